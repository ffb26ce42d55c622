"""`./distlab promises [MODULE...] [--uncovered]`: how many sentences of each module's contract
(header comments, README prose) a row of its promise ledger quotes (grader/pydistlab/coverage.py)."""
from __future__ import annotations

import argparse

from .. import coverage, manifest as mf


def main(a: argparse.Namespace) -> int:
    man = mf.load()
    names = [mf.resolve_name(n, man.order) for n in a.modules] if a.modules else list(man.order)
    found = []
    for name in names:
        c = coverage.coverage(name)
        found.append(c)
        print(c.line(), flush=True)
        if a.uncovered:
            for s in c.uncovered:
                print(f"    {s.file}:{s.line}: {s.text}")
    if len(found) > 1:
        print(coverage.overall(found))
    return 0
