"""`./distlab bench collectives [--plot FILE.png] [--no-mpi] [ARGS for bench_collectives]`.

1. builds and runs bench_collectives (built-in collectives on the threads backend; its flags:
   --world-sizes, --min-bytes, --max-bytes, --ops, --iters, --csv FILE) and shows its table;
2. when Open MPI is installed, adds --mpi: bench_collectives then runs bench_mpi_allreduce under
   mpirun for each world size (default 2, 4, 8), same sizes, and prints both all-reduce results
   side by side with the ratio of bus bandwidths (--no-mpi: threads only);
3. with --plot FILE.png: simulated time vs message size per algorithm, from
   run_03_collectives --csv (matplotlib when importable; otherwise the table).

`./distlab bench pipeline [--plot FILE.png] [ARGS for run_07_pipeline]`: run_07_pipeline --sweep
(bubble fraction and stage 0's peak stash vs the number of microbatches for the naive, GPipe and
1F1B schedules, equal stages, on the simulated clock, next to the formulas); with --plot, both
against m in one figure.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import build, cmake, deps
from .errors import DistlabError
from .paths import is_release, rel

def _col(row: dict[str, str], *names: str) -> str | None:
    low = {k.strip().lower(): v for k, v in row.items() if k}
    for n in names:
        if n in low:
            return low[n]
    for n in names:
        for k, v in low.items():
            if k.startswith(n):
                return v
    return None


def _read(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


PLOT_SCRIPT = r"""
import csv, sys, collections
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
by = collections.defaultdict(lambda: collections.defaultdict(list))
p = max(int(r["world_size"]) for r in rows)   # one world size keeps the plot readable
for r in rows:
    if int(r["world_size"]) == p:
        by[r["collective"]][r["algorithm"]].append((int(r["bytes"]), float(r["sim_time_s"])))
n = len(by)
cols = min(3, n)
rows_ = (n + cols - 1) // cols
fig, axes = plt.subplots(rows_, cols, figsize=(5 * cols, 3.8 * rows_), squeeze=False)
for ax, (coll, lines) in zip(axes.flat, sorted(by.items())):
    for label, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([q[0] for q in pts], [q[1] * 1e6 for q in pts], marker="o", label=label,
                linestyle="--" if label == "built-in" else "-", color="black" if label == "built-in" else None,
                zorder=3 if label == "built-in" else 2)
    ax.set_xscale("log", base=2); ax.set_yscale("log")
    ax.set_title(coll); ax.set_xlabel("message size (bytes)"); ax.set_ylabel("simulated time (us)")
    ax.grid(True, which="both", alpha=0.3); ax.legend(fontsize=7)
for ax in list(axes.flat)[n:]:
    ax.axis("off")
fig.suptitle(f"simulated time vs size per algorithm, {p} ranks (alpha-beta model)")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
"""


def plot(png: Path) -> int:
    solutions = not is_release()
    build_dir = build.ensure_built("default", solutions, ["run_03_collectives"])
    exe = build_dir / "bin" / "run_03_collectives"
    if not exe.is_file():
        raise DistlabError(f"{rel(exe)} does not exist yet: the 03_collectives program is needed for --plot")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "collectives.csv"
        r = subprocess.run([str(exe), "--csv", str(data)], capture_output=True, text=True)
        if r.returncode != 0 or not data.is_file():
            raise DistlabError(f"run_03_collectives --csv failed (status {r.returncode}):\n"
                               f"{(r.stdout + r.stderr)[-2000:]}")
        kept = png.with_suffix(".csv")
        shutil.copyfile(data, kept)
        py = deps.matplotlib_python()
        if py:
            p = subprocess.run([py, "-c", PLOT_SCRIPT, str(data), str(png)], capture_output=True, text=True)
            if p.returncode == 0:
                print(f"plot: {png} (data: {kept})")
                return 0
            print(f"matplotlib failed: {p.stderr[-1000:]}")
        else:
            print("matplotlib is not installed, so no plot (sudo apt-get install -y python3-matplotlib); "
                  "the table instead:")
        rows = _read(kept)
        print(f"{'collective':<16}{'algorithm':<14}{'p':>4}{'bytes':>12}{'sim time us':>14}")
        for r_ in rows:
            print(f"{r_['collective']:<16}{r_['algorithm']:<14}{r_['world_size']:>4}{r_['bytes']:>12}"
                  f"{float(r_['sim_time_s']) * 1e6:>14.2f}")
        print(f"data: {kept}")
    return 0


PIPELINE_PLOT_SCRIPT = r"""
import csv, sys, collections
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
by = collections.defaultdict(list)
for r in rows:
    by[r["schedule"]].append((int(r["microbatches"]), float(r["bubble"]), float(r["bubble_formula"]),
                              int(r["peak_microbatches_stage0"]), int(r["peak_bytes_stage0"])))
p = int(rows[0]["stages"])
fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
marks = {"naive": "s", "gpipe": "o", "1f1b": "x"}
for name, pts in sorted(by.items()):
    pts.sort()
    ms = [q[0] for q in pts]
    line, = a1.plot(ms, [q[1] for q in pts], marker=marks.get(name, "o"), markersize=8, linestyle="none",
                    label=f"{name} (measured)")
    a1.plot(ms, [q[2] for q in pts], color=line.get_color(), alpha=0.6, label=f"{name} (formula)")
    a2.plot(ms, [q[4] / 1024 for q in pts], marker=marks.get(name, "o"), color=line.get_color(), label=name)
a1.set_xscale("log", base=2); a1.set_xlabel("microbatches m"); a1.set_ylabel("bubble fraction")
a1.set_title(f"bubble, {p} equal stages: (p-1)/p and (p-1)/(m+p-1)"); a1.grid(True, alpha=0.3)
a1.legend(fontsize=7)
a2.set_xscale("log", base=2); a2.set_xlabel("microbatches m"); a2.set_ylabel("peak stash on stage 0 (KiB)")
a2.set_title("peak stashed activations, stage 0"); a2.grid(True, alpha=0.3); a2.legend(fontsize=7)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
"""


def pipeline(a: argparse.Namespace) -> int:
    """run_07_pipeline --sweep (the student's build in a student repository, else the reference)."""
    solutions = not is_release()
    build_dir = build.ensure_built("default", solutions, ["run_07_pipeline"])
    exe = build_dir / "bin" / "run_07_pipeline"
    if not exe.is_file():
        raise DistlabError(f"{rel(exe)} does not exist yet: the 07_pipeline program is needed")
    args = list(a.args)
    if args and args[0] == "--":
        args = args[1:]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "pipeline.csv"
        cmd = [str(exe), "--sweep", "--csv", str(data), *args]
        print("$ " + " ".join(cmd), flush=True)
        r = subprocess.run(cmd)
        if r.returncode != 0 or not data.is_file():
            raise DistlabError(f"run_07_pipeline --sweep failed (status {r.returncode}; its message is above)")
        if not a.plot:
            return 0
        png = Path(a.plot).resolve()
        kept = png.with_suffix(".csv")
        shutil.copyfile(data, kept)
        py = deps.matplotlib_python()
        if not py:
            print("matplotlib is not installed, so no plot (sudo apt-get install -y python3-matplotlib); "
                  f"the table is above, the data in {kept}")
            return 0
        p = subprocess.run([py, "-c", PIPELINE_PLOT_SCRIPT, str(data), str(png)], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"matplotlib failed: {p.stderr[-1000:]}")
            return 1
        print(f"plot: {png} (data: {kept})")
    return 0


def main(a: argparse.Namespace) -> int:
    if a.what == "pipeline":
        return pipeline(a)
    if a.plot:
        return plot(Path(a.plot).resolve())
    deps.ensure()
    build_dir = build.ensure_built("default", False, ["distlab_dist"])
    known = cmake.targets(build_dir)
    if "bench_collectives" not in known:
        raise DistlabError("bench_collectives is not part of this kit's build yet (bench/CMakeLists.txt); "
                           "nothing to run")
    args = list(a.args)
    if args and args[0] == "--":
        args = args[1:]
    with_mpi = not a.no_mpi and "--mpi" not in args
    if with_mpi and ("bench_mpi_allreduce" not in known or not shutil.which("mpirun")):
        print("(no Open MPI comparison: Open MPI is not installed or bench_mpi_allreduce is not built; "
              "sudo apt-get install -y openmpi-bin libopenmpi-dev, then run this again)")
        with_mpi = False
    targets = ["bench_collectives"] + (["bench_mpi_allreduce"] if with_mpi else [])
    r = cmake.build(build_dir, targets, capture=False)
    if not r.ok:
        raise DistlabError("the benchmarks do not build (see above)")
    # bench_collectives runs bench_mpi_allreduce under mpirun itself (--mpi) for each world size,
    # with the same sizes, and prints the two side by side with the busbw ratio.
    cmd = [str(build_dir / "bin" / "bench_collectives"), *args] + (["--mpi"] if with_mpi else [])
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print("$ " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, env=env).returncode
    sys.stdout.flush()
    if rc != 0:
        raise DistlabError(f"bench_collectives failed with status {rc} (its message is above)")
    return 0
