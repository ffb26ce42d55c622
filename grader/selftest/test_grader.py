"""The grader's own tests: planted submissions graded on a miniature kit (fixture_kit/).

The miniature kit has the real kit's conventions (manifest, module_<name> targets, DISTLAB_IMPL,
TSan builds) but three tiny modules, so a grading run takes a few seconds. Its copy lives in
build/selftest-kit/ and its build trees are reused between runs.

Run: python3 -m unittest discover -s grader/selftest -v   (or as part of ./distlab test)
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "grader"))

import import_graph  # noqa: E402  (grader/selftest/, beside this file)
from pydistlab import manifest as mf, runner, stubs, tree  # noqa: E402
from pydistlab.errors import DistlabError  # noqa: E402

KIT = Path(os.environ.get("DISTLAB_SELFTEST_KIT", ROOT / "build" / "selftest-kit"))

SOLUTION = {
    "exercises/01_fix/fix.cpp": (HERE / "fixture_kit/solutions/01_fix/fix.cpp").read_text(),
    "exercises/02_dep/dep.hpp": (HERE / "fixture_kit/solutions/02_dep/dep.hpp").read_text(),
    "exercises/02_dep/dep.cpp": (HERE / "fixture_kit/solutions/02_dep/dep.cpp").read_text(),
    "exercises/03_race/race.cpp": (HERE / "fixture_kit/solutions/03_race/race.cpp").read_text(),
}
FIX_HEAD = '#include "fix.hpp"\n#include "todo.hpp"\n#include <cstdio>\n#include <stdexcept>\n'


def fix_cpp(add_body: str, twice_body: str = "return add(a, a);") -> str:
    return FIX_HEAD + f"int add(int a, int b) {{ {add_body} }}\nint twice(int a) {{ {twice_body} }}\n"


def make_kit() -> None:
    """Mirrors the miniature kit (with this checkout's distlab and pydistlab) into KIT."""
    files: dict[str, Path | bytes] = {"distlab": ROOT / "distlab"}
    package = ROOT / "grader" / "pydistlab"
    for p in package.rglob("*.py"):
        if "__pycache__" not in p.parts:
            files[f"grader/pydistlab/{p.relative_to(package).as_posix()}"] = p
    for name in ("setup.sh", "run_autograder"):
        files[f"grader/gradescope/{name}"] = ROOT / "grader" / "gradescope" / name
    files["support/test_main.cpp"] = ROOT / "libdist" / "testing" / "test_main.cpp"   # the kit's test main
    fixture = HERE / "fixture_kit"
    for p in fixture.rglob("*"):
        if p.is_file():
            files[str(p.relative_to(fixture))] = p
    # exercises/ generated the way the real kit generates it.
    for relpath, data in stubs.generate(fixture / "solutions").items():
        files[f"exercises/{relpath}"] = data
    keep = {k: v for k, v in files.items()}
    KIT.mkdir(parents=True, exist_ok=True)
    # Keep build/ (the reused trees) while mirroring everything else.
    build = KIT / "build"
    parked = None
    if build.exists():
        parked = KIT.parent / (KIT.name + ".build-parked")
        if parked.exists():
            shutil.rmtree(parked)
        build.rename(parked)
    tree.mirror(keep, KIT)
    if parked is not None:
        parked.rename(build)
    for name in ("distlab", "grader/gradescope/setup.sh", "grader/gradescope/run_autograder"):
        os.chmod(KIT / name, 0o755)


def distlab(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(KIT / "distlab"), *args], cwd=KIT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


class GraderTestCase(unittest.TestCase):
    tmp: Path

    @classmethod
    def setUpClass(cls) -> None:
        make_kit()
        cls.tmp = Path(tempfile.mkdtemp(prefix="distlab-selftest-"))

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def grade(self, files: dict[str, str] | None = None, *extra: str, zip_path: Path | None = None,
              modules: tuple[str, ...] = ()) -> tuple[dict, dict[str, dict]]:
        """Grades a planted submission; returns (results.json, tests by name)."""
        out = Path(tempfile.mkdtemp(dir=self.tmp))
        if zip_path is None:
            sub = Path(tempfile.mkdtemp(dir=self.tmp))
            for rel_, text in (files or {}).items():
                (sub / rel_).parent.mkdir(parents=True, exist_ok=True)
                (sub / rel_).write_text(text)
            target = sub
        else:
            target = zip_path
        r = distlab("grade", *modules, "--submission", str(target), "--out", str(out), *extra)
        self.assertEqual(r.returncode, 0, f"grader failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        data = json.loads((out / "results.json").read_text())
        self.assertTrue((out / "junit.xml").is_file() and (out / "report.md").is_file())
        return data, {t["name"]: t for t in data["tests"]}


class TestGrading(GraderTestCase):
    def test_solutions_score_full_marks_with_hidden(self) -> None:
        out = self.tmp / "sol"
        r = distlab("grade", "--solutions", "--hidden", "--out", str(out))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        data = json.loads((out / "results.json").read_text())
        self.assertEqual(data["score"], 15)
        self.assertTrue(all(t["status"] == "passed" for t in data["tests"]))
        hidden = [t for t in data["tests"] if t["name"] == "01_fix/add_large"][0]
        self.assertEqual(hidden["visibility"], "after_published")
        self.assertIn("total", r.stdout)

    def test_hidden_items_build_after_a_grade_without_them(self) -> None:
        # The same workspace without grader/hidden/, then with it: CMake must see the hidden tests.
        for extra in ((), ("--hidden",)):
            out = Path(tempfile.mkdtemp(dir=self.tmp))
            r = distlab("grade", "01_fix", "--solutions", *extra, "--out", str(out))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            (KIT / "build/grade/solutions/build/bin/test_01_fix_hidden").unlink(missing_ok=True)  # no stale one
        data = json.loads((out / "results.json").read_text())
        self.assertEqual([(t["name"], t["status"]) for t in data["tests"]],
                         [("01_fix/add", "passed"), ("01_fix/twice", "passed"), ("01_fix/add_large", "passed")])

    def test_every_order_of_modes_grades_the_reference_full_marks(self) -> None:
        # One tree, graded public / hidden / batch (with hidden) one after another: a grade must
        # not depend on what was graded before it. The sequence holds every ordered pair of modes
        # (p-h, h-b, b-p, p-b, b-h, h-p), so every order of the three modes is covered by its steps.
        sub = self.tmp / "orders-sub"
        batch = self.tmp / "orders-batch"
        for folder in (sub, batch / "ref"):
            (folder / "exercises/01_fix").mkdir(parents=True, exist_ok=True)
            (folder / "exercises/01_fix/fix.cpp").write_text(SOLUTION["exercises/01_fix/fix.cpp"])
        public = [("01_fix/add", "passed"), ("01_fix/twice", "passed")]
        hidden = public + [("01_fix/add_large", "passed")]
        for step, mode in enumerate(["public", "hidden", "batch", "public", "batch", "hidden", "public"]):
            out = self.tmp / f"orders-{step}"
            if mode == "batch":
                gradebook = self.tmp / f"orders-{step}.csv"
                r = distlab("grade", "01_fix", "--submissions", str(batch), "--csv", str(gradebook), "--hidden")
                self.assertEqual(r.returncode, 0, f"step {step} ({mode}):\n{r.stdout}{r.stderr}")
                with gradebook.open() as f:
                    rows = {row["submission"]: row for row in csv.DictReader(f)}
                self.assertEqual(rows["ref"]["total"], "6", f"step {step} ({mode}): {rows['ref']}")
                continue
            extra = ("--hidden",) if mode == "hidden" else ()
            r = distlab("grade", "01_fix", "--submission", str(sub), *extra, "--out", str(out))
            self.assertEqual(r.returncode, 0, f"step {step} ({mode}):\n{r.stdout}{r.stderr}")
            data = json.loads((out / "results.json").read_text())
            self.assertEqual([(t["name"], t["status"]) for t in data["tests"]],
                             hidden if mode == "hidden" else public, f"step {step} ({mode})")
            self.assertEqual(data["score"], 6 if mode == "hidden" else 5, f"step {step} ({mode})")

    def test_stubs_score_zero(self) -> None:
        data, tests = self.grade({})
        self.assertEqual(data["score"], 0)
        self.assertIn("not implemented", tests["01_fix/add"]["output"])
        self.assertIn("graded the stub", tests["01_fix/add"]["output"])

    def test_compile_error_is_not_gradable_and_others_go_on(self) -> None:
        files = dict(SOLUTION)
        files["exercises/01_fix/fix.cpp"] = fix_cpp("return a + b +;")
        data, tests = self.grade(files)
        self.assertEqual(tests["01_fix/add"]["score"], 0)
        self.assertIn("does not compile", tests["01_fix/add"]["output"])
        self.assertIn("error", tests["01_fix/add"]["output"])
        self.assertNotIn(str(KIT), tests["01_fix/add"]["output"])
        # Instructor mode: 02_dep builds on the reference 01_fix, so it is graded on its own.
        self.assertEqual(tests["02_dep/quadruple"]["status"], "passed")
        self.assertEqual(tests["03_race/counts"]["status"], "passed")

    def test_crash_names_the_signal(self) -> None:
        files = {"exercises/01_fix/fix.cpp": fix_cpp("volatile int* p = nullptr; *p = a; return b;")}
        _, tests = self.grade(files, modules=("01_fix",))
        self.assertEqual(tests["01_fix/add"]["status"], "failed")
        self.assertIn("crashed: SIGSEGV", tests["01_fix/add"]["output"])

    def test_hang_is_killed_at_the_limit(self) -> None:
        hang = "for (volatile int i = 0;; i = i + 1) {} return a;"
        files = {"exercises/01_fix/fix.cpp": fix_cpp("return a + b;", hang)}
        _, tests = self.grade(files, modules=("01_fix",))
        self.assertEqual(tests["01_fix/add"]["status"], "passed")
        self.assertIn("timed out after 3 s", tests["01_fix/twice"]["output"])

    def test_deadlock_message_is_reported(self) -> None:
        msg = ("deadlock: rank 0 blocked in send(dst=1, tag=0, 16 floats); "
               "rank 1 blocked in send(dst=0, tag=0, 16 floats)")
        files = {"exercises/01_fix/fix.cpp": fix_cpp(f'throw std::runtime_error("{msg}");')}
        _, tests = self.grade(files, modules=("01_fix",))
        self.assertTrue(tests["01_fix/add"]["output"].startswith("failed: deadlock: rank 0 blocked in send"),
                        tests["01_fix/add"]["output"][:300])

    def test_output_flood_is_capped_and_fails(self) -> None:
        files = {"exercises/01_fix/fix.cpp": fix_cpp('for (;;) std::puts("spam spam spam spam spam spam"); return 0;')}
        _, tests = self.grade(files, modules=("01_fix",))
        out = tests["01_fix/add"]["output"]
        self.assertIn("output flood", out)
        self.assertLess(len(out), 12 * 1024)
        self.assertIn("output truncated", out)

    def test_partial_failure_scores_zero(self) -> None:
        files = {"exercises/01_fix/fix.cpp": fix_cpp("return a + b;", "return a > 0 ? 2 * a : 0;")}
        _, tests = self.grade(files, modules=("01_fix",))
        self.assertEqual(tests["01_fix/add"]["score"], 2)
        self.assertEqual(tests["01_fix/twice"]["score"], 0)  # Twice passes, TwiceNegative fails

    def test_tampered_tests_and_cmake_files_are_ignored(self) -> None:
        files = {
            "grader/tests/01_fix/test_fix.cpp": "#include <gtest/gtest.h>\nTEST(Fix, Add) {}\nTEST(Fix, Twice) {}\n",
            "exercises/01_fix/CMakeLists.txt": "distlab_module(01_fix SOURCES fake.cpp)\n",
            "grader/manifest.toml": "[kit]\nmodules = []\n",
            "exercises/01_fix/fix.cpp": fix_cpp('DISTLAB_TODO("x");', 'DISTLAB_TODO("y");'),
        }
        data, tests = self.grade(files, modules=("01_fix",))
        self.assertEqual(data["score"], 0)
        self.assertIn("not implemented", tests["01_fix/add"]["output"])

    def test_missing_files_fall_back_to_the_stub(self) -> None:
        data, tests = self.grade({"exercises/02_dep/dep.cpp": SOLUTION["exercises/02_dep/dep.cpp"]})
        self.assertEqual(tests["02_dep/quadruple"]["status"], "passed")
        self.assertIn("exercises/01_fix/fix.cpp: not in the submission; graded the stub",
                      tests["01_fix/add"]["output"])
        self.assertEqual(tests["01_fix/add"]["score"], 0)

    def test_corrupt_zip_grades_stubs_and_says_so(self) -> None:
        bad = self.tmp / "corrupt.zip"
        bad.write_bytes(b"PK\x03\x04 this is not really a zip archive" * 10)
        data, _ = self.grade(zip_path=bad, modules=("01_fix",))
        self.assertEqual(data["score"], 0)
        self.assertIn("could not be read", data["output"])

    def test_zip_with_a_top_folder(self) -> None:
        z = self.tmp / "with-folder.zip"
        with zipfile.ZipFile(z, "w") as zf:
            zf.writestr("my-repo/exercises/01_fix/fix.cpp", SOLUTION["exercises/01_fix/fix.cpp"])
            zf.writestr("../evil.cpp", "int x;")
        data, tests = self.grade(zip_path=z, modules=("01_fix",))
        self.assertEqual(data["score"], 5)
        self.assertIn("taken from my-repo/exercises/01_fix/fix.cpp", tests["01_fix/add"]["output"])

    def test_data_race_fails_under_tsan(self) -> None:
        racy = ('#include "race.hpp"\n#include <thread>\n#include <vector>\n'
                'long count_parallel(long n, int threads) {\n  long total = 0;\n'
                '  std::vector<std::thread> pool;\n  for (int t = 0; t < threads; ++t)\n'
                '    pool.emplace_back([&] { for (long i = 0; i < n / threads; ++i) { long v = total; '
                'std::this_thread::yield(); total = v + 1; } });\n'
                '  for (auto& th : pool) th.join();\n  return n;\n}\n')
        _, tests = self.grade({"exercises/03_race/race.cpp": racy}, modules=("03_race",))
        self.assertEqual(tests["03_race/counts"]["status"], "failed")
        self.assertIn("data race", tests["03_race/counts"]["output"])

    def test_batch_mode_writes_a_gradebook(self) -> None:
        batch = self.tmp / "batch"
        (batch / "alice/exercises/01_fix").mkdir(parents=True)
        (batch / "alice/exercises/01_fix/fix.cpp").write_text(SOLUTION["exercises/01_fix/fix.cpp"])
        (batch / "bob").mkdir()
        (batch / "carol.zip").write_bytes(b"garbage")
        gradebook = self.tmp / "grades.csv"
        r = distlab("grade", "01_fix", "--submissions", str(batch), "--csv", str(gradebook))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with gradebook.open() as f:
            rows = {row["submission"]: row for row in csv.DictReader(f)}
        self.assertEqual(rows["alice"]["total"], "5")
        self.assertEqual(rows["bob"]["total"], "0")
        self.assertEqual(rows["carol"]["total"], "0")
        self.assertIn("could not be read", rows["carol"]["status"])


def _kit_snapshot() -> dict[str, bytes]:
    """Every file of the miniature kit outside build/ (to prove a grade changed none)."""
    return {str(p.relative_to(KIT)): p.read_bytes() for p in KIT.rglob("*")
            if p.is_file() and "build" not in p.relative_to(KIT).parts[:1] and "__pycache__" not in p.parts}


def _sandboxed() -> bool:
    from pydistlab import sandbox
    return sandbox.probe("auto").isolated


class TestSandbox(GraderTestCase):
    """Dishonest submissions (DESIGN.md section 6, "Sandbox"): each earns only what its honest
    behaviour earns, changes nothing outside its scratch space, and is reported with a reason."""

    #: Without namespaces a root grader still compiles and runs submissions as an unprivileged uid
    #: (--sandbox limits); the read and write attacks must fail there too.
    MODES = ("auto", "limits") if os.geteuid() == 0 else ("auto",)

    def attack(self, body: str, *extra: str, prelude: str = "") -> dict[str, dict]:
        before = _kit_snapshot()
        _, tests = self.grade({"exercises/01_fix/fix.cpp": prelude + FIX_HEAD + body}, "--hidden",
                              *extra, modules=("01_fix",))
        self.assertEqual(_kit_snapshot(), before, "the grade changed the kit")
        return tests

    @unittest.skipUnless(_sandboxed(), "bubblewrap cannot make namespaces here")
    def test_including_the_reference_or_hidden_tests_does_not_compile(self) -> None:
        sources = {
            "absolute": f'#include "{KIT}/solutions/01_fix/fix.cpp"\n',
            "relative": '#include "../../../../../../solutions/01_fix/fix.cpp"\n',
            "hidden": '#include "../../grader/hidden/01_fix/test_fix_hidden.cpp"\n'
                      "int add(int a, int b) { return a + b; }\nint twice(int a) { return 2 * a; }\n",
            "incbin": f'asm(".incbin \\"{KIT}/grader/hidden/01_fix/test_fix_hidden.cpp\\"");\n'
                      "int add(int a, int b) { return a + b; }\nint twice(int a) { return 2 * a; }\n",
        }
        for (how, text), mode in [(kv, m) for kv in sources.items() for m in self.MODES]:
            with self.subTest(f"{how}, --sandbox {mode}"):
                tests = self.attack("", "--sandbox", mode, prelude=text)
                for name in ("01_fix/add", "01_fix/twice", "01_fix/add_large"):
                    self.assertEqual(tests[name]["score"], 0, f"{how}: {tests[name]['output'][:400]}")
                out = tests["01_fix/add"]["output"]
                self.assertIn("does not compile", out)
                self.assertRegex(out, "No such file or directory|file not found|can't open|Permission denied")
                self.assertNotIn("FixHidden", out)

    @unittest.skipUnless(_sandboxed() and os.geteuid() == 0, "needs bubblewrap and root (both sandbox modes)")
    def test_an_object_compiled_without_namespaces_is_not_reused_under_bubblewrap(self) -> None:
        # Without namespaces the compile may read any file of the host that every user may read
        # (the threat model says so): here an honest implementation in a world-readable folder
        # outside the kit. The same submission graded next under bubblewrap must be compiled
        # again, in the narrower view, and not take the object built before.
        outside = Path(tempfile.mkdtemp(prefix="distlab-outside-"))
        os.chmod(outside, 0o755)
        (outside / "impl.cpp").write_text("int add(int a, int b) { return a + b; }\n"
                                          "int twice(int a) { return 2 * a; }\n")
        os.chmod(outside / "impl.cpp", 0o644)
        try:
            files = {"exercises/01_fix/fix.cpp": FIX_HEAD + f'#include "{outside}/impl.cpp"\n'}
            _, loose = self.grade(files, "--hidden", "--sandbox", "limits", modules=("01_fix",))
            self.assertEqual(loose["01_fix/add"]["status"], "passed", loose["01_fix/add"]["output"][:300])
            _, tight = self.grade(files, "--hidden", "--sandbox", "auto", modules=("01_fix",))
            self.assertEqual(tight["01_fix/add"]["score"], 0)
            self.assertIn("No such file or directory", tight["01_fix/add"]["output"])
        finally:
            shutil.rmtree(outside, ignore_errors=True)

    def test_a_later_submission_cannot_read_what_an_earlier_one_compiled(self) -> None:
        # The workspace is reused from one submission to the next (a batch grades them in turn): a
        # victim's 02_dep is compiled there, then a submission of 01_fix .incbin's the victim's
        # object (and its library) from the same build folder and prints it.
        secret = "VICTIM-SECRET-5d1e"
        victim = dict(SOLUTION)
        victim["exercises/02_dep/dep.cpp"] += f'const char* victim_note = "{secret}";\n'
        for mode in self.MODES:
            with self.subTest(f"--sandbox {mode}"):
                self.grade({k: v for k, v in victim.items() if k.startswith("exercises/02_dep/")},
                           "--sandbox", mode, modules=("02_dep",))
                build = KIT / "build/grade/submission/build"
                stolen = sorted(build.rglob("dep.cpp.o")) + sorted(build.rglob("libdistlab_02_dep.a"))
                self.assertTrue(stolen, "the victim's object is where the attack looks for it")
                steal = "".join(f'asm(".section .rodata\\n.global stolen{i}\\nstolen{i}:\\n.incbin \\"{s}\\"'
                                f'\\n.byte 0\\n.previous");\nextern "C" const char stolen{i}[];\n'
                                for i, s in enumerate(stolen))
                body = ("#include <cstring>\n#include <string>\n" + steal +
                        "static std::string found() {\n  std::string all;\n" +
                        "".join(f"  all.append(stolen{i}, 4096);\n" for i in range(len(stolen))) +
                        f'  return all.find("{secret}") != std::string::npos ? "{secret}" : "";\n}}\n'
                        "int add(int a, int b) {\n  std::string s = found();\n"
                        '  if (!s.empty()) throw std::runtime_error("stolen: " + s);\n  return a + b;\n}\n'
                        "int twice(int a) { return 2 * a; }\n")
                tests = self.attack(body, "--sandbox", mode)
                for name in ("01_fix/add", "01_fix/twice", "01_fix/add_large"):
                    self.assertNotIn(secret, tests[name]["output"], tests[name]["output"][:400])
                self.assertEqual(tests["01_fix/add"]["score"], 0)

    @unittest.skipUnless(_sandboxed(), "bubblewrap cannot make namespaces here")
    def test_reading_hidden_tests_or_the_reference_at_run_time_fails(self) -> None:
        paths = [KIT / "grader/hidden/01_fix/test_fix_hidden.cpp", KIT / "solutions/01_fix/fix.cpp",
                 KIT / "build/grade/submission/src/grader/hidden/01_fix/test_fix_hidden.cpp"]
        # (A hidden item's own program holds the hidden tests; the other items cannot see it.)
        paths.append(KIT / "build/grade/submission/build/bin/test_01_fix_hidden")
        body = ("#include <fstream>\n#include <iostream>\n#include <sstream>\n"
                "static std::string steal() {\n  for (const char* p : {" +
                ", ".join(f'"{p}"' for p in paths) + "}) {\n"
                "    std::ifstream f(p); std::stringstream s; s << f.rdbuf();\n"
                "    if (f && s.str().size()) return s.str();\n  }\n  return {};\n}\n"
                "int add(int a, int b) {\n  std::string s = steal();\n"
                '  if (s.empty()) throw std::runtime_error("could not read the hidden tests");\n'
                "  std::cout << s; return a + b;\n}\nint twice(int a) { return steal().empty() ? -1 : 2 * a; }\n")
        for mode in self.MODES:
            with self.subTest(f"--sandbox {mode}"):
                tests = self.attack(body, "--sandbox", mode)
                self.assertEqual(tests["01_fix/add"]["score"] + tests["01_fix/twice"]["score"], 0)
                self.assertIn("could not read the hidden tests", tests["01_fix/add"]["output"])
                for name in ("01_fix/add", "01_fix/twice"):
                    self.assertNotIn("FixHidden", tests[name]["output"])

    @unittest.skipUnless(_sandboxed(), "bubblewrap cannot make namespaces here")
    def test_writing_into_the_kit_or_another_report_fails(self) -> None:
        for mode in self.MODES:
            with self.subTest(f"--sandbox {mode}"):
                self.writes(mode)

    def writes(self, mode: str) -> None:
        batch = self.tmp / f"batch-writes-{mode}"
        out = self.tmp / f"batch-writes-{mode}-reports"
        gradebook = self.tmp / f"batch-writes-{mode}.csv"
        targets = [KIT / "grader/pwned.txt", KIT / "grader/pydistlab/grade.py",
                   KIT / "build/grade/submission/src/grader/tests/01_fix/test_fix.cpp",
                   out / "alice/results.json", gradebook]
        body = ("#include <fstream>\n"
                "static bool vandalise() {\n  bool any = false;\n  for (const char* p : {" +
                ", ".join(f'"{p}"' for p in targets) + "}) {\n"
                '    std::ofstream f(p, std::ios::app); f << "{\\"score\\": 1000}"; f.flush();\n'
                "    any = any || bool(f);\n  }\n  return any;\n}\n"
                "static const bool done = vandalise();\n"
                "int add(int a, int b) {\n"
                '  if (!vandalise()) throw std::runtime_error("could not write outside the sandbox");\n'
                "  return a + b;\n}\nint twice(int a) { return done ? 2 * a : -1; }\n")
        (batch / "alice/exercises/01_fix").mkdir(parents=True)
        (batch / "alice/exercises/01_fix/fix.cpp").write_text(SOLUTION["exercises/01_fix/fix.cpp"])
        (batch / "mallory/exercises/01_fix").mkdir(parents=True)
        (batch / "mallory/exercises/01_fix/fix.cpp").write_text(FIX_HEAD + body)
        before = _kit_snapshot()
        r = distlab("grade", "01_fix", "--hidden", "--submissions", str(batch), "--csv", str(gradebook),
                    "--out", str(out), "--sandbox", mode)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(_kit_snapshot(), before, "the grade changed the kit")
        with gradebook.open() as f:
            rows = {row["submission"]: row for row in csv.DictReader(f)}
        self.assertEqual((rows["alice"]["total"], rows["mallory"]["total"]), ("6", "0"))
        alice = json.loads((out / "alice/results.json").read_text())
        self.assertEqual(alice["score"], 6)
        mallory = {t["name"]: t for t in json.loads((out / "mallory/results.json").read_text())["tests"]}
        self.assertIn("could not write outside the sandbox", mallory["01_fix/add"]["output"])
        self.assertFalse((KIT / "grader/pwned.txt").exists())

    def test_memory_limit_fails_the_test_and_grading_goes_on(self) -> None:
        # 1 GiB touched, past the fixture's 512 MiB limit (a bounded amount, in case a limit fails).
        body = ("#include <cstring>\n#include <vector>\n"
                "int add(int a, int b) {\n  std::vector<char> v(std::size_t(1) << 30);\n"
                "  std::memset(v.data(), 1, v.size());\n  return a + b + v[12345] - 1;\n}\n"
                "int twice(int a) { return 2 * a; }\n")
        tests = self.attack(body)
        self.assertEqual(tests["01_fix/add"]["score"], 0)
        self.assertIn("memory limit 512 MiB exceeded", tests["01_fix/add"]["output"])
        self.assertEqual(tests["01_fix/twice"]["status"], "passed")   # grading went on
        self.assertEqual(tests["01_fix/add_large"]["score"], 0)

    def test_fork_repeatedly_is_stopped_at_the_process_limit(self) -> None:
        # At most 200 children (the fixture's limit is 64), each waiting to be killed.
        body = ("#include <cerrno>\n#include <system_error>\n#include <unistd.h>\n"
                "int add(int a, int b) {\n  for (int i = 0; i < 200; ++i) {\n"
                "    pid_t pid = fork();\n    if (pid == 0) { pause(); _exit(0); }\n"
                '    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");\n'
                "  }\n  return a + b;\n}\nint twice(int a) { return 2 * a; }\n")
        tests = self.attack(body)
        self.assertEqual(tests["01_fix/add"]["score"], 0)
        self.assertIn("process limit 64 reached", tests["01_fix/add"]["output"])
        self.assertEqual(tests["01_fix/twice"]["status"], "passed")
        from pydistlab import sandbox
        uids = ",".join(str(sandbox.TEST_UID_BASE + i) for i in range(8))
        for _ in range(50):   # killing a whole pid namespace takes a moment
            left = subprocess.run(["pgrep", "-u", uids], capture_output=True, text=True).stdout.strip()
            if not left:
                break
            time.sleep(0.1)
        self.assertEqual(left, "", "processes of the tests are still running")

    @unittest.skipUnless(_sandboxed(), "bubblewrap cannot make namespaces here")
    def test_network_is_off(self) -> None:
        import socket
        import threading
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        server.settimeout(1.0)
        port = server.getsockname()[1]
        got: list[bytes] = []

        def serve() -> None:
            for _ in range(60):
                try:
                    conn, _ = server.accept()
                except OSError:
                    if getattr(server, "_closed", False):
                        return
                    continue
                got.append(conn.recv(100))
                conn.close()

        threading.Thread(target=serve, daemon=True).start()
        body = ("#include <arpa/inet.h>\n#include <cerrno>\n#include <cstring>\n#include <string>\n"
                "#include <sys/socket.h>\n#include <unistd.h>\n"
                "int add(int a, int b) {\n  int s = socket(AF_INET, SOCK_STREAM, 0);\n"
                "  sockaddr_in addr{}; addr.sin_family = AF_INET;\n"
                f"  addr.sin_port = htons({port}); addr.sin_addr.s_addr = htonl(0x7f000001);\n"
                "  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)\n"
                '    throw std::runtime_error(std::string("connect: ") + std::strerror(errno));\n'
                '  (void)!write(s, "leak", 4); close(s);\n  return a + b;\n}\n'
                "int twice(int a) { return 2 * a; }\n")
        try:
            tests = self.attack(body)
        finally:
            server.close()
        self.assertEqual(got, [], "a test process reached the grader's network")
        self.assertEqual(tests["01_fix/add"]["score"], 0)
        self.assertIn("no network in the sandbox: ", tests["01_fix/add"]["output"])
        self.assertIn("connect: ", tests["01_fix/add"]["output"])

    def test_grading_time_with_and_without_the_sandbox(self) -> None:
        # Two equal submissions in turn, so every grade compiles the file and links the tests (as
        # grading a class does); the first round warms the tree.
        subs = [Path(tempfile.mkdtemp(dir=self.tmp)) for _ in range(2)]
        for i, sub in enumerate(subs):
            (sub / "fix.cpp").write_text(SOLUTION["exercises/01_fix/fix.cpp"] + f"// submission {i}\n")
        times: dict[str, float] = {"off": 0.0, "auto": 0.0}
        for round_ in range(3):
            for mode, sub in (("off", subs[0]), ("auto", subs[1])):
                out = Path(tempfile.mkdtemp(dir=self.tmp))
                t0 = time.monotonic()
                r = distlab("grade", "01_fix", "--submission", str(sub), "--hidden", "--sandbox", mode,
                            "--out", str(out), "--quiet")
                if round_:
                    times[mode] += time.monotonic() - t0
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertEqual(json.loads((out / "results.json").read_text())["score"], 6)
        off, on = times["off"] / 2, times["auto"] / 2
        print(f"\n  grading 01_fix of the miniature kit (compile, link, 3 tests): {off:.2f} s without "
              f"the sandbox, {on:.2f} s with it ({100 * (on / off - 1):+.0f}%)", file=sys.stderr)


class TestSandboxRules(unittest.TestCase):
    """The sandbox's static rules (no build; the owned-header and object rules: test_header_rule.py)."""

    def test_a_report_naming_tests_outside_the_filter_is_refused(self) -> None:
        xml = (b'<?xml version="1.0"?><testsuites tests="1"><testsuite name="Fix">'
               b'<testcase name="%s" classname="Fix" status="run" result="completed"/></testsuite></testsuites>')
        self.assertEqual(runner._parse_xml(xml % b"Add", "Fix.Add"), (1, 0, [], []))
        self.assertIsNone(runner._parse_xml(xml % b"Bogus", "Fix.Add"))
        self.assertIsNone(runner._parse_xml(xml % b"Twice", "Fix.*-Fix.Twice"))
        self.assertIsNone(runner._parse_xml(b"<testsuites/><testsuites/>", "*"))


class TestRelease(GraderTestCase):
    def test_release_grades_stubs_to_zero_on_its_own(self) -> None:
        out = self.tmp / "student-repo"
        r = distlab("release", str(out))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse((out / "solutions").exists())
        self.assertFalse((out / "grader/hidden").exists())
        self.assertNotIn("add_large", (out / "grader/manifest.toml").read_text())
        self.assertEqual((out / "grader/manifest.toml").read_bytes(), (KIT / "grader/manifest.toml").read_bytes())
        self.assertTrue((out / "exercises/01_fix/fix.cpp").is_file())
        r = subprocess.run([sys.executable, str(out / "distlab"), "grade", "01_fix", "--quiet"], cwd=out,
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        data = json.loads((out / "build/grade/exercises/report/results.json").read_text())
        self.assertEqual(data["score"], 0)
        self.assertEqual(len(data["tests"]), 2)
        r = subprocess.run([sys.executable, str(out / "distlab"), "grade", "--solutions"], cwd=out,
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("student repository", r.stderr)

    def test_submit_packs_only_owned_files(self) -> None:
        z = self.tmp / "sub.zip"
        r = distlab("submit", "-o", str(z))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with zipfile.ZipFile(z) as zf:
            self.assertEqual(sorted(zf.namelist()), sorted(SOLUTION))


class TestMutants(GraderTestCase):
    @staticmethod
    def patch(name: str, ref: str, text: str) -> str:
        import difflib
        path = "solutions/01_fix/fix.cpp"
        diff = difflib.unified_diff(ref.splitlines(keepends=True), text.splitlines(keepends=True),
                                    f"a/{path}", f"b/{path}")
        return f"# MUTANT {name}: a planted change\n" + "".join(diff)

    def test_mutants_caught_escaped_and_broken(self) -> None:
        ref = (KIT / "solutions" / "01_fix" / "fix.cpp").read_text()
        planted = {
            "twice_triples": ref.replace("return add(a, a);", "return add(a, add(a, a));"),
            "same_behaviour": ref.replace("return a + b;", "return b + a;"),
        }
        folder = KIT / "grader" / "mutants" / "01_fix"
        try:
            for name, text in planted.items():
                (folder / name).mkdir(parents=True, exist_ok=True)
                (folder / name / "mutant.patch").write_text(self.patch(name, ref, text))
            (folder / "unnamed").mkdir(parents=True, exist_ok=True)
            (folder / "unnamed" / "mutant.patch").write_text(
                "// no header\n" + self.patch("x", ref, planted["twice_triples"]).partition("\n")[2])
            # A patch whose context no longer matches the reference: broken, not silently applied.
            stale = self.patch("stale", ref.replace("return a + b;", "return a  +  b;"),
                               planted["same_behaviour"].replace("return b + a;", "return b  +  a;"))
            (folder / "stale").mkdir(parents=True, exist_ok=True)
            (folder / "stale" / "mutant.patch").write_text(stale)
            r = distlab("mutants", "01_fix", "--fast")
            out = r.stdout + r.stderr
            self.assertEqual(r.returncode, 1, out)
            self.assertRegex(out, r"caught\s+01_fix/twice_triples\s.*first by twice")
            self.assertRegex(out, r"ESCAPED 01_fix/same_behaviour\s+(\d+)/\1 ")
            self.assertRegex(out, r"BROKEN\s+01_fix/unnamed\s.*# MUTANT unnamed:")
            self.assertRegex(out, r"BROKEN\s+01_fix/stale\s.*no longer applies")
            self.assertRegex(out, r"overall\s+1/4")
            r = distlab("release", str(self.tmp / "released"), "--force")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertFalse((self.tmp / "released" / "grader" / "mutants").exists())
        finally:
            shutil.rmtree(KIT / "grader" / "mutants", ignore_errors=True)


class TestGolden(GraderTestCase):
    def test_golden_writes_then_reproduces_within_tolerance(self) -> None:
        golden = KIT / "grader/golden/01_fix"
        try:
            r = distlab("golden")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(sorted(p.name for p in golden.iterdir()), ["twice.npy", "twice.txt"])
            r = distlab("golden", "--check")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("reproduce", r.stdout)
            txt = golden / "twice.txt"
            txt.write_text(txt.read_text().replace("= 3\n", "= 3.0000000001\n"))  # within rtol
            self.assertEqual(distlab("golden", "--check").returncode, 0)
            txt.write_text(txt.read_text().replace("= 3.0000000001\n", "= 3.1\n"))  # beyond
            r = distlab("golden", "--check")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("twice.txt: number", r.stdout)
            npy = golden / "twice.npy"
            data = bytearray(npy.read_bytes())
            data[-1] ^= 0x40  # flip a bit of the last double's exponent
            npy.write_bytes(bytes(data))
            r = distlab("golden", "--check")
            self.assertIn("twice.npy: element 3", r.stdout)
        finally:
            shutil.rmtree(golden, ignore_errors=True)


class TestTodoLine(unittest.TestCase):
    """The grade's terminal lists every unimplemented function of a module, wrapped."""

    def test_every_name_wrapped_at_the_width(self) -> None:
        from pydistlab.report import _wrapped
        names = [f"function_{i}" for i in range(12)]
        self.assertEqual(_wrapped("  m: ", names[:3], 110), "  m: function_0, function_1, function_2")
        text = _wrapped("  m: ", names, 60)
        lines = text.splitlines()
        self.assertGreater(len(lines), 1)
        self.assertTrue(all(len(line) <= 60 for line in lines), text)
        self.assertTrue(all(line.startswith("     ") for line in lines[1:]), text)
        shown = [n.strip().rstrip(",") for line in lines for n in line[len("  m: "):].split(", ")]
        self.assertEqual(shown, names)
        self.assertEqual(_wrapped("  m: ", ["x" * 80, "y"], 40), "  m: " + "x" * 80 + ",\n     y")


class TestGoldenTolerance(unittest.TestCase):
    """The .npy comparison of `golden --check`: rounding-level differences from another ISA pass,
    a real change of the reference does not (pure comparisons, no build)."""

    @staticmethod
    def npy(values: list[float], code: str = "f", descr: str = "<f4") -> bytes:
        header = repr({"descr": descr, "fortran_order": False, "shape": (len(values),)}).encode()
        header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
        return (b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header
                + struct.pack(f"<{len(values)}{code}", *values))

    def test_rounding_differences_pass_real_changes_fail(self) -> None:
        from pydistlab.golden import compare_file
        want = [0.25, -0.125, 3.0e-4, 1.0e-6, 0.0]
        # A few units in the last place of the array's largest value, even on tiny elements (the
        # cancellation case: 3e-4 computed as a difference of ~0.1-sized terms).
        ulp = 0.25 * 2.0 ** -23
        noisy = [w + 3 * ulp for w in want]
        self.assertEqual(compare_file(self.npy(noisy), self.npy(want), "a.npy", 1e-6, 1e-9, 10), "")
        # Beyond terms * u * max|want|: caught, with the allowed difference in the message.
        self.assertIn("element 2", compare_file(self.npy([0.25, -0.125, 3.0e-4 + 1e-5, 1e-6, 0.0]),
                                                self.npy(want), "a.npy", 1e-6, 1e-9, 10))
        # A 1e-3 relative change of every element fails even with 655 terms.
        changed = [w * (1 + 1e-3) for w in want]
        self.assertIn("a.npy: element 0", compare_file(self.npy(changed), self.npy(want), "a.npy",
                                                       1e-6, 1e-9, 655))
        # Integer arrays must match exactly, whatever the terms.
        self.assertIn("exactly", compare_file(self.npy([1, 2], "i", "<i4"), self.npy([1, 3], "i", "<i4"),
                                              "y.npy", 1e-6, 1e-9, 655))
        # A NaN where a number was expected never passes.
        self.assertNotEqual(compare_file(self.npy([float("nan")] + want[1:]), self.npy(want), "a.npy",
                                         1e-6, 1e-9, 655), "")


class TestGradescope(GraderTestCase):
    def test_autograder_zip_and_run_autograder(self) -> None:
        ag = self.tmp / "autograder"
        r = distlab("gradescope-zip", str(self.tmp / "autograder.zip"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with zipfile.ZipFile(self.tmp / "autograder.zip") as zf:
            names = zf.namelist()
            self.assertIn("run_autograder", names)
            self.assertIn("distlab/solutions/01_fix/fix.cpp", names)        # instructor mode needs it
            self.assertIn("distlab/grader/hidden/01_fix/CMakeLists.txt", names)
            self.assertIn("distlab/grader/hidden/01_fix/items.toml", names)
            zf.extractall(ag / "source")
        for p in (ag / "source").rglob("*"):
            if p.name in ("distlab", "run_autograder", "setup.sh"):
                os.chmod(p, 0o755)
        (ag / "submission").mkdir()
        (ag / "submission/fix.cpp").write_text(SOLUTION["exercises/01_fix/fix.cpp"])  # dropped in alone
        r = subprocess.run(["bash", str(ag / "source/run_autograder")], capture_output=True, text=True,
                           env=dict(os.environ, AUTOGRADER_ROOT=str(ag)), timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        data = json.loads((ag / "results/results.json").read_text())
        tests = {t["name"]: t for t in data["tests"]}
        self.assertEqual(tests["01_fix/add"]["status"], "passed")
        self.assertEqual(tests["01_fix/add_large"]["status"], "passed")
        self.assertEqual(tests["01_fix/add_large"]["visibility"], "after_published")
        self.assertEqual(tests["02_dep/quadruple"]["score"], 0)
        # DISTLAB_MODULES: an assignment that covers part of the course grades only its modules.
        r = subprocess.run(["bash", str(ag / "source/run_autograder")], capture_output=True, text=True,
                           env=dict(os.environ, AUTOGRADER_ROOT=str(ag), DISTLAB_MODULES="01_fix"), timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        names = [t["name"] for t in json.loads((ag / "results/results.json").read_text())["tests"]]
        self.assertIn("01_fix/add", names)
        self.assertFalse([n for n in names if n.startswith("02_dep/")], names)


class TestStudentMode(GraderTestCase):
    def test_blocked_by_an_earlier_module(self) -> None:
        fix = KIT / "exercises/01_fix/fix.cpp"
        dep = KIT / "exercises/02_dep/dep.cpp"
        saved = fix.read_text(), dep.read_text()
        try:
            fix.write_text(fix_cpp("return a + b +;"))
            dep.write_text(SOLUTION["exercises/02_dep/dep.cpp"])
            out = self.tmp / "student"
            r = distlab("grade", "01_fix", "02_dep", "--out", str(out))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            data = json.loads((out / "results.json").read_text())
            tests = {t["name"]: t for t in data["tests"]}
            self.assertIn("does not compile", tests["01_fix/add"]["output"])
            self.assertIn("blocked by 01_fix", tests["02_dep/quadruple"]["output"])
        finally:
            fix.write_text(saved[0])
            dep.write_text(saved[1])


class TestRunner(unittest.TestCase):
    def test_filter_matching_nothing_fails(self) -> None:
        binary = KIT / "build/grade/solutions/build/bin/test_01_fix"
        if not binary.is_file():
            r = distlab("grade", "--solutions", "01_fix", "--quiet")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        oc = runner.run_test(binary, "NoSuchTest.*", 10, KIT)
        self.assertFalse(oc.passed)
        self.assertIn("no test matched", oc.reason)
        ok = runner.run_test(binary, "Fix.Add", 10, KIT)
        self.assertTrue(ok.passed, ok.reason)

    def test_missing_binary_fails(self) -> None:
        oc = runner.run_test(KIT / "no/such/binary", "*", 5, KIT)
        self.assertFalse(oc.passed)
        self.assertIn("was not built", oc.reason)


class TestStubsAndManifest(unittest.TestCase):
    def test_regions_become_todos(self) -> None:
        src = ("int f() {\n  // BEGIN SOLUTION: return the answer\n  return 42;\n  // END SOLUTION\n}\n"
               "struct S {\n    // BEGIN SOLUTION DECL: add the members you need\n    int x;\n"
               "    // END SOLUTION\n};\n")
        out = stubs.strip_solutions(src, "f.cpp")
        self.assertIn('  DISTLAB_TODO("return the answer");\n', out)
        self.assertIn("    // TODO: add the members you need\n", out)
        self.assertNotIn("42", out)
        self.assertNotIn("int x;", out)

    def test_bad_markers_name_file_and_line(self) -> None:
        for text, line in [("// BEGIN SOLUTION: a\n// BEGIN SOLUTION: b\n// END SOLUTION\n", 2),
                           ("x\n// END SOLUTION\n", 2), ("\n\n// BEGIN SOLUTION: open\n", 3),
                           ("// BEGIN SOLUTIONS here\n", 1)]:
            with self.assertRaises(stubs.MarkerError) as cm:
                stubs.strip_solutions(text, "a.cpp")
            self.assertIn(f"a.cpp:{line}:", str(cm.exception))

    def test_check_detects_drift_and_extra_files(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            sol, ex = Path(d) / "solutions", Path(d) / "exercises"
            (sol / "m").mkdir(parents=True)
            (sol / "m/a.cpp").write_text("void f() {\n  // BEGIN SOLUTION: do it\n  g();\n  // END SOLUTION\n}\n")
            stubs.sync(sol, ex)
            self.assertTrue(stubs.compare(stubs.generate(sol), ex).empty())
            (ex / "m/a.cpp").write_text("edited by hand\n")
            (ex / "m/extra.cpp").write_text("\n")
            drift = stubs.compare(stubs.generate(sol), ex)
            self.assertEqual(drift.changed, [Path("m/a.cpp")])
            self.assertEqual(drift.extra, [Path("m/extra.cpp")])

    def test_hidden_items_load_from_their_own_file(self) -> None:
        fixture = HERE / "fixture_kit/grader"
        m = mf.load(fixture / "manifest.toml")
        fix = m.modules["01_fix"]
        self.assertEqual([(t.name, t.tier) for t in fix.tests],
                         [("add", "public"), ("twice", "public"), ("add_large", "hidden")])
        self.assertEqual(fix.binary_for(fix.tests[2]), "test_01_fix_hidden")
        self.assertEqual([t.timeout_s for t in fix.tests], [10, 3, 10])   # defaults: the module's
        self.assertEqual(fix.max_points(hidden=False), 5)
        with tempfile.TemporaryDirectory() as d:   # the manifest alone, as a release has it
            p = Path(d) / "manifest.toml"
            p.write_text((fixture / "manifest.toml").read_text())
            m = mf.load(p)
            self.assertEqual([t.name for t in m.modules["01_fix"].tests], ["add", "twice"])
            self.assertEqual(m.modules["02_dep"].prerequisites, ["01_fix"])
            self.assertEqual(m.modules["02_dep"].test_binary, "test_02_dep")

    def test_manifest_mistakes_are_named(self) -> None:
        base = '[kit]\nmodules = ["m"]\n[modules.m]\nowned = ["exercises/m/m.cpp"]\n'
        cases = [
            (base + 'tests = [{ name = "a", filter = "A.*", points = 1, tier = "hidden" }]\n', None,
             "belongs in grader/hidden/m/items.toml"),
            (base + 'timout_s = 3\n', None, "unknown key(s) timout_s"),
            (base + 'tests = [{ name = "a", filter = "A.*", points = 1 }]\n',
             'tests = [{ name = "a", filter = "A.*", points = 1 }]\n', "duplicate test name 'a'"),
            (base, 'tests = [{ name = "h", filter = "H.*" }]\n', "missing 'points'"),
        ]
        for manifest, hidden, message in cases:
            with tempfile.TemporaryDirectory() as d:
                (Path(d) / "manifest.toml").write_text(manifest)
                if hidden is not None:
                    (Path(d) / "hidden/m").mkdir(parents=True)
                    (Path(d) / "hidden/m/items.toml").write_text(hidden)
                with self.assertRaises(DistlabError) as cm:
                    mf.load(Path(d) / "manifest.toml")
                self.assertIn(message, str(cm.exception))

    def test_real_manifest_loads(self) -> None:
        m = mf.load()
        for mod in m.modules.values():
            for t in mod.tests:
                self.assertGreater(t.points, 0, t.full_name)


class TestPackage(unittest.TestCase):
    def test_import_graph_is_acyclic(self) -> None:
        edges = import_graph.graph()
        self.assertIn("pydistlab.commands.grade", edges)
        self.assertIn("pydistlab.grade", edges["pydistlab.commands.grade"])
        self.assertEqual(import_graph.find_cycle(edges), [], "pydistlab has an import cycle")

    def test_a_cycle_is_found(self) -> None:
        self.assertEqual(import_graph.find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}),
                         ["a", "b", "c", "a"])

    def test_every_module_imports_without_matplotlib(self) -> None:
        code = ("import importlib, sys\n"
                "sys.modules['matplotlib'] = None  # import matplotlib raises ImportError\n"
                f"sys.path.insert(0, {str(ROOT / 'grader')!r})\n"
                "import import_graph\n"
                "for m in sorted(import_graph.graph()):\n"
                "    importlib.import_module(m)\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE,
                           env=dict(os.environ, PYTHONPATH=str(HERE)))
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
