"""What a grading run produces: the mode it ran in and the results per item, module and run.

grade.py fills these in; report.py and batch.py read them. This module imports only the manifest,
so the reports never need the grader itself."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from . import manifest as mf


class Mode(str, enum.Enum):
    """Whose code is graded (grade.py's docstring says what each mode does). A str: it prints and
    formats as its value (enum.StrEnum's behaviour, which Python 3.10 lacks)."""
    STUDENT = "student"          # this checkout's exercises/ (the default)
    SOLUTIONS = "solutions"      # the reference solutions (--solutions)
    SUBMISSION = "submission"    # a folder or .zip of student files (--submission, --submissions)

    @property
    def tree_id(self) -> str:
        """The clean copy under build/grade/ that this mode grades in."""
        return "exercises" if self is Mode.STUDENT else self.value

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


@dataclass
class ItemResult:
    item: mf.TestItem
    passed: bool
    reason: str
    output: str
    seconds: float

    @property
    def score(self) -> float:
        return self.item.points if self.passed else 0.0


@dataclass
class ModuleResult:
    module: mf.Module
    status: str = "graded"        # graded | not gradable | blocked
    message: str = ""             # compiler errors / what blocks
    notes: list[str] = field(default_factory=list)
    items: list[ItemResult] = field(default_factory=list)
    build_seconds: float = 0.0    # this module's own build steps (its sandboxed files, its retries)
    test_seconds: float = 0.0     # its items' run times, summed (items run side by side)
    hidden: bool = False
    # What is not written yet (unfinished.py): the functions of its owned files that still hold a
    # TODO marker, and, per other module, the unfinished functions of that module its tests reached.
    unfinished: list[str] = field(default_factory=list)
    blocked_by: dict[str, list[str]] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return sum(i.score for i in self.items)

    @property
    def max_score(self) -> float:
        return self.module.max_points(self.hidden)

    @property
    def passed(self) -> int:
        return sum(1 for i in self.items if i.passed)

    @property
    def failed(self) -> int:
        return len(self.module.items(self.hidden)) - self.passed


@dataclass
class GradeRun:
    label: str
    mode: Mode
    hidden: bool
    modules: list[ModuleResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    build_seconds: float = 0.0    # building, all modules together (one ninja run serves them all)
    warnings: list[str] = field(default_factory=list)   # compiler warnings seen while building

    @property
    def score(self) -> float:
        return sum(m.score for m in self.modules)

    @property
    def max_score(self) -> float:
        return sum(m.max_score for m in self.modules)
