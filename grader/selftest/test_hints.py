"""Hints and TODO texts: every exercise function has three levels of hints, no TODO text gives away
a line of its solution, and the hint command answers and names the valid choices.

Run: python3 -m unittest discover -s grader/selftest -p test_hints.py -v   (or ./distlab test)
"""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "grader"))

from pydistlab import hints, manifest as mf, runner, stubs  # noqa: E402
from pydistlab.commands import hint as hint_cmd  # noqa: E402
from pydistlab.errors import DistlabError  # noqa: E402
from pydistlab.paths import CXX_EXTENSIONS, SOLUTIONS  # noqa: E402

# A definition line at column 0 whose name is followed by '(' (a function or a method): an
# optional return type (ending at a non-name character), then the name; a constructor defined
# out of class (`Class::Class(...)`) has no return type.
_DEF = re.compile(r"^(?![/#]|namespace\b|using\b|static_assert\b)(?:[A-Za-z].*?[^A-Za-z_0-9:])?"
                  r"([A-Za-z_][A-Za-z_0-9:]*)\s*\(")
#: A solution line this long (non-space characters, after dropping `return` and the final `;`)
#: must not appear in its TODO text.
MIN_LINE = 20
#: What a TODO text must not be written as: an assignment or update (`y = x W^T`, `p -= lr * g`)
#: or index arithmetic (`rank - s - 1`, `step * world_size`, `2^k`, `XOR`). Say the goal instead.
ASSIGNMENT = re.compile(r"[\w\]\)]\s*(?:[-+*/]?=)\s*[\w(]")
ARITHMETIC = re.compile(r"\w\s+[-+*/%]\s+\w|\w[*/%^]\w|\bXOR\b")


def todo_functions() -> dict[str, list[tuple[str, stubs.Region]]]:
    """Module -> [(function, region)] for every non-DECL solution region of solutions/."""
    out: dict[str, list[tuple[str, stubs.Region]]] = {}
    for path in sorted(SOLUTIONS.rglob("*")):
        if path.suffix not in CXX_EXTENSIONS or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for region in stubs.regions(text, str(path)):
            if region.decl:
                continue
            name = next((m.group(1) for j in range(region.line - 2, -1, -1)
                         if (m := _DEF.match(lines[j]))), None)
            if name is None:
                raise AssertionError(f"{path}:{region.line}: no enclosing function found")
            module = path.relative_to(SOLUTIONS).parts[0]
            out.setdefault(module, []).append((name, region))
    return out


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _code_line(line: str) -> str:
    """A solution line without whitespace, comments, a leading `return` and a final `;`/`{`."""
    s = _squash(line.split("//", 1)[0])
    s = s.removeprefix("return")
    return s.rstrip(";{")


class TestHintFiles(unittest.TestCase):
    def test_every_todo_function_has_three_levels(self) -> None:
        functions = todo_functions()
        self.assertEqual(sorted(functions), sorted(mf.load().order),
                         "every module with exercises has TODO regions in solutions/")
        for module, found in functions.items():
            table = hints.load(module)
            for name, _region in found:
                with self.subTest(module=module, function=name):
                    h = hints.find(table, module, name)
                    self.assertEqual(len(h.levels), 3)
                    for level in h.levels:
                        self.assertGreater(len(level), 20, f"{module} {name}: a level is nearly empty")

    def test_no_hint_for_a_function_that_does_not_exist(self) -> None:
        functions = todo_functions()
        for module, found in functions.items():
            keys = {hints._key(n) for n, _ in found}
            for name in hints.load(module):
                with self.subTest(module=module, hint=name):
                    self.assertIn(hints._key(name), keys,
                                  f"grader/hints/{module}.toml has a hint for {name!r}, which is not "
                                  f"an exercise function of {module}")


class TestTodoTexts(unittest.TestCase):
    def test_no_todo_text_contains_a_line_of_its_solution(self) -> None:
        for module, found in todo_functions().items():
            for name, region in found:
                todo = _squash(region.todo)
                for line in region.code:
                    code = _code_line(line)
                    if len(code) >= MIN_LINE:
                        with self.subTest(module=module, function=name, line=line.strip()):
                            self.assertNotIn(code, todo, f"the TODO of {module} {name} gives away a "
                                             f"line of the solution")

    def test_no_todo_text_is_a_formula(self) -> None:
        for module, found in todo_functions().items():
            for name, region in found:
                for pattern in (ASSIGNMENT, ARITHMETIC):
                    hit = pattern.search(region.todo)
                    with self.subTest(module=module, function=name):
                        self.assertIsNone(hit, f"the TODO of {module} {name} writes the answer as a "
                                          f"formula ({hit.group(0) if hit else ''!r} in {region.todo!r}): "
                                          f"state the goal and where to read; formulas go in the hints")

    def test_no_hint_contains_a_line_of_its_solution(self) -> None:
        for module, found in todo_functions().items():
            table = hints.load(module)
            for name, region in found:
                text = _squash(" ".join(hints.find(table, module, name).levels))
                for line in region.code:
                    code = _code_line(line)
                    if len(code) >= MIN_LINE:
                        with self.subTest(module=module, function=name, line=line.strip()):
                            self.assertNotIn(code, text, f"a hint of {module} {name} is a line of "
                                             f"the solution")

    def test_solution_markers_fit_in_100_columns(self) -> None:
        for path in sorted(SOLUTIONS.rglob("*")):
            if path.suffix not in CXX_EXTENSIONS or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if "BEGIN SOLUTION" in line:
                    self.assertLessEqual(len(line), 100, f"{path}:{number}")

    def test_the_checks_catch_transcribed_todos(self) -> None:
        self.assertIn(_code_line("  return step * world_size + rank;"), _squash("step * world_size + rank"))
        for todo in ("dW = dy^T x (shape out x in, like W)", "step * world_size + rank",
                     "isend block (rank - s) to the right", "for every parameter p: p->value -= lr * p->grad",
                     "exchange buf with rank XOR m"):
            self.assertTrue(ASSIGNMENT.search(todo) or ARITHMETIC.search(todo), todo)


class TestStubContinuation(unittest.TestCase):
    def test_continuation_lines_join_and_rewrap(self) -> None:
        src = ("void f() {\n  // BEGIN SOLUTION: the goal, said in words that go on and on so that the\n"
               "  //   marker needs a second line (README: Task 1)\n  g();\n  // END SOLUTION\n}\n")
        out = stubs.strip_solutions(src, "f.cpp")
        self.assertNotIn("g();", out)
        self.assertIn('  DISTLAB_TODO("the goal, said in words that go on and on so that the marker needs a '
                      'second line "\n               "(README: Task 1)");\n', out)
        self.assertTrue(all(len(line) <= 100 for line in out.splitlines()))
        (region,) = stubs.regions(src, "f.cpp")
        self.assertEqual(region.todo, "the goal, said in words that go on and on so that the marker needs "
                                      "a second line (README: Task 1)")
        self.assertEqual(region.code, ["  g();"])

    def test_a_comment_with_one_space_is_code(self) -> None:
        src = "void f() {\n  // BEGIN SOLUTION: do it\n  // a comment of the solution\n  g();\n  // END SOLUTION\n}\n"
        out = stubs.strip_solutions(src, "f.cpp")
        self.assertIn('DISTLAB_TODO("do it");', out)
        self.assertNotIn("a comment of the solution", out)


class TestHeadline(unittest.TestCase):
    def test_a_todo_names_its_place_first(self) -> None:
        failure = ('C++ exception with description "not implemented: ' + "the goal " * 40 +
                   '(exercises/05_mlp/mlp.cpp:150)" thrown in the test body.')
        line = runner._headline([failure], "")
        self.assertLessEqual(len(line), 240)
        self.assertTrue(line.startswith("not implemented at exercises/05_mlp/mlp.cpp:150: the goal"), line)


class TestHintCommand(unittest.TestCase):
    def run_hint(self, module: str, function: str | None, level: int = 1) -> str:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = hint_cmd.main(argparse.Namespace(module=module, function=function, level=level))
        self.assertEqual(rc, 0)
        return buf.getvalue()

    def test_levels_reveal_progressively(self) -> None:
        one = self.run_hint("03_collectives", "all_reduce_ring", 1)
        three = self.run_hint("03", "all_reduce_ring", 3)
        self.assertIn("hint 1 of 3", one)
        self.assertNotIn("hint 2 of 3", one)
        self.assertIn("--level 2", one)
        self.assertIn("hint 3 of 3", three)
        self.assertTrue(three.startswith(one.split("more:")[0].rstrip()[:200]))

    def test_methods_without_their_class(self) -> None:
        self.assertIn("MLP::backward", self.run_hint("05_mlp", "backward"))

    def test_list(self) -> None:
        out = self.run_hint("07_pipeline", None)
        self.assertIn("run_1f1b", out)
        self.assertIn("Stage::forward", out)

    def test_unknown_names_list_the_valid_ones(self) -> None:
        with self.assertRaises(DistlabError) as e:
            self.run_hint("03_collectives", "all_reduce_tree")
        self.assertIn("all_reduce_ring", str(e.exception))
        self.assertIn("broadcast_tree", str(e.exception))
        with self.assertRaises(DistlabError) as e:
            self.run_hint("08_nothing", "x")
        self.assertIn("03_collectives", str(e.exception))
        with self.assertRaises(DistlabError):
            self.run_hint("03_collectives", "all_reduce_ring", 4)


if __name__ == "__main__":
    unittest.main()
