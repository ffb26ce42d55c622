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

import dataclasses
import queue
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from . import cmake, deps, manifest as mf, runner, sandbox, submission, workspace as ws
from .errors import DistlabError
from .paths import ROOT, is_release, nproc, rel
from .results import GradeRun, ItemResult, Mode, ModuleResult

TSAN_TIMEOUT_FACTOR = 4.0
ASAN_TIMEOUT_FACTOR = 3.0


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

@dataclass
class Guard:
    """How a tree's builds keep the submission's code apart (the sandbox package): under bubblewrap, the
    untrusted sources (owned files of the modules graded from the student's code) are compiled
    first, in a view without hidden tests and reference sources; everything else is built after,
    from the kit's own sources, and never compiles an untrusted source."""
    status: sandbox.Status
    untrusted: dict[str, list[str]]           # module -> its untrusted sources (src-relative)
    hide: tuple[str, ...] = ()                # src-relative folders of reference prerequisites


def _target(name: str, known: set[str]) -> str:
    """What grading builds of a module: grade_<name> (library and tests, not the program) where
    the kit's CMake defines it, else module_<name>."""
    return f"grade_{name}" if f"grade_{name}" in known else f"module_{name}"


def _build_modules(tb: ws.TreeBuild, build_dir: Path, cache: dict[str, str], names: list[str],
                   results: dict[str, ModuleResult], man: mf.Manifest, mode: Mode, say: ws.Progress,
                   label: str = "", warnings: list[str] | None = None,
                   guard: Guard | None = None) -> list[str]:
    """Builds module_<name> for each name; returns the names that built. Failures and blocked
    modules are recorded in results (for the plain build) or as notes (tsan)."""
    ws.configure(tb, build_dir, cache, say)
    known = cmake.targets(build_dir)
    present = [n for n in names if f"module_{n}" in known]
    failed: set[str] = set()

    def not_built(res: ModuleResult, why: str) -> None:
        """A module that did not build: not gradable (plain build) or a note (ThreadSanitizer)."""
        failed.add(res.module.name)
        if label:
            res.notes.append(f"did not build under ThreadSanitizer: {why}")
        else:
            res.status = "not gradable"
            res.message = why

    untrusted_errors: dict[str, str] = {}
    trusted: list[str] | None = None
    untrusted_objects: list[str] = []
    plan: sandbox.BuildPlan | None = None
    lend_to: int | None = None
    if guard is not None and guard.status.isolated:
        plan = sandbox.BuildPlan.read(tb.src, build_dir)
        decoy = tb.src.parent / "empty"
        decoy.write_bytes(b"")
        view = sandbox.build_view(plan, untrusted=True, hide_sources=guard.hide, decoy=decoy)
        trusted = sandbox.build_view(plan, untrusted=False)
    elif guard is not None and guard.status.limited:
        # No namespaces: as root, the submission's files are compiled as an unprivileged uid that
        # cannot read what lock_away() closed.
        plan = sandbox.BuildPlan.read(tb.src, build_dir)
        lend_to = sandbox.build_uid(plan)
        if lend_to is not None:
            sandbox.lock_away(plan, ROOT, guard.hide)
            view, trusted = sandbox.uid_prefix(lend_to), []
        else:
            plan = None
    # A submission's owned headers are compiled into the tests: judged on the compiler's view first.
    refused = sandbox.check_owned_headers(plan or sandbox.BuildPlan.read(tb.src, build_dir), [
        man.modules[n] for n in present if n in guard.untrusted], view if plan else [], ROOT) \
        if guard is not None and mode is Mode.SUBMISSION else {}
    failed.update(refused)
    up_to_date = False
    if plan is not None and guard is not None:
        # A re-grade of unchanged files: ninja -n (which runs nothing) says there is nothing to
        # compile or link, so no sandbox needs to start for the build.
        idle = cmake.build(build_dir, ["distlab_dist"] + [_target(n, known) for n in present],
                           keep_going=True, dry_run=True)
        up_to_date = idle.ok and "no work to do" in idle.output
    if plan is not None and guard is not None and not up_to_date:
        # 1. The submission's own translation units, where nothing secret can be read.
        needed = {m for n in present for m in (n, *man.prerequisites_closure(n))}
        per_module = {n: plan.objects_of(set(guard.untrusted.get(n, []))) for n in man.order if n in needed}
        per_module = {n: objs for n, objs in per_module.items() if objs and n not in refused}
        together_ok = False
        if lend_to is None and len(per_module) > 1:
            # Every module's files in one ninja run (both cores busy); only when that fails is
            # each module built on its own (what compiled is up to date) to attribute the errors.
            say.status(f"compiling the student's own files in the sandbox{label}")
            r = cmake.build(build_dir, [o for objs in per_module.values() for o in objs],
                            keep_going=True, prefix=view)
            if warnings is not None:
                warnings.extend(ws.own_warnings(r.output, str(tb.src) + "/", ws.owned_files()))
            together_ok = r.ok
        for n, objs in per_module.items():
            untrusted_objects += objs
            if together_ok:
                continue
            say.status(f"compiling {n}'s own files in the sandbox{label}")
            if lend_to is not None:
                with sandbox.LentTo(build_dir, sorted({build_dir / Path(o).parent for o in objs}), lend_to,
                                    [tb.src / f for f in guard.untrusted.get(n, [])]):
                    r = cmake.build(build_dir, objs, keep_going=True, prefix=view)
            else:
                r = cmake.build(build_dir, objs, keep_going=True, prefix=view)
            if n in results:
                results[n].build_seconds += r.seconds
            if warnings is not None:
                warnings.extend(ws.own_warnings(r.output, str(tb.src) + "/", ws.owned_files()))
            if not r.ok:
                failed.add(n)
                untrusted_errors[n] = tb.first_errors(r.output)
    # 2. Everything else (the kit's library, references, tests, hidden tests) and the links: one
    # ninja run for all modules (-k 0: keep going past a module's errors), so both cores stay busy;
    # then each module is built on its own to attribute errors.
    buildable = [n for n in present if not ({n, *man.prerequisites_closure(n)} & failed)]
    targets = ["distlab_dist"] + [_target(n, known) for n in buildable]
    if plan is not None and guard is not None and untrusted_objects and not up_to_date:
        # Never compile an untrusted source outside its view: ninja -n lists what would run, and a
        # module whose files would be compiled again is not built.
        dry = cmake.build(build_dir, targets, keep_going=True, dry_run=True)
        for n, sources in guard.untrusted.items():
            leaked = [o for o in plan.objects_of(set(sources)) if o in dry.output]
            if leaked:
                failed.add(n)
                untrusted_errors[n] = (f"{', '.join(sources)}: the build would compile it again outside "
                                       f"the sandbox, so it was not built (tell your instructor)")
        buildable = [n for n in present if not ({n, *man.prerequisites_closure(n)} & failed)]
        targets = ["distlab_dist"] + [_target(n, known) for n in buildable]
    say(f"building {', '.join(buildable) or 'the kit library'}{label}")
    bulk = cmake.Result(True, "", 0.0) if up_to_date else \
        cmake.build(build_dir, targets, keep_going=True, progress=say.status, prefix=trusted)
    say(f"built in {bulk.seconds:.1f} s" + ("" if bulk.ok else " (with errors)"))
    if guard is not None and mode is Mode.SUBMISSION:   # no test runs with objects that replace the kit's
        refused.update(sandbox.check_module_objects((plan or sandbox.BuildPlan.read(tb.src, build_dir)).objects,
                                                    build_dir, {n: guard.untrusted.get(n, []) for n in present
                                                                if n not in failed}))
        failed.update(refused)
    if lend_to is not None and plan is not None and guard is not None:
        sandbox.lock_away(plan, ROOT, guard.hide)   # the new test programs too
    if warnings is not None:
        warnings.extend(ws.own_warnings(bulk.output, str(tb.src) + "/", ws.owned_files()))
    if not bulk.ok:
        # The kit's own library failing is not the student's fault: nothing can be graded.
        r = cmake.build(build_dir, ["distlab_dist"], prefix=trusted)
        if not r.ok:
            raise DistlabError(f"the kit itself does not build in {rel(build_dir)} (target distlab_dist); "
                               f"this is not caused by a submission:\n{tb.first_errors(r.output)}")
    built: list[str] = []
    for n in names:
        res = results[n]
        if n not in present:
            if not label:
                res.status = "not gradable"
                res.message = (f"module {n} is not part of this kit's build (no exercises/{n}/CMakeLists.txt "
                               f"or no test target)")
            continue
        blockers = [p for p in man.prerequisites_closure(n) if p in failed]
        if n in refused:
            not_built(res, refused[n])
            continue
        if n in untrusted_errors:
            not_built(res, f"does not compile; the first errors:\n{untrusted_errors[n]}")
            continue
        if mode is Mode.STUDENT and blockers and not label:
            res.status = "blocked"
            res.message = (f"blocked by {', '.join(blockers)}: it does not compile, and {n} builds "
                           f"on it. Fix {blockers[0]} first.")
            failed.add(n)
            continue
        if blockers and guard is not None and guard.status.isolated:
            not_built(res, f"builds on {', '.join(blockers)}, which does not compile")
            continue
        if bulk.ok:   # every module target is built: nothing to attribute
            built.append(n)
            continue
        one = cmake.build(build_dir, [_target(n, known)], prefix=trusted)
        res.build_seconds += one.seconds
        if one.ok:
            built.append(n)
        else:
            failed.add(n)
            errors = sandbox.redact_hidden(tb.first_errors(one.output))
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

#: One test process to run: (its module's result, the item, binary, time limit, environment, cwd,
#: the sandbox it runs in or None).
Job = tuple[ModuleResult, mf.TestItem, Path, float, dict[str, str], Path, "sandbox.TestJail | None"]


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
    slots: queue.Queue[int] = queue.Queue()
    for i in range(max(1, workers)):
        slots.put(i)

    def one(binary: Path, item: mf.TestItem, timeout: float, cwd: Path, env: dict[str, str],
            jail: sandbox.TestJail | None) -> runner.Outcome:
        slot = slots.get()   # each worker's tests run as a uid of their own (sandbox.TEST_UID_BASE)
        try:
            return runner.run_test(binary, item.filter, timeout, cwd, env, str(cwd) + "/",
                                   jail=dataclasses.replace(jail, worker=slot) if jail else None)
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futs = {pool.submit(one, binary, item, timeout, cwd, env, jail): (res, item)
                for res, item, binary, timeout, env, cwd, jail in jobs}
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
            say.status(f"  [{done}/{len(jobs)}] {item.full_name}{tag}: {status} ({oc.seconds:.1f} s)")
            if stop_early and not oc.passed:
                for other in futs:
                    other.cancel()
    sandbox.close_agents()   # the workers' sandboxes end with the run (see sandbox.Agent)
    say.done()
    return out


def _test_jobs(results: list[ModuleResult], bin_dir: Path, cwd: Path, hidden: bool,
               factor: float = 1.0, env: dict[str, str] | None = None,
               status: sandbox.Status | None = None, tsan: bool = False,
               only: set[tuple[str, str]] | None = None, first: Sequence[str] = ()) -> list[Job]:
    """The test processes to run, in manifest order except that the items named in `first` come
    first (in that order)."""
    jobs: list[Job] = []
    for res in results:
        jail = sandbox.jail_for(status, res.module, cwd, tsan) if status is not None else None
        for item in res.module.items(hidden):
            if only is not None and (res.module.name, item.name) not in only:
                continue
            jobs.append((res, item, bin_dir / res.module.binary_for(item), item.timeout_s * factor,
                         dict(env or {}, DISTLAB_ROOT=str(cwd)), cwd, jail))
    rank = {name: i for i, name in enumerate(first)}
    return sorted(jobs, key=lambda j: rank.get(j[1].name, len(rank)))   # stable: the rest in order


# ---- one grading run ------------------------------------------------------------------------

def grade(module_names: list[str], mode: Mode, submission_path: Path | None = None,
          hidden: bool = False, jobs: int = 0, quiet: bool = False, tree_prefix: str = "",
          sandbox_mode: str = "auto", stop_early: bool = False, sanitize: str = "",
          first: Sequence[str] = ()) -> GradeRun:
    """Grades and returns the results (writing no report). sandbox_mode: sandbox.probe().
    stop_early (`./distlab mutants --fast`): once an item fails, the items not yet started are not
    run (reason NOT_RUN) and the ThreadSanitizer build is skipped: the score is then only a lower
    bound. sanitize="address": the tests are built and run under AddressSanitizer and
    UndefinedBehaviorSanitizer instead (no ThreadSanitizer run). first: item names to run before
    the others (the mutants' known first catches: with stop_early, a mutant then stops after one
    item when that item still catches it)."""
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
    box = sandbox.probe(sandbox_mode)
    say(sandbox.describe(box))
    if not box.isolated and mode is not Mode.STUDENT:
        run.notes.append(sandbox.describe(box))
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
    build_times: list[float] = []
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
        untrusted = {n: [o for o in man.modules[n].owned if not o.endswith(sandbox.HEADER_SUFFIXES)]
                     for n in man.order if n in man.modules and
                     (assignment.get(n) == "sub" or (mode is Mode.STUDENT and n not in assignment))}
        hide = tuple(f"exercises/{n}/" for n, role in assignment.items() if role == "ref")
        guard = Guard(box, untrusted, hide) if mode is not Mode.SOLUTIONS or box.isolated else None
        with ws.open_tree(tree_id, overlay, hidden, say) as tb:
            build_dir, cache, factor, env = tb.build, ws.BASE_CACHE, 1.0, {}
            if sanitize:
                build_dir, cache = tb.build.with_name("build-asan"), ws.ASAN_CACHE
                factor, env = ASAN_TIMEOUT_FACTOR, ws.ASAN_ENV
            t_build = time.monotonic()   # configuring and CMake's re-runs included
            built = _build_modules(tb, build_dir, cache, graded_here, results, man, mode, say,
                                   warnings=run.warnings, guard=guard)
            build_times.append(time.monotonic() - t_build)
            say(f"running tests of {', '.join(built) or 'no module'}"
                f"{' under AddressSanitizer and UBSan' if sanitize else ''}")
            plain = _run_items(_test_jobs([results[n] for n in built], build_dir / "bin", tb.src, hidden,
                                          factor, env, status=box, tsan=bool(sanitize), first=first),
                               workers, say, stop_early=stop_early)
            tsan_mods = [n for n in built if "thread" in results[n].module.sanitizers and not sanitize]
            if stop_early:   # a module that already failed an item needs no ThreadSanitizer run
                tsan_mods = [n for n in tsan_mods if all(oc.passed for (m, _), oc in plain.items() if m == n)]
            # ThreadSanitizer re-runs the items that passed: a module with none needs no TSan build.
            tsan_mods = [n for n in tsan_mods if any(oc.passed for (m, _), oc in plain.items() if m == n)]
            tsan_built: list[str] = []
            if tsan_mods:
                t_build = time.monotonic()
                tsan_built = _build_modules(tb, tb.tsan_build, ws.TSAN_CACHE, tsan_mods, results, man,
                                            mode, say, label=" under ThreadSanitizer", guard=guard)
                build_times.append(time.monotonic() - t_build)
            # Under ThreadSanitizer only the items that passed: a failure is already a failure.
            passed_plain = {k for k, oc in plain.items() if oc.passed}
            tsan_env = {"TSAN_OPTIONS": "halt_on_error=1 second_deadlock_stack=1 report_signal_unsafe=0"}
            tsan = _run_items(_test_jobs([results[n] for n in tsan_built], tb.tsan_build / "bin", tb.src,
                                         hidden, TSAN_TIMEOUT_FACTOR, tsan_env, status=box, tsan=True,
                                         only=passed_plain, first=first),
                              workers, say, tag=" [tsan]", stop_early=stop_early)
        for n in built:
            res = results[n]
            for item in res.module.items(hidden):
                oc = plain[(n, item.name)]
                passed, reason, output, secs = oc.passed, oc.reason, oc.output, oc.seconds
                if "thread" in res.module.sanitizers and not sanitize \
                        and not (stop_early and n not in tsan_built):
                    toc = tsan.get((n, item.name))
                    if toc is None and n not in tsan_built:
                        passed, reason = False, reason or "did not build under ThreadSanitizer"
                    elif toc is None:
                        pass   # failed in the plain build; not run again under ThreadSanitizer
                    elif not toc.passed:
                        if passed:
                            passed, reason, output = False, f"under ThreadSanitizer: {toc.reason}", toc.output
                        else:
                            output += f"\n\nunder ThreadSanitizer: {toc.reason}"
                    secs += toc.seconds if toc else 0.0
                res.items.append(ItemResult(item, passed, reason, output, secs))
                res.test_seconds += secs   # the module's own test time (items run side by side)

    # Student mode: point at the earlier module that holds a later one back.
    if mode is Mode.STUDENT:
        for res in run.modules:
            for p in man.prerequisites_closure(res.module.name):
                pre = results.get(p)
                if pre and pre.status == "graded" and pre.score < pre.max_score and res.status == "graded" \
                        and res.score < res.max_score:
                    res.notes.append(f"builds on {p}, which did not get full marks: fix {p} first")
    run.seconds = time.monotonic() - t_start
    run.build_seconds = sum(build_times)
    return run

