"""The promise ledger's checker (grader/pydistlab/promises.py) on a miniature module."""
from __future__ import annotations

import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydistlab import promises  # noqa: E402

HEADER = """\
#pragma once
// Returns the sum of a and b; never
//   throws.
int add(int a, int b);
"""
PUBLIC = """\
#include <gtest/gtest.h>
TEST(Add, Small) { EXPECT_EQ(add(1, 2), 3); }
// TEST(Add, Commented) {}
/* TEST(Add, InABlock) {} */
"""
HIDDEN = """\
#include <gtest/gtest.h>
TEST_P(HiddenAdd, Large) { EXPECT_EQ(add(1 << 20, 1), (1 << 20) + 1); }
"""
ROW = """\
[[promise]]
id = "{id}"
where = "solutions/99_toy/toy.hpp"
says = "{says}"
kind = "{kind}"
condition = "both signs"
tests = [{tests}]
"""


def row(id: str = "add.sum", says: str = "Returns the sum of a and b; never throws.", kind: str = "values",
        tests: str = '"Add.Small", "hidden:HiddenAdd.Large"') -> str:
    return ROW.format(id=id, says=says, kind=kind, tests=tests)


class Ledger(unittest.TestCase):
    def kit(self, ledger: str | None) -> Path:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        root = Path(tmp.name)
        files = {"solutions/99_toy/toy.hpp": HEADER, "grader/tests/99_toy/test_toy.cpp": PUBLIC,
                 "grader/hidden/99_toy/test_toy_hidden.cpp": HIDDEN}
        if ledger is not None:
            files["grader/hidden/99_toy/promises.toml"] = ledger
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(textwrap.dedent(text))
        return root

    def test_tests_are_found_outside_comments(self) -> None:
        root = self.kit(None)
        self.assertEqual(promises.tests_of("99_toy", root), {"Add.Small", "hidden:HiddenAdd.Large"})

    def test_a_complete_ledger_passes(self) -> None:
        self.assertEqual(promises.check("99_toy", self.kit(row())), [])

    def test_quotation_across_comment_lines_matches(self) -> None:
        root = self.kit(row(says="sum of a and b; never throws"))
        self.assertEqual(promises.check("99_toy", root), [])

    def test_missing_ledger_is_reported_with_what_to_do(self) -> None:
        problems = promises.check("99_toy", self.kit(None))
        self.assertTrue(any("no promise ledger" in p for p in problems), problems)
        self.assertTrue(any("Add.Small observes no promise" in p for p in problems), problems)

    def test_a_test_no_promise_names_is_reported(self) -> None:
        problems = promises.check("99_toy", self.kit(row(tests='"Add.Small"')))
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("hidden:HiddenAdd.Large observes no promise", problems[0])

    def test_a_promise_without_tests_is_reported(self) -> None:
        problems = promises.check("99_toy", self.kit(row() + row(id="add.other", tests="")))
        self.assertTrue(any("add.other" in p and "tests" in p for p in problems), problems)

    def test_a_quotation_the_file_does_not_say_is_reported(self) -> None:
        problems = promises.check("99_toy", self.kit(row(says="returns the product")))
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("does not say", problems[0])

    def test_an_unknown_test_kind_and_duplicate_id_are_reported(self) -> None:
        problems = promises.check("99_toy", self.kit(row() + row(kind="vibes", tests='"Add.Nope"')))
        text = "\n".join(problems)
        self.assertIn("kind 'vibes'", text)
        self.assertIn("appears twice", text)
        self.assertIn("Add.Nope, which is not a test", text)

    def test_hidden_tests_need_the_prefix(self) -> None:
        problems = promises.check("99_toy", self.kit(row(tests='"Add.Small", "HiddenAdd.Large"')))
        self.assertTrue(any("HiddenAdd.Large, which is not a test" in p for p in problems), problems)


if __name__ == "__main__":
    unittest.main()
