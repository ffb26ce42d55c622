"""Which sandbox this run gets (probe) and how it is described to the user."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..paths import is_release


@dataclass
class Status:
    mode: str                  # "bwrap" | "limits-only" | "off"
    reason: str = ""           # why not bwrap (printed and noted in the report)
    #: Without bubblewrap: the code graded may run with the grader's own rights where the test
    #: uids cannot reach the tree (the references, or a student's own checkout; probe.admit()).
    own_rights: bool = False

    @property
    def isolated(self) -> bool:
        return self.mode == "bwrap"

    @property
    def limited(self) -> bool:
        return self.mode != "off"


def describe(status: Status) -> str:
    if status.mode == "bwrap":
        return ("sandbox: bubblewrap (no network, no kit checkout, hidden tests and reference "
                "sources out of sight, resource limits" +
                (", unprivileged uid" if os.geteuid() == 0 else "") + ")")
    if status.mode == "off":
        return "sandbox: OFF (" + status.reason + "): submission code runs with the grader's rights"
    if os.geteuid() == 0 and status.own_rights:
        return ("sandbox: resource limits only, with root's rights: " + status.reason + _threat_model())
    if os.geteuid() == 0:
        return ("sandbox: resource limits and an unprivileged uid, no namespaces: " + status.reason +
                ". The network is not cut off" + _threat_model())
    return ("sandbox: resource limits only: " + status.reason + ". Submission code can read what "
            "this user can read and reach the network" + _threat_model())


def _threat_model() -> str:
    """Where the threat model is documented (the instructors' guide: not in a student repository)."""
    return "" if is_release() else " (docs/instructor-guide.md, Threat model)"

