"""The grading sandbox (DESIGN.md section 6; the threat model is in docs/instructor-guide.md).

A submission's code runs at two moments: when its owned files are compiled (the preprocessor and
the assembler read any file an `#include` or `.incbin` names) and in the test processes. Both
happen under this module's rules:

  check_header()   an owned header may not add preprocessor directives beyond standard-library
                   `#include <...>` lines: the tests (hidden ones too) compile against it, so it
                   must not read a file or redefine a macro (EXPECT_EQ, TEST) in a test's TU.
  probe()          whether bubblewrap can make namespaces here, and why not (once per process).
  build_view()     the bwrap command line of one build step: system folders and the clean copy
                   read-only, its build folder writable, no network, no kit checkout. For the
                   submission's own translation units (untrusted=True) the hidden test sources,
                   the objects and programs built from them and the reference sources of
                   prerequisite modules are hidden as well.
  TestJail         one test process: resource limits (prlimit), an unprivileged uid when the
                   grader runs as root (setpriv), and a bwrap view holding only the test program,
                   the public tests' folder, the module's reference outputs and an empty /tmp.
  limit_reason()   which limit a failed test broke, from its exit status and output.
  lock_away(), LentTo
                   without namespaces, as root: what the submission must not read is made
                   root-only, and its files are compiled as an unprivileged uid.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import deps, manifest as mf
from .errors import DistlabError
from .paths import is_release

#: The uid (and gid) test processes run as when the grader is root; one per parallel worker, so
#: the process limit (counted per user) of one test never starves another.
TEST_UID_BASE = 61000
TMP_SIZE_MB = 256              # the private /tmp of a test process (a tmpfs)
#: Limits of each compiler process that reads a submission's files (a template or constexpr bomb
#: must not take the grader's memory or disk; the time limit is cmake.BUILD_TIMEOUT_S).
BUILD_MEMORY_MB = 8192
BUILD_FILE_SIZE_MB = 1024
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


@dataclass
class Status:
    mode: str                  # "bwrap" | "limits-only" | "off"
    reason: str = ""           # why not bwrap (printed and noted in the report)

    @property
    def isolated(self) -> bool:
        return self.mode == "bwrap"

    @property
    def limited(self) -> bool:
        return self.mode != "off"


_probed: dict[str, Status] = {}


# ---- availability ---------------------------------------------------------------------------

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


def _base(user_ns: bool = True) -> list[str]:
    """bwrap with new pid, network, IPC, UTS (and cgroup) namespaces; user_ns=False keeps the
    caller's user namespace (as root, so that setpriv can switch to an unmapped test uid)."""
    spaces = ["--unshare-all"] if user_ns else ["--unshare-ipc", "--unshare-pid", "--unshare-net",
                                                "--unshare-uts", "--unshare-cgroup-try"]
    return ["bwrap", *spaces, "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            *_system_binds(), "--proc", "/proc", "--dev", "/dev"]


def probe(request: str = "auto") -> Status:
    """The sandbox this run gets. request: "auto" (bubblewrap when it works here, else resource
    limits only, with the reason), "on" (bubblewrap or an error), "limits" (what a host without
    namespaces gets: resource limits and, as root, an unprivileged uid) or "off" (none: for timing
    and debugging, never for grading submissions)."""
    if request not in ("auto", "on", "off", "limits"):
        raise DistlabError(f"--sandbox {request}: use auto, on, limits or off")
    if request == "off":
        return Status("off", "turned off with --sandbox off")
    if request == "limits":
        return Status("limits-only", "bubblewrap not used (--sandbox limits)")
    if request in _probed:
        return _probed[request]
    reason = ""
    if not shutil.which("bwrap"):
        deps.ensure_optional("bubblewrap")
    if not shutil.which("prlimit") or not shutil.which("setpriv"):
        status = Status("off", "prlimit and setpriv (util-linux) are missing: no sandbox and no "
                               "resource limits on this system")
        if request == "on":
            raise DistlabError(f"--sandbox on: {status.reason}")
        _probed[request] = status
        return status
    if not shutil.which("bwrap"):
        reason = ("bubblewrap is not installed (Debian/Ubuntu: " + deps.install_line(["bubblewrap"]) + ")")
    else:
        # What a test process gets (as root: bwrap as root, then setpriv to an unprivileged uid).
        jail = TestJail(Status("bwrap"), Limits(0, 64, 0, 0))
        r = subprocess.run(jail.command(["true"], Path("/usr/bin/true"), Path("/tmp")),
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            reason = ("bubblewrap cannot create namespaces here (" + (r.stderr.strip().splitlines() or
                      ["?"])[-1] + "); containers often forbid them (Docker: --security-opt "
                      "seccomp=unconfined, or a host with user namespaces)")
    status = Status("bwrap") if not reason else Status("limits-only", reason)
    if request == "on" and not status.isolated:
        raise DistlabError(f"--sandbox on: {reason}")
    _probed[request] = status
    return status


def describe(status: Status) -> str:
    if status.mode == "bwrap":
        return ("sandbox: bubblewrap (no network, no kit checkout, hidden tests and reference "
                "sources out of sight, resource limits" +
                (", unprivileged uid" if os.geteuid() == 0 else "") + ")")
    if status.mode == "off":
        return "sandbox: OFF (" + status.reason + "): submission code runs with the grader's rights"
    if os.geteuid() == 0:
        return ("sandbox: resource limits and an unprivileged uid, no namespaces: " + status.reason +
                ". The network is not cut off" + _threat_model())
    return ("sandbox: resource limits only: " + status.reason + ". Submission code can read what "
            "this user can read and reach the network" + _threat_model())


def _threat_model() -> str:
    """Where the threat model is documented (the instructors' guide: not in a student repository)."""
    return "" if is_release() else " (docs/instructor-guide.md, Threat model)"


# ---- owned headers --------------------------------------------------------------------------

HEADER_SUFFIXES = (".hpp", ".h", ".hh", ".hxx", ".ipp", ".tpp", ".inl", ".cuh")

#: Standard library headers an owned header may add (C++20 and the C compatibility headers).
STD_HEADERS = set("""
algorithm any array atomic barrier bit bitset charconv chrono compare complex concepts
condition_variable coroutine deque exception execution expected filesystem format forward_list
fstream functional future initializer_list iomanip ios iosfwd iostream istream iterator latch
limits list locale map memory memory_resource mutex new numbers numeric optional ostream queue
random ranges ratio regex scoped_allocator semaphore set shared_mutex source_location span
sstream stack stdexcept stop_token streambuf string string_view syncstream system_error thread
tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray variant vector
version cassert cctype cerrno cfenv cfloat cinttypes climits clocale cmath csetjmp csignal
cstdarg cstddef cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype
""".split())


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, text) of each logical line, with backslash-newline splices
    joined and comments replaced by a space (string and character literals kept)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    out: list[tuple[int, str]] = []
    cur: list[str] = []
    line_no, start = 1, 1
    i, n = 0, len(text)
    in_block = False
    quote = ""

    def end_line() -> None:
        nonlocal cur, line_no, start
        out.append((start, "".join(cur)))
        cur = []
        line_no += 1
        start = line_no

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            line_no += 1
            continue
        if in_block:
            if text.startswith("*/", i):
                in_block = False
                cur.append(" ")
                i += 2
                continue
            if c == "\n":
                line_no += 1
            i += 1
            continue
        if quote:
            cur.append(c)
            if c == "\\" and i + 1 < n:
                cur.append(text[i + 1])
                i += 2
                continue
            if c == quote or c == "\n":
                quote = ""
            if c == "\n":
                end_line()
            i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    line_no += 1
                    i += 1
                i += 1
            continue
        if text.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if c in "\"'":
            quote = c
        if c == "\n":
            end_line()
            i += 1
            continue
        cur.append(c)
        i += 1
    if cur:
        out.append((start, "".join(cur)))
    return out


def _directives(text: str) -> list[tuple[int, str]]:
    """(line, normalised directive) of every preprocessor directive: "#" or "%:" first, spaces
    squeezed, e.g. "include <vector>", "pragma once"."""
    found = []
    for no, line in _logical_lines(text):
        s = line.strip()
        if s.startswith("#"):
            s = s[1:]
        elif s.startswith("%:"):
            s = s[2:]
        else:
            continue
        found.append((no, " ".join(s.split())))
    return found


def check_header(name: str, text: str, kit_versions: list[str]) -> str:
    """"" when the owned header `name` may be compiled into the tests, else the reason. It may
    hold any C++ code, the directives of the kit's own versions of that header (stub and
    reference), and `#include <h>` of standard headers; nothing else (no other #include, no
    #define or #undef, no #pragma but once, no _Pragma, #embed or #line)."""
    allowed = {d for v in kit_versions for _, d in _directives(v)}
    for no, d in _directives(text):
        if d in allowed:
            continue
        m = re.fullmatch(r"include\s*<([A-Za-z_][A-Za-z0-9_]*)>", d)
        if m and m.group(1) in STD_HEADERS:
            continue
        return (f"{name}:{no}: `#{d[:80]}` is not allowed in an owned header: the tests compile "
                f"against this file, so it may add only `#include <standard header>` lines to the "
                f"directives the kit's version has (no other #include, #define, #undef or #pragma)")
    for no, line in _logical_lines(text):
        if re.search(r"\b_Pragma\b", line):
            return f"{name}:{no}: _Pragma is not allowed in an owned header (it acts as a #pragma)"
    return ""


def _kit_versions(owned: str, module: str, root: Path) -> list[str]:
    """The kit's own texts of an owned file: the stub and the reference."""
    texts = []
    for p in (root / owned, root / "solutions" / module / Path(owned).relative_to(f"exercises/{module}")
              if owned.startswith(f"exercises/{module}/") else root / owned):
        try:
            texts.append(p.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    return texts


def check_owned_headers(mod: mf.Module, files: dict[str, bytes], root: Path) -> str:
    """check_header() of each owned header of mod in files ("" when all may be used)."""
    for owned in mod.owned:
        if owned.endswith(HEADER_SUFFIXES) and owned in files:
            problem = check_header(owned, files[owned].decode("utf-8", "replace"),
                                           _kit_versions(owned, mod.name, root))
            if problem:
                return problem
    return ""


# ---- build steps ----------------------------------------------------------------------------

@dataclass
class BuildPlan:
    """What a build step may see, from the build tree's compile database (`ninja -t compdb`)."""
    src: Path
    build: Path
    objects: dict[str, str] = field(default_factory=dict)   # object (relative to build) -> source

    @staticmethod
    def read(src: Path, build: Path) -> BuildPlan:
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


def build_view(plan: BuildPlan, untrusted: bool, hide_sources: tuple[str, ...] = (),
               decoy: Path | None = None) -> list[str]:
    """The bwrap prefix of a `cmake --build` of plan's tree. untrusted: the step compiles the
    submission's own files, so it also loses sight of grader/hidden/ (its CMakeLists.txt files
    stay, ninja checks them), of the objects and programs built from hidden or reference sources,
    and of the files under hide_sources (src-relative prefixes: the reference sources of
    prerequisite modules), which read as empty."""
    src, build = plan.src, plan.build
    args = [*_build_limits(untrusted), *_base(), "--tmpfs", "/tmp", "--ro-bind", str(src), str(src),
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
    return args + ["--chdir", str(build)]


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


# ---- test processes -------------------------------------------------------------------------

@dataclass
class TestJail:
    """How one test process runs: its limits and, with bubblewrap, what it sees."""
    status: Status
    limits: Limits
    readable: list[Path] = field(default_factory=list)   # extra read-only paths (reference outputs)
    worker: int = 0

    def command(self, cmd: list[str], binary: Path, cwd: Path) -> list[str]:
        """The command line that runs cmd (the test program `binary`, in folder cwd) in this jail.
        As root: bwrap starts as root (it can reach the kit wherever it lies) and setpriv drops
        the test to the worker's own uid, so the process limit (counted per uid) applies.
        Otherwise: bwrap as this user, in a user namespace of its own."""
        pre = ["prlimit", "--core=0", *(f"--{name}={value}" for name, value in self.rlimits())]
        if not shutil.which("prlimit"):
            pre = []   # not Linux: no limits but the time limit
        drop = self.drop(binary)
        if not self.status.isolated:
            return pre + drop + cmd
        return pre + self.view(binary, cwd, root=self.uid(binary) is not None) + drop + cmd

    def rlimits(self) -> list[tuple[str, int]]:
        """The limits as prlimit names them (core files are always off)."""
        lim = self.limits
        out = []
        if lim.memory_mb:
            out.append(("as", lim.memory_mb * 1024 * 1024))
        if lim.processes:
            out.append(("nproc", self.nproc_limit()))
        if lim.file_size_mb:
            out.append(("fsize", lim.file_size_mb * 1024 * 1024))
        if lim.cpu_s:
            out.append(("cpu", lim.cpu_s))
        return out

    def drop(self, binary: Path) -> list[str]:
        """setpriv to the test's uid, or nothing (the grader's own uid)."""
        uid = self.uid(binary)
        return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--"] if uid is not None else []

    def view(self, binary: Path, cwd: Path, root: bool) -> list[str]:
        """The bwrap prefix: system folders, the test program, the readable paths and cwd."""
        if root:
            view = [*_base(user_ns=False), "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                    "--cap-add", "CAP_SETPCAP"]
        else:
            view = [*_base(), "--unshare-user", "--disable-userns"]
        view += ["--size", str(TMP_SIZE_MB * 1024 * 1024), "--tmpfs", "/tmp"]
        binds = [p for p in self.readable if p.exists()] + [binary]
        # The folders leading to what is mounted, searchable by the test's uid (bwrap would make
        # them 0700), then the mounts: nothing else of the kit is there.
        folders = sorted({a for p in [cwd, *binds] for a in [*Path(p).parents, *([p] if p == cwd else [])]
                          if a != Path("/")}, key=lambda a: len(a.parts))
        for d in folders:
            view += ["--perms", "0755", "--dir", str(d)]
        for p in binds:
            view += ["--ro-bind", str(p), str(p)]
        return view + ["--chdir", str(cwd), "--"]

    def agent(self, binary: Path, cwd: Path) -> Agent | None:
        """This worker's long-lived sandbox for `binary` (started on first use), or None where each
        test gets a bwrap of its own: without bubblewrap, or when the grader is not root (the test
        would then share the agent's uid)."""
        if not self.status.isolated or self.uid(binary) is None or not Path(AGENT_PYTHON).is_file() \
                or not shutil.which("setpriv"):
            return None
        key = (self.worker, str(binary), str(cwd), tuple(str(p) for p in self.readable))
        with _agents_lock:
            agent = _agents.get(key)
            if agent is None or not agent.alive():
                agent = _agents[key] = Agent(self.view(binary, cwd, root=True))
            return agent

    def uid(self, binary: Path) -> int | None:
        """The uid the test runs as: the worker's own when the grader is root, else None (the
        grader's). Without bubblewrap only when any user can reach the test program."""
        if os.geteuid() != 0 or not self.status.limited or not shutil.which("setpriv"):
            return None
        if not self.status.isolated and not _reachable(binary):
            return None
        return TEST_UID_BASE + self.worker

    def nproc_limit(self) -> int:
        """RLIMIT_NPROC counts every process and thread of the uid: as root the test runs under a
        uid of its own; otherwise the user's current count is added so the limit means the same."""
        if os.geteuid() == 0 or not self.limits.processes:
            return self.limits.processes
        return self.limits.processes + _tasks_of(os.getuid())

    def uses_memory_limit(self) -> bool:
        return bool(self.limits.memory_mb) and self.status.limited and shutil.which("prlimit") is not None


# ---- one sandbox per worker and test program -----------------------------------------------
# Starting bubblewrap (namespaces, mounts) costs 10 to 20 ms, as much as a short test. So, when the
# grader is root, each worker keeps one sandbox per test program for a run of items: a small agent
# inside it (root, with only the capabilities setpriv needs) starts each test as the worker's uid,
# with the limits, the grader's pipes (passed over a socket) and a fresh /tmp; when the test ends
# it kills every process left of that uid and answers with the exit status. A test can neither
# signal nor trace the root agent, nor reach its socket. A timeout or an output flood kills the
# whole sandbox; the next item starts a new one. close_agents() ends them after each run of items,
# so a rebuilt test program is never run through an old mount.

AGENT_PYTHON = "/usr/bin/python3"
_AGENT = r"""
import json, os, resource, shutil, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
os.set_inheritable(sock.fileno(), False)
NAMES = {"as": resource.RLIMIT_AS, "nproc": resource.RLIMIT_NPROC, "fsize": resource.RLIMIT_FSIZE,
         "cpu": resource.RLIMIT_CPU, "core": resource.RLIMIT_CORE}
while True:
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
    except OSError:
        break
    if not msg:
        break
    req = json.loads(msg)
    out_fd, xml_fd = fds
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            os.dup2(xml_fd, req["xml_fd"])
            keep = req["xml_fd"]
            os.closerange(3, keep)
            os.closerange(keep + 1, 65536)
            for name, value in req["rlimits"]:
                resource.setrlimit(NAMES[name], (value, value))
            os.chdir(req["cwd"])
            os.execve(req["argv"][0], req["argv"], req["env"])
        except BaseException as e:
            os.write(2, f"sandbox: could not start the test: {e}\n".encode())
        os._exit(127)
    os.close(out_fd)
    os.close(xml_fd)
    _, status = os.waitpid(pid, 0)
    sweeper = os.fork()
    if sweeper == 0:
        try:
            os.setgid(req["uid"])
            os.setuid(req["uid"])
            os.kill(-1, 9)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(sweeper, 0)
    for entry in os.listdir("/tmp"):
        path = os.path.join("/tmp", entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    sock.send(json.dumps({"rc": os.waitstatus_to_exitcode(status)}).encode())
"""

_agents: dict[tuple, Agent] = {}
_agents_lock = threading.Lock()


class Agent:
    """One worker's long-lived sandbox for one test program (see above)."""

    def __init__(self, view: list[str]) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [*view, AGENT_PYTHON, "-I", "-S", "-c", _AGENT, str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, out_fd: int, xml_fd: int,
              rlimits: list[tuple[str, int]], uid: int) -> None:
        """Starts one test: argv (absolute program path) with the write ends of the output and
        report pipes (the report's at the same fd number as in argv)."""
        req = {"argv": argv, "env": env, "cwd": str(cwd), "xml_fd": xml_fd, "uid": uid,
               "rlimits": [("core", 0), *rlimits]}
        socket.send_fds(self.sock, [json.dumps(req).encode()], [out_fd, xml_fd])

    def wait(self, timeout_s: float) -> int:
        """The test's exit status (negative: the signal); subprocess.TimeoutExpired after
        timeout_s, or when the sandbox ended without answering (then treated as killed)."""
        self.sock.settimeout(timeout_s)
        try:
            reply = self.sock.recv(4096)
        except (TimeoutError, OSError):
            raise subprocess.TimeoutExpired("sandbox agent", timeout_s) from None
        if not reply:
            self.kill()
            return -signal.SIGKILL
        return int(json.loads(reply)["rc"])

    def kill(self) -> None:
        """Ends the sandbox and everything in it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.sock.close()


def close_agents() -> None:
    """Ends every worker's sandbox (after a run of items)."""
    with _agents_lock:
        agents = list(_agents.values())
        _agents.clear()
    for agent in agents:
        agent.kill()


atexit.register(close_agents)


def jail_for(status: Status, module: mf.Module, src: Path, tsan: bool) -> TestJail | None:
    """The limits and view of one test process of module (None: --sandbox off)."""
    if not status.limited:
        return None
    limits = Limits(memory_mb=0 if tsan else module.memory_limit_mb,   # TSan maps terabytes
                    processes=module.process_limit, file_size_mb=module.file_size_limit_mb,
                    cpu_s=module.cpu_limit_s)
    # The public tests' folder (paths such as tests/<m>/../../golden resolve through it) and the
    # module's own reference outputs; nothing else of the kit.
    readable = [src / "grader" / "tests", src / "grader" / "golden" / module.name]
    return TestJail(status, limits, readable)


def _reachable(path: Path) -> bool:
    """Whether any user can run path (every folder above it searchable by others)."""
    try:
        if not os.stat(path).st_mode & 0o001:
            return False
        return all(os.stat(p).st_mode & 0o001 for p in path.resolve().parents)
    except OSError:
        return False


def _tasks_of(uid: int) -> int:
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


# ---- without namespaces: an unprivileged uid ------------------------------------------------

def build_uid(plan: BuildPlan) -> int | None:
    """The uid the submission's own files are compiled as when bubblewrap cannot run: the first
    test uid when the grader is root and that uid can reach the tree; else None (compiled with
    the grader's rights, which the report states)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    if not all(os.stat(p).st_mode & 0o001 for p in [plan.src, *plan.src.parents]) or \
            not all(os.stat(p).st_mode & 0o001 for p in plan.build.parents):
        return None
    return TEST_UID_BASE


def uid_prefix(uid: int) -> list[str]:
    return [*_build_limits(True), "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def _build_limits(untrusted: bool) -> list[str]:
    if not untrusted or not shutil.which("prlimit"):
        return []
    return ["prlimit", f"--as={BUILD_MEMORY_MB * 1024 * 1024}", f"--fsize={BUILD_FILE_SIZE_MB * 1024 * 1024}",
            "--core=0"]


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
