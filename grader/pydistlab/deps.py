"""System packages the kit needs: detect them, and install the missing ones on Debian/Ubuntu.

A command that needs packages calls ensure(). As root it installs them non-interactively
(`apt-get update` once, then `apt-get install -y --no-install-recommends ...`): one line per step
(what, how many, seconds), the package manager's own output kept in build/install.log and shown,
last lines first, only when a step fails. Otherwise it prints the one sudo line to run and stops.
"""
from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import DistlabError
from .paths import BUILD, rel

#: The oldest CMake the kit configures with: Ubuntu 22.04's 3.22 (CMakeLists.txt's
#: cmake_minimum_required and CMakePresets.json's cmakeMinimumRequired say the same; checked by
#: grader/selftest/test_platforms.py).
CMAKE_MINIMUM = (3, 22)
#: The oldest GCC the kit is built with (C++20 as the kit uses it).
GCC_MINIMUM = 12


def _include_roots() -> list[str]:
    """Where headers of installed libraries live: the system's, and Homebrew's on macOS."""
    roots = ["/usr/include", "/usr/local/include"]
    brew = os.environ.get("HOMEBREW_PREFIX") or ("/opt/homebrew" if os.path.isdir("/opt/homebrew") else "")
    return roots + ([f"{brew}/include"] if brew else [])


def _header(*relative: str) -> Callable[[], bool]:
    return lambda: any(os.path.exists(os.path.join(root, r)) for root in _include_roots() for r in relative)


def _any_file(*patterns: str) -> bool:
    return any(glob.glob(p) for p in patterns)


def system() -> str:
    """"macos", "ubuntu-22.04" (and other "ID-VERSION_ID" of /etc/os-release), or "" when unknown."""
    if platform.system() == "Darwin":
        return "macos"
    try:
        text = open("/etc/os-release", encoding="utf-8").read()
    except OSError:
        return ""
    fields = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', text, re.M))
    return f"{fields.get('ID', '')}-{fields.get('VERSION_ID', '')}".strip("-")


def _version(cmd: list[str]) -> tuple[int, ...]:
    """The first dotted version number a command prints; () when it does not run."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", r.stdout + r.stderr)
    return tuple(int(x) for x in m.groups() if x is not None) if m else ()


def _cmake_ok() -> bool:
    return shutil.which("cmake") is not None and _version(["cmake", "--version"]) >= CMAKE_MINIMUM


def newer_gxx() -> str:
    """g++-N (N >= GCC_MINIMUM) on PATH when the default g++ is older ("" otherwise): Ubuntu 22.04's
    g++ is 11, its g++-12 package installs g++-12 beside it. The kit configures with that one."""
    if shutil.which("g++") and _version(["g++", "-dumpfullversion"])[:1] >= (GCC_MINIMUM,):
        return ""
    for n in range(GCC_MINIMUM + 3, GCC_MINIMUM - 1, -1):
        if shutil.which(f"g++-{n}"):
            return shutil.which(f"g++-{n}") or ""
    return ""


def _compiler_ok() -> bool:
    if platform.system() == "Darwin":
        return shutil.which("clang++") is not None   # Apple's clang (Xcode command line tools)
    return bool(newer_gxx()) or (shutil.which("g++") is not None and
                                 _version(["g++", "-dumpfullversion"])[:1] >= (GCC_MINIMUM,))


@dataclass(frozen=True)
class Requirement:
    what: str                 # shown by doctor
    package: str              # the Debian package that provides it
    present: Callable[[], bool]
    optional: bool = False
    grading: bool = True      # needed to grade (doctor --install --grading installs only these)
    ubuntu2204: str = ""      # the Ubuntu 22.04 package where its name differs ("" = the same)
    brew: str = ""            # the Homebrew formula on macOS ("" = none needed there)


def _which(name: str) -> Callable[[], bool]:
    return lambda: shutil.which(name) is not None


def matplotlib_python() -> str | None:
    """A Python interpreter that can import matplotlib: this one, else the system's python3."""
    try:
        import matplotlib  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    for py in ("/usr/bin/python3", shutil.which("python3") or ""):
        if py and os.path.realpath(py) != os.path.realpath(sys.executable) and os.path.exists(py):
            r = subprocess.run([py, "-c", "import matplotlib"], capture_output=True)
            if r.returncode == 0:
                return py
    return None


def _matplotlib() -> bool:
    return matplotlib_python() is not None


REQUIREMENTS: list[Requirement] = [
    Requirement(f"C++ compiler (g++ {GCC_MINIMUM} or newer)", "g++", _compiler_ok, ubuntu2204=f"g++-{GCC_MINIMUM}"),
    Requirement(f"CMake {CMAKE_MINIMUM[0]}.{CMAKE_MINIMUM[1]}+", "cmake", _cmake_ok, brew="cmake"),
    Requirement("Ninja", "ninja-build", _which("ninja"), brew="ninja"),
    Requirement("GoogleTest", "libgtest-dev", _header("gtest/gtest.h"), brew="googletest"),
    Requirement("Eigen 3", "libeigen3-dev", _header("eigen3/Eigen/Core"), brew="eigen"),
    Requirement("CLI11", "libcli11-dev", _header("CLI/CLI.hpp"), brew="cli11"),
    Requirement("nlohmann-json", "nlohmann-json3-dev", _header("nlohmann/json.hpp"), brew="nlohmann-json"),
    Requirement("Open MPI headers and libraries", "libopenmpi-dev", lambda: _any_file(
        "/usr/lib/*/openmpi/include/mpi.h", "/usr/include/*/mpi.h", "/usr/include/mpi.h")
        or shutil.which("mpicxx") is not None, brew="open-mpi"),
    Requirement("Open MPI launcher (mpirun)", "openmpi-bin", _which("mpirun"), brew="open-mpi"),
    Requirement("Python 3", "python3", lambda: True),
    Requirement("bubblewrap (the grading sandbox)", "bubblewrap", _which("bwrap"), optional=True),
    Requirement("matplotlib (plots only)", "python3-matplotlib", _matplotlib, optional=True,
                grading=False, brew="python-matplotlib"),
]


def package_name(r: Requirement, where: str = "") -> str:
    """r's package on this system (or on `where`, a system() value): Debian's name by default,
    Ubuntu 22.04's where it differs, Homebrew's formula on macOS ("" when none is needed there)."""
    where = where or system()
    if where == "macos":
        return r.brew
    if where == "ubuntu-22.04" and r.ubuntu2204:
        return r.ubuntu2204
    return r.package


def packages(reqs: list[Requirement], where: str = "") -> list[str]:
    """The packages that install reqs on this system, sorted, each once."""
    return sorted({p for p in (package_name(r, where) for r in reqs) if p})


def applies_here(r: Requirement) -> bool:
    """False for what macOS has no use for (bubblewrap: Linux only)."""
    return not (system() == "macos" and r.package == "bubblewrap")

_updated = False


def missing(include_optional: bool = False) -> list[Requirement]:
    return [r for r in REQUIREMENTS if (include_optional or not r.optional) and applies_here(r)
            and not r.present()]


def install_line(packages: list[str], where: str = "") -> str:
    if (where or system()) == "macos":
        return "brew install " + " ".join(packages)
    return "sudo apt-get update && sudo apt-get install -y --no-install-recommends " + " ".join(packages)


INSTALL_LOG = BUILD / "install.log"
LOG_TAIL = 25   # lines of the package manager's output shown when a step fails


def _apt_step(args: list[str], what: str) -> bool:
    """Runs one apt-get step quietly: a line saying what and how long, its output appended to
    INSTALL_LOG. On failure the log's last lines are printed. True when it succeeded."""
    print(f"distlab: {what} ...", end="", flush=True)
    t0 = time.monotonic()
    INSTALL_LOG.parent.mkdir(parents=True, exist_ok=True)
    with INSTALL_LOG.open("ab") as log:
        log.write(f"\n$ apt-get {' '.join(args)}\n".encode())
        log.flush()
        r = subprocess.run(["apt-get", *args], env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
                           stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - t0
    if r.returncode == 0:
        print(f" done in {seconds:.0f} s", flush=True)
        return True
    print(f" FAILED (status {r.returncode}, {seconds:.0f} s)", flush=True)
    tail = INSTALL_LOG.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL:]
    print(f"the last {len(tail)} lines of {rel(INSTALL_LOG)}:", *("  " + line for line in tail), sep="\n",
          file=sys.stderr, flush=True)
    return False


def _install(packages: list[str]) -> bool:
    """apt-get update (once per run) and install of packages, quietly (see _apt_step)."""
    global _updated
    if not _updated:
        _apt_step(["update"], "updating the package lists")   # a failed update may still install
        _updated = True
    count = f"{len(packages)} package{'s' if len(packages) != 1 else ''}"
    return _apt_step(["install", "-y", "--no-install-recommends", *packages],
                     f"installing {count} ({' '.join(packages)})")


def apt_install(packages: list[str], names: str = "") -> None:
    """Installs Debian packages as root (apt-get update once); otherwise says the sudo line."""
    names = names or ", ".join(packages)
    if system() == "macos":
        raise DistlabError(f"missing: {names}. Install them with Homebrew:\n\n    {install_line(packages)}\n\n"
                           f"then run the command again (or use the devcontainer: docs/student-guide.md).")
    if not shutil.which("apt-get"):
        raise DistlabError(f"missing: {names}. This is not a Debian/Ubuntu system; install the "
                           f"equivalents of the Debian packages {' '.join(packages)} and retry.")
    if os.geteuid() != 0:
        raise DistlabError(f"missing: {names}. Install them with\n\n    {install_line(packages)}\n\n"
                           f"then run the command again.")
    if not _install(packages):
        raise DistlabError(f"apt-get install failed; its whole output is in {rel(INSTALL_LOG)} (the last "
                           f"lines are above)")


def ensure(include_optional: bool = False) -> None:
    """Makes sure the required packages are installed (see the module docstring)."""
    need = missing(include_optional)
    if not need:
        return
    apt_install(packages(need), ", ".join(r.what for r in need))
    still = missing(include_optional)
    if still:
        raise DistlabError("still missing after installing: " + ", ".join(r.what for r in still))
    sys.stdout.flush()


def ensure_optional(package: str) -> bool:
    """Installs one optional package when this process may (root on Debian/Ubuntu); True when its
    requirement is met afterwards. Never raises: the caller says what is missing and goes on."""
    reqs = [r for r in REQUIREMENTS if r.package == package]
    if all(r.present() for r in reqs):
        return True
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    _install([package])
    return all(r.present() for r in reqs)


def install_quietly(names: list[str]) -> bool:
    """Installs Debian packages outside REQUIREMENTS (a self-test step's toolchain) where this
    process may (root with apt-get), quietly as ensure() does; True when apt-get succeeded."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    return _install(names)
