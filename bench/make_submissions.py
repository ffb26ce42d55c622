#!/usr/bin/env python3
"""Generates a class of submissions for timing batch grading (instructors' kit only).

    python3 bench/make_submissions.py OUT_DIR [N]      (default N = 10)
    ./distlab grade --submissions OUT_DIR --hidden --csv grades.csv

Submission i is, in turn: the reference (every owned file from solutions/), the stubs (every
owned file from exercises/), or partly done (the reference for the first i % modules modules,
stubs for the rest), so a batch mixes full marks, zero and everything between, and consecutive
submissions differ in different files (what the grader's reused tree rebuilds).
"""
from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    out = Path(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    manifest = tomllib.loads((ROOT / "grader" / "manifest.toml").read_text())
    modules = [m for m in manifest["kit"]["modules"] if m in manifest.get("modules", {})]
    out.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        kind = ("reference", "stubs", "partial")[i % 3]
        done = len(modules) if kind == "reference" else 0 if kind == "stubs" else i % len(modules)
        sub = out / f"student{i:03d}"
        if sub.exists():
            shutil.rmtree(sub)
        for k, name in enumerate(modules):
            for owned in manifest["modules"][name]["owned"]:
                rel = Path(owned)
                src = ROOT / "solutions" / rel.relative_to("exercises") if k < done else ROOT / rel
                if src.is_file():
                    (sub / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, sub / rel)
        print(f"{sub.name}: {kind} ({done} of {len(modules)} modules from the reference)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
