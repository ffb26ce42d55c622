"""What is not written yet: the functions of a module's owned files that still hold a TODO marker
(DISTLAB_TODO), and which module a "not implemented" failure comes from.

A stub function's body is `DISTLAB_TODO("what to write");`; the student deletes the marker when
writing the function. So the markers left in the files, not the first TODO each test happens to
hit, say what is unfinished: the terminal lists them all (report.print_table, `./distlab run`).
A failure whose TODO lies in another module's file (07's tests running an unfinished 05 MLP) is
that module's: "blocked by 05_mlp: MLP::forward"."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARKER = "DISTLAB_TODO"
_SIGNATURE = re.compile(r"(~?[A-Za-z_][\w:~]*)\s*\(")
_NOT_A_FUNCTION = ("namespace", "using", "struct", "class", "enum", "template", "typedef",
                   "static_assert", "#", "//", "/*", "*", "}", "{", "public", "private", "protected")
_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "alignof", "noexcept",
             "static_cast", "const_cast", "reinterpret_cast", "dynamic_cast", "throw", "catch"}
#: "exercises/05_mlp/mlp.cpp" (a path as the grader shows it) -> "05_mlp"
_MODULE_OF_PATH = re.compile(r"(?:^|/)(?:exercises|solutions)/(\d\d_[A-Za-z0-9_]+)/")


@dataclass(frozen=True)
class Todo:
    path: str        # as given (repository-relative: exercises/07_pipeline/pipeline.cpp)
    line: int        # 1-based line of the marker
    function: str    # the enclosing function ("" when none is found)

    @property
    def where(self) -> str:
        return f"{Path(self.path).name}:{self.line}"


def _code_lines(text: str) -> list[str]:
    """The lines of a C++ source with comments and the contents of string and character literals
    blanked out (line numbers kept), so a marker or a '(' quoted in a comment or a TODO's text
    is not taken for code."""
    out: list[str] = []
    line: list[str] = []
    i, n = 0, len(text)
    state = "code"   # code | line_comment | block_comment | string | char
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "\n":
            out.append("".join(line))
            line = []
            if state == "line_comment":
                state = "code"
            i += 1
            continue
        if state == "code":
            if c == "/" and nxt == "/":
                state = "line_comment"
                i += 2
                continue
            if c == "/" and nxt == "*":
                state = "block_comment"
                line.append("  ")
                i += 2
                continue
            if c == '"' and not (line and line[-1] == "R"):
                state = "string"
                line.append('"')
            elif c == "'" and not (line and (line[-1].isalnum())):   # (1'000 is a digit separator)
                state = "char"
                line.append("'")
            else:
                line.append(c)
        elif state == "block_comment":
            if c == "*" and nxt == "/":
                state = "code"
                line.append("  ")
                i += 2
                continue
            line.append(" ")
        elif state in ("string", "char"):
            quote = '"' if state == "string" else "'"
            if c == "\\":
                line.append("  " if nxt != "\n" else " ")
                i += 2 if nxt != "\n" else 1
                continue
            if c == quote:
                state = "code"
                line.append(quote)
            else:
                line.append(" ")
        i += 1
    out.append("".join(line))
    return out


def function_at(lines: list[str], line: int) -> str:
    """The function whose body holds `line` (1-based): the nearest definition above it that starts
    in column 0 (the kit's style: clang-format, no indented free functions), "" when none."""
    for text in reversed(lines[: max(0, line - 1)]):
        if not text[:1] or text[:1].isspace() or text.startswith(_NOT_A_FUNCTION):
            continue
        for m in _SIGNATURE.finditer(text):
            name = m.group(1)
            if name.split("::")[-1] not in _KEYWORDS:
                return name
    return ""


def todos(text: str, path: str) -> list[Todo]:
    """Every TODO marker in the code of one file (comments and strings ignored), with its function."""
    lines = _code_lines(text)
    found = []
    for i, code in enumerate(lines, start=1):
        if re.search(rf"\b{MARKER}\s*\(", code):
            found.append(Todo(path, i, function_at(lines, i)))
    return found


def module_todos(root: Path, owned: list[str]) -> list[Todo]:
    """The TODO markers of a module's owned files under root (a checkout or a grading tree), in
    file order; a file that cannot be read has none."""
    found: list[Todo] = []
    for rel_path in owned:
        try:
            text = (root / rel_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found += todos(text, rel_path)
    return found


def function_names(found: list[Todo]) -> list[str]:
    """The unfinished functions, each once, in file order (a marker outside any function by its
    place)."""
    names: list[str] = []
    for t in found:
        name = t.function or t.where
        if name not in names:
            names.append(name)
    return names


def function_in_file(root: Path, path: str, line: int) -> str:
    """The function that holds path:line in root's copy of the file ("" when it cannot be read). A
    path as another tree saw it (/elsewhere/exercises/05_mlp/mlp.cpp) is read from root's copy."""
    m = re.search(r"(?:exercises|solutions)/\d\d_[A-Za-z0-9_]+/.*", path)
    if m:
        path = m.group(0)
    try:
        text = (root / path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return function_at(_code_lines(text), line)


def module_of_path(path: str) -> str:
    """The module whose folder holds a file ("exercises/05_mlp/mlp.cpp" -> "05_mlp"), else ""."""
    m = _MODULE_OF_PATH.search("/" + path.lstrip("/"))
    return m.group(1) if m else ""
