"""Compiles and links of submitted code are bounded per process (sandbox/compile_guard.py): a
file that never ends, a device or a huge object ends in seconds with zero points and a reason,
in both sandbox modes; an honest submission still gets full marks.

Run: cd grader/selftest && python3 -m unittest test_bounded_build -v
"""
from __future__ import annotations

import os
import time
import unittest

from test_grader import FIX_HEAD, SOLUTION, GraderTestCase, _sandboxed

HONEST = "int add(int a, int b) { return a + b; }\nint twice(int a) { return 2 * a; }\n"
MODES = ("auto", "limits") if os.geteuid() == 0 else ("auto",)


class TestBoundedBuild(GraderTestCase):
    def grade_timed(self, text: str, mode: str) -> tuple[float, dict[str, dict]]:
        t0 = time.monotonic()
        _, tests = self.grade({"exercises/01_fix/fix.cpp": text}, "--sandbox", mode, modules=("01_fix",))
        return time.monotonic() - t0, tests

    @unittest.skipUnless(_sandboxed(), "bubblewrap cannot make namespaces here")
    def test_endless_includes_and_huge_objects_end_quickly_with_a_reason(self) -> None:
        attacks = {
            # The compiler reads its own output pipe: no CPU used, it would wait forever.
            "/proc/self/fd/1": ('#include "/proc/self/fd/1"\n' + FIX_HEAD + HONEST,
                                r"No such file or directory|/proc/self/fd/1|not a regular file"),
            "/dev/zero": ('#include "/dev/zero"\n' + FIX_HEAD + HONEST,
                          r"No such file or directory|not a regular file"),
            "incbin /dev/zero": (FIX_HEAD + 'asm(".incbin \\"/dev/zero\\"");\n' + HONEST,
                                 r"file not found: /dev/zero|unable to include `/dev/zero'|not a regular file"),
            # 900 MiB of zeros in the object file, which every test program would copy.
            ".skip 900 MiB": (FIX_HEAD + 'asm(".data\\n.skip 943718400\\n.text");\n' + HONEST,
                              r"error: the compile of exercises/01_fix/fix.cpp wrote a file larger than "
                              r"the file-size limit of 64 MiB"),
        }
        for (how, (text, reason)), mode in [(kv, m) for kv in attacks.items() for m in MODES]:
            with self.subTest(f"{how}, --sandbox {mode}"):
                seconds, tests = self.grade_timed(text, mode)
                self.assertLess(seconds, 60, f"{how}: the grade took {seconds:.0f} s")
                for name in ("01_fix/add", "01_fix/twice"):
                    self.assertEqual(tests[name]["score"], 0, f"{how}: {tests[name]['output'][:400]}")
                out = tests["01_fix/add"]["output"]
                self.assertIn("does not compile", out)
                self.assertRegex(out, reason)
                print(f"\n  {how}, --sandbox {mode}: zero points in {seconds:.1f} s", flush=True)

    def test_an_endless_compile_in_the_limits_mode_is_stopped_by_the_guard(self) -> None:
        """Without bubblewrap /proc and /dev are the host's: the guard sees the compiler holding a
        file that is not a regular file and stops it (within a second)."""
        if "limits" not in MODES:
            self.skipTest("--sandbox limits needs root")
        seconds, tests = self.grade_timed('#include "/proc/self/fd/1"\n' + FIX_HEAD + HONEST, "limits")
        self.assertLess(seconds, 60)
        out = tests["01_fix/add"]["output"]
        self.assertIn("exercises/01_fix/fix.cpp: error: the compile of", out)
        self.assertRegex(out, r"read (pipe:\[\d+\]|/proc/self/fd/1), which is not a regular file")
        self.assertIn("stopped by the grader's sandbox", out)

    def test_honest_submission_still_gets_full_marks(self) -> None:
        for mode in MODES:
            with self.subTest(f"--sandbox {mode}"):
                _, tests = self.grade_timed(SOLUTION["exercises/01_fix/fix.cpp"], mode)
                self.assertEqual(sum(t["score"] for t in tests.values()), sum(t["max_score"] for t in tests.values()))
                self.assertTrue(all(t["status"] == "passed" for t in tests.values()), tests)


class TestGuard(unittest.TestCase):
    """compile_guard.py on its own (no grade): the wall-clock limit and a command's exit status."""

    def run_guard(self, limits: str, *cmd: str, kind: str = "compile") -> tuple[int, str, float]:
        import subprocess
        import sys
        from pathlib import Path
        guard = Path(__file__).resolve().parents[1] / "pydistlab" / "sandbox" / "compile_guard.py"
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-I", "-S", str(guard), kind, *cmd], capture_output=True,
                           text=True, env=dict(os.environ, DISTLAB_GUARD=limits), timeout=60)
        return r.returncode, r.stdout, time.monotonic() - t0

    def test_wall_clock_limit(self) -> None:
        rc, out, seconds = self.run_guard('{"compile": [2, 2, 512, 1]}', "sleep", "30")
        self.assertNotEqual(rc, 0)
        self.assertLess(seconds, 10)
        self.assertIn("took longer than 2 s", out)

    def test_a_command_within_its_limits_runs_as_is(self) -> None:
        rc, out, _ = self.run_guard('{"compile": [20, 20, 512, 1]}', "sh", "-c", "echo hi; exit 3")
        self.assertEqual((rc, out), (3, "hi\n"))
        rc, out, _ = self.run_guard('{"link": [20, 20, 512, 1]}', "sh", "-c", "echo unlimited")
        self.assertEqual((rc, out), (0, "unlimited\n"))

    def test_file_size_limit(self) -> None:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            rc, out, _ = self.run_guard('{"compile": [20, 20, 512, 1]}', "sh", "-c",
                                        f"head -c 5000000 /dev/zero > {d}/big.o")
        self.assertNotEqual(rc, 0)
        self.assertIn("file-size limit of 1 MiB", out)

    def test_a_link_gets_its_limits_too(self) -> None:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            rc, out, _ = self.run_guard('{"link": [20, 20, 512, 2]}', "sh", "-c",
                                        f"head -c 5000000 /dev/zero > {d}/test_program", kind="link")
        self.assertNotEqual(rc, 0)
        self.assertIn("sh: error: the link of sh wrote a file larger than the file-size limit of 2 MiB", out)


if __name__ == "__main__":
    unittest.main()
