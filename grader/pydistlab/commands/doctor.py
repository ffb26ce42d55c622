"""`./distlab doctor`: what is installed (with versions), what is missing and how to install it."""
from __future__ import annotations

import glob
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .. import cmake, deps, sandbox
from ..paths import BUILD, is_release, rel


def _first_line(cmd: list[str], pick: int = 0) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    return lines[pick] if lines else ""


def _nccl_version() -> str:
    for header in sorted(glob.glob("/usr/include/nccl.h") + glob.glob("/usr/local/include/nccl.h") +
                         glob.glob("/usr/local/cuda*/include/nccl.h")):
        try:
            text = open(header, encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        parts = [re.search(rf"#define NCCL_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(p.group(1) for p in parts if p) + f" ({header})"
        return header
    return ""


def _row(name: str, ok: bool, detail: str, note: str = "") -> None:
    mark = "ok  " if ok else "--  "
    print(f"  {mark}{name:<34} {detail}{('  ' + note) if note else ''}")


def _trees() -> list[Path]:
    """Every configured build tree under build/ (presets and the grader's trees), newest first."""
    found = [c.parent for c in BUILD.glob("*/CMakeCache.txt")] + \
        [c.parent for c in BUILD.glob("grade/*/build*/CMakeCache.txt")]
    return sorted(found, key=lambda d: (d / "CMakeCache.txt").stat().st_mtime, reverse=True)


def _backends() -> None:
    """The build trees, and which backends the newest has, from its distlab_info program (built
    there, one small target, when the tree has none yet)."""
    trees = _trees()
    print("\n  Build trees" + ("" if trees else ": none yet (./distlab grade or ./distlab build)"))
    for d in trees:
        c = cmake.cached(d)
        what = ", ".join(x for x in (c.get("DISTLAB_IMPL", "?"), c.get("CMAKE_BUILD_TYPE", ""),
                                    f"sanitize={c['DISTLAB_SANITIZE']}" if c.get("DISTLAB_SANITIZE") else "",
                                    f"arch={c.get('DISTLAB_ARCH', '?')}") if x)
        built = len(list((d / "bin").glob("*"))) if (d / "bin").is_dir() else 0
        print(f"      {rel(d):<38} {what}; {built} programs built")
    infos = sorted(BUILD.glob("**/bin/distlab_info"), key=lambda p: p.stat().st_mtime, reverse=True)
    plain = [d for d in trees if not cmake.cached(d).get("DISTLAB_SANITIZE")]
    if not infos and plain and cmake.configured(plain[0]):
        r = cmake.build(plain[0], ["distlab_info"])
        if r.ok:
            infos = [plain[0] / "bin" / "distlab_info"]
    print("\n  Backends built", end="")
    if not infos:
        print(": no build yet (./distlab grade or ./distlab build, then ./distlab doctor again)")
        return
    print(f" (in {rel(infos[0].parent.parent)})")
    try:
        r = subprocess.run([str(infos[0]), "--json"], capture_output=True, text=True, timeout=60)
        backends = json.loads(r.stdout)["backends"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
        print(f"  --  {infos[0]} --json did not answer ({e}); rebuild with ./distlab build")
        return
    for b in backends:
        state = "built" if b.get("built") else "not built"
        if b.get("built") and not b.get("usable"):
            state += ", not usable here"
        devices = "; ".join(str(d) for d in b.get("devices", []))
        _row(f"{b.get('name')} backend", bool(b.get("usable")), f"{state}: {b.get('detail', '')}" +
             (f" [{devices}]" if devices else ""))


def main(install: bool = False, grading_only: bool = False) -> int:
    where = deps.system()
    kind = {"macos": "Homebrew formula", "ubuntu-22.04": "Ubuntu 22.04 package"}.get(where, "Debian package")
    print(f"distlab doctor: tools and libraries ({where or 'unknown system'})\n")
    gxx = deps.newer_gxx() or "g++"
    versions = {
        "g++": lambda: _first_line(["clang++" if where == "macos" else gxx, "--version"]),
        "cmake": lambda: _first_line(["cmake", "--version"]),
        "ninja-build": lambda: _first_line(["ninja", "--version"]),
        "openmpi-bin": lambda: _first_line(["mpirun", "--version"]),
        "python3": lambda: f"Python {sys.version.split()[0]} ({sys.executable})",
    }
    for r in deps.REQUIREMENTS:
        if not deps.applies_here(r):
            continue
        ok = r.present()
        detail = versions[r.package]() if ok and r.package in versions else ("found" if ok else "missing")
        _row(r.what, ok, detail, "" if ok else f"({kind} {deps.package_name(r) or r.package}" +
             (", optional)" if r.optional else ")"))
    if gxx != "g++":
        print(f"  (g++ is older than {deps.GCC_MINIMUM}: the kit configures its trees with {gxx})")

    print("\n  GPU backends (optional; the threads backend needs none of this)")
    nvcc = shutil.which("nvcc") or next(iter(glob.glob("/usr/local/cuda*/bin/nvcc")), "")
    _row("CUDA toolkit (nvcc)", bool(nvcc),
         _first_line([nvcc, "--version"], -1) if nvcc else "not found",
         "" if nvcc else "(NVIDIA CUDA toolkit; needed only for the NCCL backend)")
    nccl = _nccl_version()
    _row("NCCL", bool(nccl), nccl or "not found", "" if nccl else "(libnccl-dev from NVIDIA's repository)")
    gpus = ""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
            gpus = "; ".join(line.strip() for line in out.stdout.splitlines() if line.strip())
        except (OSError, subprocess.TimeoutExpired):
            gpus = ""
    _row("GPUs (nvidia-smi)", bool(gpus), gpus or "none seen (NCCL tests will be skipped)")

    _backends()

    print("\n  Grading sandbox" + ("" if is_release() else " (docs/instructor-guide.md, Threat model)"))
    if where == "macos":
        _row("bubblewrap namespaces", False, "none on macOS: bubblewrap, prlimit and setpriv are Linux "
             "tools, so ./distlab grade runs your tests with your own rights and no limits; grading "
             "for marks happens on Linux (docs/student-guide.md)")
    else:
        box = sandbox.probe("auto") if shutil.which("bwrap") else sandbox.Status(
            "limits-only", "bubblewrap is not installed")
        _row("bubblewrap namespaces", box.isolated, sandbox.describe(box))

    need = deps.missing(include_optional=False)
    optional = [r for r in deps.missing(include_optional=True) if r.optional]
    if grading_only:   # the sandbox is optional for the kit but part of grading
        optional = [r for r in optional if r.grading]
    print()
    if install and (need or optional):
        deps.apt_install(deps.packages(need + optional), ", ".join(r.what for r in need + optional))
        print("installed; run ./distlab doctor again to see the result")
        return 0
    if need:
        print(f"missing: {', '.join(r.what for r in need)}")
        print(f"install with:\n    {deps.install_line(deps.packages(need))}\n"
              + ("" if where == "macos" else "(or ./distlab doctor --install as root; ./distlab "
                 "build/grade/test install them by themselves when run as root)"))
        return 1
    print("everything the kit needs is installed.")
    if optional:
        print(f"optional: {', '.join(r.what for r in optional)}: "
              f"{deps.install_line(deps.packages(optional))}")
    return 0
