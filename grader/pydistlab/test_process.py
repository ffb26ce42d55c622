"""Starting a test program: in its jail (an agent's sandbox, a bubblewrap of its own, or limits
only), with an allowlisted environment, and ending it with nothing of it left running.

launch() starts one process; list_tests() asks a test program for its tests once (cached by the
program file's identity), in the same jail, for the report check (gtest_report.check)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import BinaryIO

from . import gtest_report, sandbox


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


class Process:
    """A started test process: its output pipe (read end), wait and kill."""
    stdout: BinaryIO
    via_bwrap = False   # its exit status is bwrap's (128 + the signal that ended the test)

    def wait(self, timeout_s: float | None) -> int | None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError


class _Popen(Process):
    """A test in a process (and, with bubblewrap, a sandbox) of its own. Without namespaces, as
    root, every process of the test's uid is killed when it ends (sandbox.sweep_uid)."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str], stdin: int | None,
                 pass_fds: tuple[int, ...], sweep: int | None) -> None:
        self.sweep = sweep
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env,
                                     stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, pass_fds=pass_fds)
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout

    def wait(self, timeout_s: float | None) -> int | None:
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        _kill_group(self.proc.pid)
        if self.sweep is not None:
            self.proc.wait()
            sandbox.sweep_uid(self.sweep)
            self.sweep = None


class _InAgent(Process):
    """A test started by its worker's long-lived sandbox (sandbox.Agent)."""

    def __init__(self, agent: sandbox.Agent, argv: list[str], env: dict[str, str], cwd: Path,
                 stdin: int, report_fd: int, rlimits: list[tuple[str, int]], uid: int) -> None:
        self.agent = agent
        self.rc: int | None = None
        out_r, out_w = os.pipe()
        argv = [shutil.which(argv[0]) or argv[0], *argv[1:]]
        try:
            agent.start(argv, env, cwd, out_w, stdin, report_fd, rlimits, uid)
        except OSError:
            agent.kill()
            self.rc = -signal.SIGKILL
        finally:
            os.close(out_w)
        self.stdout = os.fdopen(out_r, "rb", buffering=0)

    def wait(self, timeout_s: float | None) -> int | None:
        if self.rc is None:
            self.rc = self.agent.wait(timeout_s if timeout_s is not None else 60.0)
        return self.rc

    def kill(self) -> None:
        if self.rc is None:   # still running (a timeout or a flood): end its whole sandbox
            self.agent.kill()
            self.rc = -signal.SIGKILL


_swept_before: set[int] = set()


def launch(binary: Path, args: list[str], cwd: Path, env: dict[str, str], jail: sandbox.TestJail | None,
           channel: gtest_report.Channel | None) -> Process:
    """Starts `binary args` (in jail, when given) with env (made from the allowlist) and, with a
    channel, its control pipe on stdin and its report pipe at the number the control line names.
    Raises OSError when it cannot start."""
    cmd = [str(binary), *args]
    full_env = sandbox.test_env(env)
    uid = jail.uid(binary) if jail is not None else None
    agent = jail.agent(binary, cwd) if jail is not None else None
    if agent is not None and jail is not None:
        if channel is None:
            null = os.open(os.devnull, os.O_RDONLY)
            try:   # the agent wants the three pipes: /dev/null stands for the report and stdin
                return _InAgent(agent, [*jail.drop(binary), *cmd], full_env, cwd, null, null,
                                jail.rlimits(), uid or 0)
            finally:
                os.close(null)
        return _InAgent(agent, [*jail.drop(binary), *cmd], full_env, cwd, channel.control,
                        channel.write_fd, jail.rlimits(), uid or 0)
    sweep = uid if jail is not None and not jail.status.isolated else None
    if sweep is not None and sweep not in _swept_before:   # what a grade cut short may have left
        _swept_before.add(sweep)
        sandbox.sweep_uid(sweep)
    proc = _Popen(jail.command(cmd, binary, cwd) if jail is not None else cmd, cwd, full_env,
                  channel.control if channel else None, (channel.write_fd,) if channel else (), sweep)
    proc.via_bwrap = jail is not None and jail.status.isolated
    return proc


_listings: dict[tuple, list[str] | None] = {}
_listings_lock = threading.Lock()
LIST_TIMEOUT_S = 60.0
LIST_CAP = 4 * 1024 * 1024


def list_tests(binary: Path, cwd: Path, env: dict[str, str], jail: sandbox.TestJail | None) -> list[str] | None:
    """The full names of binary's tests (`--gtest_list_tests`, run in jail), once per program file;
    None when it cannot be read (the program fails, hangs or floods)."""
    st = binary.stat()
    key = (str(binary), st.st_ino, st.st_size, st.st_mtime_ns)
    with _listings_lock:
        if key in _listings:
            return _listings[key]
    try:
        proc = launch(binary, ["--gtest_list_tests"], cwd, dict(env, DISTLAB_REPORT_CHANNEL="none"),
                      jail, None)
    except OSError:
        return None
    out = bytearray()

    def drain() -> None:
        try:
            while chunk := proc.stdout.read(65536):
                if len(out) <= LIST_CAP:
                    out.extend(chunk)
        except (OSError, ValueError):
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        rc = proc.wait(LIST_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        rc = None
    proc.kill()
    reader.join(timeout=5)
    proc.stdout.close()
    names = gtest_report.parse_listing(out.decode("utf-8", "replace")) \
        if rc == 0 and len(out) <= LIST_CAP else None
    with _listings_lock:
        _listings[key] = names
    return names
