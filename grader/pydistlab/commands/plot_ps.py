"""Plot the parameter-server layouts' step time against the workers, and test loss against
simulated time for the synchronous, asynchronous and bounded-staleness modes.

    python3 plot_ps.py PS.csv OUT.png

PS.csv is what `run_08_parameter_server --sweep --compare --csv FILE` writes (columns kind, name,
x, y: kind "step" rows are (layout, workers, seconds), kind "loss" rows (mode, simulated seconds,
test loss); kind "servers" rows, (w8, servers, seconds), are not plotted). `./distlab bench ps
--plot OUT.png` runs this file as a program, with an interpreter that has matplotlib
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
    labels = {"server1": "1 server", "server2": "2 servers", "server4": "4 servers", "ring": "ring all-reduce"}
    for name, pts in sorted(by["step"].items()):
        pts.sort()
        a1.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], marker="o", label=labels.get(name, name))
    a1.set_xlabel("workers w")
    a1.set_ylabel("simulated ms per synchronous step")
    a1.set_title("one step, free compute: centralized vs ring")
    a1.grid(True, alpha=0.3)
    a1.legend(fontsize=8)
    for name in ("sync", "async", "ssp"):
        pts = sorted(by["loss"].get(name, []))
        if pts:
            a2.plot([p[0] * 1e3 for p in pts], [p[1] for p in pts], marker=".", label=name)
    a2.set_xlabel("simulated ms")
    a2.set_ylabel("held-out loss")
    a2.set_title("training with a 4x straggler")
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
