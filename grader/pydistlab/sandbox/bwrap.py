"""bubblewrap command lines: the system folders every view holds, and the view of a build step."""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .header_rule import HEADER_SUFFIXES
from .limits import build_limits, guard_prefix


def _system_binds() -> list[str]:
    """Read-only system folders: what compilers, CMake, Ninja and the test programs need, and no
    more of /etc than the loader cache and the alternatives links (/usr/bin/c++ goes through them)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / d
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for e in ("/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d"):
        if os.path.exists(e):
            args += ["--ro-bind", e, e]
    return args


def _base(user_ns: bool = True, devices: bool = True) -> list[str]:
    """bwrap with new pid, network, IPC, UTS (and cgroup) namespaces; user_ns=False keeps the
    caller's user namespace (as root, so that setpriv can switch to an unmapped test uid).
    devices=False: no /proc and only /dev/null in /dev (what compilers need), so an `#include` of
    /dev/zero or /proc/self/fd/1 finds no such file."""
    spaces = ["--unshare-all"] if user_ns else ["--unshare-ipc", "--unshare-pid", "--unshare-net",
                                                "--unshare-uts", "--unshare-cgroup-try"]
    dev = ["--proc", "/proc", "--dev", "/dev"] if devices else ["--dir", "/dev", "--dev-bind", "/dev/null", "/dev/null"]
    return ["bwrap", *spaces, "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            *_system_binds(), *dev]



# ---- build steps ----------------------------------------------------------------------------

@dataclass
class BuildPlan:
    """What a build step may see, from the build tree's compile database (`ninja -t compdb`)."""
    src: Path
    build: Path
    objects: dict[str, str] = field(default_factory=dict)   # object (relative to build) -> source
    commands: dict[str, str] = field(default_factory=dict)  # source (relative to src) -> its compile command

    @staticmethod
    def read(src: Path, build: Path) -> BuildPlan:
        # The compile database is a function of the ninja files alone, so it is read once per
        # build tree and state of those files (`./distlab mutants` grades hundreds of submissions
        # in one tree: reading it costs about a second each time).
        key = (str(src), str(build), *_ninja_stamp(build))
        if key not in _PLANS:
            _PLANS.clear()
            _PLANS[key] = BuildPlan._read(src, build)
        plan = _PLANS[key]
        return BuildPlan(src, build, dict(plan.objects), dict(plan.commands))

    @staticmethod
    def _read(src: Path, build: Path) -> BuildPlan:
        r = subprocess.run(["ninja", "-C", str(build), "-t", "compdb"], capture_output=True, text=True,
                           errors="replace", stdin=subprocess.DEVNULL)
        plan = BuildPlan(src, build)
        try:
            entries = json.loads(r.stdout) if r.returncode == 0 else []
        except json.JSONDecodeError:
            entries = []
        for e in entries:
            out = e.get("output", "")
            source = Path(e.get("directory", str(build)), e.get("file", "")).resolve()
            if out.endswith(".o") and not out.startswith("/"):
                try:
                    plan.objects[out] = source.relative_to(src.resolve()).as_posix()
                    plan.commands.setdefault(plan.objects[out], e.get("command", ""))
                except ValueError:
                    continue
        return plan

    def objects_of(self, sources: set[str]) -> list[str]:
        """The object files compiled from these sources (paths relative to src)."""
        return sorted(o for o, s in self.objects.items() if s in sources)

    def object_dirs_of(self, prefixes: tuple[str, ...], whole: bool = False) -> list[Path]:
        """The CMake target folders (…/CMakeFiles/<target>.dir) holding objects of sources under
        these src-relative prefixes; whole=True: the CMake binary folders holding those (their
        libraries and generated files too), where one is not the build's top folder."""
        dirs: set[Path] = set()
        for o, s in self.objects.items():
            if s.startswith(prefixes):
                parts = Path(o).parts
                cut = next((i for i, p in enumerate(parts) if p.endswith(".dir")), len(parts) - 2)
                top = parts.index("CMakeFiles") if "CMakeFiles" in parts else 0
                dirs.add(self.build / Path(*(parts[:top] if whole and top > 0 else parts[:cut + 1])))
        return sorted(dirs)


_PLANS: dict[tuple[object, ...], BuildPlan] = {}


def _ninja_stamp(build: Path) -> tuple[int, ...]:
    """(mtime_ns, size, inode) of each ninja file the compile database is made from; zeros where
    one is missing (a tree not configured yet)."""
    out: list[int] = []
    for p in (build / "build.ninja", build / "CMakeFiles" / "rules.ninja"):
        try:
            st = p.stat()
            out += [st.st_mtime_ns, st.st_size, st.st_ino]
        except OSError:
            out += [0, 0, 0]
    return tuple(out)


def build_view(plan: BuildPlan, untrusted: bool, hide_sources: tuple[str, ...] = (),
               decoy: Path | None = None) -> list[str]:
    """The bwrap prefix of a `cmake --build` of plan's tree. untrusted: the step compiles the
    submission's own files, so it also loses sight of grader/hidden/ (its CMakeLists.txt files
    stay, ninja checks them), of the objects and programs built from hidden or reference sources,
    and of the files under hide_sources (src-relative prefixes: the reference sources of
    prerequisite modules), which read as empty. It has no /proc and no device but /dev/null, and
    compile_guard.py limits each compile (untrusted) or each link (trusted) of the step."""
    src, build = plan.src, plan.build
    args = [*build_limits(untrusted), *_base(devices=not untrusted), "--tmpfs", "/tmp", "--ro-bind", str(src), str(src),
            "--bind", str(build), str(build)]
    if untrusted:
        hidden = src / "grader" / "hidden"
        if hidden.is_dir():
            args += ["--tmpfs", str(hidden)]
            for d, _, names in os.walk(hidden):
                if "CMakeLists.txt" in names:
                    p = Path(d) / "CMakeLists.txt"
                    args += ["--ro-bind", str(p), str(p)]
        if hide_sources and decoy is not None:
            for prefix in hide_sources:
                folder = src / prefix
                for p in sorted(folder.rglob("*")) if folder.is_dir() else []:
                    if p.is_file() and p.suffix not in HEADER_SUFFIXES and p.name != "CMakeLists.txt":
                        args += ["--ro-bind", str(decoy), str(p)]
        for d in plan.object_dirs_of(("grader/hidden/",) + hide_sources, whole=True):
            if d.is_dir():
                args += ["--tmpfs", str(d)]
        if (build / "bin").is_dir():
            args += ["--tmpfs", str(build / "bin")]
    return args + ["--chdir", str(build), *guard_prefix(untrusted)]


def redact_hidden(errors: str) -> str:
    """Compiler errors with the source lines quoted from hidden tests left out."""
    out: list[str] = []
    hiding = False
    for line in errors.splitlines():
        if "grader/hidden/" in line:
            hiding = True
            out.append(line)
            continue
        if hiding and re.match(r"^\s*(\d+\s*)?\|", line):
            continue
        hiding = False
        out.append(line)
    return "\n".join(out)


