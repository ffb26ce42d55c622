"""The self-test's steps for the platforms students and instructors really use (commands/selftest.py
lists every step):

  clang     macOS's toolchain, checked on Linux: clang++ with libc++ (-stdlib=libc++) builds the
            kit's libraries, the reference and the public tests warning-free (-Werror), runs the
            threads backend's tests and the modules' public tests, and compiles every module's
            stub files (exercises/) warning-free. GoogleTest is built from its sources against
            libc++ once (/usr/src/googletest, Debian's googletest package); everything lives in
            build/clang/ and is reused by the next run (ninja rebuilds what changed).
  mpihosts  Open MPI across two hosts (root, Linux): two network namespaces joined by a veth pair
            are the two hosts; an Open MPI job (TCP only, restricted to the veth's subnet) with a
            hostfile naming both runs the reference's MPI tests of 03 and 06's training program,
            the launcher reaching the second host through an rsh agent that enters its namespace.
            The values must be those of the same job on one host. Skipped, with the reason, where
            namespaces are refused; the namespaces are removed when the step ends, also on failure.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import cmake, deps, manifest as mf, workspace as ws
from ..paths import BUILD, ROOT, nproc, rel
from .tally import Tally

# ---- clang + libc++ -------------------------------------------------------------------------------

CLANG_DIR = BUILD / "clang"
GTEST_SRC = Path("/usr/src/googletest")
#: Debian packages of the toolchain (Homebrew's llvm, or Apple's clang, has both on macOS).
CLANG_PACKAGES = ["clang", "libc++-dev", "libc++abi-dev", "googletest"]
LIBCXX = "-stdlib=libc++"


def _libcxx_works(clang: str) -> str:
    """"" when clang++ compiles and links a program against libc++; else the compiler's words."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("#include <span>\n#include <vector>\nint main() { std::vector<int> v{1};"
                       " return std::span<int>(v).size() == 1 ? 0 : 1; }\n")
        r = subprocess.run([clang, "-std=c++20", LIBCXX, str(src), "-o", str(Path(tmp) / "probe")],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            return (r.stderr or r.stdout).strip()[-600:]
        r = subprocess.run([str(Path(tmp) / "probe")], capture_output=True, stdin=subprocess.DEVNULL)
        return "" if r.returncode == 0 else f"the probe program built with libc++ exited {r.returncode}"


def _toolchain() -> tuple[str, str]:
    """(clang++, "") when clang++ with libc++ and GoogleTest's sources are here, installing them
    as root on Debian/Ubuntu; ("", why not) otherwise."""
    clang = shutil.which("clang++") or ""
    why = _libcxx_works(clang) if clang else "clang++ is not installed"
    if (why or not GTEST_SRC.is_dir()) and deps.install_quietly(CLANG_PACKAGES):
        clang = shutil.which("clang++") or ""
        why = _libcxx_works(clang) if clang else "clang++ is not installed"
    if not why and not GTEST_SRC.is_dir():
        why = f"GoogleTest's sources are not in {GTEST_SRC}"
    if why:
        return "", f"{why} (Debian/Ubuntu: {deps.install_line(CLANG_PACKAGES)})"
    return clang, ""


def _clang_cache(clang: str) -> dict[str, str]:
    cc = shutil.which("clang") or clang
    return {"CMAKE_CXX_COMPILER": clang, "CMAKE_C_COMPILER": cc, "CMAKE_BUILD_TYPE": "Release",
            "CMAKE_CXX_FLAGS": LIBCXX, "CMAKE_EXE_LINKER_FLAGS": LIBCXX,
            "CMAKE_SHARED_LINKER_FLAGS": LIBCXX}


def _gtest(clang: str) -> tuple[Path | None, str]:
    """GoogleTest built against libc++ and installed under build/clang/gtest (once)."""
    prefix = CLANG_DIR / "gtest"
    if (prefix / "lib" / "libgtest.a").is_file() and (prefix / "lib" / "cmake" / "GTest").is_dir():
        return prefix, ""
    bdir = CLANG_DIR / "gtest-build"
    cache = dict(_clang_cache(clang), BUILD_GMOCK="OFF", INSTALL_GTEST="ON", CMAKE_INSTALL_PREFIX=str(prefix))
    cmd = ["cmake", "-S", str(GTEST_SRC), "-B", str(bdir), "-G", "Ninja", *(f"-D{k}={v}" for k, v in cache.items())]
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode == 0:
        r = subprocess.run(["cmake", "--build", str(bdir), "-j", str(nproc()), "--target", "install"],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr)[-2500:]
    return prefix, ""


def _public_test_targets(known: set[str]) -> list[str]:
    man = mf.load()
    return [f"test_{m}" for m in man.order if f"test_{m}" in known]


def _run_gtest(exe: Path) -> tuple[bool, str]:
    """Runs one GoogleTest program (every test in it); (passed, the failing tests or the error)."""
    try:
        r = subprocess.run([str(exe), "--gtest_brief=1"], capture_output=True, text=True, timeout=600,
                           errors="replace", stdin=subprocess.DEVNULL, cwd=exe.parent)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    out = r.stdout + r.stderr
    passed = re.search(r"\[  PASSED  \] (\d+) test", out)
    if r.returncode == 0 and passed:
        return True, f"{passed.group(1)} tests passed"
    failed = [line for line in out.splitlines() if line.startswith("[  FAILED  ]")]
    return False, "\n".join(failed[:20]) or out[-2000:]


def _stub_commands(build_dir: Path) -> list[tuple[str, list[str]]]:
    """The compile commands of the reference's module sources (solutions/NN_topic/), turned into
    syntax-only compiles of the stubs (exercises/NN_topic/): same flags, the stub's files and
    headers."""
    sol, exe = str(ROOT / "solutions") + "/", str(ROOT / "exercises") + "/"
    out: list[tuple[str, list[str]]] = []
    for entry in json.loads((build_dir / "compile_commands.json").read_text(encoding="utf-8")):
        if not entry["file"].startswith(sol):
            continue
        args = shlex.split(entry["command"].replace(sol, exe))
        keep: list[str] = []
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("-o", "-MF", "-MT"):
                skip = True
                continue
            if a in ("-c", "-MD"):
                continue
            keep.append(a)
        out.append((entry["file"].replace(sol, exe), keep + ["-fsyntax-only"]))
    return out


def _syntax_only(cmd: tuple[str, list[str]]) -> tuple[str, str]:
    r = subprocess.run(cmd[1], capture_output=True, text=True, errors="replace", cwd=ROOT,
                       stdin=subprocess.DEVNULL)
    problems = [line for line in (r.stdout + r.stderr).splitlines() if "warning:" in line or "error:" in line]
    if r.returncode != 0 and not problems:
        problems = [f"status {r.returncode}: {(r.stderr or r.stdout).strip()[-500:]}"]
    return rel(Path(cmd[0])), "\n".join(problems)


def step_clang(t: Tally) -> None:
    t.step("clang: the kit, the reference and the stubs with clang++ and libc++ (macOS's toolchain)")
    clang, why = _toolchain()
    if not clang:
        print(f"    skipped: {why}", flush=True)
        return
    version = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"    {version}, {LIBCXX}", flush=True)
    t0 = time.monotonic()
    prefix, err = _gtest(clang)
    if not t.check(prefix is not None, f"GoogleTest builds against libc++ from {GTEST_SRC}", err):
        return
    bdir = CLANG_DIR / "solutions"
    cache = dict(_clang_cache(clang), CMAKE_PREFIX_PATH=str(prefix), DISTLAB_IMPL="solutions",
                 DISTLAB_ARCH="portable", DISTLAB_BUILD_TESTS="ON", DISTLAB_WITH_MPI="OFF",
                 DISTLAB_WITH_NCCL="OFF")
    # Warnings are errors here: a warning in an object built by an earlier run still fails it.
    cache["CMAKE_CXX_FLAGS"] = f"{LIBCXX} -Werror"
    cmake.configure(ROOT, bdir, cache, quiet=True)
    known = cmake.targets(bdir)
    targets = ["test_threads_backend", "test_support"] + _public_test_targets(known)
    missing = [x for x in targets if x not in known]
    t.check(not missing, "the clang tree has the threads backend's and the modules' tests", " ".join(missing))
    t_build = time.monotonic()
    r = cmake.build(bdir, [x for x in targets if x in known], keep_going=True)
    print(f"    GoogleTest and configuring {t_build - t0:.0f} s; built {len(targets)} test programs "
          f"in {r.seconds:.0f} s", flush=True)
    first = ws.first_errors(r.output, str(ROOT) + "/")
    if not t.check(r.ok, "the kit, the reference and the public tests build warning-free with clang "
                   "and libc++ (-Werror)", first):
        return
    t1 = time.monotonic()
    exes = [bdir / "bin" / x for x in targets if x.startswith("test_")]
    with ThreadPoolExecutor(max_workers=nproc()) as pool:
        for exe, (ok, detail) in zip(exes, pool.map(_run_gtest, exes)):
            t.check(ok, f"clang: {exe.name} passes", detail)
    print(f"    ran {len(exes)} test programs in {time.monotonic() - t1:.0f} s", flush=True)
    t2 = time.monotonic()
    commands = _stub_commands(bdir)
    with ThreadPoolExecutor(max_workers=nproc()) as pool:
        results = list(pool.map(_syntax_only, commands))
    for name, problems in results:
        t.check(not problems, f"clang: the stub {name} compiles warning-free", problems)
    print(f"    compiled {len(commands)} stub files (syntax only) in {time.monotonic() - t2:.0f} s", flush=True)
    t.check(bool(commands), "clang: the stubs' compile commands were found", rel(bdir / "compile_commands.json"))
