"""Whether the unprivileged test uids can reach a folder, and a root-owned place for the grading
workspaces when they cannot reach the kit's own build/ (a kit cloned under root's 0700 home).

Without namespaces a root grader compiles and runs submitted code as uid 61000+ (uid.py, jail.py),
which needs every folder above the clean copy searchable by others. Where the kit's build/ is not,
the workspaces move to SHARED_TOPS[0]/<hash of the kit's path>/grade (a root-owned folder made here,
never one somebody else made), so grades never depend on where the kit was cloned.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

#: Where relocated workspaces may live, in order of preference: /var/lib's children can be made only
#: by root; /var/tmp (world-writable, sticky) only when /var/lib cannot be written.
SHARED_TOPS = (Path("/var/lib/distlab"), Path("/var/tmp/distlab-root"))


def reachable(path: Path) -> bool:
    """Whether any user can search every existing folder from / down to path (a folder still to be
    made counts as searchable: mkdir makes 0755 under the usual umask)."""
    for p in [path, *path.parents]:
        try:
            if not os.stat(p).st_mode & stat.S_IXOTH:
                return False
        except FileNotFoundError:
            continue
        except OSError:
            return False
    return True


class Unsafe(Exception):
    """A folder that may not hold grading workspaces, and why."""


def _check_parent(p: Path) -> None:
    """p (an existing folder above the workspace) must be root's, searchable, and writable by
    nobody else unless sticky (/var/tmp): else another user could swap what lies below."""
    st = os.stat(p)
    if st.st_uid != 0:
        raise Unsafe(f"{p} is not owned by root")
    if not st.st_mode & stat.S_IXOTH:
        raise Unsafe(f"{p} is not searchable by other users")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise Unsafe(f"{p} is writable by other users")


def safe_dir(path: Path, mode: int = 0o711) -> Path:
    """Makes path (root-owned, `mode`: searchable, not listable) or takes it when it is already a
    root-owned folder that only root can write; refuses a symlink or a folder another user made."""
    for parent in reversed(path.parents):
        if parent.exists():
            _check_parent(parent)
        else:
            os.mkdir(parent, 0o755)
            os.chmod(parent, 0o755)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise Unsafe(f"{path} is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise Unsafe(f"{path} is not a folder")
    if st.st_uid != 0:
        raise Unsafe(f"{path} belongs to uid {st.st_uid}, not root (made by somebody else?)")
    os.chmod(path, mode)
    return path


def shared_home(kit: Path, tops: tuple[Path, ...] | None = None) -> tuple[Path | None, str]:
    """The root-owned folder for this kit checkout's workspaces (one per checkout, named by a hash
    of its path) under the first of tops (SHARED_TOPS) that is safe, made when missing; (None, why)
    when none is safe or writable."""
    key = hashlib.sha256(str(kit.resolve()).encode()).hexdigest()[:16]
    why: list[str] = []
    for top in tops or SHARED_TOPS:
        try:
            safe_dir(top)
            home = safe_dir(top / key)
            note = home / "KIT"
            if not note.is_file() or note.read_text(errors="replace") != f"{kit.resolve()}\n":
                note.write_text(f"{kit.resolve()}\n")   # which checkout these workspaces belong to
            prune(top, keep=home)
            return home, ""
        except (OSError, Unsafe) as e:
            why.append(f"{top}: {e}")
    return None, "; ".join(why)


def prune(top: Path, keep: Path | None = None) -> list[Path]:
    """Removes the workspaces of checkouts that no longer exist (their KIT file names a folder
    without a `distlab` script: a clone deleted, a self-test's temporary copy), but keep's;
    returns them."""
    gone = []
    for home in top.iterdir():
        note = home / "KIT"
        if home == keep or home.is_symlink() or not note.is_file() or note.is_symlink():
            continue
        kit = Path(note.read_text(errors="replace").strip())
        if kit.is_absolute() and not (kit / "distlab").exists():
            shutil.rmtree(home, ignore_errors=True)
            gone.append(home)
    return gone
