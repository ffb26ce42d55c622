"""Without namespaces, as root: an unprivileged uid compiles the submission's files."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import DistlabError
from .bwrap import BuildPlan
from .header_rule import HEADER_SUFFIXES
from .limits import TEST_UID_BASE, build_limits, guard_prefix
from .reach import reachable
from .status import Status


def build_uid(plan: BuildPlan, status: Status) -> int | None:
    """The uid the submission's own files are compiled as when bubblewrap cannot run: the first
    test uid when the grader is root. None (the grader's own rights) only where status allows it
    (not root: a student grading their own checkout; own_rights: see probe.admit()); a root grader
    whose tree that uid cannot reach refuses (fail closed) instead of compiling as root."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    if not (reachable(plan.src) and reachable(plan.build)):
        if status.own_rights:
            return None
        raise DistlabError(f"the unprivileged uid {TEST_UID_BASE} cannot reach {plan.src} (a folder "
                           f"above it is not searchable by others), so the submission's files are not "
                           f"compiled: {UNREACHABLE_FIX}")
    return TEST_UID_BASE


#: What to do when the test uids cannot reach the grading tree.
UNREACHABLE_FIX = ("clone the kit under a folder every user can search (not a 0700 home), let root "
                   "write /var/lib/distlab (the grader then keeps its workspaces there), make "
                   "bubblewrap work (install it, allow user namespaces), or pass --sandbox off to "
                   "grade with root's rights knowingly")


def uid_prefix(uid: int) -> list[str]:
    """The compile step's command prefix as uid (with compile_guard.py's per-compile limits)."""
    return [*build_limits(True), "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
            *guard_prefix(True)]


def link_prefix() -> list[str]:
    """The prefix of the step that builds the kit's parts and links them with the submission's
    objects, without bubblewrap (compile_guard.py's per-link limits)."""
    return guard_prefix(False)



def lock_away(plan: BuildPlan, kit: Path, hide_sources: tuple[str, ...]) -> None:
    """Without namespaces, as root: makes what the submission must not read unreadable to the test
    and build uids: the kit's solutions/ and grader/hidden/, the tree's grader/hidden/ and the
    objects built from hidden and reference sources (0700), the test programs execute-only."""
    for p in [kit / "solutions", kit / "grader" / "hidden",
              *plan.object_dirs_of(("grader/hidden/",) + hide_sources, whole=True)]:
        if p.is_dir():
            os.chmod(p, 0o700)
    hidden = plan.src / "grader" / "hidden"
    if hidden.is_dir():
        # Searchable but not listable, the sources unreadable; ninja may still stat CMakeLists.txt.
        for root, _, files in os.walk(hidden):
            os.chmod(root, 0o711)
            for name in files:
                os.chmod(Path(root, name), 0o644 if name == "CMakeLists.txt" else 0o600)
    for prefix in hide_sources:
        folder = plan.src / prefix
        for p in folder.rglob("*") if folder.is_dir() else []:
            if p.is_file() and p.suffix not in HEADER_SUFFIXES and p.name != "CMakeLists.txt":
                os.chmod(p, 0o600)
    bin_dir = plan.build / "bin"
    if bin_dir.is_dir():
        os.chmod(bin_dir, 0o711)
        for p in bin_dir.iterdir():
            if p.is_file():
                os.chmod(p, 0o711)


class LentTo:
    """Lends the build folder's top files and the given object folders to uid for one build step
    (ninja writes .ninja_log and .ninja_deps, the compiler its objects), then takes them back."""

    def __init__(self, build: Path, folders: list[Path], uid: int, sources: list[Path]) -> None:
        self.build, self.folders, self.uid, self.sources = build, folders, uid, sources

    def _open(self) -> None:
        """What an earlier lock_away() closed but this step needs: the submission's own sources
        (a file equal to a reference kept its mode) and the folders down to its objects."""
        for p in self.sources:
            if p.is_file():
                os.chmod(p, 0o644)
        for d in self.folders:
            for parent in [d, *d.parents]:
                if parent == self.build or self.build not in parent.parents:
                    break
                if parent.is_dir():
                    os.chmod(parent, 0o755)

    def _chown(self, uid: int) -> None:
        os.chown(self.build, uid, uid)
        for p in self.build.iterdir():
            if p.is_file() and p.name.startswith(".ninja"):
                os.chown(p, uid, uid)
        for d in self.folders:
            if d.is_dir():
                for root, dirs, files in os.walk(d):
                    for name in [*dirs, *files]:
                        os.lchown(Path(root, name), uid, uid)
                os.chown(d, uid, uid)

    def __enter__(self) -> LentTo:
        self._open()
        self._chown(self.uid)
        return self

    def __exit__(self, *exc: object) -> None:
        self._chown(0)
        for p in self.build.iterdir():   # files ninja created meanwhile
            if p.is_file() and p.stat().st_uid == self.uid:
                os.chown(p, 0, 0)
