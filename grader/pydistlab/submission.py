"""Reading a submission (a folder or a .zip) and picking out the files the student owns.

Only owned files are ever taken from a submission. Each owned path is looked up as:
  1. the same path (exercises/03_collectives/ring.cpp);
  2. the same path under one extra top folder (my-repo/exercises/03_collectives/ring.cpp);
  3. the bare file name, when no other owned file has that name (ring.cpp dropped in on its own).
Anything else in the submission is ignored.
"""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_FILE_BYTES = 4 * 1024 * 1024   # an owned source file larger than this is refused
MAX_FILES = 20000                  # entries looked at in a submission


@dataclass
class Submission:
    label: str
    files: dict[str, bytes] = field(default_factory=dict)   # owned path -> content
    found_as: dict[str, str] = field(default_factory=dict)  # owned path -> where it was found
    problems: list[str] = field(default_factory=list)       # for the report
    error: str = ""                                          # the whole submission was unreadable


def _clean(name: str) -> str | None:
    p = PurePosixPath(name.replace("\\", "/"))
    parts = [x for x in p.parts if x not in ("", ".")]
    if not parts or p.is_absolute() or ".." in parts or parts[0] == "__MACOSX":
        return None
    if any(x.startswith("._") for x in parts):
        return None
    return "/".join(parts)


class _Reader:
    def names(self) -> list[str]:
        raise NotImplementedError

    def size(self, name: str) -> int:
        raise NotImplementedError

    def read(self, name: str) -> bytes:
        raise NotImplementedError


class _DirReader(_Reader):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.index: dict[str, Path] = {}
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", "build", "__pycache__")]
            for f in filenames:
                p = Path(dirpath) / f
                if p.is_symlink() or not p.is_file():
                    continue
                name = _clean(str(p.relative_to(root)))
                if name:
                    self.index[name] = p
                if len(self.index) > MAX_FILES:
                    return

    def names(self) -> list[str]:
        return list(self.index)

    def size(self, name: str) -> int:
        return self.index[name].stat().st_size

    def read(self, name: str) -> bytes:
        return self.index[name].read_bytes()


class _ZipReader(_Reader):
    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.zf = zf
        self.index: dict[str, zipfile.ZipInfo] = {}
        for info in zf.infolist()[:MAX_FILES]:
            if info.is_dir():
                continue
            # Symlinks in zips (unix mode S_IFLNK) are never followed.
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                continue
            name = _clean(info.filename)
            if name:
                self.index[name] = info

    def names(self) -> list[str]:
        return list(self.index)

    def size(self, name: str) -> int:
        return self.index[name].file_size

    def read(self, name: str) -> bytes:
        with self.zf.open(self.index[name]) as f:
            data = f.read(MAX_FILE_BYTES + 1)
        return data


def _match(owned: str, names: list[str], basenames: dict[str, list[str]],
           unique_basename: bool) -> str | None:
    if owned in names:
        return owned
    suffix = [n for n in names if n.endswith("/" + owned) and n.count("/") == owned.count("/") + 1]
    if len(suffix) == 1:
        return suffix[0]
    base = owned.rsplit("/", 1)[-1]
    cands = basenames.get(base, [])
    if unique_basename and len(cands) == 1:
        return cands[0]
    return None


def load(path: Path | None, owned: list[str], label: str = "") -> Submission:
    """Reads the owned files from the submission at path (a folder or a .zip)."""
    sub = Submission(label=label or (path.name if path else "exercises"))
    if path is None:
        return sub
    if not path.exists():
        sub.error = f"{path} does not exist"
        return sub
    zf: zipfile.ZipFile | None = None
    try:
        if path.is_dir():
            reader: _Reader = _DirReader(path)
        else:
            try:
                zf = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
                sub.error = f"could not read {path.name} as a zip archive ({e}); upload a .zip made " \
                            f"with ./distlab submit"
                return sub
            reader = _ZipReader(zf)
        names = reader.names()
        basenames: dict[str, list[str]] = {}
        for n in names:
            basenames.setdefault(n.rsplit("/", 1)[-1], []).append(n)
        owned_bases = [o.rsplit("/", 1)[-1] for o in owned]
        for o in owned:
            unique = owned_bases.count(o.rsplit("/", 1)[-1]) == 1
            hit = _match(o, names, basenames, unique)
            if hit is None:
                continue
            if reader.size(hit) > MAX_FILE_BYTES:
                sub.problems.append(f"{o}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB, ignored")
                continue
            try:
                data = reader.read(hit)
            except (OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
                sub.problems.append(f"{o}: could not be read ({e})")
                continue
            if len(data) > MAX_FILE_BYTES:
                sub.problems.append(f"{o}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB, ignored")
                continue
            sub.files[o] = data
            if hit != o:
                sub.found_as[o] = hit
    finally:
        if zf is not None:
            zf.close()
    return sub
