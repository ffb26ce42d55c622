"""The report channel of a test process, and what the grader accepts through it.

Nothing in argv or the environment says where the report goes: the grader writes one control line,
`DISTLAB1 <nonce> <fd>`, into a pipe that becomes the test's stdin; the kit's test main
(libdist/testing/test_main.cpp) reads it in the program's earliest initializer, before any code of
a submission runs, moves the report pipe to a random descriptor and records which pipe it is;
after the tests it builds the XML report from GoogleTest's results itself and writes it, then
`DISTLAB-TRAILER <nonce> <tests run>`, only if that descriptor still is the same pipe (a pipe
swapped in by the submission gets nothing: no report arrives, and the item fails). The grader then
refuses (check()):
  - a report over XML_CAP bytes, or one with a DOCTYPE (entity expansion), before parsing it;
  - a report without the trailer of this run's nonce (written by anything but the kit's main);
  - a report whose tests differ from the tests the filter selects in the program's own list
    (--gtest_list_tests, once per program) or whose count differs from the trailer's.
"""
from __future__ import annotations

import fnmatch
import os
import re
import secrets
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from .sandbox import XML_CAP

TRAILER = re.compile(rb"\nDISTLAB-TRAILER ([0-9a-f]{1,64}) (\d{1,9})\n\Z")

#: (tests run, failed, failure messages, skip messages)
Parsed = tuple[int, int, list[str], list[str]]


class Channel:
    """The pipes of one test process's report: `control` becomes its stdin, `write_fd` is passed
    at the same number; `read_fd` stays with the grader."""

    def __init__(self, owner: int | None) -> None:
        self.nonce = secrets.token_hex(16)
        self.read_fd, self.write_fd = os.pipe()
        self.control, ctl_w = os.pipe()
        os.write(ctl_w, f"DISTLAB1 {self.nonce} {self.write_fd}\n".encode())
        os.close(ctl_w)
        if owner is not None:   # the pipe belongs to the test's uid (as one it opened would)
            os.fchown(self.write_fd, owner, owner)

    def close_child_ends(self) -> None:
        os.close(self.write_fd)
        os.close(self.control)


class Reader(threading.Thread):
    """Reads the report from the read end of its pipe: at most XML_CAP bytes are kept; more sets
    over_cap (the rest is drained, so the test never blocks on it)."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.data = bytearray()
        self.over_cap = False

    def run(self) -> None:
        try:
            with os.fdopen(self.fd, "rb", buffering=0) as f:
                while True:
                    chunk = f.read(65536)
                    if not chunk:
                        break
                    room = XML_CAP - len(self.data)
                    self.over_cap = self.over_cap or len(chunk) > room
                    self.data += chunk[:max(0, room)]
        except OSError:
            pass


def matches(name: str, gtest_filter: str) -> bool:
    """Whether a test's full name is selected by a gtest filter (POS[-NEG], ':'-separated globs)."""
    pos, _, neg = gtest_filter.partition("-")
    if not any(fnmatch.fnmatchcase(name, p) for p in (pos or "*").split(":") if p):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in neg.split(":") if p)


def parse_listing(text: str) -> list[str]:
    """The full test names of `--gtest_list_tests` output (lines it does not recognise ignored)."""
    names: list[str] = []
    suite = ""
    for line in text.splitlines():
        line = line.split("  #", 1)[0].rstrip()
        if re.fullmatch(r"[A-Za-z_][\w/]*\.", line):
            suite = line
        elif suite and re.fullmatch(r"  [A-Za-z_][\w/]*", line):
            names.append(suite + line.strip())
    return names


def selected(listing: list[str], gtest_filter: str) -> set[str]:
    """The tests a run with this filter runs (DISABLED_ ones left out, as gtest does)."""
    return {n for n in listing if matches(n, gtest_filter) and "DISABLED_" not in n}


def parse_xml(data: bytes, gtest_filter: str = "*") -> Parsed | None:
    """What a gtest XML report says; None when it is not one, or names a test the filter does
    not select (a forged report). Never call it on unchecked data: check() refuses DOCTYPEs first."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return None
    if root.tag != "testsuites":
        return None
    for case in root.iter("testcase"):
        if not matches(f"{case.get('classname')}.{case.get('name')}", gtest_filter):
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


def _ran(data: bytes) -> list[str]:
    root = ET.fromstring(data)
    return [f"{c.get('classname')}.{c.get('name')}" for c in root.iter("testcase")
            if c.get("status", "run") == "run"]


@dataclass
class Checked:
    """What the grader makes of a report: parsed (None: nothing usable) and, when refused, why."""
    parsed: Parsed | None
    refused: str = ""


def check(data: bytes, over_cap: bool, nonce: str, gtest_filter: str,
          expected: set[str] | None) -> Checked:
    """The report of one run, checked (see the module's docstring). expected: the tests the filter
    selects in the program's own list (None: the list could not be read, so nothing passes)."""
    if not data:
        return Checked(None)
    if over_cap:
        return Checked(None, f"its test report is over {XML_CAP // (1024 * 1024)} MiB (refused unread)")
    root_at = data.find(b"<testsuites")
    if root_at < 0 or b"<!" in data[:root_at]:
        return Checked(None, "its test report is not a GoogleTest report (a DOCTYPE or no <testsuites>; "
                             "refused unparsed)")
    trailer = TRAILER.search(bytes(data))
    if trailer is None or not secrets.compare_digest(trailer.group(1), nonce.encode()):
        return Checked(None, "its test report was not written by the kit's test main (no trailer with "
                             "this run's nonce; refused)")
    xml = bytes(data[:trailer.start()])
    parsed = parse_xml(xml, gtest_filter)
    if parsed is None:
        return Checked(None, "its test report was not the one gtest writes for this filter (refused)")
    ran = _ran(xml)
    if int(trailer.group(2)) != len(ran):
        return Checked(None, f"its test report lists {len(ran)} tests but the test main ran "
                             f"{int(trailer.group(2))} (refused)")
    if expected is None:
        return Checked(None, "the test program's list of tests could not be read (refused)")
    if set(ran) != expected or len(ran) != len(set(ran)):
        missing = sorted(expected - set(ran))
        return Checked(None, "its test report does not list exactly the tests the filter selects" +
                       (f" (missing: {', '.join(missing[:3])})" if missing else "") + " (refused)")
    return Checked(parsed)
