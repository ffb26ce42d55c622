"""Configuring and building with CMake + Ninja (shared by build, run, bench, grade and test)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import deps
from .errors import DistlabError
from .paths import ROOT, build_jobs

#: Cache settings of the presets in CMakePresets.json, for trees configured without --preset
#: (the grader's clean copies live outside the source tree the presets name).
PRESET_CACHE: dict[str, dict[str, str]] = {
    "default": {"CMAKE_BUILD_TYPE": "Release", "DISTLAB_ARCH": "portable"},
    "native": {"CMAKE_BUILD_TYPE": "Release", "DISTLAB_ARCH": "native"},
    "debug": {"CMAKE_BUILD_TYPE": "Debug", "DISTLAB_SANITIZE": "address,undefined"},
    "tsan": {"CMAKE_BUILD_TYPE": "RelWithDebInfo", "DISTLAB_SANITIZE": "thread"},
}


BUILD_TIMEOUT_S = 1200.0   # one cmake --build call; generous for a clean build on 2 cores


@dataclass
class Result:
    ok: bool
    output: str
    seconds: float


def configured(build_dir: Path) -> bool:
    return (build_dir / "build.ninja").is_file() and (build_dir / "CMakeCache.txt").is_file()


def cached(build_dir: Path) -> dict[str, str]:
    """The cache entries (NAME -> value) of a configured tree; {} when there is none."""
    out: dict[str, str] = {}
    try:
        text = (build_dir / "CMakeCache.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+):[A-Z]+=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def arch_cache(cache: dict[str, str]) -> dict[str, str]:
    """cache with DISTLAB_ARCH taken from the environment when set there (DISTLAB_ARCH=x86-64-v4
    ./distlab test runs the self-test at another ISA level; see docs/build.md)."""
    arch = os.environ.get("DISTLAB_ARCH", "").strip()
    return dict(cache, DISTLAB_ARCH=arch) if arch and "DISTLAB_ARCH" in cache else dict(cache)


def configure(src: Path, build_dir: Path, cache: dict[str, str], preset: str | None = None,
              quiet: bool = False) -> None:
    """Configures build_dir once; later builds let ninja re-run CMake when a CMakeLists changes.
    A configured tree whose cache disagrees with `cache` (another DISTLAB_ARCH, say) is
    configured again with the new values, so a tree never silently keeps old settings."""
    cache = arch_cache(cache)
    if configured(build_dir):
        have = cached(build_dir)
        changed = {k: v for k, v in cache.items() if have.get(k) != v}
        if not changed:
            return
        cache, preset = changed, None
        cmd = ["cmake", "-S", str(src), "-B", str(build_dir)] + [f"-D{k}={v}" for k, v in cache.items()]
        r = subprocess.run(cmd, cwd=src, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise DistlabError(f"CMake could not reconfigure {build_dir} with {changed} "
                               f"(status {r.returncode}):\n{(r.stdout or '')[-3000:]}{(r.stderr or '')[-3000:]}")
        return
    gxx = "" if os.environ.get("CXX") or "CMAKE_CXX_COMPILER" in cache else deps.newer_gxx()
    if gxx:   # the default g++ is too old (Ubuntu 22.04's 11): g++-12 or newer, installed beside it
        cache = dict(cache, CMAKE_CXX_COMPILER=gxx)
    cmd = ["cmake", "-S", str(src), "-B", str(build_dir), "-G", "Ninja"]
    if preset:
        cmd = ["cmake", "--preset", preset, "-B", str(build_dir)]
    cmd += [f"-D{k}={v}" for k, v in cache.items()]
    r = subprocess.run(cmd, cwd=src, capture_output=quiet, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        detail = ("\n" + (r.stdout or "")[-3000:] + (r.stderr or "")[-3000:]) if quiet else ""
        raise DistlabError(f"CMake could not configure {build_dir} (status {r.returncode}); "
                           f"the kit's CMake files are broken, not your code{detail}")


def build(build_dir: Path, targets: list[str], keep_going: bool = False, capture: bool = True,
          jobs: int = 0, progress: Callable[[str], None] | None = None,
          timeout_s: float = BUILD_TIMEOUT_S, prefix: list[str] | None = None,
          dry_run: bool = False) -> Result:
    """cmake --build; capture=True returns the output (for compiler errors) instead of showing it.
    With progress, ninja's "[done/total]" status is reported every few seconds while building.
    prefix: a command the build runs under (the grading sandbox, sandbox.build_view()).
    dry_run: ninja -n (the steps it would run, none run)."""
    cmd = ["cmake", "--build", str(build_dir), "-j", str(jobs or build_jobs())]
    for t in targets:
        cmd += ["--target", t]
    if keep_going or dry_run:
        cmd += ["--"] + (["-k", "0"] if keep_going else []) + (["-n"] if dry_run else [])
    cmd = list(prefix or []) + cmd
    t0 = time.monotonic()
    env = dict(os.environ, NINJA_STATUS="[%f/%t] ")
    if not capture:
        sys.stdout.flush()
        r = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL)
        return Result(r.returncode == 0, "", time.monotonic() - t0)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    expired = threading.Event()

    def kill() -> None:  # a compiler stuck on pathological code must not hang the grader
        expired.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass

    timer = threading.Timer(timeout_s, kill)
    timer.daemon = True
    timer.start()
    lines: list[str] = []
    last = time.monotonic()
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if progress and line.startswith("[") and time.monotonic() - last > 5:
            m = re.match(r"^\[(\d+)/(\d+)\]", line)
            if m:
                last = time.monotonic()
                progress(f"  compiling: {m.group(1)}/{m.group(2)} steps")
    proc.wait()
    timer.cancel()
    if expired.is_set():
        lines.append(f"\nerror: the build took longer than {timeout_s:g} s and was stopped "
                     f"(look for runaway templates or constexpr loops)\n")
        return Result(False, "".join(lines), time.monotonic() - t0)
    return Result(proc.returncode == 0, "".join(lines), time.monotonic() - t0)


def targets(build_dir: Path) -> set[str]:
    """Names of the targets build_dir knows (ninja -t targets all), after letting ninja re-run
    CMake when a CMakeLists.txt changed (so a module or test added since configuring is seen)."""
    subprocess.run(["ninja", "-C", str(build_dir), "build.ninja"], capture_output=True,
                   stdin=subprocess.DEVNULL)
    r = subprocess.run(["ninja", "-C", str(build_dir), "-t", "targets", "all"], capture_output=True,
                       text=True, errors="replace")
    names = set()
    for line in r.stdout.splitlines():
        name = line.split(":", 1)[0].strip()
        if name and "/" not in name and "." not in name:
            names.add(name)
    return names


def preset_dir(preset: str, solutions: bool) -> Path:
    return ROOT / "build" / (f"{preset}-solutions" if solutions else preset)


_ISA_MACROS = [("__SSE4_2__", "SSE4.2"), ("__AVX__", "AVX"), ("__AVX2__", "AVX2"), ("__FMA__", "FMA"),
               ("__AVX512F__", "AVX-512"), ("__ARM_NEON", "NEON")]


def cpu_summary() -> str:
    """This machine's CPU model and its vector features, e.g. "AMD EPYC (AVX2 FMA AVX-512)"."""
    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, val = line.partition(":")
            if key.strip() == "model name" and not model:
                model = val.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = set(val.split())
    except OSError:
        pass
    have = [n for f, n in [("avx2", "AVX2"), ("fma", "FMA"), ("avx512f", "AVX-512"), ("asimd", "NEON")]
            if f in flags]
    return f"{model or 'unknown CPU'} ({' '.join(have) or 'no AVX2/FMA/AVX-512'})"


def codegen_summary(build_dir: Path) -> str:
    """The code generation a configured tree compiles with and the vector features it enables,
    e.g. "DISTLAB_ARCH=portable (-march=x86-64-v2 -mtune=generic -ffp-contract=off): SSE4.2"."""
    try:
        info = dict(line.split("=", 1) for line in
                    (build_dir / "distlab_codegen.txt").read_text().splitlines() if "=" in line)
    except OSError:
        return "unknown (the tree is not configured)"
    flags = info.get("flags", "").split()
    try:
        r = subprocess.run([info.get("compiler", "c++"), *flags, "-dM", "-E", "-x", "c++", "/dev/null"],
                           capture_output=True, text=True, timeout=60)
        macros = {line.split()[1] for line in r.stdout.splitlines() if line.startswith("#define ")}
        isa = [name for macro, name in _ISA_MACROS if macro in macros]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        isa = ["?"]
    return f"DISTLAB_ARCH={info.get('arch', '?')} ({' '.join(flags)}): {' '.join(isa) or 'baseline'}"
