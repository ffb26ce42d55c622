"""Plot simulated time vs message size per algorithm, one panel per collective.

    python3 plot_collectives.py COLLECTIVES.csv OUT.png

COLLECTIVES.csv is what `run_03_collectives --csv FILE` writes (columns world_size, collective,
algorithm, bytes, sim_time_s). Only the largest world size is drawn, to keep the plot readable;
the built-in collective is the dashed black line. `./distlab bench collectives --plot OUT.png`
runs this file as a program, with an interpreter that has matplotlib (deps.matplotlib_python()),
so the rest of the grader never imports matplotlib.
"""
from __future__ import annotations

import collections
import csv
import sys

Series = dict[str, dict[str, list[tuple[int, float]]]]   # collective -> algorithm -> (bytes, s)


def read_series(path: str) -> tuple[int, Series]:
    """(world size drawn, collective -> algorithm -> sorted (bytes, simulated seconds))."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    p = max(int(r["world_size"]) for r in rows)
    by: Series = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        if int(r["world_size"]) == p:
            by[r["collective"]][r["algorithm"]].append((int(r["bytes"]), float(r["sim_time_s"])))
    for lines in by.values():
        for pts in lines.values():
            pts.sort()
    return p, by


def plot(p: int, by: Series, png: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(by)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for ax, (coll, lines) in zip(axes.flat, sorted(by.items())):
        for label, pts in sorted(lines.items()):
            builtin = label == "built-in"
            ax.plot([q[0] for q in pts], [q[1] * 1e6 for q in pts], marker="o", label=label,
                    linestyle="--" if builtin else "-", color="black" if builtin else None,
                    zorder=3 if builtin else 2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(coll)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("simulated time (us)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"simulated time vs size per algorithm, {p} ranks (alpha-beta model)")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: plot_collectives.py COLLECTIVES.csv OUT.png", file=sys.stderr)
        return 2
    p, by = read_series(argv[0])
    plot(p, by, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
