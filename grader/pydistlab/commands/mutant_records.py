"""Which mutants need grading again: each mutant's fingerprint, and the self-test's record of the
mutants it caught (commands/mutants.py grades them; record_caught() there writes the record)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from .. import manifest as mf, tree as kit_tree
from ..paths import ROOT

PATCH = "mutant.patch"


# The record of caught mutants (grader/mutants/caught.json, committed with the kit): a mutant
# caught before is graded again only when something its grade depends on has changed since. What
# it depends on is taken broadly: every file of the kit except the other modules' own folders
# (of its prerequisites, the sources built into it count: their solutions/ and exercises/ folders;
# their tests, hidden tests, reference outputs and hints are never built or run when this module
# is graded), the documentation, the promise ledgers, the grader's unittests and its commands
# other than this one, and the NCCL backend's files (NCCL_ONLY); plus
# the compiler and CMake versions and the DISTLAB_* and compiler variables of the environment. So
# an edit to one module's reference regrades that module's mutants and those of the modules built
# on it, an edit to its tests or mutants regrades its own, an edit to libdist/ or the grading code
# regrades them all. The record is committed so that CI on a fresh clone grades only the
# mutants whose inputs changed since the last local self-test, plus a spot check (SPOT_CHECK).
CAUGHT = ROOT / "grader" / "mutants" / "caught.json"
MODULE_FOLDERS = ("solutions", "exercises", "grader/hidden", "grader/tests", "grader/golden", "grader/mutants")
# The NCCL backend and its tests: a grade's trees are configured with DISTLAB_WITH_NCCL=OFF
# (workspace.BASE_CACHE), so these files are never compiled when a mutant is graded.
NCCL_ONLY = ("libdist/nccl/", "libdist/tests/test_nccl.cpp", "libdist/tests/test_device_cuda.cpp",
             "grader/tests/10_streams/test_streams_nccl.cpp")
NOT_DEPENDED_ON = ("docs/", "grader/selftest/", ".ci/", "grader/pydistlab/commands/", *NCCL_ONLY)
LEDGER = "promises.toml"  # grader/hidden/<module>/: read by the self-test's ledger check, never by a grade
PREREQUISITE_FOLDERS = ("solutions/", "exercises/")  # what a prerequisite adds to a module's build
ENV_KEYS = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS")


def _owner(path: str, modules: set[str]) -> str:
    """The module whose own folder holds path ("" for the kit's shared files)."""
    for folder in MODULE_FOLDERS:
        if path.startswith(folder + "/"):
            head = path[len(folder) + 1:].split("/")[0]
            return head if head in modules else ""
    if path.startswith("grader/hints/") and path.endswith(".toml"):
        name = path[len("grader/hints/"):-len(".toml")]
        return name if name in modules else ""
    return ""


def _toolchain() -> str:
    """The tools and settings a grade's verdict could depend on, as text."""
    parts = []
    for cmd in (["c++", "--version"], ["cmake", "--version"]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            parts.append(r.stdout.splitlines()[0] if r.stdout else "")
        except (OSError, subprocess.TimeoutExpired):
            parts.append(f"{cmd[0]}: none")
    parts += [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("DISTLAB_") or k in ENV_KEYS]
    return "\n".join(parts)


def fingerprints(found: list[tuple[str, Path]], root: Path = ROOT) -> dict[str, str]:
    """"module/mutant" -> a hash of everything the mutant's grade depends on (see CAUGHT above), for
    the kit at root."""
    man = mf.load()
    names = set(man.modules)
    digest: dict[str, str] = {}
    shared: list[str] = []
    owned: dict[str, list[str]] = {}
    for path in kit_tree.kit_files(root):
        if (path.startswith(NOT_DEPENDED_ON) and path != "grader/pydistlab/commands/mutants.py") \
                or (path.endswith(".md") and "/" not in path) \
                or (path.startswith("grader/mutants/") and not path.endswith("/" + PATCH)) \
                or path.endswith("/" + LEDGER):
            continue
        try:
            digest[path] = hashlib.sha256((root / path).read_bytes()).hexdigest()
        except OSError:
            continue
        who = _owner(path, names)
        (owned.setdefault(who, []) if who else shared).append(path)
    base = hashlib.sha256(_toolchain().encode())
    for path in shared:
        base.update(f"{path}\0{digest[path]}\n".encode())
    out: dict[str, str] = {}
    for name in dict.fromkeys(m for m, _ in found):
        h = base.copy()
        for m in [*man.prerequisites_closure(name), name]:
            for path in owned.get(m, []):
                if path.startswith("grader/mutants/"):
                    continue
                if m != name and not path.startswith(PREREQUISITE_FOLDERS):
                    continue  # a prerequisite's tests, hidden tests, golden files and hints
                h.update(f"{path}\0{digest[path]}\n".encode())
        for m, folder in found:
            if m == name:
                mine = h.copy()
                mine.update((folder / PATCH).read_bytes() if (folder / PATCH).is_file() else b"")
                out[f"{m}/{folder.name}"] = mine.hexdigest()
    return out


def caught_before() -> dict[str, dict[str, str]]:
    """"module/mutant" -> {"fingerprint", "caught_by", "when"} of its last catch ({} when none)."""
    try:
        data = json.loads(CAUGHT.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}
