"""The audit of loaded submissions: findings per owned file (rules.py, less what the module's
`audit_allow` accepts) and fingerprints per module (similarity.py, less the stub's)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import manifest as mf
from ..paths import ROOT
from ..submission import Submission
from . import rules, similarity


@dataclass
class SubmissionAudit:
    label: str
    findings: list[rules.Finding] = field(default_factory=list)
    allowed: int = 0                      # findings the modules' audit_allow accepted
    files: int = 0                        # owned files audited
    problems: list[str] = field(default_factory=list)
    prints: dict[str, set[int]] = field(default_factory=dict)   # module -> fingerprints beyond the stub

    def as_dict(self) -> dict[str, object]:
        return {"submission": self.label, "files": self.files, "allowed": self.allowed,
                "problems": self.problems, "findings": [f.as_dict() for f in self.findings]}


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


class Auditor:
    """Audits submissions against one kit (its manifest and its stubs under root)."""

    def __init__(self, modules: list[mf.Module], root: Path = ROOT) -> None:
        self.modules = modules
        self.module_of = {o: m for m in modules for o in m.owned}
        self._stubs: dict[str, str | None] = {}
        self._stub_prints: dict[str, set[int]] = {}
        for o in self.module_of:
            p = root / o
            self._stubs[o] = p.read_text(encoding="utf-8", errors="replace") if p.is_file() else None
            self._stub_prints[o] = similarity.fingerprints(self._stubs[o] or "")

    @property
    def owned(self) -> list[str]:
        return list(self.module_of)

    def audit(self, sub: Submission) -> SubmissionAudit:
        res = SubmissionAudit(sub.label, problems=list(sub.problems) + ([sub.error] if sub.error else []))
        for owned, data in sub.files.items():
            module = self.module_of.get(owned)
            if module is None:
                continue
            text = _decode(data)
            res.files += 1
            for f in rules.audit_text(owned, text, self._stubs.get(owned)):
                if f.what in module.audit_allow:
                    res.allowed += 1
                else:
                    res.findings.append(f)
            prints = similarity.fingerprints(text) - self._stub_prints[owned]
            res.prints.setdefault(module.name, set()).update(prints)
        res.findings.sort(key=lambda f: (self.owned.index(f.file), f.line, f.rule))
        return res
