"""System packages the kit needs: detect them, and install the missing ones on Debian/Ubuntu.

A command that needs packages calls ensure(). As root it installs them non-interactively
(`apt-get update` once, then `apt-get install -y --no-install-recommends ...`, progress shown);
otherwise it prints the one sudo line to run and stops.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from .errors import DistlabError


def _any_file(*patterns: str) -> bool:
    return any(glob.glob(p) for p in patterns)


@dataclass(frozen=True)
class Requirement:
    what: str                 # shown by doctor
    package: str              # the Debian package that provides it
    present: Callable[[], bool]
    optional: bool = False


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
    Requirement("matplotlib (plots only)", "python3-matplotlib", _matplotlib, optional=True),
]

_updated = False


def missing(include_optional: bool = False) -> list[Requirement]:
    return [r for r in REQUIREMENTS if (include_optional or not r.optional) and not r.present()]


def install_line(packages: list[str]) -> str:
    return "sudo apt-get update && sudo apt-get install -y --no-install-recommends " + " ".join(packages)


def apt_install(packages: list[str], names: str = "") -> None:
    """Installs Debian packages as root (apt-get update once); otherwise says the sudo line."""
    global _updated
    names = names or ", ".join(packages)
    if not shutil.which("apt-get"):
        raise DistlabError(f"missing: {names}. This is not a Debian/Ubuntu system; install the "
                           f"equivalents of the Debian packages {' '.join(packages)} and retry.")
    if os.geteuid() != 0:
        raise DistlabError(f"missing: {names}. Install them with\n\n    {install_line(packages)}\n\n"
                           f"then run the command again.")
    print(f"distlab: installing missing packages: {' '.join(packages)}", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not _updated:
        subprocess.run(["apt-get", "update"], env=env, check=False, stdin=subprocess.DEVNULL)
        _updated = True
    r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *packages], env=env,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise DistlabError(f"apt-get install failed (status {r.returncode}); see its output above")


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
    global _updated
    reqs = [r for r in REQUIREMENTS if r.package == package]
    if all(r.present() for r in reqs):
        return True
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    print(f"distlab: installing {package}", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not _updated:
        subprocess.run(["apt-get", "update"], env=env, check=False, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL)
        _updated = True
    subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", package], env=env,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return all(r.present() for r in reqs)
