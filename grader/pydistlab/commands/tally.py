"""The self-test's count of passed and failed checks (commands/selftest.py and its steps)."""
from __future__ import annotations

import time


class Tally:
    def __init__(self, full: bool = False) -> None:
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []
        self.t0 = time.monotonic()
        self.mutation_score: tuple[int, int, int] | None = None   # (caught, mutants, caught before) of that step
        self.full = full     # --full: grade every mutant, also those caught before with nothing changed

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(what)
            print(f"    FAIL {what}" + ("\n      " + "\n      ".join(detail.splitlines()[:20]) if detail else ""),
                  flush=True)
        return ok

    def step(self, name: str) -> None:
        print(f"\n== [{time.monotonic() - self.t0:6.0f}s] {name}", flush=True)
