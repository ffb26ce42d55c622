"""The transcription check: no formula or line of a module's solution regions stands where a student
reads while coding.

A student reads the module's README, the comments of its C++ files (the owned headers, the stub
comments and TODO texts of exercises/), hint levels 1 and 2 (`idea`, `structure`) and the course
notes docs/NN_*.md. None of them may carry a line or formula of the reference's solution regions;
those belong in hint level 3 (`details`) or nowhere.

Both sides are compared as token sequences, normalised so that renaming or spacing does not hide a
copy: whitespace is dropped, every variable name becomes `I`, a called function keeps its own name
(`std::min` -> `min`, `gen()` -> `gen`), numbers and operators stay. So the solution line
`const std::size_t j = gen() % (i + 1);` yields the fragment `gen ( ) % ( I + 1 )` and is found in
a header comment that says `j = gen() % (k+1)`.

Fragments of a solution line: the expression of a `return`, the right-hand side of an assignment
(or the whole statement), the conditions of `if`/`while`, the parts of a `for` header,
and what their brackets hold. Only fragments with at least MIN_TOKENS tokens and MIN_OPERATORS
arithmetic, bitwise or comparison operators count (`(I + 1) % I` has 2 and 7: a neighbour's rank
in a ring is a formula too; a bare call `f(x, y)` is not).

Configuration (grader/selftest/transcription.toml, instructors only):
    pending = ["07_pipeline"]              # modules whose findings are listed, not failed
    [[allow]]                               # one formula a module may print, and why
    module = "03_collectives"
    fragment = "( I + 1 ) % I"              # as `findings` prints it
    why = "the ring's neighbours are given in the header"
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import hints, stubs
from .compat import tomllib
from .errors import DistlabError
from .paths import CXX_EXTENSIONS, ROOT, SOLUTIONS, rel

CONFIG = ROOT / "grader" / "selftest" / "transcription.toml"
DOCS = ROOT / "docs"
MIN_TOKENS = 7
MIN_OPERATORS = 2

_TOKEN = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)"
    r"|(?P<num>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?[fFuUlL]*)"
    r"|(?P<op><<=|>>=|<=|>=|==|!=|&&|\|\||<<|>>|\+\+|--|->|[-+*/%&|^]=|[-+*/%<>=!&|^~?:.,;()\[\]{}])")
OPERATORS = frozenset({"+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "<", ">", "<=", ">=",
                       "==", "!=", "&&", "||", "?"})
ASSIGN = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="})
#: Words that are no variable: they stay as they are (a declaration's type is dropped with its LHS).
KEYWORDS = frozenset({"return", "if", "for", "while", "else", "const", "auto", "static_cast",
                      "sizeof", "true", "false", "nullptr", "int", "double", "float", "bool",
                      "std::size_t", "size_t", "std::int64_t", "int64_t", "unsigned", "long", "do",
                      "break", "continue", "constexpr", "static", "throw", "new", "delete"})


@dataclass(frozen=True)
class Token:
    text: str
    line: int


def tokens(text: str) -> list[Token]:
    """text as normalised tokens: variable names -> I, called names -> their last component."""
    raw: list[tuple[str, str, int]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for m in _TOKEN.finditer(line):
            kind = m.lastgroup or "op"
            raw.append((kind, m.group(0), number))
    out: list[Token] = []
    for i, (kind, value, number) in enumerate(raw):
        if kind == "name":
            called = i + 1 < len(raw) and raw[i + 1][1] == "("
            if value in KEYWORDS:
                out.append(Token(value, number))
            elif called:
                out.append(Token(value.split("::")[-1], number))
            else:
                out.append(Token("I", number))
        elif kind == "num":
            digits = value.rstrip("fFuUlL") or value
            try:
                digits = f"{float(digits):g}"     # 2.0 and 2 are one number
            except ValueError:
                pass
            out.append(Token(digits, number))
        else:
            out.append(Token(value, number))
    return out


def _split_top(seq: list[str], sep: str) -> list[list[str]]:
    """seq cut at sep where no bracket is open."""
    parts: list[list[str]] = [[]]
    depth = 0
    for t in seq:
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        if t == sep and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _inside(seq: list[str], start: int) -> tuple[list[str], int]:
    """The tokens between the bracket at seq[start] and its partner; the partner's index."""
    depth = 0
    for j in range(start, len(seq)):
        if seq[j] in "([{":
            depth += 1
        elif seq[j] in ")]}":
            depth -= 1
            if depth == 0:
                return seq[start + 1:j], j
    return seq[start + 1:], len(seq)


def _counts(fragment: list[str]) -> bool:
    return len(fragment) >= MIN_TOKENS and sum(t in OPERATORS for t in fragment) >= MIN_OPERATORS


def fragments(line: str) -> list[str]:
    """The formulas of one solution line that must not be printed (see the module docstring)."""
    code = line.split("//", 1)[0]
    seq = [t.text for t in tokens(code)]
    found: list[list[str]] = []
    i = 0
    while i < len(seq):
        if seq[i] in ("if", "while", "for") and i + 1 < len(seq) and seq[i + 1] == "(":
            inner, end = _inside(seq, i + 1)
            found.extend(_split_top(inner, ";") if seq[i] == "for" else [inner])
            i = end + 1
            continue
        i += 1
    for statement in _split_top(seq, ";"):
        while statement and statement[0] in ("return", "else", "{", "}", "const", "auto", "constexpr"):
            statement = statement[1:]
        while statement and statement[0] in ("if", "for", "while") and len(statement) > 1 \
                and statement[1] == "(":
            statement = statement[_inside(statement, 1)[1] + 1:]     # the body after the header
        if statement:
            found.append(statement)
    for part in list(found):
        cut = next((k for k, t in enumerate(part) if t in ASSIGN), -1)
        if cut >= 0:
            found.append(part[cut + 1:])
    for part in list(found):                     # what a cast or a call wraps counts on its own
        for k, t in enumerate(part):
            if t == "(":
                found.append(_inside(part, k)[0])
    out: list[str] = []
    for fragment in found:
        fragment = [t for t in fragment if t not in ("{", "}")]
        while fragment and fragment[-1] in (";", ","):
            fragment = fragment[:-1]
        if _counts(fragment):
            text = " ".join(fragment)
            if text not in out:
                out.append(text)
    return out


@dataclass(frozen=True)
class Source:
    """One text a student reads: where it is (for messages) and its words."""
    where: str
    text: str


@dataclass(frozen=True)
class Finding:
    module: str
    where: str          # file:line
    fragment: str       # normalised tokens
    solution: str       # the solution line it comes from (file:line: code)

    def __str__(self) -> str:
        what = "call sequence" if self.fragment.startswith("calls: ") else "formula"
        return (f"{self.where}: prints a {what} of the solution ({self.fragment!r}, from "
                f"{self.solution}); state what must hold instead, and move the formula to hint "
                f"level 3")


_READ = re.compile(r'//[^\n]*|/\*.*?\*/|DISTLAB_TODO\((?:\s*"(?:[^"\\]|\\.)*")+\s*\)|"(?:[^"\\\n]|\\.)*"', re.S)


def cxx_reading(text: str) -> str:
    """What a student reads in a C++ file besides its code: the comments and the TODO texts, at
    their lines (everything else blanked, newlines kept, so line numbers hold)."""
    out: list[str] = []
    at = 0
    for m in _READ.finditer(text):
        out.append(re.sub(r"[^\n]", " ", text[at:m.start()]))
        piece = m.group(0)
        if piece.startswith('"'):           # a string literal of the code: not read as prose
            piece = re.sub(r"[^\n]", " ", piece)
        elif piece.startswith("DISTLAB_TODO"):
            piece = re.sub(r'(^DISTLAB_TODO\(|"\s*\)$)', " ", piece).replace('"', " ")
        else:
            piece = piece.replace("//", "  ").replace("/*", "  ").replace("*/", "  ")
        out.append(piece)
        at = m.end()
    out.append(re.sub(r"[^\n]", " ", text[at:]))
    return "".join(out)


def reading(module: str, solutions: Path = SOLUTIONS, docs: Path = DOCS,
            hint_folder: Path = hints.HINTS) -> list[Source]:
    """Everything a student of module reads while coding (see the module docstring)."""
    folder = solutions / module
    out: list[Source] = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        where = f"exercises/{path.relative_to(solutions)}"
        if path.suffix == ".md":
            out.append(Source(where, path.read_text(encoding="utf-8")))
        elif path.suffix in CXX_EXTENSIONS:
            stub = stubs.strip_solutions(path.read_text(encoding="utf-8"), rel(path))
            out.append(Source(where, cxx_reading(stub)))
    for path in sorted(docs.glob(f"{module[:3]}*.md")):
        out.append(Source(rel(path), path.read_text(encoding="utf-8")))
    hint_file = hint_folder / f"{module}.toml"
    if hint_file.is_file():
        lines = []
        for name, h in hints.load(module, hint_folder).items():
            lines.append(f"[{name}] idea: {h.levels[0]}")
            lines.append(f"[{name}] structure: {h.levels[1]}")
        out.append(Source(f"{rel(hint_file)} (levels 1-2)", "\n".join(lines)))
    return out


#: Calls too common to make a sequence telling (views, sizes, casts, arithmetic helpers).
PLAIN_CALLS = frozenset({"size", "data", "begin", "end", "subspan", "static_cast", "min", "max",
                         "span", "vector", "resize", "assign", "fill", "copy", "abs", "move",
                         "rank", "world_size", "push_back", "emplace_back", "at", "swap"})
CALLS_IN_A_ROW = 3


def calls(code: str) -> list[str]:
    """The functions called in code, in order (last name component), the plain ones left out."""
    toks = tokens(code)
    return [t.text for i, t in enumerate(toks) if i + 1 < len(toks) and toks[i + 1].text == "("
            and t.text not in KEYWORDS and t.text not in PLAIN_CALLS and t.text not in OPERATORS
            and re.match(r"[A-Za-z_]", t.text)]


def solution_fragments(module: str, solutions: Path = SOLUTIONS) -> dict[str, str]:
    """fragment -> the first solution line (file:line: code) it comes from. A fragment is a
    formula's tokens, or `calls: a b c` for CALLS_IN_A_ROW calls the region makes one after the
    other (a call sequence written as code: `isend(...); recv(...); wait()`)."""
    out: dict[str, str] = {}
    for path in sorted((solutions / module).rglob("*")):
        if path.suffix not in CXX_EXTENSIONS or not path.is_file():
            continue
        for region in stubs.regions(path.read_text(encoding="utf-8"), rel(path)):
            sequence: list[tuple[str, int, str]] = []
            for k, line in enumerate(region.code, start=1):
                origin = f"{rel(path)}:{region.line + k}: {line.strip()}"
                for fragment in fragments(line):
                    out.setdefault(fragment, origin)
                sequence += [(name, k, origin) for name in calls(line.split("//", 1)[0])]
            for i in range(len(sequence) - CALLS_IN_A_ROW + 1):
                run = sequence[i:i + CALLS_IN_A_ROW]
                if len({name for name, _, _ in run}) == CALLS_IN_A_ROW:
                    out.setdefault("calls: " + " ".join(name for name, _, _ in run), run[0][2])
    return out


def scan(module: str, sources: list[Source], wanted: dict[str, str],
         allowed: frozenset[str] = frozenset()) -> list[Finding]:
    """Every place in sources that prints one of the wanted fragments."""
    found: dict[str, Finding] = {}
    for source in sources:
        toks = tokens(source.text)
        words = [t.text for t in toks]
        called = [(t.text, t.line) for i, t in enumerate(toks[:-1]) if toks[i + 1].text == "("
                  and t.text not in PLAIN_CALLS]
        for fragment, origin in wanted.items():
            if any(f" {fragment} " in f" {a} " for a in allowed):
                continue                     # an allowed formula and the formulas inside it
            if fragment.startswith("calls: "):
                names = fragment.removeprefix("calls: ").split(" ")
                for i in range(len(called) - len(names) + 1):
                    if [c for c, _ in called[i:i + len(names)]] == names:
                        where = f"{source.where}:{called[i][1]}"
                        found.setdefault(where, Finding(module, where, fragment, origin))
                        break
                continue
            want = fragment.split(" ")
            n = len(want)
            first = want[0]
            for i in range(len(words) - n + 1):
                if words[i] == first and words[i:i + n] == want:
                    where = f"{source.where}:{toks[i].line}"
                    if where not in found or len(fragment) > len(found[where].fragment):
                        found[where] = Finding(module, where, fragment, origin)   # the longest
                    break
    return list(found.values())


@dataclass
class Config:
    pending: frozenset[str]
    allow: dict[str, frozenset[str]]


def load_config(path: Path = CONFIG) -> Config:
    if not path.is_file():
        return Config(frozenset(), {})
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise DistlabError(f"{rel(path)} is not valid TOML: {e}") from None
    allow: dict[str, set[str]] = {}
    for row in data.get("allow", []):
        if not {"module", "fragment", "why"} <= set(row) or not str(row["why"]).strip():
            raise DistlabError(f"{rel(path)}: every [[allow]] row needs module, fragment and why: {row}")
        allow.setdefault(row["module"], set()).add(" ".join(str(row["fragment"]).split()))
    return Config(frozenset(data.get("pending", [])), {m: frozenset(s) for m, s in allow.items()})


def findings(module: str, config: Config | None = None, solutions: Path = SOLUTIONS) -> list[Finding]:
    """The transcriptions of module's solution into what its student reads (allowed ones left out)."""
    config = config or load_config()
    return scan(module, reading(module, solutions), solution_fragments(module, solutions),
                config.allow.get(module, frozenset()))
