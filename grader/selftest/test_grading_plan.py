"""The grading core's plan, without a build: which trees a grade makes, what each tree's plan holds
(overlay, graded modules, untrusted sources, hidden reference folders, refused headers), which
passes a grade makes, which modules the ThreadSanitizer pass builds, and which build strategy a
sandbox status gets.

Run: python3 -m unittest discover -s grader/selftest -p 'test_grading_plan.py' -v
"""
from __future__ import annotations

import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pydistlab import manifest as mf, sandbox, submission, workspace as ws  # noqa: E402
from pydistlab.grading import passes, plan, strategy  # noqa: E402
from pydistlab.paths import ROOT  # noqa: E402
from pydistlab.results import Mode, ModuleResult  # noqa: E402
from pydistlab.runner import Outcome  # noqa: E402

# In the kit's manifest: 06_data_parallel and 07_pipeline build on 05_mlp; 08_parameter_server on
# both 05_mlp and 06_data_parallel; 02_races is graded under ThreadSanitizer too.


class Trees(unittest.TestCase):
    def setUp(self) -> None:
        self.man = mf.load()

    def trees(self, names: list[str], mode: Mode) -> list[dict[str, str]]:
        return plan.plan_trees(self.man.select(names), self.man, mode)

    def test_student_mode_grades_its_own_modules_in_one_tree(self) -> None:
        self.assertEqual(self.trees(["05_mlp", "06_data_parallel"], Mode.STUDENT),
                         [{"05_mlp": "sub", "06_data_parallel": "sub"}])

    def test_solutions_mode_adds_the_prerequisites_as_references(self) -> None:
        self.assertEqual(self.trees(["06_data_parallel"], Mode.SOLUTIONS),
                         [{"05_mlp": "ref", "06_data_parallel": "sub"}])
        self.assertEqual(self.trees(["05_mlp", "06_data_parallel"], Mode.SOLUTIONS),
                         [{"05_mlp": "sub", "06_data_parallel": "sub"}])

    def test_a_submission_gets_a_tree_per_conflicting_role(self) -> None:
        # 05_mlp is graded from the submission and is 06's prerequisite (the reference there).
        self.assertEqual(self.trees(["05_mlp", "06_data_parallel", "08_parameter_server"], Mode.SUBMISSION),
                         [{"05_mlp": "sub"}, {"06_data_parallel": "sub", "05_mlp": "ref"},
                          {"08_parameter_server": "sub", "05_mlp": "ref", "06_data_parallel": "ref"}])
        # Modules that agree on their prerequisites share one tree.
        self.assertEqual(self.trees(["06_data_parallel", "07_pipeline"], Mode.SUBMISSION),
                         [{"06_data_parallel": "sub", "05_mlp": "ref", "07_pipeline": "sub"}])
        self.assertEqual([plan.tree_id("mutants", i) for i in range(3)], ["mutants", "mutants-2", "mutants-3"])


class TreePlans(unittest.TestCase):
    def setUp(self) -> None:
        self.man = mf.load()
        self.results = {n: ModuleResult(self.man.modules[n], hidden=True) for n in ("06_data_parallel",)}

    def submitted(self, files: dict[str, bytes]) -> submission.Submission:
        return submission.Submission(label="s", files=files)

    def test_submission_tree_overlays_its_files_and_hides_the_references(self) -> None:
        cpp = b"// the student's data parallel\n"
        t = plan.plan_tree("t", {"06_data_parallel": "sub", "05_mlp": "ref"}, self.man, Mode.SUBMISSION,
                           self.submitted({"exercises/06_data_parallel/data_parallel.cpp": cpp}), self.results)
        self.assertEqual(t.graded, ["06_data_parallel"])
        self.assertEqual(t.overlay["exercises/06_data_parallel/data_parallel.cpp"], cpp)
        self.assertEqual(t.overlay["exercises/05_mlp/mlp.cpp"], (ROOT / "solutions/05_mlp/mlp.cpp").read_bytes())
        # Only the graded module's sources are untrusted (headers are judged, not compiled alone).
        self.assertEqual(t.untrusted, {"06_data_parallel": ["exercises/06_data_parallel/data_parallel.cpp"]})
        # Hidden from the submission's compile: every module's files and objects but its own.
        self.assertEqual(t.hide, tuple(f"exercises/{n}/" for n in self.man.order if n != "06_data_parallel"))
        self.assertEqual(self.results["06_data_parallel"].notes,
                         ["exercises/06_data_parallel/data_parallel.hpp: not in the submission; graded the stub"])

    def test_a_refused_header_makes_the_module_not_gradable_and_builds_the_stub(self) -> None:
        hpp = "exercises/06_data_parallel/data_parallel.hpp"
        bad = b'#pragma once\n#include "/etc/passwd"\n'
        t = plan.plan_tree("t", {"06_data_parallel": "sub", "05_mlp": "ref"}, self.man, Mode.SUBMISSION,
                           self.submitted({hpp: bad}), self.results)
        res = self.results["06_data_parallel"]
        self.assertEqual(t.graded, [])
        self.assertEqual(res.status, "not gradable")
        self.assertIn("data_parallel.hpp", res.message)
        self.assertEqual(t.overlay[hpp], (ROOT / hpp).read_bytes())     # the kit's stub instead

    def test_solutions_tree_is_every_reference(self) -> None:
        t = plan.plan_tree("t", {"06_data_parallel": "sub", "05_mlp": "ref"}, self.man, Mode.SOLUTIONS, None,
                           self.results)
        self.assertEqual(t.overlay, ws.solution_overlay(self.man.order, self.man))
        self.assertEqual(t.graded, ["06_data_parallel"])


class Passes(unittest.TestCase):
    def test_a_grade_makes_a_plain_pass_then_thread_sanitizer(self) -> None:
        first, then = passes.passes_for(passes.GradeOptions())
        self.assertEqual((first.kind, then and then.kind), ("plain", "tsan"))
        self.assertFalse(first.rerun or first.sanitized)
        assert then is not None
        self.assertTrue(then.rerun and then.sanitized)
        self.assertEqual((first.timeout_factor, then.timeout_factor), (1.0, passes.TSAN_TIMEOUT_FACTOR))
        self.assertEqual((first.cache, then.cache), (ws.BASE_CACHE, ws.TSAN_CACHE))
        tb = ws.TreeBuild(Path("/g/src"), Path("/g/build"), Path("/g/build-tsan"))
        self.assertEqual((first.build_dir(tb), then.build_dir(tb)), (tb.build, tb.tsan_build))

    def test_address_sanitizer_replaces_both(self) -> None:
        first, then = passes.passes_for(passes.GradeOptions(sanitize="address"))
        self.assertEqual((first.kind, then), ("asan", None))
        self.assertTrue(first.sanitized and not first.rerun)
        self.assertEqual((first.cache, first.env, first.timeout_factor),
                         (ws.ASAN_CACHE, ws.ASAN_ENV, passes.ASAN_TIMEOUT_FACTOR))
        tb = ws.TreeBuild(Path("/g/src"), Path("/g/build"), Path("/g/build-tsan"))
        self.assertEqual(first.build_dir(tb), Path("/g/build-asan"))

    def test_the_mutants_order_goes_to_every_pass(self) -> None:
        order = passes.Order(first=("some_item",), stop_early=True)
        first, then = passes.passes_for(passes.GradeOptions(order=order))
        self.assertEqual((first.order, then and then.order), (order, order))
        self.assertEqual(passes.passes_for(passes.GradeOptions())[0].order, passes.Order())

    def test_thread_sanitizer_builds_only_modules_with_a_passed_item(self) -> None:
        man = mf.load()
        results = {n: ModuleResult(man.modules[n], hidden=False) for n in ("01_threads", "02_races")}
        ok, bad = Outcome(True, "", "", 0.1), Outcome(False, "wrong", "", 0.1)
        built = ["01_threads", "02_races"]
        some = {("01_threads", "a"): ok, ("02_races", "a"): ok, ("02_races", "b"): bad}
        self.assertEqual(passes.tsan_modules(built, results, some, passes.Order()), ["02_races"])
        # stop_early: a module that already failed an item needs no ThreadSanitizer run.
        self.assertEqual(passes.tsan_modules(built, results, some, passes.Order(stop_early=True)), [])
        none = {("02_races", "a"): bad}
        self.assertEqual(passes.tsan_modules(built, results, none, passes.Order()), [])


class Strategies(unittest.TestCase):
    def choose(self, status: str, mode: Mode, untrusted: dict[str, list[str]] | None = None) -> strategy.BuildStrategy:
        with tempfile.TemporaryDirectory() as tmp:
            tb = ws.TreeBuild(Path(tmp) / "src", Path(tmp) / "build", Path(tmp) / "build-tsan")
            tb.src.mkdir()
            tree = plan.TreePlan("t", {}, [], untrusted or {})
            return strategy.choose(sandbox.Status(status), mode, tb, tb.build, tree, mf.load())

    def test_only_a_submission_is_judged(self) -> None:
        own = {"03_collectives": ["exercises/03_collectives/collectives.cpp"]}
        sub = self.choose("bwrap", Mode.SUBMISSION, own)
        assert isinstance(sub, strategy.Bubblewrap)
        self.assertEqual(list(sub.judged), ["03_collectives"])
        for mode in (Mode.STUDENT, Mode.SOLUTIONS):
            other = self.choose("bwrap", mode, own)
            assert isinstance(other, strategy.Bubblewrap)
            self.assertEqual(other.judged, {})
            self.assertEqual(other.check_sources("03_collectives", own["03_collectives"]), "")

    def test_each_status_gets_its_strategy(self) -> None:
        self.assertIs(type(self.choose("off", Mode.SUBMISSION)), strategy.NoSandbox)
        self.assertIs(type(self.choose("limits-only", Mode.SOLUTIONS)), strategy.TrustedOnly)
        self.assertIs(type(self.choose("off", Mode.SOLUTIONS)), strategy.TrustedOnly)
        bw = self.choose("bwrap", Mode.SOLUTIONS)     # the references compiled as untrusted too
        self.assertIs(type(bw), strategy.Bubblewrap)
        self.assertTrue(bw.stops_dependents)
        assert isinstance(bw, strategy.Bubblewrap)
        self.assertIn("bwrap", bw.trusted_prefix or [])
        self.assertIn("bwrap", bw.untrusted_prefix)

    def test_no_sandbox_compiles_nothing_apart(self) -> None:
        none = self.choose("off", Mode.STUDENT)
        self.assertIsNone(none.trusted_prefix)
        self.assertFalse(none.up_to_date(["x"]))
        self.assertEqual(none.recompiled(["x"], {"m": ["o"]}), {})


if __name__ == "__main__":
    unittest.main()


class CleanCopy(unittest.TestCase):
    def test_the_clean_copy_leaves_out_what_students_do_not_get(self) -> None:
        # A submission's compile reads the clean copy: the instructors' guide, the mutants, the
        # Gradescope scripts are not in it (the hidden tests only when they are graded).
        from pydistlab.paths import LEFT_OUT
        for hidden in (False, True):
            names = set(ws._tree_files(hidden))
            self.assertIn("libdist/include/dist/dist.hpp", names)
            left = sorted(n for n in names
                          if n.startswith(LEFT_OUT) and not (hidden and n.startswith("grader/hidden/")))
            self.assertEqual(left, [])
            self.assertEqual(any(n.startswith("grader/hidden/") for n in names), hidden)
        self.assertIn("docs/instructor-guide.md", LEFT_OUT)
