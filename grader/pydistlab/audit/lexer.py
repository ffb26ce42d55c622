"""A C++ tokenizer for the audit: the tokens the compiler sees, each with its physical line.

It follows the translation phases that matter for hiding things from a reader: line splices
(backslash-newline) are joined first, comments become a space, raw string literals end only at
their `)delim"` (a raw string spanning lines hides nothing after it), string and character literals
keep their escapes, `'` digit separators stay inside numbers, and a directive is a line whose first
token is `#` or the digraph `%:`. What the compiler would not see (comments) never produces a
token, so a construct named in a comment is no finding; what it does see is never hidden.

Lexical tricks that make a line read differently to a person and to the compiler are reported as
`Trick`s: a line splice inside a word, a digraph, a trigraph.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Kinds of Token.kind.
IDENT, NUMBER, STRING, CHAR, PUNCT, HEADER = "ident", "number", "string", "char", "punct", "header"

_RAW_PREFIXES = {"R", "u8R", "uR", "UR", "LR"}
_STRING_PREFIXES = {"u8", "u", "U", "L"}
_PUNCTS = sorted(["%:%:", "...", "<=>", "<<=", ">>=", "->*", "::", "->", "++", "--", "<<", ">>", "<=",
                  ">=", "==", "!=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", ".*",
                  "##", "<:", ":>", "<%", "%>", "%:"], key=len, reverse=True)
_DIGRAPHS = {"<:": "[", ":>": "]", "<%": "{", "%>": "}", "%:": "#", "%:%:": "##"}
_TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")
_IDENT_START = re.compile(r"[A-Za-z_$\x80-\U0010ffff]")
_IDENT = re.compile(r"[A-Za-z_0-9$\x80-\U0010ffff]*")
_NUMBER = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*")


@dataclass(frozen=True)
class Token:
    kind: str
    text: str     # as written (digraphs already mapped to their punctuator)
    line: int     # physical line of its first character (1-based)


@dataclass
class Directive:
    """A preprocessing directive: `# name rest`; tokens are those after the name."""
    line: int
    name: str
    tokens: list[Token]
    text: str     # the logical line, comments removed, whitespace squeezed


@dataclass(frozen=True)
class Trick:
    line: int
    what: str


@dataclass
class Lexed:
    tokens: list[Token] = field(default_factory=list)          # outside directives
    directives: list[Directive] = field(default_factory=list)
    tricks: list[Trick] = field(default_factory=list)


def _splice(text: str) -> tuple[str, list[int], list[Trick]]:
    """Joins line splices. Returns the joined text, the physical line of each of its characters,
    and a Trick for each splice that joins two parts of one word."""
    out: list[str] = []
    lines: list[int] = []
    tricks: list[Trick] = []
    line = 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            j = i + 1
            while j < n and text[j] in " \t":   # GCC accepts spaces between the backslash and newline
                j += 1
            if j < n and text[j] in "\r\n":
                j += 2 if text[j:j + 2] == "\r\n" else 1
                before = out[-1] if out else " "
                after = text[j] if j < n else " "
                if not before.isspace() and not after.isspace():
                    tricks.append(Trick(line, "a line splice (backslash-newline) inside a word"))
                line += 1
                i = j
                continue
        out.append(c)
        lines.append(line)
        if c == "\n":
            line += 1
        i += 1
    return "".join(out), lines, tricks


def lex(text: str) -> Lexed:
    """The tokens and directives of one C++ source (see the module docstring)."""
    src, where, tricks = _splice(text.replace("\r\n", "\n"))
    res = Lexed(tricks=tricks)
    n = len(src)
    i = 0
    at_line_start = True
    current: list[Token] = res.tokens
    directive: Directive | None = None
    parts: list[str] = []

    def line_of(k: int) -> int:
        return where[k] if k < len(where) else (where[-1] if where else 1)

    def end_directive() -> None:
        nonlocal directive, current
        if directive is not None:
            directive.text = " ".join("".join(parts).split())
            if directive.tokens and directive.tokens[0].kind == IDENT:
                directive.name = directive.tokens[0].text
                directive.tokens = directive.tokens[1:]
            res.directives.append(directive)
        directive = None
        current = res.tokens

    while i < n:
        c = src[i]
        if c == "\n":
            end_directive()
            at_line_start = True
            parts.clear()
            i += 1
            continue
        if c in " \t\f\v":
            parts.append(" ")
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
            parts.append(" ")
            continue
        start = i
        tok: Token
        m = _IDENT_START.match(c)
        if m:
            j = i + 1 + len(_IDENT.match(src, i + 1).group(0))   # type: ignore[union-attr]
            word = src[i:j]
            if word in _RAW_PREFIXES and src.startswith('"', j):
                k = src.find("(", j + 1)
                delim = src[j + 1:k] if k >= 0 else ""
                if k < 0 or len(delim) > 16 or any(ch in delim for ch in ' ()\\\t\n"'):
                    k = j   # not a valid raw string: read it as an ordinary string
                    end = _ordinary(src, j + 1, '"')
                else:
                    close = src.find(")" + delim + '"', k + 1)
                    end = n if close < 0 else close + len(delim) + 2
                tok = Token(STRING, src[i:end], line_of(i))
                i = end
            elif word in _STRING_PREFIXES and j < n and src[j] in "\"'":
                end = _ordinary(src, j + 1, src[j])
                tok = Token(STRING if src[j] == '"' else CHAR, src[i:end], line_of(i))
                i = end
            else:
                tok = Token(IDENT, word, line_of(i))
                i = j
        elif c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            j = _NUMBER.match(src, i).end()   # type: ignore[union-attr]
            tok = Token(NUMBER, src[i:j], line_of(i))
            i = j
        elif c in "\"'":
            end = _ordinary(src, i + 1, c)
            tok = Token(STRING if c == '"' else CHAR, src[i:end], line_of(i))
            i = end
        elif c == "<" and directive is not None and directive.name == "" and \
                [t.text for t in directive.tokens] in (["include"], ["include_next"], ["import"], ["embed"]):
            j = src.find(">", i)
            k = src.find("\n", i)
            end = (k if k >= 0 else n) if j < 0 or (0 <= k < j) else j + 1
            tok = Token(HEADER, src[i:end], line_of(i))
            i = end
        else:
            p = next((p for p in _PUNCTS if src.startswith(p, i)), c)
            if p in _DIGRAPHS:
                res.tricks.append(Trick(line_of(i), f"the digraph `{p}` (read as `{_DIGRAPHS[p]}`)"))
            if _TRIGRAPH.match(src, i):
                res.tricks.append(Trick(line_of(i), f"the trigraph `{src[i:i + 3]}`"))
            tok = Token(PUNCT, _DIGRAPHS.get(p, p), line_of(i))
            i += len(p)
        parts.append(src[start:i])
        if at_line_start and tok.kind == PUNCT and tok.text == "#":
            directive = Directive(tok.line, "", [], "")
            current = directive.tokens
            at_line_start = False
            continue
        at_line_start = False
        current.append(tok)
    end_directive()
    for t in res.tokens:
        if t.kind in (STRING, CHAR) and _TRIGRAPH.search(t.text):
            res.tricks.append(Trick(t.line, "a trigraph in a literal"))
    return res


def _ordinary(src: str, i: int, quote: str) -> int:
    """The end (exclusive) of an ordinary string or character literal whose body starts at i; an
    unterminated one ends at the end of its line (the compiler rejects it)."""
    n = len(src)
    while i < n:
        c = src[i]
        if c == "\\":
            i += 2
            continue
        if c == quote:
            return i + 1
        if c == "\n":
            return i
        i += 1
    return n


def string_value(tok: Token) -> str:
    """The characters of a string literal's body (prefix, quotes and raw delimiters dropped;
    escapes kept as written, which is enough to look for paths and words)."""
    t = tok.text
    q = t.find('"')
    if q < 0:
        return t
    if t[:q].endswith("R"):
        k = t.find("(", q)
        delim = t[q + 1:k]
        return t[k + 1:len(t) - len(delim) - 2] if k >= 0 else t[q + 1:]
    return t[q + 1:-1] if t.endswith('"') and len(t) > q + 1 else t[q + 1:]
