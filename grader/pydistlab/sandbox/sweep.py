"""Nothing of a test outlives it: its processes, its keys in the kernel's keyrings, its SysV IPC
objects and POSIX message queues (the channels a test could use to pass something to a later test
or a later grade running as the same uid).

CLEAN_AS_UID is Python source run as the test's uid once no process of that uid is left (so none
can stop it): by the agent (sandbox/agent.py, which embeds it: the agent cannot import this
package) and, without namespaces, by sweep_uid() through setpriv. It clears the uid's user, user
session and persistent keyrings, removes the uid's SysV IPC objects and message queues, and the
files and folders it owns at the top of the world-writable folders (/tmp, /var/tmp, /dev/shm,
/run/lock: without namespaces they are the host's). With
the agent each test also gets an IPC namespace and a session keyring of its own; the clearing
covers the keyrings that belong to the uid itself.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

CLEAN_AS_UID = r'''
import ctypes, os, shutil
def remove_entry(path):
    """A file, link or folder gone (what cannot be removed stays)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass
def clean_as_uid():
    libc = ctypes.CDLL(None, use_errno=True)
    L = ctypes.c_long
    nr = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)   # SYS_keyctl
    if nr is not None:
        libc.syscall(L(nr), L(1), None)                 # KEYCTL_JOIN_SESSION_KEYRING: a fresh @s
        for ring in (-4, -5):                           # @u, @us
            libc.syscall(L(nr), L(7), L(ring))          # KEYCTL_CLEAR
        ring = libc.syscall(L(nr), L(22), L(-1), L(-3))  # KEYCTL_GET_PERSISTENT, linked into @s
        if ring > 0:
            libc.syscall(L(nr), L(7), L(ring))
    me = os.getuid()
    for kind in ("shm", "sem", "msg"):
        try:
            with open("/proc/sysvipc/" + kind) as f:
                lines = f.read().split("\n")
        except OSError:
            continue
        head = lines[0].split()
        for line in lines[1:]:
            cols = line.split()
            if len(cols) != len(head):
                continue
            row = dict(zip(head, cols))
            if me not in (int(row.get("uid", -1)), int(row.get("cuid", -1))):
                continue
            ident = L(int(cols[1]))
            if kind == "shm":
                libc.shmctl(ident, L(0), None)           # IPC_RMID
            elif kind == "sem":
                libc.semctl(ident, L(0), L(0))
            else:
                libc.msgctl(ident, L(0), None)
    try:
        for name in os.listdir("/dev/mqueue"):
            path = "/dev/mqueue/" + name
            if os.lstat(path).st_uid == me:
                os.unlink(path)
    except OSError:
        pass
    seen = set()
    for shared in SHARED_FOLDERS:                       # the folders every uid may write
        real = os.path.realpath(shared)
        if real in seen or not os.path.isdir(real):
            continue
        seen.add(real)
        for name in os.listdir(real):
            path = os.path.join(real, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_uid == me:
                remove_entry(path)
'''
#: World-writable folders whose entries a test's uid may leave for a later test or grade (without
#: namespaces they are the host's; with bubblewrap /tmp is private and the others are not mounted).
SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/run/lock", "/var/lock")
CLEAN_AS_UID = CLEAN_AS_UID.replace("SHARED_FOLDERS", repr(SHARED_FOLDERS))

def processes_of(uid: int, proc: Path = Path("/proc")) -> list[int]:
    """The live processes of this pid namespace that run as uid (any of their uids; zombies, which
    no signal ends, left out), from /proc. (Processes in namespaces of their own, such as another
    grader's bubblewrap sandboxes using the same uids, are not this grader's to end.)"""
    found = []
    mine = os.readlink("/proc/self/ns/pid")
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.readlink(d / "ns" / "pid") != mine:
                continue
            fields = dict(line.split(":", 1) for line in (d / "status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if str(uid) in fields.get("Uid", "").split() and not fields.get("State", "").strip().startswith(("Z", "X")):
            found.append(int(d.name))
    return found


def sweep_uid(uid: int, rounds: int = 500) -> bool:
    """Without namespaces, as root: SIGKILLs every process of uid until none is left (a fork
    during a round is caught by the next), then clears what the uid left in the kernel
    (CLEAN_AS_UID). False when processes were still there after `rounds` rounds."""
    gone = False
    for _ in range(rounds):
        pids = processes_of(uid)
        if not pids:
            gone = True
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)
    if gone:
        subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
                        "/usr/bin/python3", "-I", "-S", "-c", CLEAN_AS_UID + "\nclean_as_uid()\n"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=30, check=False)
    return gone
