"""One pass's build of a tree: compile the untrusted files, build the trusted ones, say which
module failed (the strategy, strategy.py, keeps the submission's code apart)."""
from __future__ import annotations

from dataclasses import dataclass

from .. import cmake, manifest as mf, sandbox, workspace as ws
from ..errors import DistlabError
from ..paths import rel
from ..results import Mode, ModuleResult
from . import strategy as strat
from .passes import Pass
from .plan import TreePlan


@dataclass
class BuildRun:
    """What one build works with; the modules' outcomes go to results (notes for a re-run pass)."""
    tb: ws.TreeBuild
    tree: TreePlan
    pass_: Pass
    results: dict[str, ModuleResult]
    man: mf.Manifest
    mode: Mode
    status: sandbox.Status
    say: ws.Progress
    warnings: list[str] | None = None     # the student's own warnings (the first pass only)

    def warn(self, output: str) -> None:
        if self.warnings is not None:
            self.warnings.extend(ws.own_warnings(output, str(self.tb.src) + "/", ws.owned_files()))

    def closure(self, n: str) -> set[str]:
        return {n, *self.man.prerequisites_closure(n)}


def target(name: str, known: set[str]) -> str:
    """What grading builds of a module: grade_<name> (library and tests, not the program) where
    the kit's CMake defines it, else module_<name>."""
    return f"grade_{name}" if f"grade_{name}" in known else f"module_{name}"


def build_modules(b: BuildRun, names: list[str]) -> list[str]:
    """Builds the modules `names` in the pass's build folder; returns those that built."""
    build_dir, say, label = b.pass_.build_dir(b.tb), b.say, b.pass_.label
    ws.configure(b.tb, build_dir, b.pass_.cache, say)
    known = cmake.targets(build_dir)
    present = [n for n in names if f"module_{n}" in known]
    how = strat.choose(b.status, b.mode, b.tb, build_dir, b.tree, b.man)
    up_to_date = how.up_to_date(["distlab_dist"] + [target(n, known) for n in present])
    errors: dict[str, str] = {}      # module -> why its own files did not build
    refused: dict[str, str] = {}     # module -> why its submitted files may not be built (strategy.py)
    if not up_to_date:
        # 1. The submission's own translation units, where nothing secret can be read.
        needed = {m for n in present for m in b.closure(n)}
        own = how.compile_untrusted([n for n in b.man.order if n in needed], say, label)
        for n, secs in own.seconds.items():
            if n in b.results:
                b.results[n].build_seconds += secs
        for log in own.logs:
            b.warn(log)
        errors.update(own.errors)
        refused.update(own.refused)
        # 2. Everything else (the kit's library, references, tests, hidden tests) and the links:
        # one ninja run for all modules (-k 0: keep going past a module's errors), so both cores
        # stay busy; then each module is built on its own to attribute errors.
        errors.update(how.recompiled(_targets(b, present, errors | refused, known), own.objects))
    buildable = [n for n in present if not (b.closure(n) & (errors.keys() | refused.keys()))]
    say(f"building {', '.join(buildable) or 'the kit library'}{label}")
    bulk = cmake.Result(True, "", 0.0) if up_to_date else \
        cmake.build(build_dir, _targets(b, present, errors | refused, known), keep_going=True,
                    progress=say.status, prefix=how.trusted_prefix)
    say(f"built in {bulk.seconds:.1f} s" + ("" if bulk.ok else " (with errors)"))
    how.after_trusted()
    b.warn(bulk.output)
    if not bulk.ok:
        # The kit's own library failing is not the student's fault: nothing can be graded.
        r = cmake.build(build_dir, ["distlab_dist"], prefix=how.trusted_prefix)
        if not r.ok:
            raise DistlabError(f"the kit itself does not build in {rel(build_dir)} (target distlab_dist); "
                               f"this is not caused by a submission:\n{b.tb.first_errors(r.output)}")
    return _attribute(b, how, names, present, known, errors, refused, bulk.ok)


def _targets(b: BuildRun, present: list[str], failed: dict[str, str], known: set[str]) -> list[str]:
    return ["distlab_dist"] + [target(n, known) for n in present if not (b.closure(n) & failed.keys())]


def _attribute(b: BuildRun, how: strat.BuildStrategy, names: list[str], present: list[str],
               known: set[str], errors: dict[str, str], refused: dict[str, str], all_built: bool) -> list[str]:
    """Which modules built, and for each one that did not, why (in results: its status and
    message, or a note for a re-run pass). Modules are taken in `names` order, so a module's
    prerequisites are settled before it."""
    failed = set(errors) | set(refused)
    rerun = b.pass_.rerun
    built: list[str] = []
    for n in names:
        res = b.results[n]
        blockers = [p for p in b.man.prerequisites_closure(n) if p in failed]
        why = ""
        if n not in present:
            if not rerun:
                res.status = "not gradable"
                res.message = (f"module {n} is not part of this kit's build (no exercises/{n}/CMakeLists.txt "
                               f"or no test target)")
            continue
        if n in refused:
            why = refused[n]
        elif n in errors:
            why = f"does not compile; the first errors:\n{errors[n]}"
        elif b.mode is Mode.STUDENT and blockers and not rerun:
            res.status = "blocked"
            res.message = (f"blocked by {', '.join(blockers)}: it does not compile, and {n} builds "
                           f"on it. Fix {blockers[0]} first.")
            failed.add(n)
            continue
        elif blockers and how.stops_dependents:
            why = f"builds on {', '.join(blockers)}, which does not compile"
        elif all_built:   # every module target is built: nothing to attribute
            built.append(n)
            continue
        else:
            one = cmake.build(how.build_dir, [target(n, known)], prefix=how.trusted_prefix)
            res.build_seconds += one.seconds
            if one.ok:
                built.append(n)
                continue
            failed.add(n)
            _not_built_alone(b, res, n, sandbox.redact_hidden(b.tb.first_errors(one.output)))
            continue
        failed.add(n)
        if rerun:
            res.notes.append(f"did not build{b.pass_.label}: {why}")
        else:
            res.status, res.message = "not gradable", why
    return built


def _not_built_alone(b: BuildRun, res: ModuleResult, n: str, errors: str) -> None:
    """A module whose own target failed: blocked by a prerequisite whose files the errors name
    (student mode), else not gradable."""
    culprits = [p for p in b.man.prerequisites_closure(n) if f"exercises/{p}/" in errors]
    if b.pass_.rerun:
        res.notes.append(f"did not build{b.pass_.label}:\n{errors}")
    elif b.mode is Mode.STUDENT and culprits:
        res.status = "blocked"
        res.message = (f"blocked by {', '.join(culprits)}: {n} builds on it and it does not "
                       f"compile. Fix {culprits[0]} first; the first errors:\n{errors}")
    else:
        res.status = "not gradable"
        res.message = f"does not compile; the first errors:\n{errors}"
