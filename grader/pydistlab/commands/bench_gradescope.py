"""`./distlab bench gradescope [--keep DIR] [--cpus 0.5] [--memory-mb 768] [--setup-unlimited]`:
the Gradescope scripts (grader/gradescope/) under Gradescope's default autograder resources.

1. copies the kit (tracked and new files, no build/) to DIR/autograder/source/distlab, as the
   autograder zip unpacks it, and makes two submissions there: the reference's owned files
   (`./distlab submit --reference`: full marks) and the stubs (`./distlab submit`: zero);
2. makes a cgroup with the CPU quota and memory limit (cgroup v1 cpu + memory controllers, or
   v2's cpu.max / memory.max; root only) and runs in it, one after the other: setup.sh (once, as
   the image is built), then run_autograder on each submission (AUTOGRADER_ROOT=DIR/autograder);
3. prints each run's wall time, CPU time, the cgroup's peak memory, how many times the kernel
   killed a process for the memory limit, and the score and item count of results.json.

Where no cgroup can be made (not root, or neither hierarchy writable) the runs go on without
limits and the table says so. --setup-unlimited runs setup.sh with the memory limit but no CPU
quota (it is the image build; only run_autograder meets the per-submission time limit);
--no-setup grades again in the image an earlier run left in --keep DIR. CPU time is the cgroup's
own account (cpuacct, or v2's cpu.stat), so it includes the sandbox's processes. The peak memory
is the cgroup's (v1: page cache included, which the kernel reclaims before it kills anything).
Targets (the issue that asked for it): the full reference submission at most 180 s, every item
graded, no process killed by the memory limit.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

from ..errors import DistlabError
from ..paths import _cgroup_dirs, is_release, rel
from .bench_loop import fresh_copy

RUN_TARGET_S = 180.0


class Limits:
    """A cgroup (v1 cpu + memory, or v2) with a CPU quota and a memory limit; `prefix` runs a command
    in it. Removed by close()."""

    def __init__(self, cpus: float, memory_mb: int, tag: str) -> None:
        self.cpus, self.memory = cpus, memory_mb * 2 ** 20
        self.dirs: list[Path] = []
        self.why = ""
        self.v2 = False
        if os.geteuid() != 0:
            self.why = "not root: cgroups cannot be made"
            return
        cpu, mem, acct = _cgroup_dirs("cpu"), _cgroup_dirs("memory"), _cgroup_dirs("cpuacct")
        try:
            if cpu and mem and (cpu[0] / "cgroup.procs").exists() and "memory" in str(mem[0]):
                self._v1(cpu[0] / tag, mem[0] / tag)
                if acct and (acct[0] / "cpuacct.usage").exists() and acct[0].resolve() != cpu[0].resolve():
                    (acct[0] / tag).mkdir()
                    self.dirs.insert(1, acct[0] / tag)
            elif (Path("/sys/fs/cgroup") / "cgroup.controllers").exists():
                self._v2(Path("/sys/fs/cgroup") / tag)
            else:
                self.why = "no cgroup hierarchy with the cpu and memory controllers"
        except OSError as e:
            self.why = f"cgroup refused: {e}"
            self.close()

    def _v1(self, cpu: Path, mem: Path) -> None:
        for d in (cpu, mem):
            d.mkdir()
            self.dirs.append(d)
        period = 100000
        (cpu / "cpu.cfs_period_us").write_text(str(period))
        (cpu / "cpu.cfs_quota_us").write_text(str(int(self.cpus * period)))
        (mem / "memory.limit_in_bytes").write_text(str(self.memory))
        if (mem / "memory.memsw.limit_in_bytes").exists():   # no swapping around the limit
            (mem / "memory.memsw.limit_in_bytes").write_text(str(self.memory))

    def _v2(self, d: Path) -> None:
        d.mkdir()
        self.dirs.append(d)
        self.v2 = True
        (d / "cpu.max").write_text(f"{int(self.cpus * 100000)} 100000")
        (d / "memory.max").write_text(str(self.memory))
        (d / "memory.swap.max").write_text("0")

    @property
    def active(self) -> bool:
        return bool(self.dirs) and not self.why

    def set_cpu(self, limited: bool) -> None:
        if not self.active:
            return
        if self.v2:
            (self.dirs[0] / "cpu.max").write_text(f"{int(self.cpus * 100000)} 100000" if limited else "max 100000")
        else:
            (self.dirs[0] / "cpu.cfs_quota_us").write_text(str(int(self.cpus * 100000)) if limited else "-1")

    def _mem(self) -> Path:
        return self.dirs[-1]

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) of everything that ran in the cgroup so far, also processes
        the waiting process never reaped itself (the sandbox's own PID namespace)."""
        for d in self.dirs:
            try:
                if (d / "cpuacct.usage").exists():
                    return int((d / "cpuacct.usage").read_text()) / 1e9
                if (d / "cpu.stat").exists() and self.v2:
                    for line in (d / "cpu.stat").read_text().splitlines():
                        if line.startswith("usage_usec "):
                            return int(line.split()[1]) / 1e6
            except (OSError, ValueError):
                pass
        return None

    def reset_peak(self) -> None:
        if self.active and not self.v2:
            (self._mem() / "memory.max_usage_in_bytes").write_text("0")

    def peak_mb(self) -> float | None:
        if not self.active:
            return None
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            return int((self._mem() / name).read_text()) / 2 ** 20
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        """Processes the kernel killed in this cgroup for its memory limit, so far."""
        if not self.active:
            return 0
        f = self._mem() / ("memory.events" if self.v2 else "memory.oom_control")
        try:
            for line in f.read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    return int(v)
        except (OSError, ValueError):
            pass
        return 0

    def prefix(self) -> list[str]:
        """A command prefix that moves the command into the cgroup before it starts."""
        if not self.active:
            return []
        procs = " ".join(f"echo $$ > {d / 'cgroup.procs'};" for d in self.dirs)
        return ["/bin/sh", "-c", f"{procs} exec \"$@\"", "in-cgroup"]

    def close(self) -> None:
        for d in reversed(self.dirs):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:   # processes still leaving
                    time.sleep(0.1)
        self.dirs = []


def _cpu_of_children() -> float:
    t = os.times()
    return t.children_user + t.children_system


def _run(limits: Limits, cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict[str, object]:
    limits.reset_peak()
    kills0 = limits.oom_kills()
    g0 = limits.cpu_seconds()
    c0, t0 = _cpu_of_children(), time.monotonic()
    with log.open("w") as out:
        r = subprocess.run(limits.prefix() + cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL)
    g1 = limits.cpu_seconds()
    cpu = g1 - g0 if g0 is not None and g1 is not None else _cpu_of_children() - c0
    return {"wall": time.monotonic() - t0, "cpu": cpu, "status": r.returncode,
            "peak": limits.peak_mb(), "kills": limits.oom_kills() - kills0}


def _score(results: Path) -> str:
    try:
        data = json.loads(results.read_text())
    except (OSError, ValueError) as e:
        return f"no results.json ({e})"
    tests = data.get("tests", [])
    top = sum(float(t.get("max_score", 0) or 0) for t in tests)
    graded = sum(1 for t in tests if "not run" not in str(t.get("output", "")).lower())
    return f"score {data.get('score')}/{top:g}, {len(tests)} items ({graded} graded)"


def main(a: argparse.Namespace) -> int:
    if is_release():
        raise DistlabError("./distlab bench gradescope needs the kit's solutions/ and grader/gradescope/")
    if a.no_setup:   # the image an earlier run set up in --keep DIR
        if not a.keep or not (Path(a.keep) / "autograder" / "run_autograder").is_file():
            raise DistlabError("--no-setup needs --keep DIR of an earlier ./distlab bench gradescope run")
        base = Path(a.keep).resolve()
        ag = base / "autograder"
        source = ag / "source" / "distlab"
    else:
        base, kit = fresh_copy(a.keep, "distlab-gradescope-")
        ag = base / "autograder"
        source = ag / "source" / "distlab"
        if source.exists():
            shutil.rmtree(source)
        source.parent.mkdir(parents=True, exist_ok=True)
        kit.rename(source)
        shutil.copy2(source / "grader" / "gradescope" / "run_autograder", ag / "run_autograder")
    subs = Path(tempfile.mkdtemp(prefix="submissions-", dir=base))
    for name, extra in (("reference", ["--reference"]), ("stubs", [])):   # from the clean copy's stubs
        r = subprocess.run(["./distlab", "submit", *extra, "-o", str(subs / f"{name}.zip")], cwd=source,
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise DistlabError(f"./distlab submit {' '.join(extra)} failed:\n{r.stdout}{r.stderr}")
    cpus, memory_mb = float(a.cpus), int(a.memory_mb)
    limits = Limits(cpus, memory_mb, f"distlab-gradescope-{os.getpid()}")
    env = {k: v for k, v in os.environ.items() if k not in ("CI",)}
    env["AUTOGRADER_ROOT"] = str(ag)
    where = (f"{cpus:g} CPU, {memory_mb} MB ({'cgroup v2' if limits.v2 else 'cgroup v1'})" if limits.active
             else f"NO LIMITS ({limits.why})")
    print(f"distlab bench gradescope: {rel(ag)}, {where}; load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cores", flush=True)
    rows: list[tuple[str, dict[str, object], str]] = []
    try:
        if not a.no_setup:
            limits.set_cpu(not a.setup_unlimited)
            print("  setup.sh ...", flush=True)
            res = _run(limits, ["bash", str(source / "grader" / "gradescope" / "setup.sh")], source, env,
                       base / "setup.log")
            rows.append(("setup.sh" + (" (no CPU quota)" if a.setup_unlimited else ""), res,
                         f"status {res['status']} (log {base / 'setup.log'})"))
        limits.set_cpu(True)
        for name in ("reference", "stubs"):
            sub = ag / "submission"
            if sub.exists():
                shutil.rmtree(sub)
            sub.mkdir()
            with zipfile.ZipFile(subs / f"{name}.zip") as z:
                z.extractall(sub)
            if (ag / "results").exists():
                shutil.rmtree(ag / "results")
            print(f"  run_autograder, {name} submission ...", flush=True)
            res = _run(limits, ["bash", str(ag / "run_autograder")], source, env, base / f"run-{name}.log")
            rows.append((f"run_autograder: {name}", res, _score(ag / "results" / "results.json")))
    finally:
        limits.close()
    print(f"\n{'':<34} {'wall':>8} {'CPU':>8} {'peak mem':>9} {'mem kills':>9}  result")
    for name, res, note in rows:
        peak = res["peak"]
        print(f"{name:<34} {res['wall']:7.0f}s {res['cpu']:7.0f}s {f'{peak:.0f} MB' if peak else '?':>9} "
              f"{res['kills']:>9}  {note}")
    full = next((res for name, res, _ in rows if name == "run_autograder: reference"), None)
    ok = bool(full) and float(full["wall"]) <= RUN_TARGET_S and full["kills"] == 0  # type: ignore[index, arg-type]
    print(f"\nfull reference submission: {'within' if ok else 'OVER'} the target ({RUN_TARGET_S:.0f} s, no "
          f"process killed for memory); load average now {os.getloadavg()[0]:.1f} (a shared machine: "
          f"wall times include waiting for other work). Logs in {base}.")
    return 0 if ok else 1
