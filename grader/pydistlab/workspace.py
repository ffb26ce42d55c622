"""The grader's workspaces: clean copies of the kit under build/grade/<id>/ and their builds.

build/grade is grade_root(): the kit's own build/grade, except when the grader is root and the
unprivileged test uids cannot reach the kit (a clone under root's 0700 home): then the workspaces
live in a root-owned folder they can reach (sandbox/reach.py) and build/grade is a link to it.

One workspace is build/grade/<id>/ with
  src/          the kit's files (solutions/, the self-tests, the mutants and, unless asked, the
                hidden tests left out) with an overlay on top: the files under grade, or the reference;
  build/        its plain build, configured with BASE_CACHE;
  build-tsan/   its ThreadSanitizer build, configured with TSAN_CACHE;
  .lock         held while one command uses the workspace (see open_tree).
Copies are reused: mirroring rewrites only the files whose content changed, so ninja rebuilds only
what an edit touched. `grade`, `golden` and `test` all work through open_tree(); the solutions
workspace is shared by `grade --solutions`, `golden` and the self-test.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import cmake, manifest as mf, tree
from .paths import BUILD, LEFT_OUT, ROOT, SOLUTIONS, rel
from .sandbox import reach
from .sandbox.limits import guard_launcher

ERROR_LINES = 25          # compiler error lines kept in a "not gradable" report
ERROR_CHARS = 3000

BASE_CACHE = {
    "CMAKE_BUILD_TYPE": "Release",
    "DISTLAB_ARCH": "portable",   # the same float32 rounding on every x86-64 CPU (docs/build.md)
    "DISTLAB_IMPL": "exercises",
    "DISTLAB_BUILD_TESTS": "ON",
    "DISTLAB_WITH_NCCL": "OFF",
}
#: `grade --sanitize address`: AddressSanitizer + UndefinedBehaviorSanitizer, optimised a little
#: (the tests stay fast) with debug information (file:line in every frame).
ASAN_CACHE = dict(BASE_CACHE, CMAKE_BUILD_TYPE="RelWithDebInfo", DISTLAB_SANITIZE="address,undefined")
ASAN_ENV = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:halt_on_error=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
TSAN_CACHE = dict(BASE_CACHE, CMAKE_BUILD_TYPE="RelWithDebInfo", DISTLAB_SANITIZE="thread",
                  DISTLAB_ARCH="portable")


class Progress:
    """Prints "[  12.3s] message" lines (nothing when quiet). status() is a passing message (a
    step of the build, a test that finished): on a terminal it overwrites itself on one line,
    elsewhere (a log, a pipe) it is left out, so the output stays short; DISTLAB_VERBOSE=1 prints
    every one as a line."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.monotonic()
        self.tty = sys.stdout.isatty()
        self.verbose = os.environ.get("DISTLAB_VERBOSE", "") not in ("", "0")
        self.pending = False

    def _clear(self) -> None:
        if self.pending:
            sys.stdout.write("\r\033[K")
            self.pending = False

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            self._clear()
            print(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)

    def status(self, msg: str) -> None:
        if self.quiet:
            return
        if self.verbose:
            self(msg)
        elif self.tty:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self._clear()
            sys.stdout.write(f"[{time.monotonic() - self.t0:6.1f}s] {msg.strip()}"[:width])
            sys.stdout.flush()
            self.pending = True

    def done(self) -> None:
        """Ends a passing message (before other output)."""
        self._clear()
        sys.stdout.flush()


@dataclass
class TreeBuild:
    src: Path
    build: Path
    tsan_build: Path

    def first_errors(self, output: str) -> str:
        """first_errors() of a build log of this workspace, the students' own files first."""
        return first_errors(output, str(self.src) + "/", prefer=owned_files())


# ---- the clean copy -------------------------------------------------------------------------

def solution_overlay(modules: list[str], man: mf.Manifest) -> dict[str, bytes]:
    """The reference implementation of each module: every file of solutions/<module>/ put at
    exercises/<module>/, plus owned files outside exercises/ as the kit has them."""
    overlay: dict[str, bytes] = {}
    for name in modules:
        folder = SOLUTIONS / name
        if folder.is_dir():
            for f in sorted(folder.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    overlay[f"exercises/{name}/{f.relative_to(folder).as_posix()}"] = f.read_bytes()
        mod = man.modules.get(name)
        for owned in (mod.owned if mod else []):
            if not owned.startswith("exercises/") and (ROOT / owned).is_file():
                overlay[owned] = (ROOT / owned).read_bytes()
    return overlay


def _tree_files(hidden: bool) -> dict[str, Path | bytes]:
    files: dict[str, Path | bytes] = {}
    for name in tree.kit_files(ROOT):
        if name.startswith("grader/hidden/"):
            if not hidden:
                continue
        elif name.startswith(LEFT_OUT):   # what students do not get: nothing grading needs
            continue
        files[name] = ROOT / name
    return files


_grade_root: list[Path] = []


def grade_root() -> Path:
    """Where the workspaces live: build/grade, or (root, kit out of the test uids' reach) the
    root-owned folder reach.shared_home() names, with build/grade a link to it. When that folder
    cannot be made, build/grade (the sandbox then refuses to grade submissions: probe.admit())."""
    if _grade_root:
        return _grade_root[0]
    base = BUILD / "grade"
    if os.geteuid() != 0 or (not base.is_symlink() and reach.reachable(base)):
        _grade_root.append(base)
        return base
    home, why = reach.shared_home(ROOT)
    if home is None:
        print(f"distlab: the grading workspaces stay in {base}, out of reach of the test uids; "
              f"no shared folder could be made ({why})", file=sys.stderr)
        _grade_root.append(base)
        return base
    target = home / "grade"
    target.mkdir(mode=0o711, exist_ok=True)
    if base.is_symlink() and Path(os.readlink(base)) != target:
        base.unlink()
    if not base.exists() and not base.is_symlink():
        base.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, base)
    elif not base.is_symlink():
        print(f"distlab: the grading workspaces are in {target} (the test uids cannot reach this "
              f"kit); {base} is from before and can be removed", file=sys.stderr)
    _grade_root.append(target)
    return target


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on path (waiting, with a message, while another command holds it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another ./distlab grade that uses {rel(path.parent)}", flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


@contextmanager
def open_tree(tree_id: str, overlay: dict[str, bytes], hidden: bool, say: Progress) -> Iterator[TreeBuild]:
    """Locks the workspace build/grade/<tree_id>, makes its src/ the kit plus overlay, and yields
    it; the lock is held until the with-block ends, so keep building and testing inside it."""
    base = grade_root() / tree_id
    with _locked(base / ".lock"):
        src = base / "src"
        files = _tree_files(hidden)
        files.update(overlay)
        cmake_lists = _cmake_lists(src)
        written, removed = tree.mirror(files, src)
        say.status(f"clean copy {rel(src)}: {written} files written, {removed} removed")
        if cmake_lists and _cmake_lists(src) != cmake_lists:
            # A folder with a CMakeLists.txt came or went (grader/hidden/ with and without
            # --hidden): CMake must look again, and ninja re-runs it only for a changed file.
            os.utime(src / "CMakeLists.txt")
        yield TreeBuild(src, base / "build", base / "build-tsan")


def _cmake_lists(src: Path) -> set[str]:
    """The CMakeLists.txt files under src (relative paths)."""
    return {str(Path(d, "CMakeLists.txt").relative_to(src)) for d, _, names in os.walk(src)
            if "CMakeLists.txt" in names}


@contextmanager
def solutions_tree(say: Progress, hidden: bool = True) -> Iterator[TreeBuild]:
    """open_tree() of the solutions workspace: every module is the reference implementation."""
    man = mf.load()
    with open_tree("solutions", solution_overlay(man.order, man), hidden, say) as tb:
        yield tb


# ---- building -------------------------------------------------------------------------------

def configure(tb: TreeBuild, build_dir: Path, cache: dict[str, str], say: Progress) -> None:
    """Configures build_dir (one of tb's builds) from tb.src once; later builds let ninja re-run
    CMake when a CMakeLists.txt changes. A tree whose cache differs from `cache` (another
    DISTLAB_ARCH, say) is configured again."""
    if not cmake.configured(build_dir):
        say(f"configuring {rel(build_dir)}")
    cmake.configure(tb.src, build_dir, dict(cache, **guard_launcher(tb.src)), quiet=True)


def owned_files() -> list[str]:
    """Every file a student owns (manifest), as paths relative to the kit's root."""
    return [o for m in mf.load().modules.values() for o in m.owned]


def own_warnings(output: str, strip: str, owned: list[str]) -> list[str]:
    """The compiler's warning lines of a build log that point into the student's own files (the
    kit's code and third-party headers are the kit's business, not the student's)."""
    return [line.replace(strip, "") for line in output.splitlines()
            if "warning:" in line and line.replace(strip, "").startswith(tuple(owned))]


def first_errors(output: str, strip: str, prefer: list[str] | None = None) -> str:
    """The first compiler errors of a build log, with the clean copy's path removed. prefer: file
    paths (the student's own): the first error located in one of them comes first."""
    text = output.replace(strip, "")
    lines = text.splitlines()
    keep: list[str] = []
    is_error = re.compile(r"\berror\b|undefined reference")
    start = None
    if prefer:
        start = next((i for i, line in enumerate(lines)
                      if line.startswith(tuple(prefer)) and is_error.search(line)), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if is_error.search(line)), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if "FAILED:" in line),
                     max(0, len(lines) - ERROR_LINES))
    # Include the "In file included from / In function" lines right above the first error.
    while start > 0 and re.match(r"^(In file included|\s+from |.*In (member )?function|.*: In )",
                                 lines[start - 1]):
        start -= 1
    for line in lines[start:]:
        if line.startswith("[") and "/" in line and "Building" in line:
            continue
        if line.startswith("ninja: build stopped"):
            break
        keep.append(line)
        if len(keep) >= ERROR_LINES:
            break
    out = "\n".join(keep)
    return out[:ERROR_CHARS] + ("\n... (more errors)" if len(out) > ERROR_CHARS else "")
