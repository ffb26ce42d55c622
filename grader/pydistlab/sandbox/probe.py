"""Which sandbox this run gets, and why not a better one."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .. import deps
from ..errors import DistlabError
from .limits import TEST_UID_BASE, Limits
from .reach import reachable
from .status import Status
from .uid import UNREACHABLE_FIX

_probed: dict[str, Status] = {}


def probe(request: str = "auto") -> Status:
    """The sandbox this run gets. request: "auto" (bubblewrap when it works here, else resource
    limits only, with the reason), "on" (bubblewrap or an error), "limits" (what a host without
    namespaces gets: resource limits and, as root, an unprivileged uid) or "off" (none: for timing
    and debugging, never for grading submissions)."""
    if request not in ("auto", "on", "off", "limits"):
        raise DistlabError(f"--sandbox {request}: use auto, on, limits or off")
    if request == "off":
        return Status("off", "turned off with --sandbox off")
    if request == "limits":
        return Status("limits-only", "bubblewrap not used (--sandbox limits)")
    if request in _probed:
        return _probed[request]
    reason = ""
    if not shutil.which("bwrap"):
        deps.ensure_optional("bubblewrap")
    if not shutil.which("prlimit") or not shutil.which("setpriv"):
        status = Status("off", "prlimit and setpriv (util-linux) are missing: no sandbox and no "
                               "resource limits on this system")
        if request == "on":
            raise DistlabError(f"--sandbox on: {status.reason}")
        _probed[request] = status
        return status
    if not shutil.which("bwrap"):
        reason = ("bubblewrap is not installed (Debian/Ubuntu: " + deps.install_line(["bubblewrap"]) + ")")
    else:
        # What a test process gets (as root: bwrap as root, then setpriv to an unprivileged uid).
        from .jail import TestJail  # (jail.py imports this module)
        jail = TestJail(Status("bwrap"), Limits(0, 64, 0, 0))
        r = subprocess.run(jail.command(["true"], Path("/usr/bin/true"), Path("/tmp")),
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            reason = ("bubblewrap cannot create namespaces here (" + (r.stderr.strip().splitlines() or
                      ["?"])[-1] + "); containers often forbid them (Docker: --security-opt "
                      "seccomp=unconfined, or a host with user namespaces)")
    status = Status("bwrap") if not reason else Status("limits-only", reason)
    if request == "on" and not status.isolated:
        raise DistlabError(f"--sandbox on: {reason}")
    _probed[request] = status
    return status


def admit(status: Status, mode: str, tree: Path) -> Status:
    """Fail closed: the sandbox this grade may use, or DistlabError with the reason and the fix.
    mode: "student" (this checkout's own files), "solutions" (the references) or "submission".
    Without bubblewrap, submitted code must not run with the grader's rights: as root it runs as
    the test uids, which must reach tree (workspace.grade_root() moves it where they can); not as
    root nothing can drop rights, so instructor modes refuse. A student grading their own checkout
    (or the references) may run with their own rights, which describe() says once."""
    if status.isolated or not status.limited:
        return status
    if os.geteuid() != 0:
        if mode == "submission":
            raise DistlabError(
                "refusing to grade a submission: bubblewrap cannot isolate it here (" + status.reason +
                ") and, not being root, the grader cannot run it as another user, so it would run with "
                "your rights. Install bubblewrap (Debian/Ubuntu: " + deps.install_line(["bubblewrap"]) +
                "), allow user namespaces, grade as root, or pass --sandbox off to accept that knowingly")
        return status
    if reachable(tree):
        return status
    if mode == "submission":
        raise DistlabError(f"refusing to grade a submission: the unprivileged uid {TEST_UID_BASE} cannot "
                           f"reach the grading tree {tree}, so the submission would be compiled and run "
                           f"as root. {UNREACHABLE_FIX[0].upper()}{UNREACHABLE_FIX[1:]}")
    return Status(status.mode, status.reason + f"; the test uids cannot reach {tree}, so the code runs "
                  "with root's rights", own_rights=True)
