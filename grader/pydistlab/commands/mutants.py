"""`./distlab mutants [MODULE...]`: mutation-test the kit's own tests (instructors).

grader/mutants/<module>/<mutant>/ holds one owned file of the module: the reference with one
planted mistake, named on the file's first line (`// MUTANT <name>: <the mistake>`). Each mutant is
graded like a submission with the hidden tests on (the prerequisites are the reference). A mutant
is caught when it loses points; it ESCAPES when it scores full marks, which means no test observes
the behaviour it breaks. All mutants are graded in one workspace (build/grade/mutants/), so each
one recompiles only its own file. Prints a line per mutant and the mutation score (caught / total)
per module and overall; exits non-zero when a mutant escapes or is broken (does not compile, or is
not a one-file change of the reference).

--fast (the self-test's mode) stops grading a mutant at its first failing item: the items not yet
started are not run, nor is the ThreadSanitizer build of a mutant already caught, so the line names
the items that failed before it stopped, and the score (items not run count as lost) is a lower
bound. Without --fast every item
runs, and the line names every item that catches the mutant (what grader/mutants/README.md lists).

grader/mutants/ is instructor material: `./distlab release` leaves it out.
"""
from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import grade, manifest as mf
from ..errors import DistlabError
from ..paths import ROOT, SOLUTIONS, is_release
from ..results import Mode

MUTANTS = ROOT / "grader" / "mutants"
TREE = "mutants"       # build/grade/mutants: one workspace for every mutant
HEADER = re.compile(r"^// MUTANT ([A-Za-z0-9_.-]+): (.+)$")


@dataclass
class Outcome:
    module: str
    name: str
    mistake: str = ""
    score: float = 0.0
    max_score: float = 0.0
    caught_by: list[str] = field(default_factory=list)
    problem: str = ""      # a broken mutant (not a one-file change, does not compile): why
    seconds: float = 0.0
    fast: bool = False     # graded with stop_early: caught_by is the items that failed first

    @property
    def caught(self) -> bool:
        return not self.problem and bool(self.caught_by)


def discover(modules: list[str]) -> list[tuple[str, Path]]:
    """(module, mutant folder) for each mutant of the selected modules (all when none), in course
    order, mutants by name."""
    if not MUTANTS.is_dir():
        raise DistlabError("there are no mutants here (grader/mutants/ is missing; a student "
                           "repository does not have them)")
    man = mf.load()
    wanted = [m.name for m in man.select(modules)] if modules else man.order
    out: list[tuple[str, Path]] = []
    for name in wanted:
        folder = MUTANTS / name
        if folder.is_dir():
            out.extend((name, d) for d in sorted(folder.iterdir()) if d.is_dir() and not d.name.startswith("."))
    return out


def _check_shape(module: mf.Module, folder: Path) -> tuple[str, str]:
    """(the mistake named on the first line, "") or ("", why the mutant is malformed)."""
    files = [f for f in folder.rglob("*") if f.is_file()]
    if len(files) != 1:
        return "", f"holds {len(files)} files; a mutant is one owned file"
    f = files[0]
    owned = [o for o in module.owned if Path(o).name == f.name]
    if not owned:
        return "", f"{f.name} is not a file that {module.name} owns"
    text = f.read_text(encoding="utf-8", errors="replace")
    first, _, rest = text.partition("\n")
    m = HEADER.match(first)
    if not m or m.group(1) != folder.name:
        return "", f"its first line must be `// MUTANT {folder.name}: <the planted mistake>`"
    reference = SOLUTIONS / module.name / Path(owned[0]).relative_to(f"exercises/{module.name}")
    if reference.is_file() and reference.read_text(encoding="utf-8", errors="replace") == rest:
        return "", "apart from its first line it is the reference: no mistake planted"
    return m.group(2), ""


def grade_mutant(module: mf.Module, folder: Path, jobs: int = 0, fast: bool = False) -> Outcome:
    t0 = time.monotonic()
    out = Outcome(module.name, folder.name, fast=fast)
    out.mistake, out.problem = _check_shape(module, folder)
    if out.problem:
        return out
    run = grade.grade([module.name], Mode.SUBMISSION, folder, hidden=True, jobs=jobs, quiet=True,
                      tree_prefix=TREE, stop_early=fast)
    res = run.modules[0]
    out.max_score = res.max_score
    out.seconds = time.monotonic() - t0
    if res.status != "graded":
        out.problem = f"{res.status}: {res.message.splitlines()[0] if res.message else ''}"
        return out
    out.score = res.score
    out.caught_by = [r.item.name for r in res.items if not r.passed and r.reason != grade.NOT_RUN]
    return out


def run_all(modules: list[str], jobs: int = 0, fast: bool = False,
            on_result: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    man = mf.load()
    results: list[Outcome] = []
    for name, folder in discover(modules):
        o = grade_mutant(man.modules[name], folder, jobs, fast)
        results.append(o)
        if on_result:
            on_result(o)
    return results


def line(o: Outcome) -> str:
    if o.problem:
        verdict, detail = "BROKEN ", o.problem
    elif o.caught:
        verdict, detail = "caught ", ("first by " if o.fast else "by ") + ", ".join(o.caught_by)
    else:
        verdict, detail = "ESCAPED", "full marks: no test observes this mistake"
    score = (">=" if o.fast and o.caught else "") + (f"{o.score:g}/{o.max_score:g}" if o.max_score else "-")
    return f"  {verdict} {o.module}/{o.name:<36} {score:>7} {o.seconds:5.0f} s  {detail}"


def scores(results: list[Outcome]) -> list[tuple[str, int, int]]:
    """(module, caught, total) per module in order, then ("overall", caught, total)."""
    rows: list[tuple[str, int, int]] = []
    for m in dict.fromkeys(o.module for o in results):
        mine = [o for o in results if o.module == m]
        rows.append((m, sum(o.caught for o in mine), len(mine)))
    rows.append(("overall", sum(o.caught for o in results), len(results)))
    return rows


def main(a: argparse.Namespace) -> int:
    if is_release():
        raise DistlabError("./distlab mutants is an instructor command: it needs solutions/ and "
                           "grader/mutants/, which a student repository does not have")
    t0 = time.monotonic()
    found = discover(a.modules)
    if not found:
        raise DistlabError("no mutants under grader/mutants/ for " + (", ".join(a.modules) or "any module"))
    print(f"grading {len(found)} mutants with the hidden tests (workspace build/grade/{TREE}/"
          + (", --fast: each stops at its first failing item" if a.fast else "") + ")", flush=True)
    results = run_all(a.modules, a.jobs, a.fast, on_result=lambda o: print(line(o), flush=True))
    print("\nmutation score (caught / mutants):")
    for name, caught, total in scores(results):
        print(f"  {name:<18} {caught}/{total}" + (f"  ({100.0 * caught / total:.0f}%)" if total else ""))
    bad = [o for o in results if not o.caught]
    print(f"\n{len(results)} mutants graded in {time.monotonic() - t0:.0f} s"
          + (f"; {len(bad)} not caught: " + ", ".join(f"{o.module}/{o.name}" for o in bad) if bad else ""))
    return 1 if bad else 0
