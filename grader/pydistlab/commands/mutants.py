"""`./distlab mutants [MODULE...]`: mutation-test the kit's own tests (instructors).

grader/mutants/<module>/<mutant>/mutant.patch is one planted mistake in one owned file of the
module: a first line `# MUTANT <name>: <the mistake>`, then a unified diff against the reference
(`diff -u solutions/M/F.cpp mine.cpp`, paths `a/solutions/M/F.cpp`, `b/solutions/M/F.cpp`). A patch
keeps a mutant one mistake away from the reference as the reference evolves: when a change to the
reference touches the patched lines, the patch no longer applies and the mutant is reported
broken, so it is rewritten rather than silently testing old code. Each mutant is applied to the
reference and graded like a submission with the hidden tests on (the prerequisites are the
reference). A mutant
is caught when it loses points; it ESCAPES when it scores full marks, which means no test observes
the behaviour it breaks. All mutants are graded in one workspace (build/grade/mutants/), so each
one recompiles only its own file. Prints a line per mutant and the mutation score (caught / total)
per module and overall; exits non-zero when a mutant escapes or is broken (does not compile, or is
not a one-file change of the reference).

--fast (the self-test's mode) stops grading a mutant at its first failing item: the items not yet
started are not run, nor is the ThreadSanitizer build of a mutant already caught, so the line names
the items that failed before it stopped, and the score (items not run count as lost) is a lower
bound. Each mutant's items start with the one that caught it last time (grader/mutants/
first_catches.json, written by --save-first-catches), so a mutant still caught by it runs one
test; when that item no longer catches it the others run as before, so no check is lost. Without --fast every item
runs, and the line names every item that catches the mutant (what grader/mutants/README.md lists).

grader/mutants/ is instructor material: `./distlab release` leaves it out.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import grade, manifest as mf
from ..errors import DistlabError
from ..paths import ROOT, is_release, nproc
from ..results import Mode
from .mutant_records import CAUGHT, PATCH, caught_before, fingerprints as fingerprints

MUTANTS = ROOT / "grader" / "mutants"
TREE = "mutants"       # build/grade/mutants: one workspace for every mutant
HEADER = re.compile(r"^# MUTANT ([A-Za-z0-9_.-]+): (.+)$")
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
FIRST_CATCHES = MUTANTS / "first_catches.json"   # "module/mutant": the item that caught it first


def first_catches() -> dict[str, str]:
    """The recorded first catch of each mutant ({} when there is no record or it is unreadable:
    the items then run in manifest order)."""
    try:
        data = json.loads(FIRST_CATCHES.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(data, dict) else {}


def save_first_catches(results: list[Outcome]) -> None:
    """Records each caught mutant's first catching item (the others keep their record)."""
    data = first_catches()
    for o in results:
        if o.caught:
            data[f"{o.module}/{o.name}"] = o.caught_by[0]
    FIRST_CATCHES.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n", encoding="utf-8")


def record_caught(results: list[Outcome], prints: dict[str, str]) -> None:
    """Remembers each caught mutant with its fingerprint (an entry whose fingerprint is unchanged
    keeps its date, so a spot check leaves the committed record as it was); forgets one that was
    not caught."""
    data = {k: v for k, v in caught_before().items() if k in prints}   # mutants since removed go
    when = time.strftime("%Y-%m-%d")
    for o in results:
        key = f"{o.module}/{o.name}"
        if o.caught and key in prints:
            if data.get(key, {}).get("fingerprint") != prints[key]:
                data[key] = {"fingerprint": prints[key], "caught_by": o.caught_by[0], "when": when}
        else:
            data.pop(key, None)
    text = json.dumps(dict(sorted(data.items())), indent=1) + "\n"
    try:
        if CAUGHT.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    tmp = CAUGHT.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(CAUGHT)


def apply_patch(source: list[str], patch: list[str]) -> list[str]:
    """source with a unified diff's hunks applied, strictly: every context and removed line must
    match where the hunk says (no fuzz). Raises ValueError naming the first hunk that does not."""
    out: list[str] = []
    pos = 0   # lines of source consumed
    i = 0
    while i < len(patch):
        m = HUNK.match(patch[i])
        i += 1
        if not m:
            continue
        start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
        if start < pos:
            raise ValueError(f"hunk {m.group(0)} overlaps the one before")
        out.extend(source[pos:start])
        pos = start
        while i < len(patch) and not HUNK.match(patch[i]):
            line = patch[i]
            i += 1
            tag, text = line[:1], line[1:]
            if tag in (" ", "-"):
                if pos >= len(source) or source[pos] != text:
                    raise ValueError(f"hunk {m.group(0)}: line {pos + 1} is no longer {text.strip()!r}")
                pos += 1
                if tag == " ":
                    out.append(text)
            elif tag == "+":
                out.append(text)
            elif line.startswith("\\"):
                continue
    out.extend(source[pos:])
    return out


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


def _mutant_dirs(module: str) -> list[Path]:
    """The mutant folders of a module, by name (none when it has no grader/mutants/<module>/)."""
    folder = MUTANTS / module
    return sorted(d for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")) \
        if folder.is_dir() else []


def discover(selectors: list[str]) -> list[tuple[str, Path]]:
    """(module, mutant folder) for each selected mutant, in course order, mutants by name. A selector
    is a module (every mutant of it: '07_pipeline', '07') or one mutant ('07_pipeline/<mutant>');
    none selects every mutant."""
    if not MUTANTS.is_dir():
        raise DistlabError("there are no mutants here (grader/mutants/ is missing; a student "
                           "repository does not have them)")
    man = mf.load()
    whole: list[str] = []
    single: set[tuple[str, str]] = set()
    for sel in selectors:
        head, _, mutant = sel.strip().rstrip("/").partition("/")
        if mutant and not head.startswith(("exercises", "solutions", "grader")):
            name = man.select([head])[0].name
            if not (MUTANTS / name / mutant).is_dir():
                raise DistlabError(f"{name} has no mutant {mutant!r} (grader/mutants/{name}/{mutant}/{PATCH})")
            single.add((name, mutant))
        else:
            whole.append(sel)
    whole_modules = {m.name for m in man.select(whole)} if whole else set()
    out: list[tuple[str, Path]] = []
    for name in man.order:
        out.extend((name, d) for d in _mutant_dirs(name)
                   if not selectors or name in whole_modules or (name, d.name) in single)
    return out


def selectors_of(found: list[tuple[str, Path]]) -> list[str]:
    """The shortest selectors for `found`: a module's name where all its mutants are in it, else
    'module/mutant' for each."""
    out: list[str] = []
    for name in dict.fromkeys(m for m, _ in found):
        mine = [f.name for m, f in found if m == name]
        every = [d.name for d in _mutant_dirs(name)]
        out.extend([name] if sorted(mine) == every else [f"{name}/{x}" for x in mine])
    return out


def _materialise(module: mf.Module, folder: Path, dest: Path) -> tuple[str, str]:
    """Applies the mutant's patch to the reference, writing the owned file into dest.
    Returns (the mistake named on the first line, "") or ("", why the mutant is broken)."""
    files = [f for f in folder.rglob("*") if f.is_file()]
    if [f.name for f in files] != [PATCH]:
        return "", f"holds {', '.join(sorted(f.name for f in files)) or 'nothing'}; a mutant is one {PATCH}"
    lines = (folder / PATCH).read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    m = HEADER.match(lines[0].rstrip("\n")) if lines else None
    if not m or m.group(1) != folder.name:
        return "", f"its first line must be `# MUTANT {folder.name}: <the planted mistake>`"
    target = next((ln[6:].split("\t")[0].strip() for ln in lines if ln.startswith("+++ b/")), "")
    prefix = f"solutions/{module.name}/"
    owned = f"exercises/{module.name}/{target[len(prefix):]}"
    if not target.startswith(prefix) or owned not in module.owned:
        return "", f"the patch changes {target or 'no file'}, not a file that {module.name} owns"
    reference = (ROOT / target).read_text(encoding="utf-8").splitlines(keepends=True)
    try:
        mutated = apply_patch(reference, lines[1:])
    except ValueError as e:
        return "", f"the patch no longer applies to {target} ({e}): rewrite the mutant"
    if mutated == reference:
        return "", "the patch changes nothing: no mistake planted"
    (dest / Path(owned).name).write_text("".join(mutated), encoding="utf-8")
    return m.group(2), ""


def grade_mutant(module: mf.Module, folder: Path, jobs: int = 0, fast: bool = False,
                 tree: str = TREE, first: str = "") -> Outcome:
    t0 = time.monotonic()
    out = Outcome(module.name, folder.name, fast=fast)
    with tempfile.TemporaryDirectory(prefix=f"distlab-mutant-{folder.name}-") as tmp:
        out.mistake, out.problem = _materialise(module, folder, Path(tmp))
        if out.problem:
            return out
        order = grade.Order(first=(first,) if first else (), stop_early=fast)
        run = grade.grade([module.name], Mode.SUBMISSION, Path(tmp), grade.GradeOptions(
            hidden=True, jobs=jobs, quiet=True, tree_prefix=tree, order=order))
    res = run.modules[0]
    out.max_score = res.max_score
    out.seconds = time.monotonic() - t0
    if res.status != "graded":
        out.problem = f"{res.status}: {res.message.splitlines()[0] if res.message else ''}"
        return out
    out.score = res.score
    out.caught_by = [r.item.name for r in res.items if not r.passed and r.reason != grade.NOT_RUN]
    return out


def run_all(found: list[tuple[str, Path]], jobs: int = 0, fast: bool = False,
            on_result: Callable[[Outcome], None] | None = None, groups: int = 1,
            tree: str = TREE, workspaces: list[str] | None = None,
            pinned: dict[str, int] | None = None) -> list[Outcome]:
    """Grades the mutants `found` (discover's list). groups > 1: their modules are split into that
    many groups of about equal numbers of mutants, each graded by a `./distlab mutants` process of
    its own in its own workspace (build/grade/mutants-<i>/, or workspaces[i]: e.g. the grader's
    solutions and exercises trees, already built, so that no workspace is built from scratch), side
    by side: one mutant is mostly one compile on one core, so two groups keep two cores busy.
    pinned: module -> the group it must go to. Results come in as they are graded (on_result), in
    no fixed order across groups."""
    man = mf.load()
    if groups > 1:
        return _run_groups(found, jobs, fast, on_result, groups, workspaces, pinned or {})
    results: list[Outcome] = []
    known = first_catches()
    for name, folder in found:
        o = grade_mutant(man.modules[name], folder, jobs, fast, tree, known.get(f"{name}/{folder.name}", ""))
        results.append(o)
        if on_result:
            on_result(o)
    return results


def split_groups(found: list[tuple[str, Path]], groups: int,
                 pinned: dict[str, int] | None = None) -> list[list[str]]:
    """The modules in `groups` groups of about equal numbers of mutants (pinned modules first into
    their group, then the largest module first into the smallest group); empty groups dropped."""
    counts: dict[str, int] = {}
    for name, _ in found:
        counts[name] = counts.get(name, 0) + 1
    bins: list[list[str]] = [[] for _ in range(groups)]
    sizes = [0] * groups
    pinned = {n: g for n, g in (pinned or {}).items() if n in counts and 0 <= g < groups}
    for name in sorted(counts, key=lambda n: (n not in pinned, -counts[n])):
        i = pinned.get(name, sizes.index(min(sizes)))
        bins[i].append(name)
        sizes[i] += counts[name]
    return [b for b in bins if b]


def _run_groups(found: list[tuple[str, Path]], jobs: int, fast: bool,
                on_result: Callable[[Outcome], None] | None, groups: int,
                workspaces: list[str] | None = None, pinned: dict[str, int] | None = None) -> list[Outcome]:
    procs = []
    for i, names in enumerate(split_groups(found, groups, pinned)):
        where = workspaces[i] if workspaces and i < len(workspaces) else f"{TREE}-{i + 1}"
        cmd = [sys.executable, str(ROOT / "distlab"), "mutants", "--json", "--workspace", where,
               "--jobs", str(jobs or max(1, nproc() // groups)), *(["--fast"] if fast else []),
               *selectors_of([(m, f) for m, f in found if m in names])]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      stdin=subprocess.DEVNULL))
    results: list[Outcome] = []
    lock = threading.Lock()

    def drain(proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for text in proc.stdout:
            if not text.startswith("{"):
                continue   # the group's own header and score lines
            o = Outcome(**json.loads(text))
            with lock:
                results.append(o)
                if on_result:
                    on_result(o)

    threads = [threading.Thread(target=drain, args=(p,), daemon=True) for p in procs]
    for t in threads:
        t.start()
    for t, p in zip(threads, procs):
        t.join()
        p.wait()
    expected = {(name, folder.name) for name, folder in found}
    for name, mutant in sorted(expected - {(o.module, o.name) for o in results}):
        o = Outcome(name, mutant, problem="its group's grading process stopped before grading it")
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
    """(module, caught, total) per module in course order, then ("overall", caught, total)."""
    rows: list[tuple[str, int, int]] = []
    order = mf.load().order
    modules = set(o.module for o in results)
    for m in [n for n in order if n in modules] + sorted(modules - set(order)):
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
    where = (f"{a.groups} workspaces build/grade/{TREE}-<i>/" if a.groups > 1
             else f"workspace build/grade/{a.workspace}/")
    print(f"grading {len(found)} mutants with the hidden tests ({where}"
          + (", --fast: each stops at its first failing item" if a.fast else "") + ")", flush=True)
    def show(o: Outcome) -> None:
        print(json.dumps(dataclasses.asdict(o)) if a.json else line(o), flush=True)

    results = run_all(found, a.jobs, a.fast, on_result=show, groups=max(1, a.groups),
                      tree=a.workspace)
    if a.save_first_catches:
        save_first_catches(results)
        print(f"recorded the first catches in {FIRST_CATCHES.relative_to(ROOT)}")
    print("\nmutation score (caught / mutants):")
    for name, caught, total in scores(results):
        print(f"  {name:<18} {caught}/{total}" + (f"  ({100.0 * caught / total:.0f}%)" if total else ""))
    bad = [o for o in results if not o.caught]
    print(f"\n{len(results)} mutants graded in {time.monotonic() - t0:.0f} s"
          + (f"; {len(bad)} not caught: " + ", ".join(f"{o.module}/{o.name}" for o in bad) if bad else ""))
    return 1 if bad else 0
