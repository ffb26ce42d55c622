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

from .sweep import CLEAN_AS_UID

# ---- one sandbox per worker and test program -----------------------------------------------
# Starting bubblewrap (namespaces, mounts) costs 10 to 20 ms, as much as a short test. So, when the
# grader is root, each worker keeps one sandbox per test program for a run of items: a small agent
# inside it (root, with only the capabilities it needs: setpriv's, CAP_KILL and CAP_SYS_ADMIN for
# unshare) starts each test as the worker's uid, with the limits, the grader's pipes (passed over a
# socket: the control line on stdin, the output, the report pipe), an IPC namespace and a session
# keyring of its own, and a fresh /tmp. When the test ends the agent itself (root, which no test
# process can signal) SIGKILLs every process of its pid namespace (kill(-1) as root: one atomic
# pass no fork escapes) and checks /proc until no process of the uid is left, then clears the
# uid's keyrings and IPC objects (sweep.CLEAN_AS_UID, as that uid, when none of its processes can
# stop it) and empties /tmp; it answers with the exit status. A test can neither signal nor trace
# the root agent, nor reach its socket. A timeout, an output flood or a sweep that does not end
# kills the whole sandbox; the next item starts a new one. close_agents() ends them after each run
# of items, so a rebuilt test program is never run through an old mount.

AGENT_PYTHON = "/usr/bin/python3"
#: The capabilities the agent keeps in its bubblewrap (the tests drop them all: setpriv).
AGENT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL", "CAP_SYS_ADMIN")
_AGENT = CLEAN_AS_UID + r"""
import ctypes, json, os, resource, socket, sys, time
sock = socket.socket(fileno=int(sys.argv[1]))
os.set_inheritable(sock.fileno(), False)
NAMES = {"as": resource.RLIMIT_AS, "nproc": resource.RLIMIT_NPROC, "fsize": resource.RLIMIT_FSIZE,
         "cpu": resource.RLIMIT_CPU, "core": resource.RLIMIT_CORE}
libc = ctypes.CDLL(None, use_errno=True)
KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)

def left_of(uid):
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/" + name + "/status") as f:
                fields = dict(l.split(":", 1) for l in f.read().split(chr(10)) if ":" in l)
        except OSError:
            continue
        if str(uid) in fields.get("Uid", "").split() and not fields.get("State", "").strip().startswith(("Z", "X")):
            found.append(int(name))
    return found

def sweep(uid):
    try:
        os.kill(-1, 9)
    except OSError:
        pass
    for _ in range(500):
        pids = left_of(uid)
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        time.sleep(0.002)
    return False

def clean(uid):
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            clean_as_uid()
        except BaseException:
            os._exit(1)
        os._exit(0)
    return os.waitpid(pid, 0)[1] == 0

cleaned = set()
while True:
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
    except OSError:
        break
    if not msg:
        break
    req = json.loads(msg)
    out_fd, ctl_fd, xml_fd = fds
    if req["uid"] not in cleaned:   # what an earlier grade that was cut short may have left
        cleaned.add(req["uid"])
        sweep(req["uid"])
        clean(req["uid"])
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(ctl_fd, 0)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            os.dup2(xml_fd, req["xml_fd"])
            keep = req["xml_fd"]
            os.closerange(3, keep)
            os.closerange(keep + 1, 65536)
            if libc.unshare(0x08000000) != 0:     # CLONE_NEWIPC: SysV IPC and mqueues of its own
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWIPC)")
            if KEYCTL is not None and libc.syscall(ctypes.c_long(KEYCTL), ctypes.c_long(1), None) < 0 \
                    and ctypes.get_errno() not in (38, 1):   # a session keyring of its own (ENOSYS, EPERM: none)
                raise OSError(ctypes.get_errno(), "keyctl(KEYCTL_JOIN_SESSION_KEYRING)")
            for name, value in req["rlimits"]:
                resource.setrlimit(NAMES[name], (value, value))
            os.chdir(req["cwd"])
            os.execve(req["argv"][0], req["argv"], req["env"])
        except BaseException as e:
            os.write(2, f"sandbox: could not start the test: {e}\n".encode())
        os._exit(127)
    for fd in fds:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    swept = sweep(req["uid"]) and clean(req["uid"])
    for entry in os.listdir("/tmp"):
        remove_entry(os.path.join("/tmp", entry))   # (sweep.CLEAN_AS_UID's)
    sock.send(json.dumps({"rc": os.waitstatus_to_exitcode(status), "swept": swept}).encode())
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

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, out_fd: int, ctl_fd: int,
              xml_fd: int, rlimits: list[tuple[str, int]], uid: int) -> None:
        """Starts one test: argv (absolute program path) with the output pipe on 1 and 2, the
        control pipe on stdin and the report pipe's write end at its number here (the one the
        control line names)."""
        req = {"argv": argv, "env": env, "cwd": str(cwd), "xml_fd": xml_fd, "uid": uid,
               "rlimits": [("core", 0), *rlimits]}
        socket.send_fds(self.sock, [json.dumps(req).encode()], [out_fd, ctl_fd, xml_fd])

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
        answer = json.loads(reply)
        if not answer.get("swept"):   # processes of the test outlived it: end the whole sandbox
            self.kill()
        return int(answer["rc"])

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

