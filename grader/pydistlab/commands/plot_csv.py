"""What the plot programs of `./distlab bench ... --plot` share (plot_ps.py, plot_fsdp.py): reading
a sweep's CSV (columns kind, name, x, y) and a figure of two panels. Imported by those programs,
which run as scripts with an interpreter that has matplotlib (deps.matplotlib_python()), so this
file sits next to them and the rest of the grader never imports it."""
from __future__ import annotations

import collections
import csv
import sys
from typing import Any

Points = dict[str, dict[str, list[tuple[float, float]]]]


def read(path: str) -> Points:
    """kind -> name -> [(x, y), ...] in file order."""
    by: Points = collections.defaultdict(lambda: collections.defaultdict(list))
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            by[r["kind"]][r["name"]].append((float(r["x"]), float(r["y"])))
    return by


def two_panels(argv: list[str], usage: str) -> tuple[Any, Any, Any, Points] | None:
    """(figure, left axes, right axes, the CSV's points) for `program CSV OUT.png`, or None after
    printing usage when the arguments are not those two."""
    if len(argv) != 3:
        print(usage, file=sys.stderr)
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    return fig, a1, a2, read(argv[1])


def finish(fig: Any, axes: list[tuple[Any, str, str, str]], out: str) -> int:
    """Labels each (axes, x label, y label, title), adds grid and legend, writes out (PNG)."""
    for ax, xlabel, ylabel, title in axes:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return 0
