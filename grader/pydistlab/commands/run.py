"""`./distlab run MODULE [--solutions] [-- program args]`: build and run a module's program."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from .. import manifest as mf, mpi
from ..errors import DistlabError
from . import build


def _help(exe: Path) -> str:
    """The program's --help text ("" when it does not answer)."""
    try:
        r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout + r.stderr


def main(a: argparse.Namespace) -> int:
    man = mf.load()
    module = mf.resolve_name(a.module, man.order)
    target = f"run_{module}"
    # The grader's build tree serves the program too (nothing compiled twice); only the NCCL
    # backend needs build/default, which builds it when CUDA and NCCL are found.
    nccl = (a.backend or "").lower() == "nccl"
    build_dir = build.ensure_built(a.preset, a.solutions, [target], shared=not nccl)
    exe = build_dir / "bin" / target
    if not exe.is_file():
        raise DistlabError(f"{exe} was not built: does {module} have a program (MAIN in its CMakeLists.txt)?")
    args = list(a.args)
    backend = (a.backend or "threads").lower()
    if backend != "threads" and "--backend" not in _help(exe):
        raise DistlabError(f"the {module} program runs in one process and uses no communication "
                           f"backend (it has no --backend flag): run it without --backend and -n "
                           f"(./distlab run {module})")
    if backend == "mpi":
        n = a.np or 2
        cmd, env = mpi.mpirun_command(n, [str(exe), "--backend", "mpi", *args], a.hostfile)
    else:
        if a.hostfile:
            raise DistlabError("--hostfile goes with --backend mpi")
        cmd, env = [str(exe)], dict(os.environ)
        if a.backend:
            cmd += ["--backend", backend]
        if a.np:
            cmd += ["--world-size", str(a.np)]
        cmd += args
    print("$ " + " ".join(cmd), flush=True)
    sys.stdout.flush()
    return subprocess.run(cmd, env=env).returncode
