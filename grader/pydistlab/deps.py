"""System packages the kit needs: detect them, and install the missing ones on Debian/Ubuntu.

A command that needs packages calls ensure(). As root it installs them non-interactively
(`apt-get update` once, then `apt-get install -y --no-install-recommends ...`): one line per step
(what, how many, seconds), the package manager's own output kept in build/install.log and shown,
last lines first, only when a step fails. Otherwise it prints the one sudo line to run and stops.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import DistlabError
from .paths import BUILD, rel


def _any_file(*patterns: str) -> bool:
    return any(glob.glob(p) for p in patterns)


@dataclass(frozen=True)
class Requirement:
    what: str                 # shown by doctor
    package: str              # the Debian package that provides it
    present: Callable[[], bool]
    optional: bool = False
    grading: bool = True      # needed to grade (doctor --install --grading installs only these)


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
    Requirement("C++ compiler (g++ 12 or newer)", "g++", _which("g++")),
    Requirement("CMake 3.25+", "cmake", _which("cmake")),
    Requirement("Ninja", "ninja-build", _which("ninja")),
    Requirement("GoogleTest", "libgtest-dev", lambda: _any_file(
        "/usr/include/gtest/gtest.h", "/usr/local/include/gtest/gtest.h")),
    Requirement("Eigen 3", "libeigen3-dev", lambda: _any_file(
        "/usr/include/eigen3/Eigen/Core", "/usr/local/include/eigen3/Eigen/Core")),
    Requirement("CLI11", "libcli11-dev", lambda: _any_file(
        "/usr/include/CLI/CLI.hpp", "/usr/local/include/CLI/CLI.hpp")),
    Requirement("nlohmann-json", "nlohmann-json3-dev", lambda: _any_file(
        "/usr/include/nlohmann/json.hpp", "/usr/local/include/nlohmann/json.hpp")),
    Requirement("Open MPI headers and libraries", "libopenmpi-dev", lambda: _any_file(
        "/usr/lib/*/openmpi/include/mpi.h", "/usr/include/*/mpi.h", "/usr/include/mpi.h")
        or shutil.which("mpicxx") is not None),
    Requirement("Open MPI launcher (mpirun)", "openmpi-bin", _which("mpirun")),
    Requirement("Python 3", "python3", lambda: True),
    Requirement("bubblewrap (the grading sandbox)", "bubblewrap", _which("bwrap"), optional=True),
    Requirement("matplotlib (plots only)", "python3-matplotlib", _matplotlib, optional=True,
                grading=False),
]

_updated = False


def missing(include_optional: bool = False) -> list[Requirement]:
    return [r for r in REQUIREMENTS if (include_optional or not r.optional) and not r.present()]


def install_line(packages: list[str]) -> str:
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
    apt_install(sorted({r.package for r in need}), ", ".join(r.what for r in need))
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
