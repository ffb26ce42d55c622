"""One test process: its limits and, with bubblewrap, what it sees."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .. import manifest as mf
from ..errors import DistlabError
from .agent import AGENT_CAPS, AGENT_PYTHON, Agent, agents, agents_lock
from .bwrap import _base
from .limits import TEST_UID_BASE, TMP_SIZE_MB, Limits, tasks_of
from .status import Status


@dataclass
class TestJail:
    """How one test process runs: its limits and, with bubblewrap, what it sees."""
    status: Status
    limits: Limits
    readable: list[Path] = field(default_factory=list)   # extra read-only paths (reference outputs)
    worker: int = 0

    def command(self, cmd: list[str], binary: Path, cwd: Path) -> list[str]:
        """The command line that runs cmd (the test program `binary`, in folder cwd) in this jail.
        As root: bwrap starts as root (it can reach the kit wherever it lies) and setpriv drops
        the test to the worker's own uid, so the process limit (counted per uid) applies.
        Otherwise: bwrap as this user, in a user namespace of its own."""
        pre = ["prlimit", "--core=0", *(f"--{name}={value}" for name, value in self.rlimits())]
        if not shutil.which("prlimit"):
            pre = []   # not Linux: no limits but the time limit
        drop = self.drop(binary)
        if not self.status.isolated:
            return pre + drop + cmd
        return pre + self.view(binary, cwd, root=self.uid(binary) is not None) + drop + cmd

    def rlimits(self) -> list[tuple[str, int]]:
        """The limits as prlimit names them (core files are always off)."""
        lim = self.limits
        out = []
        if lim.memory_mb:
            out.append(("as", lim.memory_mb * 1024 * 1024))
        if lim.processes:
            out.append(("nproc", self.nproc_limit()))
        if lim.file_size_mb:
            out.append(("fsize", lim.file_size_mb * 1024 * 1024))
        if lim.cpu_s:
            out.append(("cpu", lim.cpu_s))
        return out

    def drop(self, binary: Path) -> list[str]:
        """setpriv to the test's uid, or nothing (the grader's own uid)."""
        uid = self.uid(binary)
        return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--"] if uid is not None else []

    def view(self, binary: Path, cwd: Path, root: bool, agent: bool = False) -> list[str]:
        """The bwrap prefix: system folders, the test program, the readable paths and cwd. root:
        bwrap as root with the capabilities setpriv needs (agent: the agent's, AGENT_CAPS)."""
        if root:
            caps = AGENT_CAPS if agent else ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")
            view = [*_base(user_ns=False), *(a for cap in caps for a in ("--cap-add", cap))]
        else:
            view = [*_base(), "--unshare-user", "--disable-userns"]
        # A private /tmp the test's uid may write (bwrap makes a tmpfs 0755 root's otherwise).
        view += ["--size", str(TMP_SIZE_MB * 1024 * 1024), "--perms", "1777", "--tmpfs", "/tmp"]
        binds = [p for p in self.readable if p.exists()] + [binary]
        # The folders leading to what is mounted, searchable by the test's uid (bwrap would make
        # them 0700), then the mounts: nothing else of the kit is there.
        folders = sorted({a for p in [cwd, *binds] for a in [*Path(p).parents, *([p] if p == cwd else [])]
                          if a != Path("/")}, key=lambda a: len(a.parts))
        for d in folders:
            view += ["--perms", "0755", "--dir", str(d)]
        for p in binds:
            view += ["--ro-bind", str(p), str(p)]
        return view + ["--chdir", str(cwd), "--"]

    def agent(self, binary: Path, cwd: Path) -> Agent | None:
        """This worker's long-lived sandbox for `binary` (started on first use), or None where each
        test gets a bwrap of its own: without bubblewrap, or when the grader is not root (the test
        would then share the agent's uid)."""
        if not self.status.isolated or self.uid(binary) is None or not Path(AGENT_PYTHON).is_file() \
                or not shutil.which("setpriv"):
            return None
        key = (self.worker, str(binary), str(cwd), tuple(str(p) for p in self.readable))
        with agents_lock:
            agent = agents.get(key)
            if agent is None or not agent.alive():
                agent = agents[key] = Agent(self.view(binary, cwd, root=True, agent=True))
            return agent

    def uid(self, binary: Path) -> int | None:
        """The uid the test runs as: the worker's own when the grader is root, else None (the
        grader's). Without bubblewrap, a test program the test uids cannot reach runs as root only
        where the status allows it (probe.admit()); otherwise the test is refused (fail closed)."""
        if os.geteuid() != 0 or not self.status.limited or not shutil.which("setpriv"):
            return None
        if not self.status.isolated and not _reachable(binary):
            if self.status.own_rights:
                return None
            raise DistlabError(f"the test uids cannot reach {binary}: the test was not run as root")
        return TEST_UID_BASE + self.worker

    def nproc_limit(self) -> int:
        """RLIMIT_NPROC counts every process and thread of the uid: as root the test runs under a
        uid of its own; otherwise the user's current count is added so the limit means the same."""
        if os.geteuid() == 0 or not self.limits.processes:
            return self.limits.processes
        return self.limits.processes + tasks_of(os.getuid())

    def uses_memory_limit(self) -> bool:
        return bool(self.limits.memory_mb) and self.status.limited and shutil.which("prlimit") is not None



def jail_for(status: Status, module: mf.Module, src: Path, tsan: bool) -> TestJail | None:
    """The limits and view of one test process of module (None: --sandbox off)."""
    if not status.limited:
        return None
    limits = Limits(memory_mb=0 if tsan else module.memory_limit_mb,   # TSan maps terabytes
                    processes=module.process_limit, file_size_mb=module.file_size_limit_mb,
                    cpu_s=module.cpu_limit_s)
    # The public tests' folder (paths such as tests/<m>/../../golden resolve through it) and the
    # module's own reference outputs; nothing else of the kit.
    readable = [src / "grader" / "tests", src / "grader" / "golden" / module.name]
    return TestJail(status, limits, readable)


def _reachable(path: Path) -> bool:
    """Whether any user can run path (every folder above it searchable by others)."""
    try:
        if not os.stat(path).st_mode & 0o001:
            return False
        return all(os.stat(p).st_mode & 0o001 for p in path.resolve().parents)
    except OSError:
        return False


