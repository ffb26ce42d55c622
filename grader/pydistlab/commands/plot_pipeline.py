"""Plot the pipeline schedules' bubble fraction and peak stash against the number of microbatches.

    python3 plot_pipeline.py PIPELINE.csv OUT.png

PIPELINE.csv is what `run_07_pipeline --sweep --csv FILE` writes (columns schedule, recompute,
stages, microbatches, step_s, bubble, bubble_formula, peak_microbatches_stage0, peak_bytes_stage0,
peak_microbatches_max; schedules naive, gpipe, 1f1b, zb and interleaved, the last only where m is a
multiple of p).
`./distlab bench pipeline --plot OUT.png` runs this file as a program, with an interpreter that has
matplotlib (deps.matplotlib_python()), so the rest of the grader never imports matplotlib.
"""
from __future__ import annotations

import collections
import csv
import sys

Point = tuple[int, float, float, int, int]   # m, bubble, formula, peak microbatches, peak bytes


def read_points(path: str) -> tuple[int, dict[str, list[Point]]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    by: dict[str, list[Point]] = collections.defaultdict(list)
    for r in rows:
        by[r["schedule"]].append((int(r["microbatches"]), float(r["bubble"]), float(r["bubble_formula"]),
                                  int(r["peak_microbatches_stage0"]), int(r["peak_bytes_stage0"])))
    return int(rows[0]["stages"]), by


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p, by = read_points(argv[1])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    marks = {"naive": "s", "gpipe": "o", "1f1b": "x", "zb": "^", "interleaved": "d"}
    for name, pts in sorted(by.items()):
        pts.sort()
        ms = [q[0] for q in pts]
        (line,) = a1.plot(ms, [q[1] for q in pts], marker=marks.get(name, "o"), markersize=8,
                          linestyle="none", label=f"{name} (measured)")
        a1.plot(ms, [q[2] for q in pts], color=line.get_color(), alpha=0.6, label=f"{name} (formula)")
        a2.plot(ms, [q[4] / 1024 for q in pts], marker=marks.get(name, "o"), color=line.get_color(), label=name)
    a1.set_xscale("log", base=2)
    a1.set_xlabel("microbatches m")
    a1.set_ylabel("bubble fraction")
    a1.set_title(f"bubble, {p} equal stages (lines: the formulas)")
    a1.grid(True, alpha=0.3)
    a1.legend(fontsize=7)
    a2.set_xscale("log", base=2)
    a2.set_xlabel("microbatches m")
    a2.set_ylabel("peak stash on stage 0 (KiB)")
    a2.set_title("peak stashed activations, stage 0")
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
