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
    labels = {"server1": "1 server", "server2": "2 servers", "server4": "4 servers", "ring": "ring all-reduce"}
    for name, pts in sorted(by["step"].items()):
        pts.sort()
        a1.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], marker="o", label=labels.get(name, name))
    for name in ("sync", "async", "ssp"):
        pts = sorted(by["loss"].get(name, []))
        if pts:
            a2.plot([p[0] * 1e3 for p in pts], [p[1] for p in pts], marker=".", label=name)
    return finish(fig, [(a1, "workers w", "simulated ms per synchronous step",
                         "one step, free compute: centralized vs ring"),
                        (a2, "simulated ms", "held-out loss", "training with a 4x straggler")], argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
