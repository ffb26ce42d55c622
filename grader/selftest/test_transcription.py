"""The transcription check: no formula of a solution region stands in what a student reads (README,
comments and TODO texts of the C++ files, hint levels 1-2, docs/NN_*.md).

Run: python3 -m unittest discover -s grader/selftest -p test_transcription.py -v
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "grader"))

from pydistlab import manifest as mf, transcription as tr  # noqa: E402
from pydistlab.errors import DistlabError  # noqa: E402

SOLUTION = """#include "topic.hpp"

std::vector<int> shuffled(int n, Gen& gen) {
  // BEGIN SOLUTION: a permutation of 0..n-1, drawn from gen (topic.hpp: shuffled)
  std::vector<int> p(n);
  for (int i = n - 1; i > 0; --i) {
    const auto j = static_cast<int>(gen() % (i + 1));
    std::swap(p[i], p[j]);
  }
  const int warmup = std::min(stages - stage - 1, microbatches);
  return p;
  // END SOLUTION
}
"""


class TestFragments(unittest.TestCase):
    def test_names_and_spacing_do_not_hide_a_formula(self) -> None:
        self.assertIn("gen ( ) % ( I + 1 )", tr.fragments("  const std::size_t j = gen() % (i + 1);"))
        self.assertIn("min ( I - I - 1 , I )", tr.fragments("  plan.warmup = std::min(p - r - 1, m);"))
        self.assertIn("0.1 * ( 2 * to_unit ( gen ( ) ) - 1 )",
                      tr.fragments("  for (double& x : w) x = 0.1 * (2.0 * to_unit(gen()) - 1.0);"))

    def test_a_bare_call_or_a_short_loop_is_no_formula(self) -> None:
        self.assertEqual(tr.fragments("  dist::send(buf, dst, tag);"), [])
        self.assertEqual(tr.fragments("  for (int s = 0; s < p - 1; ++s) {"), [])
        self.assertEqual(tr.fragments("  x = y + 1;"), [])


class TestPlantedGiveaways(unittest.TestCase):
    """A module folder with one solution region, and giveaways planted where a student reads."""

    def setUp(self) -> None:
        self.tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.tmp)
        (self.tmp / "solutions" / "99_topic").mkdir(parents=True)
        (self.tmp / "docs").mkdir()
        (self.tmp / "hints").mkdir()
        (self.tmp / "solutions" / "99_topic" / "topic.cpp").write_text(SOLUTION)
        self.write(readme="Shuffle 0..n-1 so that every permutation is equally likely.\n",
                   header="/// A permutation of 0..n-1 drawn from gen, the same for the same gen.\n",
                   doc="Fisher and Yates walk from the back and swap.\n",
                   idea="walk from the back", structure="one loop", details="j = gen() % (i + 1)")

    def write(self, *, readme: str, header: str, doc: str, idea: str, structure: str, details: str) -> None:
        (self.tmp / "solutions" / "99_topic" / "README.md").write_text(readme)
        (self.tmp / "solutions" / "99_topic" / "topic.hpp").write_text(header + "int shuffled();\n")
        (self.tmp / "docs" / "99_topic.md").write_text(doc)
        (self.tmp / "hints" / "99_topic.toml").write_text(
            f'["shuffled"]\nidea = "{idea}"\nstructure = "{structure}"\ndetails = "{details}"\n')

    def found(self, config: tr.Config | None = None) -> list[tr.Finding]:
        config = config or tr.Config(frozenset(), {})
        sources = tr.reading("99_topic", self.tmp / "solutions", self.tmp / "docs", self.tmp / "hints")
        return tr.scan("99_topic", sources, tr.solution_fragments("99_topic", self.tmp / "solutions"),
                       config.allow.get("99_topic", frozenset()))

    def test_clean_module_passes_and_level_3_may_give_the_formula(self) -> None:
        self.assertEqual(self.found(), [])

    def test_each_place_a_student_reads_is_caught(self) -> None:
        plants = {
            "readme": ("exercises/99_topic/README.md:2", "then swap p[i] with p[k], k = gen() % (i+1)\n"),
            "header": ("exercises/99_topic/topic.hpp:1", "/// for each i: j = gen()%(i + 1), swap\n"),
            "doc": ("docs/99_topic.md:1", "warmup is `min(p - r - 1, m)` on stage r\n"),
            "idea": ("hints/99_topic.toml (levels 1-2):1", "draw idx = gen() % (k + 1)"),
            "structure": ("hints/99_topic.toml (levels 1-2):2", "warm-up std::min(S-s-1, M) steps"),
        }
        base = {"readme": "Shuffle.\n", "header": "", "doc": "", "idea": "walk", "structure": "loop",
                "details": "x"}
        for place, (where, text) in plants.items():
            with self.subTest(place=place):
                args = dict(base)
                args[place] = (base[place] + text) if place in ("readme", "header") else text
                self.write(**args)
                found = self.found()
                self.assertEqual(len(found), 1, [str(f) for f in found])
                self.assertTrue(found[0].where.endswith(where.split("/", 1)[-1]), found[0].where)
                self.assertIn("topic.cpp:", found[0].solution)
                self.assertIn("hint level 3", str(found[0]))

    def test_a_todo_text_in_a_stub_is_read_too(self) -> None:
        text = SOLUTION.replace("(topic.hpp: shuffled)", "(j = gen() % (i + 1))")
        (self.tmp / "solutions" / "99_topic" / "topic.cpp").write_text(text)
        found = self.found()
        self.assertEqual([f.where for f in found], ["exercises/99_topic/topic.cpp:4"])

    def test_a_call_sequence_written_as_code_is_caught(self) -> None:
        ring = ("void step(std::span<float> out, std::span<float> in, int left, int right) {\n"
                "  // BEGIN SOLUTION: one exchange step (README: cost model)\n"
                "  auto w = dist::isend(std::span<const float>(out), right);\n"
                "  dist::recv(in.subspan(0, in.size()), left);\n"
                "  w.wait();\n"
                "  dist::reduce_into(out, in, op);\n"
                "  // END SOLUTION\n}\n")
        (self.tmp / "solutions" / "99_topic" / "ring.cpp").write_text(ring)
        self.write(readme="Each step sends and receives at the same time: isend, then recv, then wait.\n",
                   header="", doc="", idea="a", structure="b", details="c")
        self.assertEqual(self.found(), [], "the calls named in prose are no code")
        self.write(readme="A step: `auto r = dist::isend(buf, to); dist::recv(tmp, from); r.wait();`\n",
                   header="", doc="", idea="a", structure="b", details="c")
        found = self.found()
        self.assertEqual([f.fragment for f in found], ["calls: isend recv wait"])
        self.assertIn("call sequence", str(found[0]))
        self.assertIn("ring.cpp:3", found[0].solution)

    def test_the_code_of_a_stub_is_not_prose(self) -> None:
        (self.tmp / "solutions" / "99_topic" / "given.cpp").write_text(
            "int given(Gen& gen, int i) { return gen() % (i + 1); }  // given code\n")
        self.assertEqual(self.found(), [])

    def test_an_allowed_formula_is_not_reported(self) -> None:
        self.write(readme="Shuffle: j = gen() % (i + 1).\n", header="", doc="", idea="a", structure="b",
                   details="c")
        self.assertEqual(len(self.found()), 1)
        allowed = tr.Config(frozenset(), {"99_topic": frozenset({"gen ( ) % ( I + 1 )"})})
        self.assertEqual(self.found(allowed), [])

    def test_config_rows_need_a_reason(self) -> None:
        path = self.tmp / "t.toml"
        path.write_text('[[allow]]\nmodule = "99_topic"\nfragment = "a + b"\n')
        with self.assertRaises(DistlabError) as e:
            tr.load_config(path)
        self.assertIn("why", str(e.exception))


class TestKit(unittest.TestCase):
    def test_no_module_prints_its_solution(self) -> None:
        config = tr.load_config()
        for module in mf.load().order:
            if module in config.pending:
                continue
            with self.subTest(module=module):
                found = tr.findings(module, config)
                self.assertEqual([str(f) for f in found], [])

    def test_pending_and_allowed_modules_exist(self) -> None:
        config = tr.load_config()
        order = set(mf.load().order)
        self.assertLessEqual(set(config.pending) | set(config.allow), order)


if __name__ == "__main__":
    unittest.main()
