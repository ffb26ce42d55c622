"""The mutants' shortcuts keep every check: the recorded first catch runs first and the other
items follow in manifest order; the groups put pinned modules where they must go.

Run: python3 -m unittest discover -s grader/selftest -p 'test_mutant_order.py' -v
"""
from __future__ import annotations

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pydistlab import grade, manifest as mf  # noqa: E402
from pydistlab.commands import mutants  # noqa: E402
from pydistlab.results import ModuleResult  # noqa: E402


class MutantOrder(unittest.TestCase):
    def test_first_catch_runs_first_and_no_item_is_dropped(self) -> None:
        mod = mf.load().modules["03_collectives"]
        names = [i.name for i in mod.items(True)]
        last = names[-1]
        jobs = grade._test_jobs([ModuleResult(mod, hidden=True)], Path("/bin"), Path("/src"), True,
                                first=[last])
        order = [j[1].name for j in jobs]
        self.assertEqual(order[0], last)
        self.assertEqual(order[1:], names[:-1])            # the others, in manifest order
        plain = grade._test_jobs([ModuleResult(mod, hidden=True)], Path("/bin"), Path("/src"), True)
        self.assertEqual([j[1].name for j in plain], names)
        unknown = grade._test_jobs([ModuleResult(mod, hidden=True)], Path("/bin"), Path("/src"), True,
                                   first=["no_such_item"])
        self.assertEqual([j[1].name for j in unknown], names)

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


if __name__ == "__main__":
    unittest.main()
