"""Where things live in a kit checkout (or a released student repository)."""
from __future__ import annotations

import os
from pathlib import Path

#: The kit's root: the folder holding the `distlab` script (grader/pydistlab/ is two levels down).
ROOT: Path = Path(__file__).resolve().parents[2]

MANIFEST = ROOT / "grader" / "manifest.toml"
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
BUILD = ROOT / "build"

#: What the student repository leaves out (`./distlab release`); the grader's clean copies leave it
#: out too (the hidden tests excepted, when they are graded), so a submission's compile cannot read it.
LEFT_OUT = ("solutions/", "grader/hidden/", "grader/mutants/", "grader/selftest/", "grader/gradescope/",
            "docs/instructor-guide.md", "docs/authoring.md", "bench/make_submissions.py",
            "bench/sandbox_overhead.py", "grader/answers/")

#: Extensions of the C++ files in which solution markers are recognised.
CXX_EXTENSIONS = (".cpp", ".cc", ".cxx", ".hpp", ".h", ".hh", ".cu", ".cuh", ".ipp", ".tpp")


def nproc() -> int:
    """Number of CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def is_release() -> bool:
    """True in a student repository written by `./distlab release` (it has no solutions/)."""
    return not SOLUTIONS.is_dir()


def rel(path: Path) -> str:
    """path relative to the kit root when inside it (for messages)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
