"""`./distlab format [--check]`: the kit's C++ style (.clang-format at the root, clang-format 14).

Every hand-written C++ file is formatted: the library, the support library, the solutions, the
tests, the benchmarks, the mutants. exercises/ is generated from solutions/ by `./distlab sync`
and is checked for drift instead. `./distlab test` runs the check (step format).
"""
from __future__ import annotations

import os
import shutil
import subprocess

from .. import deps
from ..errors import DistlabError
from ..paths import CXX_EXTENSIONS, ROOT
from ..tree import kit_files

SKIP = ("exercises/", "build/")


def cxx_files() -> list[str]:
    return sorted(f for f in kit_files() if f.endswith(CXX_EXTENSIONS) and not f.startswith(SKIP))


def clang_format(install: bool) -> tuple[str | None, str]:
    """The clang-format to use (clang-format-14 first: output differs between versions) and, when
    there is none, why."""
    for name in ("clang-format-14", "clang-format"):
        if shutil.which(name):
            return name, ""
    if install and os.geteuid() == 0:
        deps.apt_install(["clang-format"])
        return clang_format(install=False)
    return None, "clang-format is not installed (sudo apt-get install -y clang-format)"


def unformatted(tool: str, files: list[str]) -> list[str]:
    """The files that clang-format would change."""
    bad: list[str] = []
    for i in range(0, len(files), 50):
        chunk = files[i:i + 50]
        r = subprocess.run([tool, "--dry-run", "--Werror", "--style=file", *chunk], cwd=ROOT,
                           capture_output=True, text=True, errors="replace")
        if r.returncode != 0:
            bad += sorted({f for f in chunk if f"{f}:" in r.stderr})
    return bad


def main(check: bool) -> int:
    tool, why = clang_format(install=True)
    if not tool:
        raise DistlabError(why)
    files = cxx_files()
    if check:
        bad = unformatted(tool, files)
        for f in bad:
            print(f"not formatted: {f}")
        print(f"{len(files) - len(bad)} of {len(files)} C++ files formatted"
              + (" (fix: ./distlab format)" if bad else ""))
        return 1 if bad else 0
    subprocess.run([tool, "-i", "--style=file", *files], cwd=ROOT, check=True)
    print(f"formatted {len(files)} C++ files with {tool}")
    return 0
