"""`./distlab bench loop [--keep DIR]`: the student's loop, timed on a fresh copy of this kit.

1. copies the kit (tracked and new files, no build/) to a new folder, as a fresh clone would be;
2. `./distlab grade` there (the stubs): wall time, CPU time (user + system of every process it
   started) and the number of lines it printed;
3. `./distlab run 05_mlp` after it: the time until the program starts (the build of its one
   missing program) and the whole run;
4. a one-line edit of exercises/01_threads/threads.cpp, then `./distlab grade 01_threads`.

The targets (docs/build.md): first grade <= 90 s, <= 40 lines; first run <= 10 s to start; the
regrade <= 3 s. CPU time shows how busy the machine was: on an idle 2-core machine the wall time
of a build is about half its CPU time. CPU time is read from a cpuacct cgroup where this process
may make one (root on cgroup v1), else from the children's rusage (which misses processes that
bubblewrap reaps itself: then it says so).
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .. import tree
from ..paths import ROOT

TARGETS = {"first grade": 90.0, "first run 05_mlp (to start)": 10.0, "regrade after an edit": 3.0}
CGROUP = Path("/sys/fs/cgroup/cpuacct")


class CpuMeter:
    """CPU seconds (user + system) used by this process and everything it starts."""

    def __init__(self) -> None:
        self.group: Path | None = None
        if os.geteuid() == 0 and (CGROUP / "cgroup.procs").is_file():
            group = CGROUP / f"distlab-bench-{os.getpid()}"
            try:
                group.mkdir()
                (group / "cgroup.procs").write_text(str(os.getpid()))
                self.group = group
            except OSError:
                self.group = None

    @property
    def how(self) -> str:
        return "cgroup cpuacct" if self.group else "rusage of the children (misses sandboxed processes)"

    def read(self) -> float:
        if self.group:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    def close(self) -> None:
        if self.group:
            try:
                (CGROUP / "cgroup.procs").write_text(str(os.getpid()))
                self.group.rmdir()
            except OSError:
                pass


def _step(meter: CpuMeter, cwd: Path, cmd: list[str], log: Path) -> tuple[float, float, str]:
    """Runs cmd; returns (wall s, CPU s, its output)."""
    c0, t0 = meter.read(), time.monotonic()
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", stdin=subprocess.DEVNULL)
    wall, cpu = time.monotonic() - t0, meter.read() - c0
    log.write_text(r.stdout)
    if r.returncode != 0:
        print(f"  (status {r.returncode}; its output: {log})")
    return wall, cpu, r.stdout


def fresh_copy(keep: str | None, prefix: str) -> tuple[Path, Path]:
    """(base, base/kit): the kit's tracked and new files copied to base/kit, as a fresh clone would
    be (no build/); base is `keep` or a new temporary folder."""
    base = Path(keep).resolve() if keep else Path(tempfile.mkdtemp(prefix=prefix))
    kit = base / "kit"
    if kit.exists():
        shutil.rmtree(kit)
    files: dict[str, Path | bytes] = {n: ROOT / n for n in tree.kit_files(ROOT)}
    tree.mirror(files, kit)
    os.chmod(kit / "distlab", 0o755)
    return base, kit


def print_table(title: str, rows: list[tuple[str, float, float, str]], targets: dict[str, float]) -> None:
    """The results: wall and CPU time of each row next to its target (ok or MISSED), and the load."""
    print(f"\n{title:<30} {'wall':>8} {'CPU':>8} {'target':>8}  notes")
    for name, wall, cpu, note in rows:
        target = targets.get(name)
        verdict = "" if target is None else ("ok" if wall <= target else "MISSED")
        print(f"{name:<30} {wall:7.1f}s {cpu:7.1f}s {target or 0:7.0f}s  {verdict:6} {note}")
    print(f"\nload average now {os.getloadavg()[0]:.1f} (2 cores: above ~2 the wall times include waiting "
          f"for other work; CPU time does not)")


def main(a: argparse.Namespace) -> int:
    base, kit = fresh_copy(a.keep, "distlab-loop-")
    meter = CpuMeter()
    load = os.getloadavg()[0]
    print(f"distlab bench loop: a fresh copy in {kit} ({os.cpu_count()} cores, load average {load:.1f}; "
          f"CPU time from {meter.how})")
    rows: list[tuple[str, float, float, str]] = []
    try:
        wall, cpu, out = _step(meter, kit, ["./distlab", "grade"], base / "grade.log")
        lines = len(out.splitlines())
        rows.append(("first grade", wall, cpu, f"{lines} lines of output (target <= 40)"))
        t0, c0 = time.monotonic(), meter.read()
        proc = subprocess.Popen(["./distlab", "run", "05_mlp"], cwd=kit, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace",
                                stdin=subprocess.DEVNULL)
        started = None
        out_lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            out_lines.append(line)
            if started is None and line.startswith("$ "):
                started = (time.monotonic() - t0, meter.read() - c0)
        proc.wait()
        (base / "run.log").write_text("".join(out_lines))
        total = time.monotonic() - t0
        if started is None:
            started = (total, meter.read() - c0)
        rows.append(("first run 05_mlp (to start)", started[0], started[1],
                     f"whole run {total:.1f} s, status {proc.returncode}, "
                     f"{sum(1 for x in out_lines if not x.startswith(('$', 'distlab:')))} program lines"))
        src = kit / "exercises" / "01_threads" / "threads.cpp"
        text = src.read_text()
        src.write_text(re.sub(r"\n", "\n// an edit\n", text, count=1))
        wall, cpu, out = _step(meter, kit, ["./distlab", "grade", "01_threads"], base / "regrade.log")
        rows.append(("regrade after an edit", wall, cpu, "exercises/01_threads/threads.cpp, one line"))
    finally:
        meter.close()
    print_table("step", rows, TARGETS)
    print(f"logs: {base}/grade.log, run.log, regrade.log" + ("" if a.keep else f" (the copy stays in {kit})"))
    return 0
