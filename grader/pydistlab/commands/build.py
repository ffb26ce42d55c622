"""`./distlab build [--preset P] [--solutions]`: configure (once) and build with a CMake preset.

The default preset builds in the grader's own tree (build/grade/exercises/build, or
build/grade/solutions/build with --solutions): `grade`, `run`, `build` and `bench` then share one
build of the same sources, and nothing is compiled twice. The other presets (native, debug, tsan)
have their own folders, build/<preset>[-solutions]. Compiler output is shown only when the build
fails: its first error, the student's own file:line first.
"""
from __future__ import annotations

from pathlib import Path

from .. import cmake, deps, manifest as mf, workspace as ws
from ..errors import DistlabError
from ..paths import ROOT, is_release, rel


def _progress(msg: str) -> None:
    print(f"distlab: {msg.strip()}", flush=True)


def _failed(output: str, strip: str) -> DistlabError:
    errors = ws.first_errors(output, strip, prefer=ws.owned_files())
    return DistlabError(f"the build failed; the first error:\n{errors}\n"
                        f"fix it and run the command again")


def shared_tree(solutions: bool) -> Path:
    """The grader's build folder for these sources (it may not be configured yet)."""
    return ws.grade_root() / ("solutions" if solutions else "exercises") / "build"


def _build_shared(solutions: bool, targets: list[str], capture: bool = True) -> Path:
    """Builds the targets in the grader's workspace of exercises/ (or of the solutions)."""
    man = mf.load()
    tree_id = "solutions" if solutions else "exercises"
    overlay = ws.solution_overlay(man.order, man) if solutions else {}
    # Keep the hidden tests as the last grade left them (adding or removing them re-runs CMake).
    hidden = (ws.grade_root() / tree_id / "src" / "grader" / "hidden").is_dir()
    with ws.open_tree(tree_id, overlay, hidden, ws.Progress(quiet=True)) as tb:
        if not cmake.configured(tb.build):
            _progress(f"configuring {rel(tb.build)}")
        ws.configure(tb, tb.build, ws.BASE_CACHE, ws.Progress(quiet=True))
        what = ", ".join(targets) if targets else "everything"
        _progress(f"building {what} in {rel(tb.build)}")
        r = cmake.build(tb.build, targets, progress=_progress, capture=capture)
        if not r.ok:
            if not capture:
                raise DistlabError("the build failed (see the compiler output above)")
            raise _failed(r.output, str(tb.src) + "/")
        _progress(f"built in {r.seconds:.1f} s")
        return tb.build


def ensure_built(preset: str, solutions: bool, targets: list[str], capture: bool = True,
                 shared: bool = True) -> Path:
    """Builds the targets (all when empty) and returns the build folder: the grader's tree for the
    default preset (shared=False: build/default, which also builds the NCCL backend when CUDA is
    found; the grader's tree leaves it out), the preset's own folder otherwise. capture=False
    shows the compiler's output."""
    deps.ensure()
    if solutions and is_release():
        raise DistlabError("this is a student repository: it has no solutions/ to build")
    if preset == "default" and shared:
        return _build_shared(solutions, targets, capture)
    build_dir = cmake.preset_dir(preset, solutions)
    cache = {"DISTLAB_IMPL": "solutions" if solutions else "exercises"}
    _progress(f"configuring {rel(build_dir)} (preset {preset}{', solutions' if solutions else ''})"
              if not cmake.configured(build_dir) else f"building in {rel(build_dir)}")
    cmake.configure(ROOT, build_dir, cache, preset=preset, quiet=capture)
    r = cmake.build(build_dir, targets, capture=capture, progress=_progress if capture else None)
    if not r.ok:
        if capture:
            raise _failed(r.output, str(ROOT) + "/")
        raise DistlabError("the build failed (see the compiler output above); fix the first error "
                           "and run the command again")
    return build_dir


def main(preset: str, solutions: bool, targets: list[str], verbose: bool = False) -> int:
    d = ensure_built(preset, solutions, targets, capture=not verbose)
    print(f"built in {rel(d)} (programs and tests in {rel(d / 'bin')})")
    return 0
