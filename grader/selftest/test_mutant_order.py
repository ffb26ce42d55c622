"""The mutants' shortcuts keep every check: the recorded first catch runs first and the other
items follow in manifest order; the groups put pinned modules where they must go; a mutant caught
before is skipped only while nothing its grade depends on has changed (its fingerprint).

Run: python3 -m unittest discover -s grader/selftest -p 'test_mutant_order.py' -v
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pydistlab import manifest as mf  # noqa: E402
from pydistlab.commands import mutants  # noqa: E402
from pydistlab.errors import DistlabError  # noqa: E402
from pydistlab.grading import items, passes  # noqa: E402
from pydistlab.results import ModuleResult  # noqa: E402


class MutantOrder(unittest.TestCase):
    def test_first_catch_runs_first_and_no_item_is_dropped(self) -> None:
        mod = mf.load().modules["03_collectives"]
        names = [i.name for i in mod.items(True)]
        last = names[-1]
        def jobs(first: tuple[str, ...] = ()) -> list[items.Job]:
            return items.test_jobs([ModuleResult(mod, hidden=True)], Path("/bin"), Path("/src"), True,
                                   passes.PLAIN.ordered(passes.Order(first=first)))
        order = [j.item.name for j in jobs((last,))]
        self.assertEqual(order[0], last)
        self.assertEqual(order[1:], names[:-1])            # the others, in manifest order
        plain = jobs()
        self.assertEqual([j.item.name for j in plain], names)
        unknown = jobs(("no_such_item",))
        self.assertEqual([j.item.name for j in unknown], names)

    def test_every_recorded_first_catch_is_an_item_of_its_module(self) -> None:
        man = mf.load()
        known = {f"{m}/{d.name}" for m, d in mutants.discover([])}
        for key, item in mutants.first_catches().items():
            with self.subTest(mutant=key):
                self.assertIn(key, known, "a record for a mutant that does not exist")
                module = key.split("/")[0]
                self.assertIn(item, [i.name for i in man.modules[module].items(True)])

    def test_pinned_modules_go_to_their_group(self) -> None:
        found = mutants.discover([])
        groups = mutants.split_groups(found, 2, {"02_races": 1})
        self.assertIn("02_races", groups[1])
        self.assertEqual(sorted(n for g in groups for n in g), sorted({m for m, _ in found}))


    def test_selectors_name_modules_or_single_mutants(self) -> None:
        found = mutants.discover([])
        one = next(f.name for m, f in found if m == "05_mlp")
        picked = mutants.discover(["07", f"05_mlp/{one}"])
        self.assertEqual([(m, f.name) for m, f in picked][0], ("05_mlp", one))
        self.assertEqual({m for m, _ in picked}, {"05_mlp", "07_pipeline"})
        self.assertEqual(mutants.selectors_of(picked), [f"05_mlp/{one}", "07_pipeline"])
        self.assertEqual(mutants.discover(mutants.selectors_of(picked)), picked)
        with self.assertRaises(DistlabError):
            mutants.discover(["05_mlp/no_such_mutant"])


class Fingerprints(unittest.TestCase):
    """A small kit in a temporary folder: which edits change which mutants' fingerprints."""

    FILES = ["libdist/src/x.cpp", "docs/guide.md", "README.md", "grader/selftest/test_x.py",
             "grader/pydistlab/grade.py", "grader/pydistlab/commands/plot_x.py", "grader/mutants/README.md",
             "solutions/01_threads/threads.cpp", "solutions/05_mlp/mlp.cpp", "grader/tests/05_mlp/test.cpp",
             "grader/hidden/05_mlp/hidden.cpp", "grader/hints/05_mlp.toml", "solutions/06_data_parallel/dp.cpp",
             "grader/mutants/01_threads/a/mutant.patch", "grader/mutants/05_mlp/b/mutant.patch",
             "grader/mutants/05_mlp/c/mutant.patch", "grader/mutants/06_data_parallel/d/mutant.patch"]

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        for f in self.FILES:
            (self.root / f).parent.mkdir(parents=True, exist_ok=True)
            (self.root / f).write_text(f"{f}\n")
        self.found = [(m, self.root / "grader" / "mutants" / m / x)
                      for m, x in [("01_threads", "a"), ("05_mlp", "b"), ("05_mlp", "c"), ("06_data_parallel", "d")]]
        self.before = mutants.fingerprints(self.found, self.root)

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def changed_by(self, path: str, text: str = "edited\n") -> set[str]:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        (self.root / path).write_text(text)
        after = mutants.fingerprints(self.found, self.root)
        self.assertEqual(after.keys(), self.before.keys())
        changed = {k for k in after if after[k] != self.before[k]}
        self.before = after    # the next edit is compared with this state
        return changed

    def test_every_mutant_has_its_own(self) -> None:
        self.assertEqual(set(self.before), {"01_threads/a", "05_mlp/b", "05_mlp/c", "06_data_parallel/d"})
        self.assertEqual(len(set(self.before.values())), 4)
        self.assertEqual(mutants.fingerprints(self.found, self.root), self.before)

    def test_a_module_edit_regrades_it_and_the_modules_built_on_it(self) -> None:
        # 06_data_parallel builds on 05_mlp (prerequisites in grader/manifest.toml): 05's sources
        # are built into 06's grade, 05's tests and hints are not.
        for path in ["solutions/05_mlp/mlp.cpp", "solutions/05_mlp/new_file.hpp", "exercises/05_mlp/mlp.cpp"]:
            with self.subTest(path=path):
                self.assertEqual(self.changed_by(path), {"05_mlp/b", "05_mlp/c", "06_data_parallel/d"})
        for path in ["grader/tests/05_mlp/test.cpp", "grader/hidden/05_mlp/hidden.cpp", "grader/hints/05_mlp.toml",
                     "grader/golden/05_mlp/out.txt"]:
            with self.subTest(path=path):
                self.assertEqual(self.changed_by(path), {"05_mlp/b", "05_mlp/c"})
        self.assertEqual(self.changed_by("solutions/06_data_parallel/dp.cpp"), {"06_data_parallel/d"})
        self.assertEqual(self.changed_by("solutions/01_threads/threads.cpp"), {"01_threads/a"})

    def test_a_mutant_edit_regrades_only_it(self) -> None:
        self.assertEqual(self.changed_by("grader/mutants/05_mlp/c/mutant.patch"), {"05_mlp/c"})

    def test_shared_code_regrades_all(self) -> None:
        every = set(self.before)
        for path in ["libdist/src/x.cpp", "grader/pydistlab/grade.py", "libdist/src/new.cpp", "CMakeLists.txt"]:
            with self.subTest(path=path):
                self.assertEqual(self.changed_by(path), every)

    def test_documentation_and_unittests_regrade_none(self) -> None:
        for path in ["docs/guide.md", "README.md", "grader/selftest/test_x.py", "grader/pydistlab/commands/plot_x.py",
                     "grader/mutants/README.md", "grader/mutants/first_catches.json", "grader/mutants/caught.json",
                     "grader/hidden/05_mlp/promises.toml"]:
            with self.subTest(path=path):
                self.assertEqual(self.changed_by(path), set())

    def test_the_nccl_backend_regrades_none(self) -> None:
        # A grade's trees are configured without NCCL: these files are never compiled there.
        for path in ["libdist/nccl/nccl_ops.cpp", "libdist/nccl/new.hpp", "libdist/tests/test_nccl.cpp",
                     "libdist/tests/test_device_cuda.cpp", "grader/tests/10_streams/test_streams_nccl.cpp"]:
            with self.subTest(path=path):
                self.assertEqual(self.changed_by(path), set())

    def test_the_same_files_elsewhere_give_the_same_fingerprints(self) -> None:
        # The record is committed: a fresh clone in another folder must find it holds.
        with tempfile.TemporaryDirectory() as other:
            there = Path(other) / "clone"
            shutil.copytree(self.root, there)
            found = [(m, there / "grader" / "mutants" / m / f.name) for m, f in self.found]
            self.assertEqual(mutants.fingerprints(found, there), self.before)

    def test_a_deleted_file_counts(self) -> None:
        (self.root / "libdist/src/x.cpp").unlink()
        after = mutants.fingerprints(self.found, self.root)
        self.assertTrue(all(after[k] != self.before[k] for k in after))


if __name__ == "__main__":
    unittest.main()
