"""`./distlab grade`: build student files on a clean copy of the kit and run the graded tests.

Modes
  student (default)  this checkout's exercises/; later modules build on the student's own earlier
                     modules, and a module whose prerequisite does not compile is "blocked".
  --solutions        the reference solutions (instructor).
  --submission PATH  a folder or .zip of student files (instructor, Gradescope): only owned files
                     are taken; each module's prerequisites are the reference implementations, so
                     every module is graded on its own.

Trees live in build/grade/<id>/{src,build,build-tsan} and are reused between runs: the copy only
rewrites files whose content changed, so ninja rebuilds only what an edit touched.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from . import cmake, deps, manifest as mf, report, runner, submission, tree
from .errors import DistlabError
from .paths import BUILD, ROOT, SOLUTIONS, is_release, nproc, rel

TSAN_TIMEOUT_FACTOR = 4.0
ERROR_LINES = 25          # compiler error lines kept in a "not gradable" report
ERROR_CHARS = 3000

BASE_CACHE = {
    "CMAKE_BUILD_TYPE": "Release",
    "DISTLAB_ARCH": "portable",   # the same float32 rounding on every x86-64 CPU (docs/build.md)
    "DISTLAB_IMPL": "exercises",
    "DISTLAB_BUILD_TESTS": "ON",
    "DISTLAB_WITH_NCCL": "OFF",
}
TSAN_CACHE = dict(BASE_CACHE, CMAKE_BUILD_TYPE="RelWithDebInfo", DISTLAB_SANITIZE="thread",
                  DISTLAB_ARCH="portable")


@dataclass
class ItemResult:
    item: mf.TestItem
    passed: bool
    reason: str
    output: str
    seconds: float

    @property
    def score(self) -> float:
        return self.item.points if self.passed else 0.0


@dataclass
class ModuleResult:
    module: mf.Module
    status: str = "graded"        # graded | not gradable | blocked
    message: str = ""             # compiler errors / what blocks
    notes: list[str] = field(default_factory=list)
    items: list[ItemResult] = field(default_factory=list)
    build_seconds: float = 0.0
    test_seconds: float = 0.0
    hidden: bool = False

    @property
    def score(self) -> float:
        return sum(i.score for i in self.items)

    @property
    def max_score(self) -> float:
        return self.module.max_points(self.hidden)

    @property
    def passed(self) -> int:
        return sum(1 for i in self.items if i.passed)

    @property
    def failed(self) -> int:
        return len(self.module.items(self.hidden)) - self.passed


@dataclass
class GradeRun:
    label: str
    mode: str
    hidden: bool
    modules: list[ModuleResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)   # compiler warnings seen while building

    @property
    def score(self) -> float:
        return sum(m.score for m in self.modules)

    @property
    def max_score(self) -> float:
        return sum(m.max_score for m in self.modules)


class Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)


# ---- the clean copy -------------------------------------------------------------------------

def solution_overlay(modules: list[str], man: mf.Manifest) -> dict[str, bytes]:
    """The reference implementation of each module: every file of solutions/<module>/ put at
    exercises/<module>/, plus owned files outside exercises/ as the kit has them."""
    overlay: dict[str, bytes] = {}
    for name in modules:
        folder = SOLUTIONS / name
        if folder.is_dir():
            for f in sorted(folder.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    overlay[f"exercises/{name}/{f.relative_to(folder).as_posix()}"] = f.read_bytes()
        mod = man.modules.get(name)
        for owned in (mod.owned if mod else []):
            if not owned.startswith("exercises/") and (ROOT / owned).is_file():
                overlay[owned] = (ROOT / owned).read_bytes()
    return overlay


def _tree_files(hidden: bool) -> dict[str, Path | bytes]:
    files: dict[str, Path | bytes] = {}
    for name in tree.kit_files(ROOT):
        top = Path(name).parts[0]
        if top == "solutions":
            continue
        if not hidden and name.startswith("grader/hidden/"):
            continue
        if name.startswith("grader/selftest/"):
            continue
        files[name] = ROOT / name
    return files


def _plan_trees(selected: list[mf.Module], man: mf.Manifest, mode: str) -> list[dict[str, str]]:
    """Groups modules into trees. Each tree maps module -> "sub" (graded files) or "ref"
    (reference, as a prerequisite). Student and solutions mode need one tree; a submission needs
    more only when one graded module is another's prerequisite."""
    if mode == "student":
        return [{m.name: "sub" for m in selected}]
    if mode == "solutions":
        everything = {p: "ref" for m in selected for p in man.prerequisites_closure(m.name)}
        everything.update({m.name: "sub" for m in selected})
        return [everything]
    trees: list[dict[str, str]] = []
    for m in selected:
        want = {m.name: "sub"}
        want.update({p: "ref" for p in man.prerequisites_closure(m.name)})
        for t in trees:
            if all(t.get(k, v) == v for k, v in want.items()):
                t.update(want)
                break
        else:
            trees.append(dict(want))
    return trees


# ---- building -------------------------------------------------------------------------------

_ERROR_RE = re.compile(r"(error|Error|undefined reference|FAILED:|ninja: build stopped)")


def first_errors(output: str, strip: str) -> str:
    """The first compiler errors of a build log, with the clean copy's path removed."""
    text = output.replace(strip, "")
    lines = text.splitlines()
    keep: list[str] = []
    start = next((i for i, l in enumerate(lines) if re.search(r"\berror\b|undefined reference", l)), None)
    if start is None:
        start = next((i for i, l in enumerate(lines) if "FAILED:" in l), max(0, len(lines) - ERROR_LINES))
    # Include the "In file included from / In function" lines right above the first error.
    while start > 0 and re.match(r"^(In file included|\s+from |.*In (member )?function|.*: In )", lines[start - 1]):
        start -= 1
    for l in lines[start:]:
        if l.startswith("[") and "/" in l and "Building" in l:
            continue
        if l.startswith("ninja: build stopped"):
            break
        keep.append(l)
        if len(keep) >= ERROR_LINES:
            break
    out = "\n".join(keep)
    return out[:ERROR_CHARS] + ("\n... (more errors)" if len(out) > ERROR_CHARS else "")


def _lock(path: Path, say: Progress):  # type: ignore[no-untyped-def]
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"waiting for another ./distlab grade that uses {rel(path.parent)}", flush=True)
        fcntl.flock(f, fcntl.LOCK_EX)
    return f


@dataclass
class TreeBuild:
    src: Path
    build: Path
    tsan_build: Path


def prepare_tree(tree_id: str, overlay: dict[str, bytes], hidden: bool, say: Progress) -> TreeBuild:
    base = BUILD / "grade" / tree_id
    src = base / "src"
    files = _tree_files(hidden)
    files.update(overlay)
    written, removed = tree.mirror(files, src)
    say(f"clean copy {rel(src)}: {written} files written, {removed} removed")
    return TreeBuild(src, base / "build", base / "build-tsan")


def _configure(tb: TreeBuild, build_dir: Path, cache: dict[str, str], say: Progress) -> None:
    if not cmake.configured(build_dir):
        say(f"configuring {rel(build_dir)}")
    cmake.configure(tb.src, build_dir, cache, quiet=True)   # reconfigures when the cache differs


def _build_modules(tb: TreeBuild, build_dir: Path, cache: dict[str, str], names: list[str],
                   results: dict[str, ModuleResult], man: mf.Manifest, mode: str, say: Progress,
                   label: str = "", warnings: list[str] | None = None) -> list[str]:
    """Builds module_<name> for each name; returns the names that built. Failures and blocked
    modules are recorded in results (for the plain build) or as notes (tsan)."""
    _configure(tb, build_dir, cache, say)
    known = cmake.targets(build_dir)
    present = [n for n in names if f"module_{n}" in known]
    # One ninja run for the kit's library and every module (-k 0: keep going past a module's
    # errors), so both cores stay busy; then each module is built on its own to attribute errors.
    say(f"building {', '.join(present) or 'the kit library'}{label}")
    bulk = cmake.build(build_dir, ["distlab_dist"] + [f"module_{n}" for n in present], keep_going=True,
                       progress=say)
    say(f"built in {bulk.seconds:.1f} s" + ("" if bulk.ok else " (with errors)"))
    if warnings is not None:
        warnings.extend(l.replace(str(tb.src) + "/", "") for l in bulk.output.splitlines()
                        if "warning:" in l)
    for n in present:
        results[n].build_seconds += bulk.seconds / len(present)
    if not bulk.ok:
        # The kit's own library failing is not the student's fault: nothing can be graded.
        r = cmake.build(build_dir, ["distlab_dist"])
        if not r.ok:
            raise DistlabError(f"the kit itself does not build in {rel(build_dir)} (target distlab_dist); "
                               f"this is not caused by a submission:\n{first_errors(r.output, str(tb.src) + '/')}")
    built: list[str] = []
    failed: set[str] = set()
    for n in names:
        res = results[n]
        if n not in present:
            if not label:
                res.status = "not gradable"
                res.message = (f"module {n} is not part of this kit's build (no exercises/{n}/CMakeLists.txt "
                               f"or no test target)")
            continue
        blockers = [p for p in man.prerequisites_closure(n) if p in failed]
        if mode == "student" and blockers and not label:
            res.status = "blocked"
            res.message = (f"blocked by {', '.join(blockers)}: it does not compile, and {n} builds "
                           f"on it. Fix {blockers[0]} first.")
            failed.add(n)
            continue
        t0 = time.monotonic()
        one = cmake.build(build_dir, [f"module_{n}"])
        res.build_seconds += time.monotonic() - t0
        if one.ok:
            built.append(n)
        else:
            failed.add(n)
            errors = first_errors(one.output, str(tb.src) + "/")
            culprits = [p for p in man.prerequisites_closure(n) if f"exercises/{p}/" in errors]
            if label:
                res.notes.append(f"did not build under ThreadSanitizer:\n{errors}")
            elif mode == "student" and culprits:
                res.status = "blocked"
                res.message = (f"blocked by {', '.join(culprits)}: {n} builds on it and it does not "
                               f"compile. Fix {culprits[0]} first; the first errors:\n{errors}")
            else:
                res.status = "not gradable"
                res.message = f"does not compile; the first errors:\n{errors}"
    return built


# ---- running tests --------------------------------------------------------------------------

def _run_items(jobs: list[tuple[ModuleResult, mf.TestItem, Path, float, dict[str, str], Path]],
               workers: int, say: Progress, tag: str = "") -> dict[tuple[str, str], runner.Outcome]:
    out: dict[tuple[str, str], runner.Outcome] = {}
    if not jobs:
        return out
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futs = {pool.submit(runner.run_test, binary, item.filter, timeout, cwd, env, str(cwd) + "/"):
                (res, item) for res, item, binary, timeout, env, cwd in jobs}
        for fut in as_completed(futs):
            res, item = futs[fut]
            try:
                oc = fut.result()
            except Exception as e:  # never lose the other results
                oc = runner.Outcome(False, f"grader error while running the test: {e}", "", 0.0)
            out[(res.module.name, item.name)] = oc
            done += 1
            status = "passed" if oc.passed else f"FAILED: {oc.reason}"
            say(f"  [{done}/{len(jobs)}] {item.full_name}{tag}: {status} ({oc.seconds:.1f} s)")
    return out


def _test_jobs(results: list[ModuleResult], bin_dir: Path, cwd: Path, hidden: bool,
               factor: float = 1.0, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    jobs = []
    for res in results:
        for item in res.module.items(hidden):
            jobs.append((res, item, bin_dir / res.module.binary_for(item), item.timeout_s * factor,
                         dict(env or {}, DISTLAB_ROOT=str(cwd)), cwd))
    return jobs


# ---- one grading run ------------------------------------------------------------------------

def grade(module_names: list[str], mode: str, submission_path: Path | None = None,
          hidden: bool = False, jobs: int = 0, quiet: bool = False, tree_prefix: str = "") -> GradeRun:
    """Grades and returns the results (writing no report)."""
    t_start = time.monotonic()
    say = Progress(quiet)
    man = mf.load()
    if mode in ("solutions", "submission") and is_release():
        raise DistlabError("this is a student repository: it has no solutions/, so --solutions and "
                           "--submission (instructor modes) cannot run here. Run ./distlab grade to "
                           "grade your exercises.")
    if hidden and not (ROOT / "grader" / "hidden").is_dir():
        raise DistlabError("--hidden: there are no hidden tests here (grader/hidden/ is missing; "
                           "a student repository does not have them)")
    selected = man.select(module_names)
    run = GradeRun(label=(submission_path.name if submission_path else mode), mode=mode, hidden=hidden)
    if not selected:
        run.notes.append("no module has graded tests in grader/manifest.toml yet")
        return run
    deps.ensure()
    results = {m.name: ModuleResult(m, hidden=hidden) for m in selected}
    run.modules = [results[m.name] for m in selected]

    owned_all = [o for m in man.modules.values() for o in m.owned]
    sub = submission.load(submission_path, owned_all) if mode == "submission" else None
    if sub and sub.error:
        run.notes.append(f"the submission could not be read: {sub.error}. Every module was graded "
                         f"with the stubs.")
    if sub:
        run.notes.extend(sub.problems)

    workers = jobs or nproc()
    trees = _plan_trees(selected, man, mode)
    base_id = tree_prefix or {"student": "exercises", "solutions": "solutions",
                              "submission": "submission"}[mode]
    for index, assignment in enumerate(trees):
        tree_id = base_id if index == 0 else f"{base_id}-{index + 1}"
        overlay: dict[str, bytes] = {}
        if mode == "solutions":
            # Every module is the reference (not only the selected ones), so the tree never changes.
            overlay.update(solution_overlay(man.order, man))
        for name, role in assignment.items():
            mod = man.modules.get(name)
            if role == "ref" and mode != "solutions":
                overlay.update(solution_overlay([name], man))
            if mod is None or role == "ref" or mode == "solutions":
                continue
            for owned in mod.owned:
                if mode == "submission" and sub is not None:
                    if owned in sub.files:
                        overlay[owned] = sub.files[owned]
                        if owned in sub.found_as and name in results:
                            results[name].notes.append(f"{owned}: taken from {sub.found_as[owned]}")
                    elif name in results and not sub.error:
                        results[name].notes.append(f"{owned}: not in the submission; graded the stub")
                elif mode == "student" and name in results and not (ROOT / owned).is_file():
                    results[name].notes.append(f"{owned}: missing in this checkout")
        graded_here = [n for n in man.order if assignment.get(n) == "sub" and n in results]
        lock = _lock(BUILD / "grade" / tree_id / ".lock", say)
        try:
            tb = prepare_tree(tree_id, overlay, hidden, say)
            built = _build_modules(tb, tb.build, BASE_CACHE, graded_here, results, man, mode, say,
                                   warnings=run.warnings)
            tsan_mods = [n for n in built if "thread" in results[n].module.sanitizers]
            tsan_built: list[str] = []
            if tsan_mods:
                tsan_built = _build_modules(tb, tb.tsan_build, TSAN_CACHE, tsan_mods, results, man,
                                            mode, say, label=" under ThreadSanitizer")
            say(f"running tests of {', '.join(built) or 'no module'}")
            t0 = time.monotonic()
            plain = _run_items(_test_jobs([results[n] for n in built], tb.build / "bin", tb.src, hidden),
                               workers, say)
            tsan_env = {"TSAN_OPTIONS": "halt_on_error=1 second_deadlock_stack=1 report_signal_unsafe=0"}
            tsan = _run_items(_test_jobs([results[n] for n in tsan_built], tb.tsan_build / "bin", tb.src,
                                         hidden, TSAN_TIMEOUT_FACTOR, tsan_env),
                              workers, say, tag=" [tsan]")
            elapsed = time.monotonic() - t0
        finally:
            lock.close()
        for n in built:
            res = results[n]
            res.test_seconds = elapsed / max(1, len(built))
            for item in res.module.items(hidden):
                oc = plain[(n, item.name)]
                passed, reason, output, secs = oc.passed, oc.reason, oc.output, oc.seconds
                if "thread" in res.module.sanitizers:
                    toc = tsan.get((n, item.name))
                    if toc is None:
                        passed, reason = False, "did not build under ThreadSanitizer"
                    elif not toc.passed:
                        if passed:
                            passed, reason, output = False, f"under ThreadSanitizer: {toc.reason}", toc.output
                        else:
                            output += f"\n\nunder ThreadSanitizer: {toc.reason}"
                    secs += toc.seconds if toc else 0.0
                res.items.append(ItemResult(item, passed, reason, output, secs))

    # Student mode: point at the earlier module that holds a later one back.
    if mode == "student":
        for res in run.modules:
            for p in man.prerequisites_closure(res.module.name):
                pre = results.get(p)
                if pre and pre.status == "graded" and pre.score < pre.max_score and res.status == "graded" \
                        and res.score < res.max_score:
                    res.notes.append(f"builds on {p}, which did not get full marks: fix {p} first")
    run.seconds = time.monotonic() - t_start
    return run


def _batch(a: argparse.Namespace) -> int:
    from . import batch
    return batch.main(Path(a.submissions), Path(a.csv) if a.csv else None, a.modules, a.hidden,
                      Path(a.out) if a.out else None, a.jobs)


def main(a: argparse.Namespace) -> int:
    if a.submissions:
        return _batch(a)
    if a.csv:
        raise DistlabError("--csv goes with --submissions DIR (batch mode)")
    mode = "solutions" if a.solutions else "submission" if a.submission else "student"
    sub_path = Path(a.submission).resolve() if a.submission else None
    if sub_path is not None and not sub_path.exists():
        raise DistlabError(f"--submission {a.submission}: no such file or folder")
    # DISTLAB_GRADE_TREE names another tree under build/grade/ (e.g. to time a clean grade).
    custom = os.environ.get("DISTLAB_GRADE_TREE", "")
    if custom and not re.fullmatch(r"[A-Za-z0-9_.-]+", custom):
        raise DistlabError("DISTLAB_GRADE_TREE: letters, digits, '.', '_' and '-' only")
    run = grade(a.modules, mode, sub_path, a.hidden, a.jobs, a.quiet, tree_prefix=custom)
    tree_id = custom or {"student": "exercises", "solutions": "solutions", "submission": "submission"}[mode]
    out = Path(a.out).resolve() if a.out else BUILD / "grade" / tree_id / "report"
    report.write_all(run, out)
    report.print_table(run)
    print(f"\nreport: {rel(out / 'report.md')} (also results.json, junit.xml)")
    sys.stdout.flush()
    return 0
