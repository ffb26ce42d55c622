"""`./distlab bench collectives [--plot FILE.png] [--no-mpi] [ARGS for bench_collectives]`.

1. builds and runs bench_collectives (built-in collectives on the threads backend; its flags:
   --world-sizes, --min-bytes, --max-bytes, --ops, --iters, --csv FILE) and shows its table;
2. when Open MPI is installed, runs bench_mpi_allreduce under mpirun for n = 2, 4, 8 (the same
   size flags) and prints both all-reduce results side by side with the ratio of bus bandwidths;
3. with --plot FILE.png: simulated time vs message size per algorithm, from
   run_03_collectives --csv (matplotlib when importable; otherwise the table).
"""
from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import build, cmake, deps, mpi
from .errors import DistlabError
from .paths import is_release, rel

SIZE_FLAGS = ("--min-bytes", "--max-bytes", "--iters", "--warmup")


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


def _allreduce_rows(rows: list[dict[str, str]]) -> dict[tuple[int, int], float]:
    """(world size, bytes) -> busbw GB/s for the all_reduce rows of a bench CSV."""
    out: dict[tuple[int, int], float] = {}
    for r in rows:
        op = (_col(r, "op", "collective", "name") or "all_reduce").lower().replace("-", "_")
        if op not in ("all_reduce", "allreduce", "mpi_allreduce"):
            continue
        try:
            n = int(float(_col(r, "world_size", "ranks", "n", "np") or "0"))
            size = int(float(_col(r, "bytes", "size") or "0"))
            bw = float(_col(r, "busbw_gbps", "busbw", "bus_bw") or "nan")
        except ValueError:
            continue
        out[(n, size)] = bw
    return out


def _split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """(all args for bench_collectives, the size/iteration args that also suit the MPI bench)."""
    if args and args[0] == "--":
        args = args[1:]
    shared: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        key = a.split("=", 1)[0]
        if key in SIZE_FLAGS:
            if "=" in a:
                shared.append(a)
            elif i + 1 < len(args):
                shared += [a, args[i + 1]]
                i += 1
        i += 1
    return args, shared


def _fmt_bytes(b: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B"


def compare_table(threads: dict[tuple[int, int], float], mpi_: dict[tuple[int, int], float]) -> list[str]:
    keys = sorted(set(threads) & set(mpi_))
    if not keys:
        return []
    lines = ["", "all_reduce bus bandwidth, threads backend vs Open MPI MPI_Allreduce (same machine, one run)",
             f"{'ranks':>5}  {'size':>10}  {'threads GB/s':>12}  {'MPI GB/s':>9}  {'ratio':>6}"]
    for n, size in keys:
        t, m = threads[(n, size)], mpi_[(n, size)]
        ratio = f"{t / m:.2f}x" if m > 0 else "-"
        lines.append(f"{n:>5}  {_fmt_bytes(size):>10}  {t:>12.2f}  {m:>9.2f}  {ratio:>6}")
    return lines


PLOT_SCRIPT = r"""
import csv, sys, collections
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
by = collections.defaultdict(lambda: collections.defaultdict(list))
sizes = sorted({int(r["world_size"]) for r in rows})
for r in rows:
    label = r["algorithm"] + ("" if len(sizes) == 1 else f" (p={r['world_size']})")
    by[r["collective"]][label].append((int(r["bytes"]), float(r["sim_time_s"])))
n = len(by)
cols = min(3, n)
rows_ = (n + cols - 1) // cols
fig, axes = plt.subplots(rows_, cols, figsize=(5 * cols, 3.8 * rows_), squeeze=False)
for ax, (coll, lines) in zip(axes.flat, sorted(by.items())):
    for label, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] * 1e6 for p in pts], marker="o", label=label)
    ax.set_xscale("log", base=2); ax.set_yscale("log")
    ax.set_title(coll); ax.set_xlabel("message size (bytes)"); ax.set_ylabel("simulated time (us)")
    ax.grid(True, which="both", alpha=0.3); ax.legend(fontsize=7)
for ax in list(axes.flat)[n:]:
    ax.axis("off")
fig.suptitle("simulated time vs size per algorithm (alpha-beta model)")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
"""


def plot(png: Path) -> int:
    solutions = not is_release()
    build_dir = build.ensure_built("default", solutions, [])
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


def main(a: argparse.Namespace) -> int:
    if a.plot:
        return plot(Path(a.plot).resolve())
    deps.ensure()
    build_dir = build.ensure_built("default", False, ["distlab_dist"])
    known = cmake.targets(build_dir)
    if "bench_collectives" not in known:
        raise DistlabError("bench_collectives is not part of this kit's build yet (bench/CMakeLists.txt); "
                           "nothing to run")
    r = cmake.build(build_dir, ["bench_collectives"], capture=False)
    if not r.ok:
        raise DistlabError("bench_collectives does not build (see above)")
    args, shared = _split_args(list(a.args))
    with tempfile.TemporaryDirectory(prefix="distlab-bench-") as tmp:
        tcsv = Path(tmp) / "threads.csv"
        user_csv = next((args[i + 1] for i, x in enumerate(args[:-1]) if x == "--csv"), None)
        cmd = [str(build_dir / "bin" / "bench_collectives"), *args]
        if user_csv is None:
            cmd += ["--csv", str(tcsv)]
        else:
            tcsv = Path(user_csv)
        print("$ " + " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            raise DistlabError(f"bench_collectives failed with status {rc}")
        threads = _allreduce_rows(_read(tcsv))
        mpi_rows: dict[tuple[int, int], float] = {}
        if a.no_mpi:
            pass
        elif "bench_mpi_allreduce" not in known or not shutil.which("mpirun"):
            print("\n(no Open MPI comparison: Open MPI is not installed or bench_mpi_allreduce is not built; "
                  "sudo apt-get install -y openmpi-bin libopenmpi-dev)")
        else:
            r = cmake.build(build_dir, ["bench_mpi_allreduce"], capture=False)
            if not r.ok:
                raise DistlabError("bench_mpi_allreduce does not build (see above)")
            for n in [int(x) for x in a.mpi_ranks.split(",") if x.strip()]:
                mcsv = Path(tmp) / f"mpi{n}.csv"
                cmd, env = mpi.mpirun_command(n, [str(build_dir / "bin" / "bench_mpi_allreduce"), *shared,
                                                  "--csv", str(mcsv)])
                print(f"\n$ {' '.join(cmd)}", flush=True)
                rc = subprocess.run(cmd, env=env).returncode
                if rc != 0:
                    print(f"(mpirun -np {n} failed with status {rc}; skipped)")
                    continue
                mpi_rows.update(_allreduce_rows(_read(mcsv)))
        table = compare_table(threads, mpi_rows)
        if table:
            print("\n".join(table))
        elif mpi_rows:
            print("\n(no all_reduce sizes in common between the two runs to compare)")
    sys.stdout.flush()
    return 0
