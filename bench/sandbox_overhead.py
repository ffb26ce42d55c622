#!/usr/bin/env python3
"""What the grading sandbox costs: a re-grade of 03_collectives's reference with its hidden tests
(nothing to compile, 36 + 24 test processes), without the sandbox, with one bubblewrap per test
process, and with one per worker and test program (the grader's way when it runs as root).
Rounds alternate the three, so a busy machine slows each alike; prints each one's median and its
ratio to no sandbox. Usage: python3 bench/sandbox_overhead.py [ROUNDS] (default 5; root, Linux,
bubblewrap; builds the solutions' grading tree first if needed)."""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "grader"))
sys.dont_write_bytecode = True
from pydistlab import grade, sandbox  # noqa: E402
from pydistlab.results import Mode  # noqa: E402

VARIANTS = {"no sandbox": ("off", True), "one per test": ("on", False), "one per worker": ("on", True)}


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    agent_python = sandbox.AGENT_PYTHON
    grade.grade(["03_collectives"], Mode.SOLUTIONS, options=grade.GradeOptions(hidden=True, quiet=True))  # build once
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    for _ in range(rounds):
        for name, (mode, per_worker) in VARIANTS.items():
            sandbox.AGENT_PYTHON = agent_python if per_worker else "/nonexistent"   # no agent: per test
            t0 = time.monotonic()
            grade.grade(["03_collectives"], Mode.SOLUTIONS,
                        options=grade.GradeOptions(hidden=True, quiet=True, sandbox=mode))
            times[name].append(time.monotonic() - t0)
    base = statistics.median(times["no sandbox"])
    print(f"re-grade of 03_collectives (reference, hidden tests, nothing to compile), {rounds} rounds:")
    for name, xs in times.items():
        m = statistics.median(xs)
        print(f"  {name:<15} median {m:5.2f} s  {m / base:5.2f}x  ({' '.join(f'{x:.2f}' for x in xs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
