"""Fail closed: a grade never compiles or runs submitted code with the grader's rights unless
`--sandbox off` says so, wherever the kit is cloned (sandbox/probe.admit(), sandbox/reach.py).

The miniature kit is mirrored under a folder only root can search (as a kit cloned under root's
0700 home is): the grading workspaces move to a root-owned folder the test uids can reach, the
planted attacks of test_grader.TestSandbox (both sandbox modes) fail there as they do elsewhere,
and the reference keeps full marks. Where no such folder can be made, a submission is refused.

Run: cd grader/selftest && python3 -m unittest test_fail_closed -v
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # grader/: pydistlab

from pydistlab import sandbox  # noqa: E402
from pydistlab.errors import DistlabError  # noqa: E402
from pydistlab.sandbox import reach  # noqa: E402
from test_grader import HERE, ROOT, SOLUTION, _sandboxed  # noqa: E402

#: A clone under a folder nobody but root can search (reused between runs: its trees too).
CLOSED = ROOT / "build" / "selftest-0700"
CLOSED_KIT = CLOSED / "kit"
#: The attacks of test_grader run again from that clone (each in both sandbox modes).
ATTACKS = ["test_grader.TestSandbox.test_including_the_reference_or_hidden_tests_does_not_compile",
           "test_grader.TestSandbox.test_reading_hidden_tests_or_the_reference_at_run_time_fails",
           "test_grader.TestSandbox.test_writing_into_the_kit_or_another_report_fails"]
ROOT_ONLY = unittest.skipUnless(os.geteuid() == 0, "needs root (test uids, root-owned folders)")


def unittest_in_closed_kit(*names: str, extra: str = "") -> subprocess.CompletedProcess[str]:
    """Runs test_grader tests with the miniature kit mirrored into the 0700 clone."""
    CLOSED.mkdir(parents=True, exist_ok=True)
    os.chmod(CLOSED, 0o700)
    code = extra + "import sys, unittest; sys.exit(unittest.main(module=None, argv=['x', *sys.argv[1:]]))"
    return subprocess.run([sys.executable, "-c", code, *names], cwd=HERE, capture_output=True, text=True,
                          env=dict(os.environ, DISTLAB_SELFTEST_KIT=str(CLOSED_KIT)), timeout=1200,
                          stdin=subprocess.DEVNULL)


@ROOT_ONLY
class TestClosedClone(unittest.TestCase):
    """The kit cloned where the test uids cannot reach it (a 0700 home)."""

    def test_planted_attacks_fail_from_a_0700_clone(self) -> None:
        r = unittest_in_closed_kit(*ATTACKS)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-5000:])
        self.assertIn("OK", r.stderr)
        if _sandboxed():
            self.assertNotIn("skipped", r.stderr)
        # The workspaces moved: build/grade is a link to a root-owned folder the test uids reach.
        link = CLOSED_KIT / "build" / "grade"
        self.assertTrue(link.is_symlink(), "build/grade was not relocated")
        target = link.resolve()
        self.assertTrue(str(target).startswith(tuple(str(t) for t in reach.SHARED_TOPS)), target)
        self.assertTrue(reach.reachable(target / "submission" / "src"))
        self.assertEqual(target.parent.stat().st_uid, 0)
        self.assertEqual((target.parent / "KIT").read_text(), f"{CLOSED_KIT.resolve()}\n")

    def test_reference_gets_full_marks_from_a_0700_clone(self) -> None:
        code = ("import json, os, subprocess, sys, tempfile\nfrom pathlib import Path\n"
                "import test_grader as t\nt.make_kit()\n"
                "sub = Path(tempfile.mkdtemp())\n"
                f"files = {SOLUTION!r}\n"
                "for rel, text in files.items():\n"
                "    (sub / rel).parent.mkdir(parents=True, exist_ok=True); (sub / rel).write_text(text)\n"
                "scores = {}\n"
                "for mode in ('auto', 'limits'):\n"
                "    for how in (['--submission', str(sub)], ['--solutions']):\n"
                "        out = Path(tempfile.mkdtemp())\n"
                "        r = t.distlab('grade', '--hidden', *how, '--sandbox', mode, '--out', str(out))\n"
                "        assert r.returncode == 0, r.stdout + r.stderr\n"
                "        data = json.loads((out / 'results.json').read_text())\n"
                "        scores[f'{how[0]} {mode}'] = [data['score'], sum(x['max_score'] for x in data['tests'])]\n"
                "print(json.dumps(scores))\n")
        r = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, timeout=1200,
                           env=dict(os.environ, DISTLAB_SELFTEST_KIT=str(CLOSED_KIT)), stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        scores = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(len(scores), 4)
        for how, (score, full) in scores.items():
            self.assertEqual(score, full, how)
            self.assertGreater(full, 0)

    def test_a_submission_is_refused_where_no_reachable_folder_can_be_made(self) -> None:
        """No /var/lib/distlab nor /var/tmp to move to (SHARED_TOPS patched): the grade stops with
        the reason and what to do, and nothing is compiled as root."""
        sub = Path(tempfile.mkdtemp())
        try:
            (sub / "fix.cpp").write_text(SOLUTION["exercises/01_fix/fix.cpp"])
            code = ("import sys\nfrom pathlib import Path\nimport test_grader as t\nt.make_kit()\n"
                    "sys.path.insert(0, str(t.KIT / 'grader'))\n"
                    "for name in [m for m in sys.modules if m.startswith('pydistlab')]: del sys.modules[name]\n"
                    "from pydistlab.sandbox import reach\n"
                    "reach.SHARED_TOPS = (Path('/proc/distlab-cannot-be-made'),)\n"
                    "from pydistlab.cli import main\n"
                    f"sys.exit(main(['grade', '01_fix', '--submission', {str(sub)!r}, '--sandbox', 'limits']))\n")
            kit = CLOSED.parent / "selftest-0700-b" / "kit"
            r = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, timeout=600,
                               env=dict(os.environ, DISTLAB_SELFTEST_KIT=str(kit)), stdin=subprocess.DEVNULL)
            out = r.stdout + r.stderr
            self.assertNotEqual(r.returncode, 0, out)
            self.assertIn("refusing to grade a submission: the unprivileged uid 61000 cannot reach", out)
            self.assertIn("clone the kit under a folder every user can search".capitalize(), out)
            self.assertIn("--sandbox off", out)
            self.assertNotIn("Traceback", out)
        finally:
            shutil.rmtree(sub, ignore_errors=True)

    @classmethod
    def setUpClass(cls) -> None:
        b = CLOSED.parent / "selftest-0700-b"
        b.mkdir(parents=True, exist_ok=True)
        os.chmod(b, 0o700)


@ROOT_ONLY
class TestSharedFolder(unittest.TestCase):
    """reach.safe_dir(): the relocated workspaces' folder is root's, never somebody else's."""

    def setUp(self) -> None:
        self.top = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="distlab-reach-"))
        os.chmod(self.top, 0o755)

    def tearDown(self) -> None:
        shutil.rmtree(self.top, ignore_errors=True)

    def test_a_fresh_folder_is_made_root_owned_and_searchable(self) -> None:
        home, why = reach.shared_home(Path("/some/kit"), (self.top / "a",))
        self.assertEqual(why, "")
        assert home is not None
        self.assertEqual(home.parent, self.top / "a")
        self.assertEqual(home.stat().st_mode & 0o777, 0o711)
        self.assertEqual((home / "KIT").read_text(), "/some/kit\n")
        again, _ = reach.shared_home(Path("/some/kit"), (self.top / "a",))
        self.assertEqual(again, home)
        other, _ = reach.shared_home(Path("/other/kit"), (self.top / "a",))
        self.assertNotEqual(other, home)   # one folder per kit checkout

    def test_workspaces_of_checkouts_gone_are_removed(self) -> None:
        kit = self.top / "kit"
        kit.mkdir()
        (kit / "distlab").write_text("")
        gone, _ = reach.shared_home(Path("/nonexistent/kit"), (self.top / "a",))
        assert gone is not None
        self.assertTrue(gone.is_dir())   # its own is kept
        kept, _ = reach.shared_home(kit, (self.top / "a",))
        assert kept is not None
        self.assertFalse(gone.exists())   # pruned when the next one was made
        self.assertTrue(kept.is_dir())
        shutil.rmtree(kit)
        self.assertEqual(reach.prune(self.top / "a"), [kept])

    def test_a_link_or_somebody_elses_folder_is_refused(self) -> None:
        (self.top / "elsewhere").mkdir()
        os.symlink(self.top / "elsewhere", self.top / "link")
        (self.top / "theirs").mkdir()
        os.chown(self.top / "theirs", sandbox.TEST_UID_BASE, sandbox.TEST_UID_BASE)
        (self.top / "open").mkdir(mode=0o777)
        os.chmod(self.top / "open", 0o777)
        cases = {"link": "is a symbolic link", "theirs": "not root", "open/x": "writable by other users"}
        for name, why in cases.items():
            with self.subTest(name):
                home, reason = reach.shared_home(Path("/some/kit"), (self.top / name,))
                self.assertIsNone(home)
                self.assertIn(why, reason)
        # The first safe candidate is taken.
        home, _ = reach.shared_home(Path("/some/kit"), (self.top / "link", self.top / "ok"))
        self.assertEqual(home is not None and home.parent, self.top / "ok")


class TestAdmit(unittest.TestCase):
    """probe.admit(): which grades may run without bubblewrap, as root and not."""

    LIMITS = sandbox.Status("limits-only", "bubblewrap is not installed")

    def admit(self, euid: int, mode: str, tree: Path) -> sandbox.Status:
        from unittest import mock
        with mock.patch("os.geteuid", return_value=euid):
            return sandbox.admit(self.LIMITS, mode, tree)

    def test_without_bubblewrap_not_root_instructor_modes_refuse(self) -> None:
        with self.assertRaises(DistlabError) as e:
            self.admit(1000, "submission", Path("/tmp"))
        for words in ("refusing to grade a submission", "bubblewrap is not installed", "Install bubblewrap",
                      "allow user namespaces", "--sandbox off"):
            self.assertIn(words, str(e.exception))
        # A student's own checkout, or the references: with the user's rights, as describe() says.
        for mode in ("student", "solutions"):
            self.assertEqual(self.admit(1000, mode, Path("/tmp")), self.LIMITS)

    @ROOT_ONLY
    def test_as_root_a_tree_out_of_the_test_uids_reach_is_refused(self) -> None:
        closed = Path(tempfile.mkdtemp())   # 0700
        try:
            tree = closed / "grade"
            self.assertEqual(self.admit(0, "submission", Path("/tmp")), self.LIMITS)
            with self.assertRaises(DistlabError) as e:
                self.admit(0, "submission", tree)
            self.assertIn(f"cannot reach the grading tree {tree}", str(e.exception))
            own = self.admit(0, "student", tree)
            self.assertTrue(own.own_rights)
            self.assertIn("with root's rights", sandbox.describe(own))
            # The lower layers refuse too (fail closed even if admit() were skipped).
            plan = sandbox.BuildPlan(tree / "src", tree / "build")
            with self.assertRaises(DistlabError):
                sandbox.build_uid(plan, self.LIMITS)
            self.assertIsNone(sandbox.build_uid(plan, own))
            jail = sandbox.TestJail(self.LIMITS, sandbox.Limits(0, 0, 0, 0))
            with self.assertRaises(DistlabError):
                jail.uid(tree / "build" / "bin" / "test")
        finally:
            shutil.rmtree(closed, ignore_errors=True)

    def test_bubblewrap_and_off_pass_through(self) -> None:
        for status in (sandbox.Status("bwrap"), sandbox.Status("off", "turned off with --sandbox off")):
            self.assertIs(sandbox.admit(status, "submission", Path("/nonexistent")), status)


@ROOT_ONLY
class TestNotRoot(unittest.TestCase):
    """A grader that is not root and has no bubblewrap: a submission is refused with the fix; the
    student's own checkout is graded with the user's rights, said on the first line."""

    def test_instructor_mode_refuses_student_mode_runs(self) -> None:
        uid = sandbox.TEST_UID_BASE + 90
        base = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="distlab-notroot-"))
        try:
            os.chmod(base, 0o755)
            kit = base / "kit"
            import test_grader
            shutil.copytree(test_grader.KIT, kit, ignore=shutil.ignore_patterns("build", "__pycache__"))
            (base / "sub").mkdir()
            (base / "sub" / "fix.cpp").write_text(SOLUTION["exercises/01_fix/fix.cpp"])
            for d, dirs, files in os.walk(base):
                for name in [*dirs, *files]:
                    os.lchown(Path(d, name), uid, uid)
            os.chown(base, uid, uid)
            drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable,
                    str(kit / "distlab"), "grade", "01_fix", "--sandbox", "limits"]
            env = dict(os.environ, HOME=str(base))
            r = subprocess.run([*drop, "--submission", str(base / "sub")], cwd=kit, capture_output=True,
                               text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
            out = r.stdout + r.stderr
            self.assertNotEqual(r.returncode, 0, out)
            self.assertIn("refusing to grade a submission: bubblewrap cannot isolate it here", out)
            self.assertIn("pass --sandbox off", out)
            self.assertFalse((kit / "build" / "grade" / "submission").exists(), "something was built")
            r = subprocess.run([*drop, "--out", str(base / "out")], cwd=kit, capture_output=True, text=True,
                               env=env, timeout=600, stdin=subprocess.DEVNULL)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("sandbox: resource limits only", r.stdout.splitlines()[0])
            self.assertIn("Submission code can read what this user can read", r.stdout.splitlines()[0])
            data = json.loads((base / "out" / "results.json").read_text())
            self.assertEqual(data["score"], 0)   # the stubs: graded, not refused
            self.assertGreater(sum(t["max_score"] for t in data["tests"]), 0)
        finally:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
