"""Resource limits of test processes and of the compiles of submitted files, and which limit a
failed test broke."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

#: The uid (and gid) test processes run as when the grader is root; one per parallel worker, so
#: the process limit (counted per user) of one test never starves another.
TEST_UID_BASE = 61000
TMP_SIZE_MB = 256              # the private /tmp of a test process (a tmpfs)
#: Limits of the build step that compiles a submission's files, as a whole (prlimit on ninja).
BUILD_MEMORY_MB = 8192
BUILD_FILE_SIZE_MB = 1024
#: Limits of each compiler process that reads a submission's file (compile_guard.py): wall clock
#: and CPU seconds (DISTLAB_COMPILE_LIMIT_S overrides both), address space, and the size of a file
#: it writes (an object file: a 900 MiB `.skip` is refused here, not copied into every program).
COMPILE_LIMIT_S = 120
COMPILE_MEMORY_MB = BUILD_MEMORY_MB
OBJECT_SIZE_MB = 64
#: Limits of each link of the kit's programs with a submission's objects.
LINK_LIMIT_S = 300
LINK_MEMORY_MB = BUILD_MEMORY_MB
PROGRAM_SIZE_MB = 1024
XML_CAP = 4 * 1024 * 1024      # bytes of gtest report read back


@dataclass(frozen=True)
class Limits:
    """Resource limits of one test process (the manifest's memory_limit_mb, process_limit,
    file_size_limit_mb, cpu_limit_s; 0 = no limit)."""
    memory_mb: int
    processes: int
    file_size_mb: int
    cpu_s: int

    @staticmethod
    def size(mb: int) -> str:
        return f"{mb // 1024} GiB" if mb % 1024 == 0 else f"{mb} MiB"




def tasks_of(uid: int) -> int:
    count = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if d.stat().st_uid == uid:
                count += sum(1 for _ in (d / "task").iterdir())
        except OSError:
            continue
    return count


def limit_reason(rc: int | None, output: str, limits: Limits | None, memory_applied: bool,
                 network_off: bool = False) -> str:
    """The limit a failed test process broke ("" when none can be told)."""
    if limits is None:
        return ""
    if network_off and re.search(r"Network is unreachable|Connection refused|Temporary failure in name "
                                 r"resolution|Name or service not known", output):
        return "no network in the sandbox"
    if rc is not None and rc < 0:
        sig = -rc
        if sig == signal.SIGXCPU and limits.cpu_s:
            return f"CPU time limit {limits.cpu_s} s exceeded"
        if sig == signal.SIGXFSZ and limits.file_size_mb:
            return f"file size limit {Limits.size(limits.file_size_mb)} exceeded"
    if memory_applied and limits.memory_mb and re.search(
            r"std::bad_alloc|Cannot allocate memory|out of memory|failed to allocate", output):
        return f"memory limit {Limits.size(limits.memory_mb)} exceeded"
    if limits.processes and re.search(r"Resource temporarily unavailable|Cannot fork|fork: ", output):
        return f"process limit {limits.processes} reached (a fork or a thread could not start)"
    return ""



def build_limits(untrusted: bool) -> list[str]:
    if not untrusted or not shutil.which("prlimit"):
        return []
    return ["prlimit", f"--as={BUILD_MEMORY_MB * 1024 * 1024}", f"--fsize={BUILD_FILE_SIZE_MB * 1024 * 1024}",
            "--core=0"]



def compile_limit_s() -> int:
    value = os.environ.get("DISTLAB_COMPILE_LIMIT_S", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else COMPILE_LIMIT_S


def guard_launcher(src: Path) -> dict[str, str]:
    """The CMake cache entries that run every compile and link of a grading tree through
    compile_guard.py (which only limits them when the build step sets DISTLAB_GUARD)."""
    guard = src / "grader" / "pydistlab" / "sandbox" / "compile_guard.py"
    if not guard.is_file():
        return {}
    python = "/usr/bin/python3" if Path("/usr/bin/python3").is_file() else sys.executable
    run = f"{python};-I;-S;{guard}"
    return {"CMAKE_CXX_COMPILER_LAUNCHER": f"{run};compile", "CMAKE_CXX_LINKER_LAUNCHER": f"{run};link"}


def guard_prefix(untrusted: bool) -> list[str]:
    """What a build step's command starts with so that compile_guard.py limits each compile of a
    submitted file (untrusted) or each link of the kit's programs with its objects."""
    if untrusted:
        limits = {"compile": [compile_limit_s(), compile_limit_s(), COMPILE_MEMORY_MB, OBJECT_SIZE_MB]}
    else:
        limits = {"link": [LINK_LIMIT_S, LINK_LIMIT_S, LINK_MEMORY_MB, PROGRAM_SIZE_MB]}
    return ["env", "DISTLAB_GUARD=" + json.dumps(limits, separators=(",", ":"))]
