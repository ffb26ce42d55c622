"""Planning a grade: which clean trees it needs and what goes into each.

A tree maps module -> "sub" (graded: the files under grade) or "ref" (the reference, as a
prerequisite). Student and solutions mode need one tree; a submission needs more only when one
graded module is another's prerequisite (each module is then graded on the references of its
prerequisites). plan_tree() turns one such map into what the build needs: the overlay on the clean
copy, the modules graded from it (a refused owned header makes a module not gradable), the
untrusted sources per module and the reference folders their compile must not see.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import manifest as mf, sandbox, submission, workspace as ws
from ..paths import ROOT
from ..results import GradeRun, Mode, ModuleResult


@dataclass
class TreePlan:
    tree_id: str                              # its workspace: build/grade/<tree_id>/
    overlay: dict[str, bytes]                 # kit path -> content, on top of the clean copy
    graded: list[str]                         # the modules graded from it, in course order
    untrusted: dict[str, list[str]]           # module -> its untrusted sources (src-relative)
    hide: tuple[str, ...] = ()                # src-relative folders of reference prerequisites


def plan_trees(selected: list[mf.Module], man: mf.Manifest, mode: Mode) -> list[dict[str, str]]:
    """Groups modules into trees (module -> "sub" or "ref"), as few as the mode allows."""
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


def tree_id(base: str, index: int) -> str:
    return base if index == 0 else f"{base}-{index + 1}"


def load_submission(mode: Mode, path: Path | None, man: mf.Manifest,
                    run: GradeRun) -> submission.Submission | None:
    """The submission's owned files (submission mode), its problems noted in run."""
    if mode is not Mode.SUBMISSION:
        return None
    sub = submission.load(path, [o for m in man.modules.values() for o in m.owned])
    if sub.error:
        run.notes.append(f"the submission could not be read: {sub.error}. Every module was graded "
                         f"with the stubs.")
    run.notes.extend(sub.problems)
    return sub


def plan_tree(tid: str, assignment: dict[str, str], man: mf.Manifest, mode: Mode,
              sub: submission.Submission | None, results: dict[str, ModuleResult]) -> TreePlan:
    """The overlay, graded modules and untrusted sources of one tree; notes (a file taken from
    elsewhere, missing, refused) go to the modules' results."""
    overlay = _overlay(assignment, man, mode, sub, results)
    graded = [n for n in man.order if assignment.get(n) == "sub" and n in results]
    if mode is Mode.SUBMISSION:
        graded = _refuse_headers(assignment, man, overlay, graded, results)
    untrusted = {n: [o for o in man.modules[n].owned if not o.endswith(sandbox.HEADER_SUFFIXES)]
                 for n in man.order if n in man.modules and
                 (assignment.get(n) == "sub" or (mode is Mode.STUDENT and n not in assignment))}
    # What the submission's compile may not see of the tree: the reference sources of prerequisites
    # and every module's objects and libraries but its own (a workspace is reused by the next
    # submission: what an earlier one compiled must not be read by a later one).
    hide = tuple(f"exercises/{n}/" for n in man.order if n not in untrusted)
    return TreePlan(tid, overlay, graded, untrusted, hide)


def _overlay(assignment: dict[str, str], man: mf.Manifest, mode: Mode,
             sub: submission.Submission | None, results: dict[str, ModuleResult]) -> dict[str, bytes]:
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
    return overlay


def _refuse_headers(assignment: dict[str, str], man: mf.Manifest, overlay: dict[str, bytes],
                    graded: list[str], results: dict[str, ModuleResult]) -> list[str]:
    """Owned headers are compiled into the tests: a submitted one whose directives go beyond the
    kit's stub and reference (sandbox.check_header: the cheap first gate; the compiler's view is
    judged at build time, strategy.py) is refused, and that module's stub header is built instead; the module, and those
    graded on top of it, are not gradable. (Student mode grades the student's own checkout, where
    the stub is the student's file: nothing to compare with.) Returns the modules still graded."""
    refused: dict[str, str] = {}
    for name, role in assignment.items():
        mod = man.modules.get(name)
        if mod is None or role != "sub":
            continue
        problem = next((p for o in mod.owned if o.endswith(sandbox.HEADER_SUFFIXES) and o in overlay
                        for p in [sandbox.check_header(o, overlay[o].decode("utf-8", "replace"),
                                                       sandbox.kit_versions(o, name, ROOT))] if p), "")
        if problem:
            refused[name] = problem
            for o in mod.owned:
                if o.endswith(sandbox.HEADER_SUFFIXES) and (ROOT / o).is_file():
                    overlay[o] = (ROOT / o).read_bytes()
    still: list[str] = []
    for name in graded:
        blockers = [p for p in [name, *man.prerequisites_closure(name)] if p in refused]
        if not blockers:
            still.append(name)
            continue
        res = results[name]
        res.status = "not gradable"
        res.message = (refused[name] if name in refused else
                       f"builds on {blockers[0]}, whose header was refused: {refused[blockers[0]]}")
    return still
