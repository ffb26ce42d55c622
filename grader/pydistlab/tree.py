"""Clean copies of the kit: mirror the kit's files into a folder, touching only what changed."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .paths import ROOT

#: Never copied into a clean copy or a release.
SKIP_DIRS = {".git", "build", "out", "__pycache__", ".cache", ".pytest_cache", ".vscode", ".idea"}


def kit_files(root: Path = ROOT) -> list[str]:
    """The kit's files, relative to root: tracked plus untracked-but-not-ignored when root is a git
    checkout (so a file just created is included and build outputs are not), else a plain walk."""
    if (root / ".git").exists() and shutil.which("git"):
        r = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True)
        if r.returncode == 0:
            names = [n for n in r.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
            return sorted(n for n in names if (root / n).is_file() and not (root / n).is_symlink()
                          and not set(Path(n).parts[:-1]) & SKIP_DIRS)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for f in filenames:
            p = Path(dirpath) / f
            if f.endswith(".pyc") or p.is_symlink():
                continue
            found.append(str(p.relative_to(root)))
    return sorted(found)


def write_if_changed(target: Path, data: bytes, mode: int | None = None) -> bool:
    """Writes data unless target already holds exactly it (keeps mtimes so ninja rebuilds little).
    A write gets a fresh mtime, so ninja sees the change even when the source file is older."""
    try:
        if target.is_file() and not target.is_symlink() and target.stat().st_size == len(data) \
                and target.read_bytes() == data:
            return False
    except OSError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.is_dir():
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
    tmp = target.with_name(target.name + ".distlab-tmp")
    tmp.write_bytes(data)
    if mode is not None:
        os.chmod(tmp, mode & 0o777)
    os.replace(tmp, target)
    return True


def mirror(files: dict[str, Path | bytes], dest: Path) -> tuple[int, int]:
    """Makes dest hold exactly `files` (relative path -> source file or content). Returns
    (written, removed)."""
    dest.mkdir(parents=True, exist_ok=True)
    written = 0
    for relpath, src in files.items():
        if isinstance(src, Path):
            data = src.read_bytes()
            mode = src.stat().st_mode
        else:
            data, mode = src, None
        if write_if_changed(dest / relpath, data, mode):
            written += 1
    removed = 0
    wanted = set(files)
    for dirpath, dirnames, filenames in os.walk(dest, topdown=False):
        for f in filenames:
            p = Path(dirpath) / f
            if str(p.relative_to(dest)) not in wanted:
                p.unlink()
                removed += 1
        for d in dirnames:
            p = Path(dirpath) / d
            if p.is_dir() and not p.is_symlink() and not any(p.iterdir()):
                p.rmdir()
    return written, removed
