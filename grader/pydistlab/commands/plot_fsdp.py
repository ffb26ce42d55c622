"""Plot 11_fsdp's sweep: peak memory per rank against dp (FSDP settings and DDP with Adam), and
the simulated step time against the prefetch window (weights resharded after forward, or kept).

    python3 plot_fsdp.py FSDP.csv OUT.png

FSDP.csv is what `run_11_fsdp --sweep --csv FILE` writes (columns kind, name, x, y: kind "memory"
rows are (setting, dp, KiB), kind "time" rows (setting, prefetch window, ms)). `./distlab bench
fsdp --plot OUT.png` runs this file as a program, with an interpreter that has matplotlib
(deps.matplotlib_python()), so the rest of the grader never imports it.
"""
from __future__ import annotations

import collections
import csv
import sys


def read(path: str) -> dict[str, dict[str, list[tuple[float, float]]]]:
    by: dict[str, dict[str, list[tuple[float, float]]]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            by[r["kind"]][r["name"]].append((float(r["x"]), float(r["y"])))
    return by


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = read(argv[1])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    labels = {"ddp": "DDP (16 bytes per parameter)", "prefetch0": "FSDP, prefetch 0",
              "prefetch1": "FSDP, prefetch 1", "keep": "FSDP, weights kept"}
    for name in ("ddp", "keep", "prefetch1", "prefetch0"):
        pts = sorted(by["memory"].get(name, []))
        if pts:
            a1.plot([p[0] for p in pts], [p[1] / 1024 for p in pts], marker="o", label=labels[name])
    a1.set_xscale("log", base=2)
    a1.set_xlabel("dp (ranks)")
    a1.set_ylabel("peak MiB per rank (kit's meter)")
    a1.set_title("memory: shards shrink as 1/dp, the window does not")
    a1.grid(True, alpha=0.3)
    a1.legend(fontsize=8)
    for name, label in (("reshard", "reshard after forward"), ("keep", "weights kept")):
        pts = sorted(by["time"].get(name, []))
        if pts:
            a2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    a2.set_xlabel("prefetch window (units)")
    a2.set_ylabel("simulated ms per step")
    a2.set_title("time: gathers hidden behind compute")
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
