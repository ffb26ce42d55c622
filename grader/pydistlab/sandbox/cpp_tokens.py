"""A small C++ tokenizer for the owned-header rule: what the compiler's lexer sees, not lines.

It follows translation phases 2 and 3 closely enough that a check cannot be shown something other
than what the compiler sees: backslash-newline splices are joined everywhere except inside raw
string literals (where the compiler reverts them), comments are dropped, raw strings
(R"delim(...)delim", with u8/u/U/L prefixes) and string and character literals are single tokens
even when they span lines, digraphs are spelled as the punctuator they stand for (`%:` is `#`).
Trigraphs are left alone: C++17 and later (GCC's gnu++20 too) do not replace them.

Each token records its physical line and whether it is the first token of its logical line, so a
directive is exactly a `#` token that starts a line (also in `c++ -E` output, whose raw strings
may hold lines that only look like directives).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Token:
    kind: str      # "id", "num", "str", "chr", "punct", "other"
    text: str      # digraphs spelled as their punctuator
    line: int      # physical line of the first character (1-based)
    bol: bool      # the first token of its logical line
    pos: int = 0   # offset of the first character in the text


_DIGRAPHS = {"%:%:": "##", "%:": "#", "<:": "[", ":>": "]", "<%": "{", "%>": "}"}
_PUNCT = sorted("""
... ->* <=> <<= >>= ## -> ++ -- << >> <= >= == != && || += -= *= /= %= &= |= ^= :: .*
{ } [ ] ( ) ; : ? . + - * / % ^ & | ~ ! = < > , #
""".split() + list(_DIGRAPHS), key=len, reverse=True)
_ENC = re.compile(r"(u8|u|U|L)?R?$")


def _skip(text: str, i: int) -> int:
    """i moved past any backslash-newline splices."""
    while text.startswith("\\\n", i):
        i += 2
    return i


def tokenize(text: str) -> list[Token]:
    """The preprocessing tokens of text (a header or `c++ -E` output)."""
    return list(iter_tokens(text.replace("\r\n", "\n").replace("\r", "\n")))


def iter_tokens(text: str, i: int = 0, line: int = 1) -> Iterator[Token]:
    """The tokens of text from offset i (the start of a line, numbered `line`), one at a time,
    so that a reader can stop early."""
    n = len(text)
    bol = True

    def lines_in(a: int, b: int) -> int:
        return text.count("\n", a, b)

    while True:
        j = _skip(text, i)
        line += lines_in(i, j)
        i = j
        if i >= n:
            break
        c = text[i]
        if c == "\n":
            line, bol, i = line + 1, True, i + 1
            continue
        if c in " \t\f\v":
            i += 1
            continue
        nxt = _skip(text, i + 1)
        if c == "/" and nxt < n and text[nxt] == "/":      # a line comment; a splice continues it
            k = nxt
            while k < n and text[k] != "\n":
                k += 2 if text.startswith("\\\n", k) else 1
            line += lines_in(i, k)
            i = k
            continue
        if c == "/" and nxt < n and text[nxt] == "*":
            k = nxt + 1
            while k < n:
                if text[k] == "*" and _skip(text, k + 1) < n and text[_skip(text, k + 1)] == "/":
                    k = _skip(text, k + 1) + 1
                    break
                k += 1
            else:
                k = n
            line += lines_in(i, k)
            i = k
            continue
        start, start_line = i, line
        if c.isalpha() or c == "_" or ord(c) > 127:
            word = []
            k = i
            while k < n and (text[k].isalnum() or text[k] == "_" or ord(text[k]) > 127):
                word.append(text[k])
                k = _skip(text, k + 1)
            ident = "".join(word)
            if k < n and text[k] in "\"'" and _ENC.fullmatch(ident) and ident:
                if ident.endswith("R") and text[k] == '"':
                    k = _raw_string_end(text, k)
                else:
                    k = _quoted_end(text, k)
                kind = "str" if text[k - 1] == '"' or ident.endswith("R") else "chr"
                yield Token(kind, text[start:k], start_line, bol, start)
            else:
                yield Token("id", ident, start_line, bol, start)
            line += lines_in(start, k)
            i, bol = k, False
            continue
        if c.isdigit() or (c == "." and nxt < n and text[nxt].isdigit()):
            k, prev = i, ""
            while k < n and (text[k].isalnum() or text[k] in "_.'" or
                             (text[k] in "+-" and prev in ("e", "E", "p", "P"))):
                prev = text[k]
                k = _skip(text, k + 1)
            yield Token("num", re.sub(r"\\\n", "", text[start:k]), start_line, bol, start)
            line += lines_in(start, k)
            i, bol = k, False
            continue
        if c in "\"'":
            k = _quoted_end(text, i)
            yield Token("str" if c == '"' else "chr", text[start:k], start_line, bol, start)
            line += lines_in(start, k)
            i, bol = k, False
            continue
        # Punctuators, read through splices (`%\<newline>:` is a digraph too).
        logical, k = [], i
        while k < n and len(logical) < 4 and text[k] != "\n":
            logical.append(text[k])
            k = _skip(text, k + 1)
        seq = "".join(logical)
        op = next((p for p in _PUNCT if seq.startswith(p)), "")
        if op == "<:" and seq.startswith("<::") and not seq.startswith(("<:::", "<::>")):
            op = "<"                        # `<::` is `<` then `::` ([lex.pptoken])
        if not op:
            yield Token("other", c, start_line, bol, start)
            i, bol = i + 1, False
            continue
        k = i
        for _ in range(len(op)):
            k = _skip(text, k)
            k += 1
        line += lines_in(start, k)
        yield Token("punct", _DIGRAPHS.get(op, op), start_line, bol, start)
        i, bol = k, False


def _quoted_end(text: str, i: int) -> int:
    """The index after the string or character literal whose quote is at i (or the end of its
    line when it is not closed, as the compiler does)."""
    q, k, n = text[i], i + 1, len(text)
    while k < n:
        k = _skip(text, k)
        if k >= n or text[k] == "\n":
            return k
        if text[k] == "\\":
            k = _skip(text, k + 1) + 1
            continue
        if text[k] == q:
            return k + 1
        k += 1
    return n


def _raw_string_end(text: str, i: int) -> int:
    """The index after the raw string literal whose `"` is at i: inside it nothing is spliced."""
    open_paren = text.find("(", i + 1, i + 18)
    if open_paren < 0 or not re.fullmatch(r"[^\s()\\]*", text[i + 1:open_paren]):
        return _quoted_end(text, i)     # not a valid raw string: the compiler reports an error
    close = text.find(")" + text[i + 1:open_paren] + '"', open_paren + 1)
    return len(text) if close < 0 else close + len(text[i + 1:open_paren]) + 2


def logical_lines(tokens: list[Token]) -> list[list[Token]]:
    """The tokens grouped by logical line."""
    lines: list[list[Token]] = []
    for t in tokens:
        if t.bol or not lines:
            lines.append([])
        lines[-1].append(t)
    return lines


def directives(tokens: list[Token]) -> list[tuple[int, str]]:
    """(line, text) of each preprocessor directive: a line whose first token is `#` (or `%:`),
    its tokens after it joined by single spaces, e.g. "include < vector >", "pragma once"."""
    return [(ln[0].line, " ".join(t.text for t in ln[1:])) for ln in logical_lines(tokens)
            if ln[0].text == "#" and ln[0].kind == "punct"]
