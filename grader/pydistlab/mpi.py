"""Starting programs under Open MPI's mpirun (root and oversubscription handled)."""
from __future__ import annotations

import os
import shutil

from .errors import DistlabError
from .paths import nproc


def mpirun_command(n: int, program: list[str], hostfile: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The mpirun command line and environment for n ranks of program."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise DistlabError("mpirun not found: install Open MPI (sudo apt-get install -y openmpi-bin "
                           "libopenmpi-dev) or run ./distlab doctor")
    cmd = [mpirun, "-np", str(n)]
    if hostfile:
        cmd += ["--hostfile", hostfile]
    if hostfile is None and n > nproc():
        cmd += ["--oversubscribe"]
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd += ["--allow-run-as-root"]
    return cmd + program, env
