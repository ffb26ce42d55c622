"""What one grading run is made of: its options, and the passes it makes over a tree.

A pass is one build of the graded modules and one run of their items: the plain pass, or the
plain pass under AddressSanitizer + UBSan (`grade --sanitize address`), then, for the modules that
ask for it (manifest `sanitizers = ["thread"]`), a ThreadSanitizer pass over the items that passed.
Each pass has its own build folder and CMake cache, a time-limit factor and an environment for
its test processes. An Order says in which order items run and whether a pass stops at the first
failure (`./distlab mutants`: a mutant's known first catch first, and with --fast, stop there).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from .. import workspace as ws
from ..results import ModuleResult
from ..runner import Outcome

TSAN_TIMEOUT_FACTOR = 4.0
ASAN_TIMEOUT_FACTOR = 3.0
TSAN_ENV = {"TSAN_OPTIONS": "halt_on_error=1 second_deadlock_stack=1 report_signal_unsafe=0"}

#: The reason of an item that was not run because an earlier one failed (Order.stop_early).
NOT_RUN = "not run: an earlier item already failed"


@dataclass(frozen=True)
class Order:
    """Which items run first, and whether the rest are skipped once one fails (the score is then
    only a lower bound, and the ThreadSanitizer pass is left out for a module that failed)."""
    first: tuple[str, ...] = ()     # item names to run before the others, in this order
    stop_early: bool = False


@dataclass(frozen=True)
class GradeOptions:
    """How to grade (the modules, the mode and the submission are grade()'s own arguments).
    sandbox: sandbox.probe()'s mode (auto, on, limits, off); sanitize: "" or "address";
    tree_prefix: the workspace build/grade/<tree_prefix>/ instead of the mode's own."""
    hidden: bool = False
    jobs: int = 0
    quiet: bool = False
    tree_prefix: str = ""
    sandbox: str = "auto"
    sanitize: str = ""
    order: Order = Order()


@dataclass(frozen=True)
class Pass:
    """One build and one run of items over a tree."""
    kind: str                        # "plain", "asan" or "tsan"
    build_name: str                  # the build folder beside the tree's src/
    cache: dict[str, str] = field(hash=False)
    timeout_factor: float = 1.0
    env: dict[str, str] = field(default_factory=dict, hash=False)
    tag: str = ""                    # after an item's name in progress lines
    label: str = ""                  # after a build step's description
    order: Order = Order()

    @property
    def rerun(self) -> bool:
        """A second pass (ThreadSanitizer) over items the first one graded: a module that does
        not build is a note there, not a status, and the first pass's verdicts stand."""
        return self.kind == "tsan"

    @property
    def sanitized(self) -> bool:
        """Built with a sanitizer (its test processes get no address-space limit)."""
        return self.kind != "plain"

    def build_dir(self, tb: ws.TreeBuild) -> Path:
        return tb.build.parent / self.build_name

    def ordered(self, order: Order) -> Pass:
        return dataclasses.replace(self, order=order)


PLAIN = Pass("plain", "build", ws.BASE_CACHE)
ASAN = Pass("asan", "build-asan", ws.ASAN_CACHE, ASAN_TIMEOUT_FACTOR, ws.ASAN_ENV)
TSAN = Pass("tsan", "build-tsan", ws.TSAN_CACHE, TSAN_TIMEOUT_FACTOR, TSAN_ENV, tag=" [tsan]",
            label=" under ThreadSanitizer")


def passes_for(options: GradeOptions) -> tuple[Pass, Pass | None]:
    """The first pass of a grade, and the ThreadSanitizer pass after it (None under ASan)."""
    if options.sanitize == "address":
        return ASAN.ordered(options.order), None
    return PLAIN.ordered(options.order), TSAN.ordered(options.order)


def wants_tsan(res: ModuleResult) -> bool:
    return "thread" in res.module.sanitizers


def tsan_modules(built: list[str], results: dict[str, ModuleResult],
                 first: dict[tuple[str, str], Outcome], order: Order) -> list[str]:
    """The modules the ThreadSanitizer pass builds: those that ask for it and have an item that
    passed the first pass (only those are run again); with stop_early, none that failed one."""
    mods = [n for n in built if wants_tsan(results[n])]
    if order.stop_early:
        mods = [n for n in mods if all(oc.passed for (m, _), oc in first.items() if m == n)]
    return [n for n in mods if any(oc.passed for (m, _), oc in first.items() if m == n)]
