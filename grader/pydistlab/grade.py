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

A grade is plan -> build -> run items -> results, each step a module of grading/:
  passes.py    GradeOptions, and the passes over a tree (plain or ASan, then ThreadSanitizer)
  plan.py      which trees, and each one's overlay, graded modules and untrusted sources
  strategy.py  how a build keeps the submission apart (bubblewrap, unprivileged uid, none)
  builds.py    one pass's build: untrusted files, trusted parts, which module failed
  items.py     the test processes of a pass, and the item results from the passes' outcomes

Each mode grades in its own workspace (workspace.py: build/grade/<id>/{src,build,build-tsan}),
reused between runs, so ninja rebuilds only what an edit touched.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

from . import deadlock, deps, manifest as mf, sandbox, unfinished, workspace as ws
from .errors import DistlabError
from .grading import items, passes, plan
from .grading.builds import BuildRun, build_modules
from .grading.passes import NOT_RUN, GradeOptions, Order
from .paths import ROOT, cpus, is_release
from .results import GradeRun, Mode, ModuleResult

__all__ = ["GradeOptions", "NOT_RUN", "Order", "grade"]


def grade(module_names: list[str], mode: Mode, submission_path: Path | None = None,
          options: GradeOptions | None = None) -> GradeRun:
    """Grades and returns the results (writing no report)."""
    t_start = time.monotonic()
    options = options or GradeOptions()
    mode = Mode(mode)
    say = ws.Progress(options.quiet)
    man = mf.load()
    _check_mode(mode, options.hidden)
    selected = man.select(module_names)
    run = GradeRun(label=(submission_path.name if submission_path else mode.value), mode=mode,
                   hidden=options.hidden)
    if not selected:
        run.notes.append("no module has graded tests in grader/manifest.toml yet")
        return run
    deps.ensure()
    box = sandbox.admit(sandbox.probe(options.sandbox), mode.value, ws.grade_root())
    say(sandbox.describe(box))
    if not box.isolated and mode is not Mode.STUDENT:
        run.notes.append(sandbox.describe(box))
    results = {m.name: ModuleResult(m, hidden=options.hidden) for m in selected}
    run.modules = [results[m.name] for m in selected]
    sub = plan.load_submission(mode, submission_path, man, run)
    build_times: list[float] = []
    for index, assignment in enumerate(plan.plan_trees(selected, man, mode)):
        tid = plan.tree_id(options.tree_prefix or mode.tree_id, index)
        tree = plan.plan_tree(tid, assignment, man, mode, sub, results)
        build_times += _grade_tree(tree, options, results, man, mode, box, say, run.warnings)
    if mode is Mode.STUDENT:
        _point_at_prerequisites(run, results, man)
    run.seconds = time.monotonic() - t_start
    run.build_seconds = sum(build_times)
    return run


def _grade_tree(tree: plan.TreePlan, options: GradeOptions, results: dict[str, ModuleResult],
                man: mf.Manifest, mode: Mode, box: sandbox.Status, say: ws.Progress,
                warnings: list[str]) -> list[float]:
    """Builds and runs the tree's passes; fills in the results of the modules graded from it.
    Returns the time of each build (configuring and CMake's re-runs included)."""
    first, tsan_pass = passes.passes_for(options)
    workers, hidden = options.jobs or cpus(), options.hidden
    times: list[float] = []
    with ws.open_tree(tree.tree_id, tree.overlay, hidden, say) as tb:
        t_build = time.monotonic()
        built = build_modules(BuildRun(tb, tree, first, results, man, mode, box, say, warnings), tree.graded)
        times.append(time.monotonic() - t_build)
        say(f"running tests of {', '.join(built) or 'no module'}"
            f"{' under AddressSanitizer and UBSan' if first.kind == 'asan' else ''}")
        jobs = items.test_jobs([results[n] for n in built], first.build_dir(tb) / "bin", tb.src, hidden, first,
                               status=box)
        outcomes = items.run_items(jobs, workers, say, first)
        tsan_built: list[str] = []
        tsan: items.Outcomes = {}
        mods = passes.tsan_modules(built, results, outcomes, options.order) if tsan_pass else []
        if tsan_pass and mods:
            t_build = time.monotonic()
            tsan_built = build_modules(BuildRun(tb, tree, tsan_pass, results, man, mode, box, say), mods)
            times.append(time.monotonic() - t_build)
        if tsan_pass:
            # Under ThreadSanitizer only the items that passed: a failure is already a failure.
            passed = {k for k, oc in outcomes.items() if oc.passed}
            jobs = items.test_jobs([results[n] for n in tsan_built], tsan_pass.build_dir(tb) / "bin", tb.src,
                                   hidden, tsan_pass, status=box, only=passed)
            tsan = items.run_items(jobs, workers, say, tsan_pass)
        for n in built:
            items.collect(results[n], hidden, outcomes, tsan_pass, tsan, tsan_built)
            _find_unfinished(results[n], tb.src)
    return times


#: A reason that says a TODO was reached (runner._headline's form): "not implemented at FILE:LINE: ..."
_TODO_AT = re.compile(r"^(?:[^:]*: )?not implemented at (?P<file>[^\s:]+):(?P<line>\d+)")


def todo_place(reason: str) -> tuple[str, int] | None:
    """(file, line) of the TODO a failed item's reason says it reached (the reason may start
    with a resource limit's words), else None."""
    m = _TODO_AT.match(reason)
    return (m.group("file"), int(m.group("line"))) if m else None


def _find_unfinished(res: ModuleResult, src: Path) -> None:
    """Fills in what the module's files leave unwritten (their TODO markers, as graded) and the
    other modules' unfinished functions its failed items reached ("blocked by"); a deadlock's
    reason and output get the module's tag names and advice (deadlock.py)."""
    res.unfinished = unfinished.function_names(unfinished.module_todos(src, res.module.owned))
    tags = deadlock.tag_names(src / "exercises" / res.module.name)
    advice = deadlock.load_advice().get(res.module.name, {})
    for r in res.items:
        if not r.passed and "deadlock:" in r.reason:
            r.reason = deadlock.explain(r.reason, tags, advice)
            r.output = "\n".join(deadlock.explain(line, tags, advice) for line in r.output.split("\n"))
        place = None if r.passed else todo_place(r.reason)
        if place is None:
            continue
        owner = unfinished.module_of_path(place[0])
        fn = unfinished.function_in_file(src, place[0], place[1]) or f"{Path(place[0]).name}:{place[1]}"
        # A TODO of its own that threw without a marker the scan saw (a hand-written throw) counts
        # too; one of another module's files is that module's.
        names = res.unfinished if not owner or owner == res.module.name else res.blocked_by.setdefault(owner, [])
        if fn not in names:
            names.append(fn)


def _check_mode(mode: Mode, hidden: bool) -> None:
    if mode in (Mode.SOLUTIONS, Mode.SUBMISSION) and is_release():
        raise DistlabError("this is a student repository: it has no solutions/, so --solutions and "
                           "--submission (instructor modes) cannot run here. Run ./distlab grade to "
                           "grade your exercises.")
    if hidden and not (ROOT / "grader" / "hidden").is_dir():
        raise DistlabError("--hidden: there are no hidden tests here (grader/hidden/ is missing; "
                           "a student repository does not have them)")


def _point_at_prerequisites(run: GradeRun, results: dict[str, ModuleResult], man: mf.Manifest) -> None:
    """Student mode: point at the earlier module that holds a later one back."""
    for res in run.modules:
        for p in man.prerequisites_closure(res.module.name):
            pre = results.get(p)
            if pre and pre.status == "graded" and pre.score < pre.max_score and res.status == "graded" \
                    and res.score < res.max_score:
                res.notes.append(f"builds on {p}, which did not get full marks: fix {p} first")
