"""Which sandbox this run gets, and why not a better one."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .. import deps
from ..errors import DistlabError
from .limits import Limits
from .status import Status

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
