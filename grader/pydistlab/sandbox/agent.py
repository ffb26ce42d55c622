"""One worker's long-lived sandbox for one test program."""
from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

# ---- one sandbox per worker and test program -----------------------------------------------
# Starting bubblewrap (namespaces, mounts) costs 10 to 20 ms, as much as a short test. So, when the
# grader is root, each worker keeps one sandbox per test program for a run of items: a small agent
# inside it (root, with only the capabilities setpriv needs) starts each test as the worker's uid,
# with the limits, the grader's pipes (passed over a socket) and a fresh /tmp; when the test ends
# it kills every process left of that uid and answers with the exit status. A test can neither
# signal nor trace the root agent, nor reach its socket. A timeout or an output flood kills the
# whole sandbox; the next item starts a new one. close_agents() ends them after each run of items,
# so a rebuilt test program is never run through an old mount.

AGENT_PYTHON = "/usr/bin/python3"
_AGENT = r"""
import json, os, resource, shutil, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
os.set_inheritable(sock.fileno(), False)
NAMES = {"as": resource.RLIMIT_AS, "nproc": resource.RLIMIT_NPROC, "fsize": resource.RLIMIT_FSIZE,
         "cpu": resource.RLIMIT_CPU, "core": resource.RLIMIT_CORE}
while True:
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
    except OSError:
        break
    if not msg:
        break
    req = json.loads(msg)
    out_fd, xml_fd = fds
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            os.dup2(xml_fd, req["xml_fd"])
            keep = req["xml_fd"]
            os.closerange(3, keep)
            os.closerange(keep + 1, 65536)
            for name, value in req["rlimits"]:
                resource.setrlimit(NAMES[name], (value, value))
            os.chdir(req["cwd"])
            os.execve(req["argv"][0], req["argv"], req["env"])
        except BaseException as e:
            os.write(2, f"sandbox: could not start the test: {e}\n".encode())
        os._exit(127)
    os.close(out_fd)
    os.close(xml_fd)
    _, status = os.waitpid(pid, 0)
    sweeper = os.fork()
    if sweeper == 0:
        try:
            os.setgid(req["uid"])
            os.setuid(req["uid"])
            os.kill(-1, 9)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(sweeper, 0)
    for entry in os.listdir("/tmp"):
        path = os.path.join("/tmp", entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    sock.send(json.dumps({"rc": os.waitstatus_to_exitcode(status)}).encode())
"""

agents: dict[tuple, Agent] = {}
agents_lock = threading.Lock()


class Agent:
    """One worker's long-lived sandbox for one test program (see above)."""

    def __init__(self, view: list[str]) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [*view, AGENT_PYTHON, "-I", "-S", "-c", _AGENT, str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, out_fd: int, xml_fd: int,
              rlimits: list[tuple[str, int]], uid: int) -> None:
        """Starts one test: argv (absolute program path) with the write ends of the output and
        report pipes (the report's at the same fd number as in argv)."""
        req = {"argv": argv, "env": env, "cwd": str(cwd), "xml_fd": xml_fd, "uid": uid,
               "rlimits": [("core", 0), *rlimits]}
        socket.send_fds(self.sock, [json.dumps(req).encode()], [out_fd, xml_fd])

    def wait(self, timeout_s: float) -> int:
        """The test's exit status (negative: the signal); subprocess.TimeoutExpired after
        timeout_s, or when the sandbox ended without answering (then treated as killed)."""
        self.sock.settimeout(timeout_s)
        try:
            reply = self.sock.recv(4096)
        except (TimeoutError, OSError):
            raise subprocess.TimeoutExpired("sandbox agent", timeout_s) from None
        if not reply:
            self.kill()
            return -signal.SIGKILL
        return int(json.loads(reply)["rc"])

    def kill(self) -> None:
        """Ends the sandbox and everything in it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.sock.close()


def close_agents() -> None:
    """Ends every worker's sandbox (after a run of items)."""
    with agents_lock:
        running = list(agents.values())
        agents.clear()
    for agent in running:
        agent.kill()


atexit.register(close_agents)

