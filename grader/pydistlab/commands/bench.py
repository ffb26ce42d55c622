"""`./distlab bench collectives [--plot FILE.png] [--no-mpi] [ARGS for bench_collectives]`.

1. builds and runs bench_collectives (built-in collectives on the threads backend; its flags:
   --world-sizes, --min-bytes, --max-bytes, --ops, --iters, --csv FILE) and shows its table;
2. when Open MPI is installed, adds --mpi: bench_collectives then runs bench_mpi_allreduce under
   mpirun for each world size (default 2, 4, 8), same sizes, and prints both all-reduce results
   side by side with the ratio of bus bandwidths (--no-mpi: threads only);
3. with --plot FILE.png: simulated time vs message size per algorithm, from
   run_03_collectives --csv, drawn by plot_collectives.py with matplotlib when an interpreter has it;
   otherwise the table.

`./distlab bench pipeline [--plot FILE.png] [ARGS for run_07_pipeline]`: run_07_pipeline --sweep
(bubble fraction and stage 0's peak stash vs the number of microbatches for the naive, GPipe and
1F1B schedules, equal stages, on the simulated clock, next to the formulas); with --plot, both
against m in one figure, drawn by plot_pipeline.py.

`./distlab bench ps [--plot FILE.png] [ARGS for run_08_parameter_server]`: run_08_parameter_server
--sweep --compare with 4 workers and a 4x straggler (one synchronous step's simulated time vs the
number of workers for one server, 2 and 4 servers and the ring all-reduce; test loss vs simulated
time for sync, async and ssp); with --plot, both in one figure, drawn by plot_ps.py.
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

from .. import cmake, deps
from ..errors import DistlabError
from ..paths import is_release, rel
from . import build


def _read(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


#: The plot program, run with an interpreter that has matplotlib (the CLI never imports it).
PLOT_PROGRAM = Path(__file__).with_name("plot_collectives.py")


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
        # Installed like the other packages (as root on Debian/Ubuntu) the first time a plot is asked.
        py = deps.matplotlib_python() if deps.ensure_optional("python3-matplotlib") else None
        if py:
            p = subprocess.run([py, str(PLOT_PROGRAM), str(data), str(png)], capture_output=True, text=True)
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


PIPELINE_PLOT_PROGRAM = Path(__file__).with_name("plot_pipeline.py")


def pipeline(a: argparse.Namespace) -> int:
    """run_07_pipeline --sweep (the student's build in a student repository, else the reference)."""
    return _program_plot(a, "07_pipeline", ["--sweep"], PIPELINE_PLOT_PROGRAM)


PS_PLOT_PROGRAM = Path(__file__).with_name("plot_ps.py")


def ps(a: argparse.Namespace) -> int:
    """run_08_parameter_server --sweep --compare with 4 workers and a 4x straggler."""
    return _program_plot(a, "08_parameter_server",
                         ["--world-size", "5", "--sweep", "--compare", "--straggler", "4"], PS_PLOT_PROGRAM)


FSDP_PLOT_PROGRAM = Path(__file__).with_name("plot_fsdp.py")


def fsdp(a: argparse.Namespace) -> int:
    """run_11_fsdp --sweep: peak memory per rank against dp, step time against the prefetch window."""
    return _program_plot(a, "11_fsdp", ["--sweep"], FSDP_PLOT_PROGRAM)


def _program_plot(a: argparse.Namespace, module: str, flags: list[str], plot_program: Path) -> int:
    """Runs the module's program with `flags` and --csv, then (--plot) plot_program on the data."""
    solutions = not is_release()
    target = f"run_{module}"
    build_dir = build.ensure_built("default", solutions, [target])
    exe = build_dir / "bin" / target
    if not exe.is_file():
        raise DistlabError(f"{rel(exe)} does not exist yet: the {module} program is needed")
    args = list(a.args)
    if args and args[0] == "--":
        args = args[1:]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / f"{module}.csv"
        cmd = [str(exe), *flags, "--csv", str(data), *args]
        print("$ " + " ".join(cmd), flush=True)
        r = subprocess.run(cmd)
        if r.returncode != 0 or not data.is_file():
            raise DistlabError(f"{target} {' '.join(flags)} failed (status {r.returncode}; its message is above)")
        if not a.plot:
            return 0
        png = Path(a.plot).resolve()
        kept = png.with_suffix(".csv")
        shutil.copyfile(data, kept)
        # Installed like the other packages (as root on Debian/Ubuntu) the first time a plot is asked.
        py = deps.matplotlib_python() if deps.ensure_optional("python3-matplotlib") else None
        if not py:
            print("matplotlib is not installed, so no plot (sudo apt-get install -y python3-matplotlib); "
                  f"the table is above, the data in {kept}")
            return 0
        p = subprocess.run([py, str(plot_program), str(data), str(png)], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"matplotlib failed: {p.stderr[-1000:]}")
            return 1
        print(f"plot: {png} (data: {kept})")
    return 0


def main(a: argparse.Namespace) -> int:
    if a.what == "pipeline":
        return pipeline(a)
    if a.what == "ps":
        return ps(a)
    if a.what == "fsdp":
        return fsdp(a)
    if a.plot:
        return plot(Path(a.plot).resolve())
    build_dir = build.ensure_built("default", False, ["distlab_dist"])
    known = cmake.targets(build_dir)
    if "bench_collectives" not in known:
        raise DistlabError("bench_collectives is not part of this kit's build yet (bench/CMakeLists.txt); "
                           "nothing to run")
    args = list(a.args)   # what follows `--` (cli.py took the `--` itself off)
    with_mpi = not a.no_mpi and "--mpi" not in args
    if with_mpi and ("bench_mpi_allreduce" not in known or not shutil.which("mpirun")):
        print("(no Open MPI comparison: Open MPI is not installed or bench_mpi_allreduce is not built; "
              "sudo apt-get install -y openmpi-bin libopenmpi-dev, then run this again)")
        with_mpi = False
    targets = ["bench_collectives"] + (["bench_mpi_allreduce"] if with_mpi else [])
    build.ensure_built("default", False, targets)
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
