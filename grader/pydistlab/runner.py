"""Running one graded item: a GoogleTest binary with a filter, as its own process group.

Whatever the test does (crash, hang, deadlock, flood of output, exit, a broken resource limit),
the grader gets back an Outcome with a short reason, and nothing is left running. With a
sandbox.TestJail the process runs under its limits and in its bubblewrap view.

The gtest report comes back through a pipe the grader opened and the kit's test main set up
(gtest_report: nothing in argv or the environment names it, and a report without this run's nonce,
with a DOCTYPE, over the size cap, or that differs from the tests the filter selects is refused);
test_process starts the program in its jail with an allowlisted environment."""
from __future__ import annotations

import math
import os
import re
import signal
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import gtest_report, sandbox, test_process

_parse_xml = gtest_report.parse_xml   # (the name the self-test's older checks use)

OUTPUT_CAP = 10 * 1024            # bytes of output kept per test ("output truncated" beyond)
FLOOD_LIMIT = 1024 * 1024         # more output than this fails the test at once ("output flood")
TAIL_KEEP = 2 * 1024              # of the kept output, this much comes from the end
DEADLOCK_CHARS = 3000            # of a deadlock report kept in the reason (other reasons: 240)


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
                # A deadlock whole: every rank's call and file:line (the terminal shows one rank a
                # line, deadlock.terminal_lines).
                return line[:DEADLOCK_CHARS if key == "deadlock:" else 240]
    for f in failures:
        # The test's own message (what follows gtest's "Expected ... Which is ..." lines) says
        # more than gtest's expression dump: take its first line when there is one.
        body = f.splitlines()[1:]
        own = [line.strip() for line in body if line.strip() and not line.startswith(" ")
               and not _GTEST_LINE.match(line.strip())]
        if own:
            return _with_detail(own[0], body)
        for line in body + f.splitlines()[:1]:
            if line.strip() and not line.strip().endswith(":") and line.strip() != "Failed":
                return round_numbers(line.strip())[:240]
    return "test failed"


def _with_detail(first: str, body: list[str]) -> str:
    """The test's first own line and, while what is taken ends with ':' (a heading such as
    "all_reduce_ring, world size 2, count 1:"), the lines under it, so the reason always ends in
    the first concrete mismatch ("... first wrong element at index 0 of 1: got 3, expected 6").
    The heading is shortened before the mismatch is: the mismatch is what the student needs."""
    lines = [line.strip() for line in body if line.strip()]
    at = lines.index(first) if first in lines else 0
    taken = [first]
    for line in lines[at + 1:at + 4]:
        if not taken[-1].endswith(":"):
            break
        taken.append(line)
    text = round_numbers(" ".join(taken))
    if len(text) <= 240 or len(taken) == 1:
        return text[:240]
    head, tail = round_numbers(" ".join(taken[:-1])), round_numbers(taken[-1])
    room = max(0, 240 - len(tail) - 5)
    return (head[:room] + " ... " + tail)[:240] if room else tail[:240]


#: A decimal number printed with more digits than it means (gtest prints a double with 17
#: significant digits: 14.199999999999999); six decimals or more, not part of a longer token.
_LONG_NUMBER = re.compile(r"(?<![\w.])(-?\d+\.\d{6,}(?:[eE][-+]?\d+)?)(?![\w.])")


def round_numbers(text: str) -> str:
    """Each long decimal number of text at the precision it means: a value that is exactly a
    float32 in its shortest float32 form (0.10000000149011612 -> 0.1), any other in the shortest
    form of its double rounded to 12 significant digits (14.199999999999999 -> 14.2)."""
    def short(m: re.Match[str]) -> str:
        x = float(m.group(1))
        if not math.isfinite(x):
            return m.group(1)
        try:
            as_f32 = struct.unpack("f", struct.pack("f", x))[0]
        except OverflowError:
            as_f32 = None
        if as_f32 == x:
            for digits in range(1, 10):
                s = f"{x:.{digits}g}"
                if struct.unpack("f", struct.pack("f", float(s)))[0] == x:
                    return _plain(s)
        return _plain(repr(float(f"{x:.12g}")))
    return _LONG_NUMBER.sub(short, text)


def _plain(s: str) -> str:
    """'3.0' -> '3', '1e-05' kept: a number without a trailing '.0'."""
    return s[:-2] if s.endswith(".0") else s


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
    env = dict(env or {}, DISTLAB_REPORT_CHANNEL="stdin")
    expected_names = test_process.list_tests(binary, cwd, env, jail)
    expected = gtest_report.selected(expected_names, gtest_filter) if expected_names is not None else None
    channel = gtest_report.Channel(jail.uid(binary) if jail is not None else None)
    try:
        proc = test_process.launch(binary, [f"--gtest_filter={gtest_filter}", "--gtest_color=no",
                                            "--gtest_brief=0"], cwd, env, jail, channel)
    except OSError as e:
        channel.close_child_ends()
        os.close(channel.read_fd)
        return Outcome(False, f"could not start {binary.name}: {e}", "", 0.0)
    channel.close_child_ends()
    report = gtest_report.Reader(channel.read_fd)
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
    checked = gtest_report.Checked(None) if (timed_out or cap.flooded or report.is_alive()) else \
        gtest_report.check(bytes(report.data), report.over_cap, channel.nonce, gtest_filter, expected)
    parsed = checked.parsed

    if proc.via_bwrap and rc is not None and rc > 128:
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
        if checked.refused:
            return Outcome(False, checked.refused + (f"; exited with status {rc}" if rc else ""),
                           output, seconds)
        return Outcome(False, f"exited with status {rc} before writing its test report (not written by the "
                       f"kit's test main: the program ended before its tests did, e.g. exit() in the code, "
                       f"or its report descriptor was replaced)", output, seconds)
    run, failed, failures, skips = parsed
    if strip_prefix:
        failures = [f.replace(strip_prefix, "") for f in failures]
    if run == 0 and not skips:
        return Outcome(False, f"no test matched the filter '{gtest_filter}' (a manifest error: "
                       f"tell your instructor)", output, seconds)
    if failed:
        details = "\n\n".join(round_numbers(f[:1500]) for f in failures[:5])
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
