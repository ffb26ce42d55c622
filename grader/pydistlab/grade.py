"""Grading: build student files on a clean copy of the kit and run the graded tests.

grade() returns a results.GradeRun and writes nothing; commands/grade.py (`./distlab grade`) and
batch.py write the reports.

Modes (results.Mode)
  STUDENT     this checkout's exercises/; later modules build on the student's own earlier
              modules, and a module whose prerequisite does not compile is "blocked".
  SOLUTIONS   the reference solutions (instructor).
  SUBMISSION  a folder or .zip of student files (instructor, Gradescope): only owned files are
              taken; each module's prerequisites are the reference implementations, so every
              module is graded on its own.

Each mode grades in its own workspace (workspace.py: build/grade/<id>/{src,build,build-tsan}),
reused between runs, so ninja rebuilds only what an edit touched.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from . import cmake, deps, manifest as mf, runner, submission, workspace as ws
from .errors import DistlabError
from .paths import ROOT, is_release, nproc, rel
from .results import GradeRun, ItemResult, Mode, ModuleResult

TSAN_TIMEOUT_FACTOR = 4.0


def _plan_trees(selected: list[mf.Module], man: mf.Manifest, mode: Mode) -> list[dict[str, str]]:
    """Groups modules into trees. Each tree maps module -> "sub" (graded files) or "ref"
    (reference, as a prerequisite). Student and solutions mode need one tree; a submission needs
    more only when one graded module is another's prerequisite."""
    if mode is Mode.STUDENT:
        return [{m.name: "sub" for m in selected}]
    if mode is Mode.SOLUTIONS:
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

def _build_modules(tb: ws.TreeBuild, build_dir: Path, cache: dict[str, str], names: list[str],
                   results: dict[str, ModuleResult], man: mf.Manifest, mode: Mode, say: ws.Progress,
                   label: str = "", warnings: list[str] | None = None) -> list[str]:
    """Builds module_<name> for each name; returns the names that built. Failures and blocked
    modules are recorded in results (for the plain build) or as notes (tsan)."""
    ws.configure(tb, build_dir, cache, say)
    known = cmake.targets(build_dir)
    present = [n for n in names if f"module_{n}" in known]
    # One ninja run for the kit's library and every module (-k 0: keep going past a module's
    # errors), so both cores stay busy; then each module is built on its own to attribute errors.
    say(f"building {', '.join(present) or 'the kit library'}{label}")
    bulk = cmake.build(build_dir, ["distlab_dist"] + [f"module_{n}" for n in present], keep_going=True,
                       progress=say)
    say(f"built in {bulk.seconds:.1f} s" + ("" if bulk.ok else " (with errors)"))
    if warnings is not None:
        warnings.extend(line.replace(str(tb.src) + "/", "") for line in bulk.output.splitlines()
                        if "warning:" in line)
    for n in present:
        results[n].build_seconds += bulk.seconds / len(present)
    if not bulk.ok:
        # The kit's own library failing is not the student's fault: nothing can be graded.
        r = cmake.build(build_dir, ["distlab_dist"])
        if not r.ok:
            raise DistlabError(f"the kit itself does not build in {rel(build_dir)} (target distlab_dist); "
                               f"this is not caused by a submission:\n{tb.first_errors(r.output)}")
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
        if mode is Mode.STUDENT and blockers and not label:
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
            errors = tb.first_errors(one.output)
            culprits = [p for p in man.prerequisites_closure(n) if f"exercises/{p}/" in errors]
            if label:
                res.notes.append(f"did not build under ThreadSanitizer:\n{errors}")
            elif mode is Mode.STUDENT and culprits:
                res.status = "blocked"
                res.message = (f"blocked by {', '.join(culprits)}: {n} builds on it and it does not "
                               f"compile. Fix {culprits[0]} first; the first errors:\n{errors}")
            else:
                res.status = "not gradable"
                res.message = f"does not compile; the first errors:\n{errors}"
    return built


# ---- running tests --------------------------------------------------------------------------

#: One test process to run: (its module's result, the item, binary, time limit, environment, cwd).
Job = tuple[ModuleResult, mf.TestItem, Path, float, dict[str, str], Path]


#: The reason of an item that was not run because an earlier one failed (grade(stop_early=True)).
NOT_RUN = "not run: an earlier item already failed"


def _run_items(jobs: list[Job], workers: int, say: ws.Progress,
               tag: str = "", stop_early: bool = False) -> dict[tuple[str, str], runner.Outcome]:
    """Runs the jobs, `workers` at a time. stop_early: after the first failure, the items not yet
    started are not run (their outcome says NOT_RUN)."""
    out: dict[tuple[str, str], runner.Outcome] = {}
    if not jobs:
        return out
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futs = {pool.submit(runner.run_test, binary, item.filter, timeout, cwd, env, str(cwd) + "/"):
                (res, item) for res, item, binary, timeout, env, cwd in jobs}
        for fut in as_completed(futs):
            res, item = futs[fut]
            if fut.cancelled():
                out[(res.module.name, item.name)] = runner.Outcome(False, NOT_RUN, "", 0.0)
                continue
            try:
                oc = fut.result()
            except Exception as e:  # never lose the other results
                oc = runner.Outcome(False, f"grader error while running the test: {e}", "", 0.0)
            out[(res.module.name, item.name)] = oc
            done += 1
            status = "passed" if oc.passed else f"FAILED: {oc.reason}"
            say(f"  [{done}/{len(jobs)}] {item.full_name}{tag}: {status} ({oc.seconds:.1f} s)")
            if stop_early and not oc.passed:
                for other in futs:
                    other.cancel()
    return out


def _test_jobs(results: list[ModuleResult], bin_dir: Path, cwd: Path, hidden: bool,
               factor: float = 1.0, env: dict[str, str] | None = None) -> list[Job]:
    jobs: list[Job] = []
    for res in results:
        for item in res.module.items(hidden):
            jobs.append((res, item, bin_dir / res.module.binary_for(item), item.timeout_s * factor,
                         dict(env or {}, DISTLAB_ROOT=str(cwd)), cwd))
    return jobs


# ---- one grading run ------------------------------------------------------------------------

def grade(module_names: list[str], mode: Mode, submission_path: Path | None = None,
          hidden: bool = False, jobs: int = 0, quiet: bool = False, tree_prefix: str = "",
          stop_early: bool = False) -> GradeRun:
    """Grades and returns the results (writing no report). stop_early (`./distlab mutants
    --fast`): once an item fails, the items not yet started are not run (reason NOT_RUN) and the
    ThreadSanitizer build is skipped: the score is then only a lower bound."""
    t_start = time.monotonic()
    mode = Mode(mode)
    say = ws.Progress(quiet)
    man = mf.load()
    if mode in (Mode.SOLUTIONS, Mode.SUBMISSION) and is_release():
        raise DistlabError("this is a student repository: it has no solutions/, so --solutions and "
                           "--submission (instructor modes) cannot run here. Run ./distlab grade to "
                           "grade your exercises.")
    if hidden and not (ROOT / "grader" / "hidden").is_dir():
        raise DistlabError("--hidden: there are no hidden tests here (grader/hidden/ is missing; "
                           "a student repository does not have them)")
    selected = man.select(module_names)
    run = GradeRun(label=(submission_path.name if submission_path else mode.value), mode=mode, hidden=hidden)
    if not selected:
        run.notes.append("no module has graded tests in grader/manifest.toml yet")
        return run
    deps.ensure()
    results = {m.name: ModuleResult(m, hidden=hidden) for m in selected}
    run.modules = [results[m.name] for m in selected]

    owned_all = [o for m in man.modules.values() for o in m.owned]
    sub = submission.load(submission_path, owned_all) if mode is Mode.SUBMISSION else None
    if sub and sub.error:
        run.notes.append(f"the submission could not be read: {sub.error}. Every module was graded "
                         f"with the stubs.")
    if sub:
        run.notes.extend(sub.problems)

    workers = jobs or nproc()
    trees = _plan_trees(selected, man, mode)
    base_id = tree_prefix or mode.tree_id
    for index, assignment in enumerate(trees):
        tree_id = base_id if index == 0 else f"{base_id}-{index + 1}"
        overlay: dict[str, bytes] = {}
        if mode is Mode.SOLUTIONS:
            # Every module is the reference (not only the selected ones), so the tree never changes.
            overlay.update(ws.solution_overlay(man.order, man))
        for name, role in assignment.items():
            mod = man.modules.get(name)
            if role == "ref" and mode is not Mode.SOLUTIONS:
                overlay.update(ws.solution_overlay([name], man))
            if mod is None or role == "ref" or mode is Mode.SOLUTIONS:
                continue
            for owned in mod.owned:
                if mode is Mode.SUBMISSION and sub is not None:
                    if owned in sub.files:
                        overlay[owned] = sub.files[owned]
                        if owned in sub.found_as and name in results:
                            results[name].notes.append(f"{owned}: taken from {sub.found_as[owned]}")
                    elif name in results and not sub.error:
                        results[name].notes.append(f"{owned}: not in the submission; graded the stub")
                elif mode is Mode.STUDENT and name in results and not (ROOT / owned).is_file():
                    results[name].notes.append(f"{owned}: missing in this checkout")
        graded_here = [n for n in man.order if assignment.get(n) == "sub" and n in results]
        with ws.open_tree(tree_id, overlay, hidden, say) as tb:
            built = _build_modules(tb, tb.build, ws.BASE_CACHE, graded_here, results, man, mode, say,
                                   warnings=run.warnings)
            say(f"running tests of {', '.join(built) or 'no module'}")
            t0 = time.monotonic()
            plain = _run_items(_test_jobs([results[n] for n in built], tb.build / "bin", tb.src, hidden),
                               workers, say, stop_early=stop_early)
            tsan_mods = [n for n in built if "thread" in results[n].module.sanitizers]
            if stop_early:   # a module that already failed an item needs no ThreadSanitizer run
                tsan_mods = [n for n in tsan_mods if all(oc.passed for (m, _), oc in plain.items() if m == n)]
            tsan_built: list[str] = []
            if tsan_mods:
                tsan_built = _build_modules(tb, tb.tsan_build, ws.TSAN_CACHE, tsan_mods, results, man,
                                            mode, say, label=" under ThreadSanitizer")
            tsan_env = {"TSAN_OPTIONS": "halt_on_error=1 second_deadlock_stack=1 report_signal_unsafe=0"}
            tsan = _run_items(_test_jobs([results[n] for n in tsan_built], tb.tsan_build / "bin", tb.src,
                                         hidden, TSAN_TIMEOUT_FACTOR, tsan_env),
                              workers, say, tag=" [tsan]", stop_early=stop_early)
            elapsed = time.monotonic() - t0
        for n in built:
            res = results[n]
            res.test_seconds = elapsed / max(1, len(built))
            for item in res.module.items(hidden):
                oc = plain[(n, item.name)]
                passed, reason, output, secs = oc.passed, oc.reason, oc.output, oc.seconds
                if "thread" in res.module.sanitizers and not (stop_early and n not in tsan_built):
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
    if mode is Mode.STUDENT:
        for res in run.modules:
            for p in man.prerequisites_closure(res.module.name):
                pre = results.get(p)
                if pre and pre.status == "graded" and pre.score < pre.max_score and res.status == "graded" \
                        and res.score < res.max_score:
                    res.notes.append(f"builds on {p}, which did not get full marks: fix {p} first")
    run.seconds = time.monotonic() - t_start
    return run

