"""Stub generation: exercises/ is solutions/ with every marked solution region replaced by a TODO.

Marker format (docs/authoring.md):

    // BEGIN SOLUTION: <what to do>          -> DISTLAB_TODO("<what to do>");  (same indentation)
    ...reference code...
    // END SOLUTION

    // BEGIN SOLUTION DECL: <what to do>     -> // TODO: <what to do>
    ...members or helpers only the solution needs...
    // END SOLUTION

A long text continues on the comment lines right below the marker, written with two or more
spaces after the slashes (`//   more of the text`); the stub gets the whole text, rewrapped to
100 columns (adjacent string literals in DISTLAB_TODO, `//` lines for a DECL TODO).

Markers are recognised in C++ files only; every other file is copied unchanged. Regions do not
nest; an unmatched or nested marker is an error naming file:line.
"""
from __future__ import annotations

import difflib
import os
import re
import shutil
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DistlabError
from .paths import CXX_EXTENSIONS, EXERCISES, ROOT, SOLUTIONS, rel

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)//[ \t]*BEGIN SOLUTION(?P<decl>[ \t]+DECL)?[ \t]*"
                    r"(?::[ \t]*(?P<text>.*?))?[ \t]*$")
_END = re.compile(r"^[ \t]*//[ \t]*END SOLUTION[ \t]*$")
_MORE = re.compile(r"^[ \t]*//[ \t]{2,}(?P<text>\S.*?)[ \t]*$")
_MENTION = re.compile(r"^[ \t]*//.*\b(BEGIN|END) SOLUTION")

DEFAULT_TODO = "write this part (see the module README)"
WIDTH = 100


@dataclass
class Region:
    """One solution region: where its marker is, its TODO text (continuation lines joined) and the
    reference code it hides."""
    line: int
    todo: str
    decl: bool
    code: list[str]


class MarkerError(DistlabError):
    """A malformed solution marker; the message names file:line."""


def _c_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def strip_solutions(text: str, name: str = "<text>") -> str:
    """Returns text with every solution region replaced by its TODO (see the module docstring)."""
    out: list[str] = []
    for kind, payload in _scan(text, name):
        if kind == "keep":
            out.append(payload)
        elif kind == "todo":
            out.extend(payload)
    return "".join(out)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=max(40, width), break_long_words=False,
                         break_on_hyphens=False) or [text]


def _todo_lines(indent: str, what: str, decl: bool, newline: str) -> list[str]:
    """The stub's TODO statement (or DECL comment) for `what`, wrapped to WIDTH columns."""
    if decl:
        head, more = f"{indent}// TODO: ", f"{indent}//       "
        parts = _wrap(what, WIDTH - len(head))
        return [(more if i else head) + part + newline for i, part in enumerate(parts)]
    head = f'{indent}DISTLAB_TODO("'
    more = " " * (len(head) - 1) + '"'
    parts = _wrap(what, WIDTH - len(head) - 3)
    lines = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        lines.append((more if i else head) + _c_string(part + ("" if last else " ")) +
                     ('");' if last else '"') + newline)
    return lines


def regions(text: str, name: str = "<text>") -> list[Region]:
    """The solution regions of a C++ source, in order (see the module docstring)."""
    found: list[Region] = []
    for kind, payload in _scan(text, name):
        if kind == "region":
            found.append(payload)
    return found


def _scan(text: str, name: str) -> Iterator[tuple[str, Any]]:
    """Yields ("keep", line) for lines outside regions, ("todo", lines) for each region's stub
    text and ("region", Region) once each region is closed."""
    lines = text.splitlines(keepends=True)
    open_at: int | None = None
    current: Region | None = None
    continuing = False
    pending: tuple[str, str] = ("", "\n")  # indent and newline of the open marker
    for number, line in enumerate(lines, start=1):
        body = line.rstrip("\r\n")
        newline = line[len(body):] or "\n"
        if continuing and current is not None:
            more = _MORE.match(body)
            if more and not _END.match(body) and not _MENTION.match(body):
                current.todo = f"{current.todo} {more.group('text')}".strip()
                continue
            continuing = False
            yield "todo", _todo_lines(pending[0], current.todo or DEFAULT_TODO, current.decl, pending[1])
        begin = _BEGIN.match(body)
        if begin:
            if open_at is not None:
                raise MarkerError(f"{name}:{number}: BEGIN SOLUTION inside the region opened at "
                                  f"line {open_at}; regions do not nest: close it with "
                                  f"'// END SOLUTION' first")
            open_at = number
            current = Region(number, (begin.group("text") or "").strip(), bool(begin.group("decl")), [])
            pending = (begin.group("indent"), newline)
            continuing = True
            continue
        if _END.match(body):
            if open_at is None or current is None:
                raise MarkerError(f"{name}:{number}: END SOLUTION without a BEGIN SOLUTION above it")
            if not current.todo:
                current.todo = DEFAULT_TODO
            yield "region", current
            open_at, current = None, None
            continue
        if _MENTION.match(body):
            raise MarkerError(f"{name}:{number}: malformed solution marker {body.strip()!r}; "
                              f"write '// BEGIN SOLUTION: <what to do>', "
                              f"'// BEGIN SOLUTION DECL: <what to do>' or '// END SOLUTION' "
                              f"alone on the line")
        if open_at is None:
            yield "keep", line
        elif current is not None:
            current.code.append(body)
    if open_at is not None:
        raise MarkerError(f"{name}:{open_at}: BEGIN SOLUTION is never closed; "
                          f"add '// END SOLUTION' after the reference code")


def has_markers(text: str) -> bool:
    return any(_BEGIN.match(line) for line in text.splitlines())


def _files(tree: Path) -> list[Path]:
    """Regular files under tree, relative to it, sorted (ignores editor and Python droppings)."""
    found: list[Path] = []
    if not tree.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".git"))
        for f in sorted(filenames):
            if f.endswith((".pyc", "~", ".swp")) or f == ".DS_Store":
                continue
            found.append((Path(dirpath) / f).relative_to(tree))
    return found


def generate(solutions: Path = SOLUTIONS) -> dict[Path, bytes]:
    """The exercises/ tree that solutions/ generates: relative path -> content."""
    if not solutions.is_dir():
        raise DistlabError(f"{rel(solutions)} does not exist: stubs are generated from the reference "
                           f"solutions, which a student repository does not have")
    result: dict[Path, bytes] = {}
    errors: list[str] = []
    for relpath in _files(solutions):
        data = (solutions / relpath).read_bytes()
        if relpath.suffix in CXX_EXTENSIONS:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                errors.append(f"{rel(solutions / relpath)}: not UTF-8 text")
                continue
            try:
                data = strip_solutions(text, rel(solutions / relpath)).encode("utf-8")
            except MarkerError as e:
                errors.append(str(e))
                continue
        result[relpath] = data
    if errors:
        raise MarkerError("solution markers are malformed (nothing was written):\n  " +
                          "\n  ".join(errors))
    return result


@dataclass
class Drift:
    """How exercises/ differs from what `sync` would write."""
    changed: list[Path] = field(default_factory=list)
    missing: list[Path] = field(default_factory=list)
    extra: list[Path] = field(default_factory=list)
    diffs: dict[Path, list[str]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.changed or self.missing or self.extra)

    def print_files(self, *, missing: str, changed: str, extra: str, max_diff_lines: int = 0) -> None:
        """One line per file that differs, each kind under its own word; with max_diff_lines, the
        start of each changed file's diff below its line."""
        for relpath in self.missing:
            print(f"  {missing:<8} exercises/{relpath}")
        for relpath in self.changed:
            print(f"  {changed:<8} exercises/{relpath}")
            diff = self.diffs.get(relpath, [])[2:]
            for line in diff[:max_diff_lines]:
                print(f"           {line}")
            if max_diff_lines and len(diff) > max_diff_lines:
                print(f"           ... ({len(diff) - max_diff_lines} more diff lines)")
        for relpath in self.extra:
            print(f"  {extra:<8} exercises/{relpath} (not in solutions/)")


def compare(wanted: dict[Path, bytes], exercises: Path = EXERCISES) -> Drift:
    drift = Drift()
    present = set(_files(exercises))
    for relpath, data in sorted(wanted.items()):
        target = exercises / relpath
        if relpath not in present:
            drift.missing.append(relpath)
            continue
        have = target.read_bytes()
        if have != data:
            drift.changed.append(relpath)
            a = have.decode("utf-8", "replace").splitlines()
            b = data.decode("utf-8", "replace").splitlines()
            drift.diffs[relpath] = list(difflib.unified_diff(
                a, b, f"exercises/{relpath}", f"(generated) exercises/{relpath}", lineterm="", n=1))
    drift.extra = sorted(present - set(wanted))
    return drift


def sync(solutions: Path = SOLUTIONS, exercises: Path = EXERCISES) -> Drift:
    """Writes exercises/ from solutions/ (write(generate(solutions), ...))."""
    return write(generate(solutions), solutions, exercises)


def write(wanted: dict[Path, bytes], solutions: Path = SOLUTIONS, exercises: Path = EXERCISES) -> Drift:
    """Writes the generated files `wanted` into exercises/; touches only files whose content
    changes (so builds stay incremental) and removes files that solutions/ no longer has. Returns
    what it changed."""
    drift = compare(wanted, exercises)
    for relpath in drift.changed + drift.missing:
        target = exercises / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(wanted[relpath])
        shutil.copymode(solutions / relpath, target)
    for relpath in drift.extra:
        (exercises / relpath).unlink()
    # Drop folders left empty by removed files.
    if exercises.is_dir():
        for dirpath, _dirs, _names in sorted(os.walk(exercises), key=lambda t: -len(t[0])):
            d = Path(dirpath)
            if d != exercises and not any(d.iterdir()):
                d.rmdir()
    return drift


__all__ = ["strip_solutions", "regions", "Region", "generate", "compare", "sync", "write", "Drift", "MarkerError",
           "ROOT"]
