"""The self-test's steps that build the kit itself, outside grading, and run its own tests with
ctest: build (everything, with solutions/), tsan (the threads backend under ThreadSanitizer), nccl (the NCCL
backend, where CUDA and NCCL are installed). commands/selftest.py lists every step."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from .. import cmake, workspace as ws
from ..paths import ROOT, nproc
from .tally import Tally


def _ctest(build_dir: Path, args: list[str], env: dict[str, str] | None, t: Tally, label: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "ctest.xml"
        cmd = ["ctest", "--test-dir", str(build_dir), "-j", str(nproc()), "--output-on-failure",
               "--timeout", "300", "--output-junit", str(junit), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                           env=dict(os.environ, **(env or {})))
        summary = [line for line in r.stdout.splitlines() if "tests passed" in line or "No tests were found" in line]
        print(f"    ctest {label}: {summary[0].strip() if summary else 'status ' + str(r.returncode)}", flush=True)
        if not junit.is_file():
            t.check(False, f"ctest {label} ran", r.stdout[-3000:] + r.stderr[-2000:])
            return
        root = ET.parse(junit).getroot()
        cases = list(root.iter("testcase"))
        if not cases:
            t.check(False, f"ctest {label}: no tests found", r.stdout[-2000:])
        for case in cases:
            bad = case.find("failure") is not None or case.find("error") is not None or \
                case.get("status") in ("fail", "failed")
            detail = ""
            if bad:
                out = case.find("system-out")
                detail = (out.text or "")[-2500:] if out is not None else ""
            t.check(not bad, f"ctest {label}: {case.get('name')}", detail)


def step_build(t: Tally) -> None:
    t.step("build: configure and build everything with solutions/, run the kit's own tests")
    say = ws.Progress(False)
    with ws.solutions_tree(say) as tb:
        ws.configure(tb, tb.build, ws.BASE_CACHE, say)
        print(f"    code generation: {cmake.codegen_summary(tb.build)}\n"
              f"    this CPU: {cmake.cpu_summary()}", flush=True)
        r = cmake.build(tb.build, [], capture=True, progress=say)
        warnings = sorted({line for line in r.output.splitlines() if "warning:" in line})
        print(f"    built in {r.seconds:.0f} s", flush=True)
        if not t.check(r.ok, "the kit builds with solutions/", tb.first_errors(r.output)):
            return
        t.check(not warnings, "the kit builds warning-free", "\n".join(warnings[:15]))
        # Every module program starts: `run_<module> --help` answers (a flag defined twice makes
        # CLI11 abort before main's first line, on every run).
        for exe in sorted((tb.build / "bin").glob("run_*")):
            try:
                r2 = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60,
                                    stdin=subprocess.DEVNULL)
                ok, detail = r2.returncode == 0, (r2.stdout + r2.stderr)[-1500:]
            except (OSError, subprocess.TimeoutExpired) as e:
                ok, detail = False, str(e)
            t.check(ok, f"{exe.name} --help answers", detail)
        _ctest(tb.build, ["-LE", "module"], None, t, "(kit tests)")


def _threads_backend_targets() -> list[str]:
    text = (ROOT / "libdist" / "tests" / "CMakeLists.txt").read_text(encoding="utf-8", errors="replace")
    names = re.findall(r"add_executable\(\s*([A-Za-z0-9_]+)", text)
    names += re.findall(r"TARGET\s+([A-Za-z0-9_]+)", text)
    return sorted(n for n in set(names) if "threads_backend" in n)


def step_tsan(t: Tally) -> None:
    t.step("tsan: the threads backend's tests under ThreadSanitizer")
    targets = _threads_backend_targets()
    if not targets:
        t.check(False, "libdist/tests/CMakeLists.txt defines the threads backend's test executables")
        return
    say = ws.Progress(False)
    with ws.solutions_tree(say) as tb:
        ws.configure(tb, tb.tsan_build, ws.TSAN_CACHE, say)
        known = cmake.targets(tb.tsan_build)
        targets = [x for x in targets if x in known]
        r = cmake.build(tb.tsan_build, targets, progress=say)
        print(f"    built {', '.join(targets)} in {r.seconds:.0f} s", flush=True)
        if not t.check(r.ok, "the threads backend's tests build under TSan", tb.first_errors(r.output)):
            return
        _ctest(tb.tsan_build, ["-L", "threads_backend"],
               {"TSAN_OPTIONS": "halt_on_error=1 second_deadlock_stack=1"}, t, "(threads backend, TSan)")


def step_nccl(t: Tally) -> None:
    t.step("nccl: the NCCL backend compiles and links (its tests skip without a GPU)")
    cuda = Path("/usr/local/cuda")
    if not ((cuda / "include" / "nccl.h").exists() or Path("/usr/include/nccl.h").exists()):
        print("    skipped: no CUDA toolkit with NCCL here (nccl.h not found)", flush=True)
        return
    say = ws.Progress(False)
    with ws.solutions_tree(say) as tb:
        nccl_build = tb.build.with_name("build-nccl")   # the solutions sources, its own build
        # Built once: a precompiled header would cost more than the few files it would speed up.
        cache = dict(ws.BASE_CACHE, DISTLAB_WITH_NCCL="ON", DISTLAB_PCH="OFF")
        ws.configure(tb, nccl_build, cache, say)
        known = cmake.targets(nccl_build)
        if not t.check("test_dist_nccl" in known, "CMake found CUDA and NCCL (target test_dist_nccl)",
                       "see the 'distlab: NCCL backend' line of the configure output"):
            return
        # The module tests that run on a GPU too (10_streams: the device API and its nvcc kernels).
        targets = ["test_dist_nccl"] + [t for t in ("test_10_streams_nccl",) if t in known]
        r = cmake.build(nccl_build, targets, progress=say)
        print(f"    built {', '.join(targets)} in {r.seconds:.0f} s", flush=True)
        if not t.check(r.ok, "the NCCL backend builds", tb.first_errors(r.output)):
            return
        _ctest(nccl_build, ["-L", "nccl", "-LE", "mpi"], None, t, "(nccl)")
