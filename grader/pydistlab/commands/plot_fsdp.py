"""Plot 11_fsdp's sweep: peak memory per rank against dp (FSDP settings and DDP with Adam), and
the simulated step time against the prefetch window (weights resharded after forward, or kept).

    python3 plot_fsdp.py FSDP.csv OUT.png

FSDP.csv is what `run_11_fsdp --sweep --csv FILE` writes (columns kind, name, x, y: kind "memory"
rows are (setting, dp, KiB), kind "time" rows (setting, prefetch window, ms)). `./distlab bench
fsdp --plot OUT.png` runs this file as a program, with an interpreter that has matplotlib
(deps.matplotlib_python()), so the rest of the grader never imports it.
"""
from __future__ import annotations

import sys

try:
    from .plot_csv import finish, two_panels  # imported as part of the grader's package
except ImportError:
    from plot_csv import finish, two_panels  # run as a program (bench --plot)


def main(argv: list[str]) -> int:
    got = two_panels(argv, __doc__)
    if got is None:
        return 2
    fig, a1, a2, by = got
    labels = {"ddp": "DDP (16 bytes per parameter)", "prefetch0": "FSDP, prefetch 0",
              "prefetch1": "FSDP, prefetch 1", "keep": "FSDP, weights kept"}
    for name in ("ddp", "keep", "prefetch1", "prefetch0"):
        pts = sorted(by["memory"].get(name, []))
        if pts:
            a1.plot([p[0] for p in pts], [p[1] / 1024 for p in pts], marker="o", label=labels[name])
    a1.set_xscale("log", base=2)
    for name, label in (("reshard", "reshard after forward"), ("keep", "weights kept")):
        pts = sorted(by["time"].get(name, []))
        if pts:
            a2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    return finish(fig, [(a1, "dp (ranks)", "peak MiB per rank (kit's meter)",
                         "memory: shards shrink as 1/dp, the window does not"),
                        (a2, "prefetch window (units)", "simulated ms per step",
                         "time: gathers hidden behind compute")], argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
