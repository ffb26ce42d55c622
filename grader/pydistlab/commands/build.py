"""`./distlab build [--preset P] [--solutions]`: configure (once) and build with a CMake preset."""
from __future__ import annotations

from pathlib import Path

from .. import cmake, deps
from ..errors import DistlabError
from ..paths import ROOT, is_release, rel


def ensure_built(preset: str, solutions: bool, targets: list[str], capture: bool = False) -> Path:
    """Builds the targets (all when empty) in the preset's folder and returns that folder."""
    deps.ensure()
    if solutions and is_release():
        raise DistlabError("this is a student repository: it has no solutions/ to build")
    build_dir = cmake.preset_dir(preset, solutions)
    cache = {"DISTLAB_IMPL": "solutions" if solutions else "exercises"}
    print(f"distlab: configuring {rel(build_dir)} (preset {preset}"
          f"{', solutions' if solutions else ''})" if not cmake.configured(build_dir) else
          f"distlab: building {rel(build_dir)}", flush=True)
    cmake.configure(ROOT, build_dir, cache, preset=preset)
    r = cmake.build(build_dir, targets, capture=capture)
    if not r.ok:
        raise DistlabError("the build failed (see the compiler output above); fix the first error "
                           "and run the command again" + ("\n" + r.output[-4000:] if capture else ""))
    return build_dir


def main(preset: str, solutions: bool, targets: list[str]) -> int:
    d = ensure_built(preset, solutions, targets)
    print(f"built in {rel(d)} (programs and tests in {rel(d / 'bin')})")
    return 0
