"""The contract's sentences and the promise ledger's coverage of them
(grader/pydistlab/coverage.py, `./distlab promises`) on a miniature module.

Run: python3 -m unittest discover -s grader/selftest -p test_coverage.py -v
"""
from __future__ import annotations

import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydistlab import coverage  # noqa: E402

HEADER = """\
#pragma once
// 1. Sums.

/// TODO. Returns the sum of a and b, e.g. add(1, 2) == 3; never
///   throws. Overflow is undefined.
int add(int a, int b);

/* Given. Returns
 * the product of a and b. */
int mul(int a, int b);

struct Config {
  int n = 4;     // how many values
  int seed = 1;  // one seed for every rank and a
                 // fixed order of the draws
};
const char* url = "http://example.org";
}  // namespace toy
"""
README = """\
# 99_toy: a toy

The toy adds two numbers. It never allocates.

```
./distlab run 99_toy   # not prose. Not a sentence.
```

| a | b |
|---|---|
| table. | cells. |

- add is exact for every pair of ints that does not overflow.
- mul rounds nothing.
<!-- a note for instructors. -->

## Questions

Why is add exact?
"""
LEDGER = """\
[[promise]]
id = "add.sum"
where = "solutions/99_toy/toy.hpp"
says = "Returns the sum of a and b, e.g. add(1, 2) == 3; never throws."
kind = "values"
condition = "both signs"
tests = ["Add.Small"]

[[promise]]
id = "readme.exact"
where = "solutions/99_toy/README.md"
says = "add is exact for every pair of ints"
kind = "values"
condition = "large ints"
tests = ["Add.Large"]
"""


def texts(sentences: list[coverage.Sentence]) -> list[str]:
    return [s.text for s in sentences]


class Sentences(unittest.TestCase):
    def test_header_comments_split_into_sentences_with_their_lines(self) -> None:
        found = coverage.header_sentences(HEADER, "toy.hpp")
        self.assertEqual([(s.line, s.text) for s in found], [
            (4, "Returns the sum of a and b, e.g. add(1, 2) == 3; never throws."),
            (5, "Overflow is undefined."),
            (8, "Returns the product of a and b."),
            (13, "how many values"),
            (14, "one seed for every rank and a fixed order of the draws"),
        ])

    def test_code_strings_section_titles_and_closing_namespaces_are_not_sentences(self) -> None:
        found = " ".join(texts(coverage.header_sentences(HEADER, "toy.hpp")))
        for left_out in ("example.org", "Sums", "namespace", "TODO", "Given", "#pragma", "int add"):
            self.assertNotIn(left_out, found)

    def test_readme_prose_without_code_tables_comments_and_questions(self) -> None:
        found = coverage.readme_sentences(README, "README.md")
        self.assertEqual([(s.line, s.text) for s in found], [
            (3, "The toy adds two numbers."),
            (3, "It never allocates."),
            (13, "add is exact for every pair of ints that does not overflow."),
            (14, "mul rounds nothing."),
        ])

    def test_abbreviations_and_numbered_items_do_not_end_a_sentence(self) -> None:
        found = coverage.readme_sentences("Use a pool, i.e. few threads. Step 2. is next. Done.\n", "R.md")
        self.assertEqual(texts(found), ["Use a pool, i.e. few threads.", "Step 2. is next.", "Done."])


class Rule(unittest.TestCase):
    def test_says_containing_the_sentence_covers_it(self) -> None:
        self.assertTrue(coverage.covers("Returns the sum. Never throws.", "Never throws."))

    def test_sentence_containing_the_says_covers_it(self) -> None:
        self.assertTrue(coverage.covers("never throws", "Returns the sum; never throws."))

    def test_comment_markers_and_emphasis_are_normalised_as_the_checker_does(self) -> None:
        self.assertTrue(coverage.covers("returns the **sum** of `a`\n// and b", "returns the sum of a and b"))

    def test_a_shared_run_of_eight_words_covers_and_seven_do_not(self) -> None:
        eight = "one two three four five six seven eight"
        self.assertTrue(coverage.covers(f"A {eight} B.", f"C, {eight.upper()}, D."))
        seven = "one two three four five six seven"
        self.assertFalse(coverage.covers(f"A {seven} B.", f"C {seven} D."))

    def test_unrelated_or_empty_text_does_not_cover(self) -> None:
        self.assertFalse(coverage.covers("returns the product", "Returns the sum of a and b."))
        self.assertFalse(coverage.covers("", "Returns the sum."))


class Module(unittest.TestCase):
    def kit(self, ledger: str | None) -> Path:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        root = Path(tmp.name)
        files = {"solutions/99_toy/toy.hpp": HEADER, "solutions/99_toy/README.md": README}
        if ledger is not None:
            files["grader/hidden/99_toy/promises.toml"] = ledger
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(textwrap.dedent(text))
        return root

    def test_covered_and_uncovered_sentences_with_file_and_line(self) -> None:
        c = coverage.coverage("99_toy", self.kit(LEDGER))
        self.assertEqual(len(c.sentences), 9)
        self.assertEqual(c.covered, 2)
        self.assertIn(("solutions/99_toy/toy.hpp", 5, "Overflow is undefined."),
                      [(s.file, s.line, s.text) for s in c.uncovered])
        self.assertNotIn("add is exact for every pair of ints that does not overflow.", texts(c.uncovered))
        self.assertEqual(c.line(), "99_toy: 9 sentences, 2 covered by a promise row (22%)")

    def test_no_ledger_covers_nothing_and_the_overall_line_adds_up(self) -> None:
        root = self.kit(None)
        none = coverage.coverage("99_toy", root)
        self.assertEqual(none.covered, 0)
        both = [none, coverage.coverage("99_toy", self.kit(LEDGER))]
        self.assertEqual(coverage.overall(both), "all modules: 18 sentences, 2 covered by a promise row (11%)")


if __name__ == "__main__":
    unittest.main()
