"""Progressive hints for the exercise functions, read from grader/hints/<module>.toml.

One file per module, written by the instructor; each exercise function is a table with three
levels, revealed one at a time by `./distlab hint MODULE FUNCTION [--level N]`:

    ["MLP::backward"]
    readme = "05_mlp README: Tasks, backward"     # where to read (optional)
    idea = "..."          # level 1: the idea, in words
    structure = "..."     # level 2: the shape of the code (loops, order of the steps)
    details = "..."       # level 3: the details (indices, edge cases), still not a line of code

Function names match ignoring case and underscores, and a method may be named without its class
(`backward` for `MLP::backward`) when that is unambiguous.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .compat import tomllib
from .errors import DistlabError
from .paths import ROOT, rel

HINTS = ROOT / "grader" / "hints"
LEVELS = ("idea", "structure", "details")
KEYS = {"readme", *LEVELS}


@dataclass
class Hint:
    function: str
    levels: list[str]     # idea, structure, details
    readme: str = ""


def _key(name: str) -> str:
    return name.replace("_", "").lower()


def load(module: str, folder: Path = HINTS) -> dict[str, Hint]:
    """The hints of a module, by function name as written in the file (file order)."""
    path = folder / f"{module}.toml"
    if not path.is_file():
        raise DistlabError(f"no hints for {module}: {rel(path)} is missing")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise DistlabError(f"{rel(path)} is not valid TOML: {e}") from None
    out: dict[str, Hint] = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            raise DistlabError(f"{rel(path)}: {name!r} must be a table [\"{name}\"] with "
                               f"{', '.join(LEVELS)}")
        unknown = sorted(set(table) - KEYS)
        missing = [k for k in LEVELS if not str(table.get(k, "")).strip()]
        if unknown or missing:
            raise DistlabError(f"{rel(path)}: [{name!r}]: " +
                               "; ".join(([f"unknown keys {unknown}"] if unknown else []) +
                                         ([f"missing levels {missing}"] if missing else [])))
        out[name] = Hint(name, [" ".join(str(table[k]).split()) for k in LEVELS],
                         " ".join(str(table.get("readme", "")).split()))
    return out


def find(hints: dict[str, Hint], module: str, function: str) -> Hint:
    """The hint for function (see the module docstring for how names match)."""
    want = _key(function)
    hits = [h for n, h in hints.items() if _key(n) == want]
    if not hits:
        hits = [h for n, h in hints.items() if _key(n.split("::")[-1]) == want]
    if len(hits) == 1:
        return hits[0]
    names = ", ".join(hints)
    if hits:
        raise DistlabError(f"{function!r} is ambiguous in {module}; say which: "
                           f"{', '.join(h.function for h in hits)}")
    raise DistlabError(f"{module} has no exercise function {function!r}; functions with hints: {names}")
