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
            "grader/answers/",
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


def _cgroup_dirs(controller: str) -> list[Path]:
    """This process's cgroup folders for a controller and their ancestors, innermost first
    (cgroup v1: /sys/fs/cgroup/<controller>/...; v2: the unified hierarchy)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            base = Path("/sys/fs/cgroup") / controller
        elif controllers == "" and (Path("/sys/fs/cgroup") / "cgroup.controllers").exists():
            base = Path("/sys/fs/cgroup")
        else:
            continue
        d = base / path.lstrip("/")
        dirs = [d, *d.parents]
        return [x for x in dirs if x.is_relative_to(base) and x.is_dir()] or [base]
    return []


def _read_number(path: Path) -> float | None:
    try:
        return float(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_limit() -> float | None:
    """The CPUs this process's cgroup grants (its quota, e.g. 0.5); None where none is set."""
    found: list[float] = []
    for d in _cgroup_dirs("cpu"):
        quota, period = _read_number(d / "cpu.cfs_quota_us"), _read_number(d / "cpu.cfs_period_us")
        if quota is not None and period and quota > 0:
            found.append(quota / period)
        try:
            q, p = (d / "cpu.max").read_text().split()[:2]
            if q != "max":
                found.append(float(q) / float(p))
        except (OSError, ValueError):
            pass
    return min(found) if found else None


def memory_limit() -> int | None:
    """The memory (bytes) this process's cgroup may use; None where no limit is set."""
    found = []
    for d in _cgroup_dirs("memory"):
        for name in ("memory.limit_in_bytes", "memory.max"):
            v = _read_number(d / name)
            if v is not None and v < 2 ** 60:
                found.append(int(v))
    return min(found) if found else None


def cpus() -> int:
    """nproc(), lowered to the cgroup's CPU quota (rounded up): 0.5 CPU is one."""
    quota = cpu_limit()
    return max(1, min(nproc(), int(-(-quota // 1)))) if quota else nproc()


#: Peak memory of one compile of the kit's heaviest translation units (a test file under
#: ThreadSanitizer); a build runs no more compiles side by side than the memory limit holds.
COMPILE_MB = 600
RESERVE_MB = 160   # the grader, ninja and the linker's share of a limited container


def build_jobs() -> int:
    """Parallel compiles: cpus(), and no more than the cgroup's memory limit holds."""
    jobs = cpus()
    mem = memory_limit()
    if mem:
        jobs = min(jobs, max(1, (mem // 2 ** 20 - RESERVE_MB) // COMPILE_MB))
    return jobs


def is_release() -> bool:
    """True in a student repository written by `./distlab release` (it has no solutions/)."""
    return not SOLUTIONS.is_dir()


def rel(path: Path) -> str:
    """path relative to the kit root when inside it (for messages)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
