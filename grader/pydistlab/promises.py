"""The promise ledger of a module: grader/hidden/<module>/promises.toml (instructors only).

One row per promise a student could break (a sentence of a header, README, doc or hint), with the
condition under which breaking it shows and the GoogleTest tests that observe it there:

    [[promise]]
    id = "pool.first_exception"
    where = "solutions/01_threads/threads.hpp"
    says = "rethrows the first exception"
    kind = "errors"
    condition = "several tasks fail with different exception types"
    tests = ["PoolFailure.FirstOfSeveral", "hidden:HiddenPool.NonStdException"]

`check(module)` reports what keeps the ledger honest: a row without a test, a test (public or
hidden) that no row names, a quotation that is not in the file it names, a test name that does not
exist. The self-test runs it over every module (step `sync`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .compat import tomllib
from .paths import ROOT

KINDS = ("values", "order", "traffic", "time", "memory", "determinism", "errors", "lifetime", "cleanup")
FIELDS = ("id", "where", "says", "kind", "condition", "tests")
HIDDEN = "hidden:"

_TEST = re.compile(r"^[ \t]*(?:TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)


@dataclass(frozen=True)
class Promise:
    id: str
    where: str
    says: str
    kind: str
    condition: str
    tests: tuple[str, ...]


def ledger_path(module: str, root: Path = ROOT) -> Path:
    return root / "grader" / "hidden" / module / "promises.toml"


def load(module: str, root: Path = ROOT) -> tuple[list[Promise], list[str]]:
    """(the rows, problems reading them)."""
    path = ledger_path(module, root)
    if not path.is_file():
        return [], [f"{module}: no promise ledger ({path.relative_to(root)}): write one row per promise "
                    f"a student could break, with the tests that observe it (grader/pydistlab/promises.py)"]
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        return [], [f"{module}: {path.relative_to(root)} is not valid TOML: {e}"]
    rows, problems = [], []
    for i, row in enumerate(data.get("promise", []), 1):
        where = f"{module}: promise {i} ({row.get('id', 'no id')})"
        missing = [f for f in FIELDS if not row.get(f)]
        if missing:
            problems.append(f"{where}: missing or empty {', '.join(missing)}")
            continue
        if not isinstance(row["tests"], list) or not all(isinstance(x, str) for x in row["tests"]):
            problems.append(f"{where}: tests must be a list of \"Suite.Name\" or \"hidden:Suite.Name\"")
            continue
        if row["kind"] not in KINDS:
            problems.append(f"{where}: kind {row['kind']!r} is not one of {', '.join(KINDS)}")
        rows.append(Promise(str(row["id"]), str(row["where"]), str(row["says"]), str(row["kind"]),
                            str(row["condition"]), tuple(row["tests"])))
    unknown = set(data) - {"promise"}
    if unknown:
        problems.append(f"{module}: unknown table(s) {', '.join(sorted(unknown))} in the ledger (only [[promise]])")
    if not rows and not problems:
        problems.append(f"{module}: the promise ledger has no [[promise]] rows")
    return rows, problems


def tests_of(module: str, root: Path = ROOT) -> set[str]:
    """Every GoogleTest test of the module: "Suite.Name" (grader/tests) and "hidden:Suite.Name"."""
    names: set[str] = set()
    for folder, prefix in (("tests", ""), ("hidden", HIDDEN)):
        base = root / "grader" / folder / module
        for f in sorted(base.glob("*.cpp")) if base.is_dir() else []:
            text = _BLOCK_COMMENT.sub("", f.read_text(errors="replace"))
            text = "\n".join(line.split("//")[0] if line.lstrip().startswith("//") else line
                             for line in text.splitlines())
            names.update(f"{prefix}{suite}.{name}" for suite, name in _TEST.findall(text))
    return names


def normalise(text: str) -> str:
    """Words only: comment markers, markdown emphasis and line breaks do not matter in a quotation."""
    text = re.sub(r"^[ \t]*(?://+|/?\*+|#+|>)[ \t]?", " ", text, flags=re.M)
    text = text.replace("\\\n", " ").replace("`", "").replace("**", "")
    return " ".join(text.split())


def check(module: str, root: Path = ROOT) -> list[str]:
    rows, problems = load(module, root)
    have = tests_of(module, root)
    named: set[str] = set()
    ids: set[str] = set()
    texts: dict[str, str | None] = {}
    for p in rows:
        if p.id in ids:
            problems.append(f"{module}: promise id {p.id!r} appears twice")
        ids.add(p.id)
        if p.where not in texts:
            f = root / p.where
            texts[p.where] = normalise(f.read_text(errors="replace")) if f.is_file() else None
        text = texts[p.where]
        if text is None:
            problems.append(f"{module}: promise {p.id}: {p.where} does not exist")
        elif normalise(p.says) not in text:
            problems.append(f"{module}: promise {p.id}: {p.where} does not say {p.says!r} (quote its words)")
        for t in p.tests:
            if t not in have:
                problems.append(f"{module}: promise {p.id} names {t}, which is not a test of the module "
                                f"(public tests as Suite.Name, hidden ones as hidden:Suite.Name)")
        named.update(p.tests)
    for t in sorted(have - named):
        problems.append(f"{module}: test {t} observes no promise of the ledger: name it in the row of "
                        f"the promise it checks, or add that promise")
    return problems


def summary(module: str, root: Path = ROOT) -> str:
    rows, _ = load(module, root)
    kinds = sorted({p.kind for p in rows})
    return f"{module}: {len(rows)} promises ({', '.join(kinds)}), {len(tests_of(module, root))} tests"
