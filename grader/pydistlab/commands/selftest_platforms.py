"""The self-test's steps for the platforms students and instructors really use (commands/selftest.py
lists every step):

  clang     macOS's toolchain, checked on Linux: clang++ with libc++ (-stdlib=libc++) builds the
            kit's libraries, the reference and the public tests warning-free (-Werror), runs the
            threads backend's tests and the modules' public tests, and compiles every module's
            stub files (exercises/) warning-free. GoogleTest is built from its sources against
            libc++ once (/usr/src/googletest, Debian's googletest package); everything lives in
            build/clang/ and is reused by the next run (ninja rebuilds what changed).
  mpihosts  Open MPI across two hosts (root, Linux): two network namespaces joined by a veth pair
            are the two hosts; an Open MPI job (TCP only, restricted to the veth's subnet) with a
            hostfile naming both runs the reference's MPI tests of 03 and 06's training program,
            the launcher reaching the second host through an rsh agent that enters its namespace.
            The values must be those of the same job on one host. Skipped, with the reason, where
            namespaces are refused; the namespaces are removed when the step ends, also on failure.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from .. import cmake, deps, manifest as mf, workspace as ws
from ..paths import BUILD, ROOT, nproc, rel
from .tally import Tally

# ---- clang + libc++ -------------------------------------------------------------------------------

CLANG_DIR = BUILD / "clang"
GTEST_SRC = Path("/usr/src/googletest")
#: Debian packages of the toolchain (Homebrew's llvm, or Apple's clang, has both on macOS).
CLANG_PACKAGES = ["clang", "libc++-dev", "libc++abi-dev", "googletest"]
LIBCXX = "-stdlib=libc++"


def _libcxx_works(clang: str) -> str:
    """"" when clang++ compiles and links a program against libc++; else the compiler's words."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("#include <span>\n#include <vector>\nint main() { std::vector<int> v{1};"
                       " return std::span<int>(v).size() == 1 ? 0 : 1; }\n")
        r = subprocess.run([clang, "-std=c++20", LIBCXX, str(src), "-o", str(Path(tmp) / "probe")],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            return (r.stderr or r.stdout).strip()[-600:]
        r = subprocess.run([str(Path(tmp) / "probe")], capture_output=True, stdin=subprocess.DEVNULL)
        return "" if r.returncode == 0 else f"the probe program built with libc++ exited {r.returncode}"


def _toolchain() -> tuple[str, str]:
    """(clang++, "") when clang++ with libc++ and GoogleTest's sources are here, installing them
    as root on Debian/Ubuntu; ("", why not) otherwise."""
    clang = shutil.which("clang++") or ""
    why = _libcxx_works(clang) if clang else "clang++ is not installed"
    if (why or not GTEST_SRC.is_dir()) and deps.install_quietly(CLANG_PACKAGES):
        clang = shutil.which("clang++") or ""
        why = _libcxx_works(clang) if clang else "clang++ is not installed"
    if not why and not GTEST_SRC.is_dir():
        why = f"GoogleTest's sources are not in {GTEST_SRC}"
    if why:
        return "", f"{why} (Debian/Ubuntu: {deps.install_line(CLANG_PACKAGES)})"
    return clang, ""


def _clang_cache(clang: str) -> dict[str, str]:
    return {"CMAKE_CXX_COMPILER": clang, "CMAKE_BUILD_TYPE": "Release",
            "CMAKE_CXX_FLAGS": LIBCXX, "CMAKE_EXE_LINKER_FLAGS": LIBCXX,
            "CMAKE_SHARED_LINKER_FLAGS": LIBCXX}


def _gtest(clang: str) -> tuple[Path | None, str]:
    """GoogleTest built against libc++ and installed under build/clang/gtest (once)."""
    prefix = CLANG_DIR / "gtest"
    if (prefix / "lib" / "libgtest.a").is_file() and (prefix / "lib" / "cmake" / "GTest").is_dir():
        return prefix, ""
    bdir = CLANG_DIR / "gtest-build"
    cache = dict(_clang_cache(clang), BUILD_GMOCK="OFF", INSTALL_GTEST="ON", CMAKE_INSTALL_PREFIX=str(prefix),
                 CMAKE_C_COMPILER=shutil.which("clang") or clang)   # GoogleTest's project enables C too
    cmd = ["cmake", "-S", str(GTEST_SRC), "-B", str(bdir), "-G", "Ninja", *(f"-D{k}={v}" for k, v in cache.items())]
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode == 0:
        r = subprocess.run(["cmake", "--build", str(bdir), "-j", str(nproc()), "--target", "install"],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr)[-2500:]
    return prefix, ""


def _public_test_targets(known: set[str]) -> list[str]:
    man = mf.load()
    return [f"test_{m}" for m in man.order if f"test_{m}" in known]


def _run_gtest(exe: Path) -> tuple[bool, str]:
    """Runs one GoogleTest program (every test in it); (passed, the failing tests or the error)."""
    try:
        r = subprocess.run([str(exe), "--gtest_brief=1"], capture_output=True, text=True, timeout=600,
                           errors="replace", stdin=subprocess.DEVNULL, cwd=exe.parent)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    out = r.stdout + r.stderr
    passed = re.search(r"\[  PASSED  \] (\d+) test", out)
    if r.returncode == 0 and passed:
        return True, f"{passed.group(1)} tests passed"
    failed = [line for line in out.splitlines() if line.startswith("[  FAILED  ]")]
    return False, "\n".join(failed[:20]) or out[-2000:]


def _differs(rel_path: str) -> bool:
    a, b = ROOT / "solutions" / rel_path, ROOT / "exercises" / rel_path
    return not b.is_file() or a.read_bytes() != b.read_bytes()


def _stub_commands(build_dir: Path) -> list[tuple[str, list[str]]]:
    """The compile commands of the reference's module sources (solutions/NN_topic/) whose stub
    differs (the file, or a header of its module), turned into syntax-only compiles of the stubs
    (exercises/NN_topic/): same flags, the stub's files and headers. A file the stub shares with
    the reference is compiled by the reference's build already."""
    sol, exe = str(ROOT / "solutions") + "/", str(ROOT / "exercises") + "/"
    out: list[tuple[str, list[str]]] = []
    for entry in json.loads((build_dir / "compile_commands.json").read_text(encoding="utf-8")):
        if not entry["file"].startswith(sol):
            continue
        rel_path = entry["file"][len(sol):]
        module = rel_path.split("/")[0]
        headers = [f"{module}/{h.name}" for h in (ROOT / "solutions" / module).glob("*.hpp")]
        if not _differs(rel_path) and not any(_differs(h) for h in headers):
            continue
        args = shlex.split(entry["command"].replace(sol, exe))
        keep: list[str] = []
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("-o", "-MF", "-MT"):
                skip = True
                continue
            if a in ("-c", "-MD"):
                continue
            keep.append(a)
        out.append((entry["file"].replace(sol, exe), keep + ["-fsyntax-only"]))
    return out


def _inputs_digest() -> str:
    """A digest of everything a stub's compile reads from the kit: exercises/ and the kit's headers."""
    h = hashlib.sha256()
    for top in ("exercises", "libdist/include", "support/include", "datasets/include"):
        for f in sorted((ROOT / top).rglob("*")):
            if f.is_file():
                h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _syntax_only(cmd: tuple[str, list[str]]) -> tuple[str, str]:
    r = subprocess.run(cmd[1], capture_output=True, text=True, errors="replace", cwd=ROOT,
                       stdin=subprocess.DEVNULL)
    problems = [line for line in (r.stdout + r.stderr).splitlines() if "warning:" in line or "error:" in line]
    if r.returncode != 0 and not problems:
        problems = [f"status {r.returncode}: {(r.stderr or r.stdout).strip()[-500:]}"]
    return rel(Path(cmd[0])), "\n".join(problems)


def _programs_at_o0() -> Path:
    """A compiler launcher for the clang tree: the modules' programs (their main.cpp, CLI11 most of
    their compile) are built here to prove they compile and link with libc++, never run, so they
    are compiled at -O0 (the last -O wins), which takes about 40% off each; the tests keep their -O."""
    script = CLANG_DIR / "programs-at-O0.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    text = '#!/bin/sh\ncase "$*" in\n  *" -c "*/main.cpp) exec "$@" -O0 ;;\nesac\nexec "$@"\n'
    if not script.is_file() or script.read_text() != text:
        script.write_text(text)
        script.chmod(0o755)
    return script


def step_clang(t: Tally) -> None:
    t.step("clang: the kit, the reference and the stubs with clang++ and libc++ (macOS's toolchain)")
    clang, why = _toolchain()
    if not clang:
        print(f"    skipped: {why}", flush=True)
        return
    version = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"    {version}, {LIBCXX}", flush=True)
    t0 = time.monotonic()
    prefix, err = _gtest(clang)
    if not t.check(prefix is not None, f"GoogleTest builds against libc++ from {GTEST_SRC}", err):
        return
    bdir = CLANG_DIR / "solutions"
    cache = dict(_clang_cache(clang), CMAKE_PREFIX_PATH=str(prefix), DISTLAB_IMPL="solutions",
                 DISTLAB_ARCH="portable", DISTLAB_BUILD_TESTS="ON", DISTLAB_WITH_MPI="OFF",
                 DISTLAB_WITH_NCCL="OFF", DISTLAB_PCH="OFF",   # built once: no precompiled header
                 CMAKE_CXX_COMPILER_LAUNCHER=str(_programs_at_o0()))
    # Warnings are errors here: a warning in an object built by an earlier run still fails it.
    cache["CMAKE_CXX_FLAGS"] = f"{LIBCXX} -Werror"
    cmake.configure(ROOT, bdir, cache, quiet=True)
    known = cmake.targets(bdir)
    targets = ["test_threads_backend", "test_support"] + _public_test_targets(known)
    targets += sorted(x for x in known if x.startswith("run_"))   # the modules' programs (main.cpp)
    missing = [x for x in targets if x not in known]
    t.check(not missing, "the clang tree has the threads backend's and the modules' tests", " ".join(missing))
    t_build = time.monotonic()
    r = cmake.build(bdir, [x for x in targets if x in known], keep_going=True)
    print(f"    GoogleTest and configuring {t_build - t0:.0f} s; built {len(targets)} programs (tests and "
          f"the modules' run_*) in {r.seconds:.0f} s", flush=True)
    first = ws.first_errors(r.output, str(ROOT) + "/")
    if not t.check(r.ok, "the kit, the reference and the public tests build warning-free with clang "
                   "and libc++ (-Werror)", first):
        return
    t1 = time.monotonic()
    exes = [bdir / "bin" / x for x in targets if x.startswith("test_")]
    with ThreadPoolExecutor(max_workers=nproc()) as pool:
        for exe, (ok, detail) in zip(exes, pool.map(_run_gtest, exes)):
            t.check(ok, f"clang: {exe.name} passes", detail)
    print(f"    ran {len(exes)} test programs in {time.monotonic() - t1:.0f} s", flush=True)
    t2 = time.monotonic()
    commands = _stub_commands(bdir)
    t.check(bool(commands), "clang: the stubs' compile commands were found", rel(bdir / "compile_commands.json"))
    # Compiles that passed with the same inputs and flags before are not repeated.
    stamp = CLANG_DIR / "stubs-passed.json"
    digest = _inputs_digest()
    try:
        passed = set(json.loads(stamp.read_text())) if stamp.is_file() else set()
    except ValueError:
        passed = set()
    keys = {c[0]: hashlib.sha256((digest + "\0".join(c[1])).encode()).hexdigest() for c in commands}
    todo = [c for c in commands if keys[c[0]] not in passed]
    with ThreadPoolExecutor(max_workers=nproc()) as pool:
        results = list(pool.map(_syntax_only, todo))
    for (file, _), (name, problems) in zip(todo, results):
        if t.check(not problems, f"clang: the stub {name} compiles warning-free", problems):
            passed.add(keys[file])
    for file, _ in commands:
        if all(file != c[0] for c in todo):
            t.check(True, f"clang: the stub {rel(Path(file))} compiles warning-free (as before)")
    stamp.write_text(json.dumps(sorted(passed & set(keys.values()))))
    print(f"    compiled {len(todo)} of the {len(commands)} stub files that differ from the reference "
          f"(syntax only; the others passed before with the same inputs) in {time.monotonic() - t2:.0f} s",
          flush=True)


# ---- Open MPI across two hosts ----------------------------------------------------------------------

SUBNET = "10.231.7"          # a /24 no real network here uses; the two hosts are .1 and .2
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
#: Open MPI's settings for the job: TCP only (no shared memory between ranks on one host), and
#: both its data (btl) and its launcher's control channel (oob) restricted to the veth's subnet.
MPI_MCA = {"pml": "ob1", "btl": "tcp,self", "btl_tcp_if_include": f"{SUBNET}.0/24",
           "oob_tcp_if_include": f"{SUBNET}.0/24", "plm_rsh_no_tree_spawn": "1"}


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)


@contextmanager
def two_hosts(tag: str) -> Iterator[tuple[list[str], str]]:
    """Two network namespaces ("hosts") joined by a veth pair, SUBNET.1 and SUBNET.2; yields their
    names and "" (or [], why they could not be made). Removed on leaving, also after an error:
    the processes still in them are killed first, then the namespaces (the veth goes with them)."""
    names = [f"distlab-{tag}-a", f"distlab-{tag}-b"]
    made: list[str] = []
    try:
        why = ""
        if os.geteuid() != 0:
            why = "needs root (ip netns)"
        elif not shutil.which("ip"):
            why = "the ip command (iproute2) is not installed"
        for n in names if not why else []:
            _ip("netns", "del", n)   # left over from a run that was killed
            r = _ip("netns", "add", n)
            if r.returncode != 0:
                why = f"network namespaces are refused here: ip netns add: {r.stderr.strip()}"
                break
            made.append(n)
        if not why:
            va, vb = f"dl{os.getpid() % 100000}a", f"dl{os.getpid() % 100000}b"
            steps = [["link", "add", va, "type", "veth", "peer", "name", vb],
                     ["link", "set", va, "netns", names[0]], ["link", "set", vb, "netns", names[1]]]
            for i, (n, v) in enumerate(zip(names, (va, vb))):
                steps += [["-n", n, "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", v],
                          ["-n", n, "link", "set", v, "up"], ["-n", n, "link", "set", "lo", "up"]]
            for s in steps:
                r = _ip(*s)
                if r.returncode != 0:
                    why = f"ip {' '.join(s)}: {r.stderr.strip()}"
                    break
        yield (names, "") if not why else ([], why)
    finally:
        for n in made:
            pids = _ip("netns", "pids", n).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ValueError, OSError):
                    pass
            _ip("netns", "del", n)


def _agent(folder: Path, names: list[str]) -> Path:
    """The rsh agent mpirun uses to start its daemon on the second host: `agent HOST COMMAND...`
    runs COMMAND in HOST's namespace, as ssh would on a real machine."""
    agent = folder / "netns-rsh"
    agent.write_text("#!/bin/sh\n# mpirun calls: netns-rsh HOST COMMAND...\nhost=$1; shift\ncase $host in\n"
                     + "".join(f"  {SUBNET}.{i + 1}) ns={n} ;;\n" for i, n in enumerate(names))
                     + "  *) echo \"netns-rsh: unknown host $host\" >&2; exit 1 ;;\nesac\n"
                     + "exec ip netns exec \"$ns\" /bin/sh -c \"$*\"\n")
    agent.chmod(0o755)
    return agent


def _mpirun(np: int, program: list[str], hostfile: Path | None, agent: Path | None,
            netns: str | None) -> subprocess.CompletedProcess[str]:
    mca = dict(MPI_MCA) if hostfile else {"btl": "tcp,self", "pml": "ob1"}
    cmd = ["mpirun", "-np", str(np), "--oversubscribe"]
    if hostfile and agent:
        cmd += ["--hostfile", str(hostfile), "--map-by", "node", "--mca", "plm_rsh_agent", str(agent)]
    else:
        mca["btl_tcp_if_include"] = "lo"
        mca["oob_tcp_if_include"] = "lo"
    for k, v in mca.items():
        cmd += ["--mca", k, v]
    cmd += ["--tag-output", *program]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=300,
                          env=dict(os.environ, **MPI_ENV), stdin=subprocess.DEVNULL)


def _hosts_seen(out: str) -> set[str]:
    return set(re.findall(r"^\[\d+,\d+\]<stdout>:distlab-host (\S+)", out, re.M))


def _values(out: str) -> list[str]:
    """The lines of rank 0's output that carry values: the losses, with the wall times cut off."""
    lines = [re.sub(r"^\[\d+,\d+\]<stdout>:", "", line) for line in out.splitlines()
             if re.match(r"^\[\d+,0\]<stdout>:", line)]
    return [re.sub(r"\| step time.*$", "", line).strip() for line in lines if "loss" in line]


def step_mpihosts(t: Tally) -> None:
    t.step("mpihosts: an Open MPI job across two hosts (two network namespaces, TCP only)")
    if not shutil.which("mpirun"):
        print("    skipped: Open MPI's mpirun is not installed", flush=True)
        return
    say = ws.Progress(False)
    with ws.solutions_tree(say) as tb:
        ws.configure(tb, tb.build, ws.BASE_CACHE, say)
        known = cmake.targets(tb.build)
        targets = ["test_03_collectives_mpi", "run_06_data_parallel"]
        if not t.check(all(x in known for x in targets), "the reference tree has the Open MPI backend's "
                       "targets " + ", ".join(targets), "see the 'distlab: MPI backend' configure line"):
            return
        r = cmake.build(tb.build, targets, progress=say)
        if not t.check(r.ok, "the MPI programs build", tb.first_errors(r.output)):
            return
        bindir = tb.build / "bin"
        with two_hosts(str(os.getpid())) as (names, why), tempfile.TemporaryDirectory() as tmp:
            if why:
                print(f"    skipped: {why}", flush=True)
                return
            folder = Path(tmp)
            os.chmod(folder, 0o755)
            hostfile = folder / "hostfile"
            hostfile.write_text(f"{SUBNET}.1 slots=2\n{SUBNET}.2 slots=2\n")
            agent = _agent(folder, names)
            print(f"    hosts {SUBNET}.1 ({names[0]}) and {SUBNET}.2 ({names[1]}), veth pair, "
                  f"mpirun in {names[0]}", flush=True)
            # Which host each rank runs on: its network namespace, as the kernel names it.
            probe = ["/bin/sh", "-c", "echo distlab-host $(ip netns identify $$)"]
            p = _mpirun(4, probe, hostfile, agent, names[0])
            seen = _hosts_seen(p.stdout)
            t.check(p.returncode == 0 and seen == set(names), "mpihosts: the job's ranks run on both hosts",
                    f"status {p.returncode}, hosts seen {sorted(seen)}\n{(p.stdout + p.stderr)[-2000:]}")
            if p.returncode != 0:
                return
            t0 = time.monotonic()
            r3 = _mpirun(4, [str(bindir / "test_03_collectives_mpi"), "--gtest_brief=1"], hostfile, agent, names[0])
            t.check(r3.returncode == 0, "mpihosts: 03's MPI tests (closed-form values) pass on 4 ranks "
                    "across two hosts", (r3.stdout + r3.stderr)[-2500:])
            prog = [str(bindir / "run_06_data_parallel"), "--backend", "mpi", "--niters", "150", "--sim-steps", "1"]
            two = _mpirun(4, prog, hostfile, agent, names[0])
            one = _mpirun(4, prog, None, None, None)
            v2, v1 = _values(two.stdout), _values(one.stdout)
            t.check(two.returncode == 0 and one.returncode == 0 and bool(v1) and v1 == v2,
                    "mpihosts: 06's training on 4 ranks across two hosts prints the losses of one host",
                    f"status {two.returncode} (two hosts), {one.returncode} (one host)\n"
                    f"two hosts: {v2[:6]}\none host:  {v1[:6]}\n{(two.stderr or one.stderr)[-1500:]}")
            print(f"    03's MPI tests and 06's training ({len(v1)} loss lines) in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    leftover = [n for n in _ip("netns", "list").stdout.split() if n in names]
    t.check(not leftover, "mpihosts: the namespaces are removed", " ".join(leftover))
