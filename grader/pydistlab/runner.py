"""Running one graded item: a GoogleTest binary with a filter, as its own process group.

Whatever the test does (crash, hang, deadlock, flood of output, exit, a broken resource limit),
the grader gets back an Outcome with a short reason, and nothing is left running. With a
sandbox.TestJail the process runs under its limits and in its bubblewrap view.

The gtest report comes back through a pipe the grader opened (--gtest_output=xml:/dev/fd/N), never
through a file: no other process can write it, and a report that names a test outside the filter
is refused."""
from __future__ import annotations

import fnmatch
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from . import sandbox

OUTPUT_CAP = 10 * 1024            # bytes of output kept per test ("output truncated" beyond)
FLOOD_LIMIT = 1024 * 1024         # more output than this fails the test at once ("output flood")
TAIL_KEEP = 2 * 1024              # of the kept output, this much comes from the end


@dataclass
class Outcome:
    passed: bool
    reason: str          # one line; "" when passed
    output: str          # what the student reads: failures, then (capped) program output
    seconds: float
    tests_run: int = 0


def signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


class _Capture(threading.Thread):
    """Drains a pipe, keeping the first and last bytes; flags a flood."""

    def __init__(self, pipe, on_flood) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.pipe = pipe
        self.on_flood = on_flood
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.flooded = False

    def run(self) -> None:
        head_cap = OUTPUT_CAP - TAIL_KEEP
        try:
            while True:
                chunk = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536)
                if not chunk:
                    break
                self.total += len(chunk)
                if len(self.head) < head_cap:
                    self.head += chunk[: head_cap - len(self.head)]
                self.tail = (self.tail + chunk)[-TAIL_KEEP:]
                if self.total > FLOOD_LIMIT and not self.flooded:
                    self.flooded = True
                    self.on_flood()
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        if self.total <= OUTPUT_CAP:
            data = bytes(self.head) + bytes(self.tail)[len(self.tail) - (self.total - len(self.head)):] \
                if self.total > len(self.head) else bytes(self.head)
            return data.decode("utf-8", "replace")
        return (self.head.decode("utf-8", "replace") +
                f"\n... [output truncated: {self.total} bytes in all, showing the first "
                f"{len(self.head)} and the last {len(self.tail)}] ...\n" +
                self.tail.decode("utf-8", "replace"))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


class _Report(threading.Thread):
    """Reads the gtest report from the read end of a pipe (at most sandbox.XML_CAP bytes)."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.data = bytearray()

    def run(self) -> None:
        try:
            with os.fdopen(self.fd, "rb", buffering=0) as f:
                while True:
                    chunk = f.read(65536)
                    if not chunk:
                        break
                    if len(self.data) < sandbox.XML_CAP:
                        self.data += chunk[: sandbox.XML_CAP - len(self.data)]
        except OSError:
            pass


def _matches(name: str, gtest_filter: str) -> bool:
    """Whether a test's full name is selected by a gtest filter (POS[-NEG], ':'-separated globs)."""
    pos, _, neg = gtest_filter.partition("-")
    if not any(fnmatch.fnmatchcase(name, p) for p in (pos or "*").split(":") if p):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in neg.split(":") if p)


def _parse_xml(data: bytes, gtest_filter: str = "*") -> tuple[int, int, list[str], list[str]] | None:
    """(tests run, failed, failure messages, skip messages) from a gtest XML report; None when it
    is not one, or names a test the filter does not select (a forged report)."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return None
    if root.tag != "testsuites":
        return None
    for case in root.iter("testcase"):
        if not _matches(f"{case.get('classname')}.{case.get('name')}", gtest_filter):
            return None
    run = failed = 0
    failures: list[str] = []
    skips: list[str] = []
    for case in root.iter("testcase"):
        if case.get("status", "run") != "run":
            continue  # DISABLED_ tests
        skipped = case.find("skipped")
        if case.get("result") == "skipped" or skipped is not None:
            skips.append(f"{case.get('classname')}.{case.get('name')}: " +
                         ((skipped.get("message") or skipped.text or "") if skipped is not None else ""))
            continue
        run += 1
        fails = case.findall("failure") + case.findall("error")
        if fails:
            failed += 1
            for f in fails:
                msg = (f.text or f.get("message") or "").strip()
                failures.append(f"{case.get('classname')}.{case.get('name')}: {msg}")
    return run, failed, failures, skips


def _headline(failures: list[str], output: str) -> str:
    """The most telling line: the threads backend's deadlock/timeout report, a TODO, or the first failure."""
    text = "\n".join(failures) + "\n" + output
    for key in ("deadlock:", "not implemented:", "TimeoutError", "timed out"):
        for line in text.splitlines():
            if key in line:
                line = line.strip()
                start = line.find(key) if key in ("deadlock:", "not implemented:") else 0
                line = line[start:]
                for tail in ('" thrown in the test body.', '" thrown in SetUp().', '" thrown in TearDown().',
                             '".', '"'):   # (the last two: gtest's "it throws ... description \"...\".")
                    if line.endswith(tail):
                        line = line[: -len(tail)]
                        break
                where = line.rfind(" (") if key == "not implemented:" and line.endswith(")") else -1
                if where > 0 and len(line) - where < 120:
                    # A TODO: its place first (file:line says which function), so that a table
                    # that cuts the line short still names it; then the TODO text.
                    text = line[len(key):where].strip()
                    return f"not implemented at {line[where + 2:-1]}: {text}"[:240]
                return line[:240]
    for f in failures:
        # The test's own message (what follows gtest's "Expected ... Which is ..." lines) says
        # more than gtest's expression dump: take its first line when there is one.
        body = f.splitlines()[1:]
        own = [line.strip() for line in body if line.strip() and not line.startswith(" ")
               and not _GTEST_LINE.match(line.strip())]
        if own:
            return own[0][:240]
        for line in body + f.splitlines()[:1]:
            if line.strip() and not line.strip().endswith(":") and line.strip() != "Failed":
                return line.strip()[:240]
    return "test failed"


class _Process:
    """A started test process: its output pipe (read end), wait and kill."""
    stdout: BinaryIO

    def wait(self, timeout_s: float | None) -> int | None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError


class _Popen(_Process):
    """A test in a process (and, with bubblewrap, a sandbox) of its own."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str], write_fd: int) -> None:
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, pass_fds=(write_fd,))
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout

    def wait(self, timeout_s: float | None) -> int | None:
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        _kill_group(self.proc.pid)


class _InAgent(_Process):
    """A test started by its worker's long-lived sandbox (sandbox.Agent)."""

    def __init__(self, agent: sandbox.Agent, argv: list[str], env: dict[str, str], cwd: Path,
                 write_fd: int, rlimits: list[tuple[str, int]], uid: int) -> None:
        self.agent = agent
        self.rc: int | None = None
        out_r, out_w = os.pipe()
        argv = [shutil.which(argv[0]) or argv[0], *argv[1:]]
        try:
            agent.start(argv, env, cwd, out_w, write_fd, rlimits, uid)
        except OSError:
            agent.kill()
            self.rc = -signal.SIGKILL
        finally:
            os.close(out_w)
        self.stdout = os.fdopen(out_r, "rb", buffering=0)

    def wait(self, timeout_s: float | None) -> int | None:
        if self.rc is None:
            self.rc = self.agent.wait(timeout_s if timeout_s is not None else 60.0)
        return self.rc

    def kill(self) -> None:
        if self.rc is None:   # still running (a timeout or a flood): end its whole sandbox
            self.agent.kill()
            self.rc = -signal.SIGKILL
#: Lines gtest writes itself around a failed assertion (not the test's own message).
_GTEST_LINE = re.compile(r"^(Expected|Actual|Value of|Which is|Failed$|The difference between|"
                         r"Expected equality|expected|actual|Google Test trace|\S+:\d+: Failure|"
                         r"Death test|Result:|Error msg:|With diff:|Whose value|evaluates to)")


_FRAME = re.compile(r"^\s*#(\d+) 0x[0-9a-f]+ in (.+?) (\S+?:\d+)(?::\d+)?\s*$")


def sanitizer_headline(output: str) -> str:
    """The first line of an AddressSanitizer or UndefinedBehaviorSanitizer report, with the first
    stack frame in the student's files (exercises/...) named first; "" when there is none."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if "ERROR: AddressSanitizer:" in line:
            kind = line.split("ERROR: AddressSanitizer:", 1)[1].strip().split(" on address")[0]
            frames = [m for m in (_FRAME.match(x) for x in lines[i + 1:i + 60]) if m]
            own = next((m for m in frames if "exercises/" in m.group(3)), frames[0] if frames else None)
            if own is None:
                return f"AddressSanitizer: {kind}"
            return f"AddressSanitizer: {kind} at {own.group(3)} in {own.group(2)}"[:240]
        if ": runtime error: " in line:
            where, _, what = line.partition(": runtime error: ")
            return f"undefined behaviour at {where.strip()}: {what.strip()}"[:240]
    return ""


def run_test(binary: Path, gtest_filter: str, timeout_s: float, cwd: Path,
             env: dict[str, str] | None = None, strip_prefix: str = "",
             jail: sandbox.TestJail | None = None) -> Outcome:
    """Runs `binary --gtest_filter=...` with a time limit (in jail, when given) and returns what
    happened."""
    t0 = time.monotonic()
    if not binary.is_file():
        return Outcome(False, f"test program {binary.name} was not built", "", 0.0)
    read_fd, write_fd = os.pipe()
    cmd = [str(binary), f"--gtest_filter={gtest_filter}", f"--gtest_output=xml:/dev/fd/{write_fd}",
           "--gtest_color=no", "--gtest_brief=0"]
    full_env = dict(os.environ)
    full_env.update(env or {})
    agent = jail.agent(binary, cwd) if jail is not None else None
    if jail is not None:
        uid = jail.uid(binary)
        if uid is not None:   # gtest reopens /dev/fd/N: the pipe must belong to the test's uid
            os.fchown(write_fd, uid, uid)
    if agent is not None and jail is not None:
        proc: _Process = _InAgent(agent, [*jail.drop(binary), *cmd], full_env, cwd, write_fd,
                                  jail.rlimits(), jail.uid(binary) or 0)
    else:
        try:
            proc = _Popen(jail.command(cmd, binary, cwd) if jail is not None else cmd, cwd,
                          full_env, write_fd)
        except OSError as e:
            os.close(read_fd)
            os.close(write_fd)
            return Outcome(False, f"could not start {binary.name}: {e}", "", 0.0)
    os.close(write_fd)
    report = _Report(read_fd)
    report.start()
    cap = _Capture(proc.stdout, proc.kill)
    cap.start()
    timed_out = False
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    proc.kill()  # the test, and anything it started
    rc = proc.wait(None)
    cap.join(timeout=5)
    report.join(timeout=5)
    proc.stdout.close()
    seconds = time.monotonic() - t0
    output = cap.text()
    if strip_prefix:
        output = output.replace(strip_prefix, "")
    parsed = None if (timed_out or cap.flooded or report.is_alive()) else _parse_xml(bytes(report.data),
                                                                                      gtest_filter)

    if agent is None and jail is not None and jail.status.isolated and rc is not None and rc > 128:
        rc = -(rc - 128)   # bwrap exits with 128 + the signal that ended the test
    limits = jail.limits if jail is not None else None
    network_off = jail is not None and jail.status.isolated
    limit = sandbox.limit_reason(rc, output, limits, jail is not None and jail.uses_memory_limit(),
                                 network_off) if jail is not None and not timed_out else ""
    tsan = "WARNING: ThreadSanitizer" in output
    sanitizer = sanitizer_headline(output) if "Sanitizer" in output or "runtime error:" in output else ""
    if cap.flooded:
        return Outcome(False, f"output flood: more than {FLOOD_LIMIT // 1024} KiB written; killed",
                       output, seconds)
    if timed_out:
        return Outcome(False, f"timed out after {timeout_s:g} s (killed); look for a loop or a "
                       f"wait that never ends", output, seconds)
    if tsan:
        return Outcome(False, "data race reported by ThreadSanitizer", output, seconds)
    if sanitizer:
        return Outcome(False, sanitizer, output, seconds)
    if rc is not None and rc < 0:
        if limit:
            return Outcome(False, f"{limit} (killed by {signal_name(rc)})", output, seconds)
        said = next((line.strip() for line in reversed(output.splitlines())
                     if re.search(r"malloc|free\(\)|corrupted|terminate called|Assertion|smashing", line)), "")
        return Outcome(False, f"crashed: {signal_name(rc)}" + (f" ({said[:120]})" if said else ""),
                       output, seconds)
    if parsed is None:
        if limit:
            return Outcome(False, f"{limit}; exited with status {rc}", output, seconds)
        if report.data and rc == 0:
            return Outcome(False, "its test report was not the one gtest writes for this filter "
                           "(refused)", output, seconds)
        return Outcome(False, f"exited with status {rc} before writing its test report", output, seconds)
    run, failed, failures, skips = parsed
    if strip_prefix:
        failures = [f.replace(strip_prefix, "") for f in failures]
    if run == 0 and not skips:
        return Outcome(False, f"no test matched the filter '{gtest_filter}' (a manifest error: "
                       f"tell your instructor)", output, seconds)
    if failed:
        details = "\n\n".join(f[:1500] for f in failures[:5])
        if len(failures) > 5:
            details += f"\n\n... and {len(failures) - 5} more failures"
        limit = limit or sandbox.limit_reason(rc, "\n".join(failures), limits,
                                              jail is not None and jail.uses_memory_limit(), network_off)
        headline = _headline(failures, output)
        return Outcome(False, f"{limit}: {headline}" if limit else headline, details, seconds, run)
    if skips:
        return Outcome(False, "skipped: " + skips[0][:200], output, seconds, run)
    if rc != 0:
        return Outcome(False, f"exited with status {rc}", output, seconds, run)
    return Outcome(True, "", f"{run} test{'s' if run != 1 else ''} passed", seconds, run)
