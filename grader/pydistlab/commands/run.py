"""`./distlab run MODULE [--solutions] [-- program args]`: build and run a module's program."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .. import deadlock, manifest as mf, mpi, unfinished
from ..errors import DistlabError
from ..paths import ROOT
from . import build

#: A line of the program's output about a function that still throws "not implemented" (a row
#: of its table, an error): said once, before the run, instead of once per row.
TODO_WORDS = "not implemented"


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
    todo = [] if a.solutions or module not in man.modules else \
        unfinished.function_names(unfinished.module_todos(ROOT, man.modules[module].owned))
    tags = deadlock.tag_names(ROOT / ("solutions" if a.solutions else "exercises") / module)
    advice = deadlock.load_advice().get(module, {})
    if not (todo or tags or advice):
        return subprocess.run(cmd, env=env).returncode
    if todo:
        print(f"not implemented yet in exercises/{module} ({len(todo)} of its functions still hold "
              f"their TODO): {', '.join(todo)}.\nThe program's lines about them are left out below.",
              flush=True)
    return run_collapsed(cmd, env, lambda line: deadlock.explain(line, tags, advice))


def run_collapsed(cmd: list[str], env: dict[str, str],
                  rewrite: Callable[[str], str] = lambda line: line) -> int:
    """Runs cmd, passing its output through line by line (a deadlock report with the module's tag
    names and advice: `rewrite`) except the lines that say "not implemented" (the list printed
    before the run names those functions once); ends with how many lines were left out. stderr
    joins stdout, so the order of the lines is kept."""
    if shutil.which("stdbuf"):
        cmd = ["stdbuf", "-oL", "-eL", *cmd]   # line by line through the pipe, as on a terminal
    left_out = 0
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            if TODO_WORDS in line:
                left_out += 1
                continue
            sys.stdout.write(rewrite(line.rstrip("\n")) + ("\n" if line.endswith("\n") else ""))
            sys.stdout.flush()
        rc = proc.wait()
    if left_out:
        print(f"({left_out} line{'s' if left_out != 1 else ''} about unfinished functions left out)")
    return rc
