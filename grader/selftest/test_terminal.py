"""What the terminal tells a student: which modules a module builds on (README = manifest), every
unfinished function of a module (from the TODO markers in its files), and "blocked by" when a
module's tests stop in another module's unfinished function. No build: the real kit's files and
hand-made results.

Run: python3 -m unittest test_terminal -v   (from grader/selftest)
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "grader"))

from pydistlab import deadlock, grade, manifest as mf, report, runner, unfinished  # noqa: E402
from pydistlab.results import GradeRun, ItemResult, Mode, ModuleResult  # noqa: E402

MODULE_NAME = re.compile(r"\b\d\d_[a-z][a-z0-9_]*\b")


def builds_on_problems(root: Path, man: mf.Manifest) -> list[str]:
    """Each module's README (solutions/ in the kit, exercises/ in a student repository) has one
    "Builds on:" line near the top that names exactly the manifest's prerequisites."""
    problems = []
    for name in man.order:
        readme = root / "solutions" / name / "README.md"
        if not readme.is_file():
            readme = root / "exercises" / name / "README.md"
        if not readme.is_file():
            continue
        lines = readme.read_text(encoding="utf-8").splitlines()
        found = [(i, line) for i, line in enumerate(lines) if line.startswith("Builds on:")]
        if len(found) != 1 or found[0][0] > 10:
            problems.append(f"{readme.relative_to(root)}: needs one 'Builds on:' line in its first 10 "
                            f"lines (found {len(found)})")
            continue
        said = MODULE_NAME.findall(found[0][1])
        want = man.modules[name].prerequisites if name in man.modules else []
        if sorted(said) != sorted(want):
            problems.append(f"{readme.relative_to(root)}: 'Builds on:' names {said or 'no module'}, "
                            f"grader/manifest.toml's prerequisites are {want or 'none'}")
        if not want and "no earlier module" not in found[0][1]:
            problems.append(f"{readme.relative_to(root)}: 'Builds on:' should say 'no earlier module'")
    return problems


class TestBuildsOn(unittest.TestCase):
    def test_every_readme_states_the_manifest_prerequisites(self) -> None:
        self.assertEqual(builds_on_problems(ROOT, mf.load()), [])

    def test_a_wrong_line_is_caught(self) -> None:
        man = mf.load()
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            for name in man.order:
                src = ROOT / "solutions" / name / "README.md"
                dst = root / "exercises" / name / "README.md"
                dst.parent.mkdir(parents=True)
                dst.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
            self.assertEqual(builds_on_problems(root, man), [])
            seven = root / "exercises" / "07_pipeline" / "README.md"
            seven.write_text(seven.read_text().replace("Builds on: 05_mlp", "Builds on: 03_collectives"))
            one = root / "exercises" / "01_threads" / "README.md"
            one.write_text("\n".join(line for line in one.read_text().splitlines()
                                     if not line.startswith("Builds on:")))
            problems = builds_on_problems(root, man)
            self.assertEqual(len(problems), 2, problems)
            self.assertIn("07_pipeline/README.md: 'Builds on:' names ['03_collectives']", problems[1])
            self.assertIn("01_threads/README.md: needs one 'Builds on:' line", problems[0])


class TestUnfinishedFunctions(unittest.TestCase):
    def test_markers_in_code_only_each_function_once(self) -> None:
        text = (
            '// DISTLAB_TODO("a comment is not a marker")\n'
            "namespace pp {\n"
            "const Matrix& Stage::forward(const Matrix& x,\n"
            "                             int microbatch) {\n"
            "  if (x.cols() != 3) throw std::invalid_argument(\"f(x)\");\n"
            '  DISTLAB_TODO("first part (README: Task 2)");\n'
            '  DISTLAB_TODO("second part");\n'
            "}\n"
            "/* DISTLAB_TODO(\"in a block comment\") */\n"
            "template <typename T>\n"
            "std::vector<T> gather_all(std::span<const T> in) {\n"
            '  const char* s = "DISTLAB_TODO(not code)";\n'
            "  if (in.empty()) {\n"
            '    DISTLAB_TODO("nested in a block");\n'
            "  }\n"
            "}\n"
            "int done(int a) { return a; }\n"
            "}  // namespace pp\n")
        found = unfinished.todos(text, "exercises/07_pipeline/pipeline.cpp")
        self.assertEqual([(t.line, t.function) for t in found],
                         [(6, "Stage::forward"), (7, "Stage::forward"), (14, "gather_all")])
        self.assertEqual(unfinished.function_names(found), ["Stage::forward", "gather_all"])

    def test_the_kits_stubs_list_every_todo_and_the_solutions_none(self) -> None:
        man = mf.load()
        for name in man.order:
            owned = man.modules[name].owned
            stubs = unfinished.module_todos(ROOT, owned)
            markers = sum(len(re.findall(r"^\s*DISTLAB_TODO\(", (ROOT / f).read_text(), re.M))
                          for f in owned if (ROOT / f).is_file())
            self.assertEqual(len(stubs), markers, name)
            self.assertTrue(all(t.function for t in stubs), [t for t in stubs if not t.function])
            refs = [f.replace("exercises/", "solutions/", 1) for f in owned]
            self.assertEqual(unfinished.module_todos(ROOT, refs), [], name)
        seven = unfinished.function_names(unfinished.module_todos(ROOT, man.modules["07_pipeline"].owned))
        self.assertEqual(len(seven), 22)
        self.assertEqual(seven[:3], ["stage_layers", "Stage::forward", "Stage::backward"])
        self.assertIn("one_f_one_b_plan", seven)

    def test_module_of_a_path(self) -> None:
        self.assertEqual(unfinished.module_of_path("exercises/05_mlp/mlp.cpp"), "05_mlp")
        self.assertEqual(unfinished.module_of_path("/tmp/x/exercises/07_pipeline/pipeline.cpp"), "07_pipeline")
        self.assertEqual(unfinished.module_of_path("support/src/todo.cpp"), "")


def _todo_reason(path: str, function: str) -> str:
    """The reason runner._headline gives an item that reached `function`'s TODO in the kit's stub."""
    todo = next(t for t in unfinished.todos((ROOT / path).read_text(), path) if t.function == function)
    return f"not implemented at {path}:{todo.line}: the goal (README: Task 2)"


class TestBlockedBy(unittest.TestCase):
    """07's tests run the student's 05 MLP: a TODO of 05 reached from 07 is 05's, said once as
    "blocked by 05_mlp: MLP::forward", and 07's own unfinished functions are all listed."""

    def grade_07(self, items: list[tuple[str, bool, str]]) -> tuple[GradeRun, ModuleResult]:
        man = mf.load()
        mod = man.modules["07_pipeline"]
        res = ModuleResult(mod)
        by_name = {t.name: t for t in mod.items(False)}
        for name, passed, reason in items:
            res.items.append(ItemResult(by_name[name], passed, reason, "", 0.1))
        grade._find_unfinished(res, ROOT)
        run = GradeRun("student", Mode.STUDENT, False, [res])
        return run, res

    def test_a_prerequisites_todo_blocks_and_every_own_function_is_listed(self) -> None:
        names = [t.name for t in mf.load().modules["07_pipeline"].items(False)]
        mlp = "exercises/05_mlp/mlp.cpp"
        items = [(names[0], False, _todo_reason(mlp, "MLP::forward")),
                 (names[1], False, _todo_reason(mlp, "linear_forward")),
                 (names[2], False, _todo_reason("exercises/07_pipeline/pipeline.cpp", "stage_layers")),
                 (names[3], False, "all_reduce gave 3 at element 0, expected 6")]
        items += [(n, True, "") for n in names[4:]]
        run, res = self.grade_07(items)
        self.assertEqual(res.blocked_by, {"05_mlp": ["MLP::forward", "linear_forward"]})
        self.assertEqual(report.module_status(res), "blocked by 05_mlp")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.print_table(run)
        text = out.getvalue()
        self.assertIn("07_pipeline: blocked by 05_mlp: MLP::forward, linear_forward", text)
        self.assertIn(f"07_pipeline/{names[3]}: all_reduce gave 3 at element 0, expected 6", text)
        todo = text.split("not implemented yet (")[1]
        self.assertTrue(todo.startswith("22 functions"), todo)
        for fn in unfinished.function_names(unfinished.module_todos(ROOT, res.module.owned)):
            self.assertIn(fn, todo)
        self.assertNotIn("MLP::forward", todo)   # 05's, not 07's
        self.assertNotIn(f"07_pipeline/{names[0]}:", text)
        md = report.markdown(run)
        self.assertIn("- blocked by 05_mlp: MLP::forward, linear_forward", md)
        self.assertIn("- not implemented yet: stage_layers, Stage::forward", md)
        summary = "\n".join(report.summary_lines(run))
        self.assertIn("  blocked by 05_mlp: MLP::forward, linear_forward", summary)

    def test_several_modules_an_unstarted_one_by_its_count(self) -> None:
        names = [t.name for t in mf.load().modules["07_pipeline"].items(False)]
        mlp = "exercises/05_mlp/mlp.cpp"
        items = [(n, False, _todo_reason(mlp, "MLP::forward")) for n in names]
        run, res = self.grade_07(items)
        res.notes.append("builds on 05_mlp, which did not get full marks: fix 05_mlp first")
        one = io.StringIO()
        with contextlib.redirect_stdout(one):
            report.print_table(run)
        self.assertIn("  07_pipeline: stage_layers, Stage::forward", one.getvalue())   # one module: named
        self.assertNotIn("note: builds on 05_mlp", one.getvalue())   # the blocked-by line says it
        run.modules.append(ModuleResult(mf.load().modules["05_mlp"]))
        two = io.StringIO()
        with contextlib.redirect_stdout(two):
            report.print_table(run)
        count = len(unfinished.function_names(unfinished.module_todos(ROOT, res.module.owned)))
        self.assertIn(f"  07_pipeline: {count} functions, none passing yet (./distlab grade 07_pipeline "
                      f"names them)", two.getvalue())
        self.assertNotIn("stage_layers", two.getvalue())

    def test_full_marks_lists_nothing(self) -> None:
        names = [t.name for t in mf.load().modules["07_pipeline"].items(False)]
        run, res = self.grade_07([(n, True, "") for n in names])
        self.assertEqual(res.blocked_by, {})
        self.assertEqual(report.unfinished_functions(res), [])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.print_table(run)
        self.assertNotIn("not implemented yet", out.getvalue())


class TestRunSaysOnce(unittest.TestCase):
    """`./distlab run` on a half-done module: the unfinished functions once, before the run, and
    none of the program's per-row "not implemented" lines."""

    def test_rows_about_unfinished_functions_are_left_out_and_counted(self) -> None:
        from pydistlab.commands import run
        prog = ("import sys\n"
                "print('algorithm   p  time')\n"
                "for p in (2, 3, 4):\n"
                "    print(f'ring        {p}  not implemented')\n"
                "    print(f'tree        {p}  {p * 1.5} us')\n"
                "print('error: not implemented: broadcast_ring', file=sys.stderr)\n"
                "sys.exit(3)\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = run.run_collapsed([sys.executable, "-c", prog], dict(os.environ))
        self.assertEqual(rc, 3)
        self.assertEqual(out.getvalue().splitlines(),
                         ["algorithm   p  time", "tree        2  3.0 us", "tree        3  4.5 us",
                          "tree        4  6.0 us", "(4 lines about unfinished functions left out)"])

    def test_a_deadlock_line_gets_the_modules_tag_names(self) -> None:
        from pydistlab.commands import run
        prog = "print('run_07_pipeline: rank 0: deadlock: rank 0 blocked in send(dst=1, tag=7, 2 floats)')"
        tags = deadlock.tag_names(ROOT / "exercises" / "07_pipeline")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = run.run_collapsed([sys.executable, "-c", prog], dict(os.environ),
                                   lambda line: deadlock.explain(line, tags, {}))
        self.assertEqual(rc, 0)
        self.assertEqual(out.getvalue(), "run_07_pipeline: rank 0: deadlock: rank 0 blocked in "
                                         "send(dst=1, tag=kForwardTag (7), 2 floats)\n")


#: The threads backend's report of 07's classic mistake (libdist/threads/diagnostics.cpp's words),
#: as gtest quotes it: both neighbours in a synchronous send, each at the student's file:line.
SEVEN_DEADLOCK = (
    "C++ exception with description \"rank 1: deadlock: rank 0 blocked in send(dst=1, tag=7, "
    "512 floats) at exercises/07_pipeline/pipeline.cpp:61; rank 1 blocked in send(dst=0, tag=8, "
    "512 floats) at exercises/07_pipeline/pipeline.cpp:71; rank 2 blocked in wait on irecv(src=1, "
    "tag=7, 512 floats) (started at exercises/07_pipeline/pipeline.cpp:66); rank 3 finished. Hint: "
    "rank 0 and rank 1 both send first, and send is synchronous here (it returns only once the "
    "matching recv took the data, as MPI may do for large messages): in an exchange step start the "
    "send with isend, then recv, then wait on the send (the 03 README, cost model section); "
    "ordering the calls by rank parity is also correct but takes two message times per step.\" "
    "thrown in the test body.")


class TestDeadlockReport(unittest.TestCase):
    """A deadlock in a student's 07 schedule: every blocked call with its file:line, the tags by
    07's names, and 07's advice (its paired helpers), not 03's exchange step."""

    def test_the_modules_tags_and_advice(self) -> None:
        tags = deadlock.tag_names(ROOT / "exercises" / "07_pipeline")
        self.assertEqual(tags, {7: "kForwardTag", 8: "kBackwardTag"})
        self.assertEqual(deadlock.tag_names(ROOT / "exercises" / "03_collectives"), {})
        advice = deadlock.load_advice()
        self.assertIn("send_forward_recv_backward", advice["07_pipeline"]["both_send"])
        for module, table in advice.items():
            self.assertIn(module, mf.load().order)
            self.assertTrue(set(table) <= set(deadlock.PATTERNS), table)
            # The helpers it names are the module's (declared in its header).
            header = "\n".join(h.read_text() for h in (ROOT / "exercises" / module).glob("*.hpp"))
            for name in re.findall(r"\b[a-z]+(?:_[a-z]+){2,}\b", " ".join(table.values())):
                self.assertIn(name, header, f"{module}: advice names {name}, which its headers do not")

    def test_headline_keeps_every_rank_and_the_terminal_shows_one_a_line(self) -> None:
        reason = runner._headline([f"pipeline_test.cpp:40: Failure\n{SEVEN_DEADLOCK}"], "")
        self.assertGreater(len(reason), 240)
        self.assertTrue(reason.startswith("deadlock: rank 0 blocked in send(dst=1, tag=7"), reason)
        self.assertIn("(started at exercises/07_pipeline/pipeline.cpp:66)", reason)
        man = mf.load()
        mod = man.modules["07_pipeline"]
        res = ModuleResult(mod)
        items = mod.items(False)
        res.items = [ItemResult(items[0], False, reason, SEVEN_DEADLOCK, 0.2)]
        res.items += [ItemResult(t, True, "", "", 0.1) for t in items[1:]]
        grade._find_unfinished(res, ROOT)
        said = res.items[0].reason
        self.assertIn("send(dst=1, tag=kForwardTag (7), 512 floats)", said)
        self.assertIn("send(dst=0, tag=kBackwardTag (8), 512 floats)", said)
        self.assertIn("paired helpers send_forward_recv_backward", said)
        self.assertNotIn("exchange step", said)
        self.assertNotIn("03 README", said)
        self.assertIn("tag=kForwardTag (7)", res.items[0].output)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.print_table(GradeRun("student", Mode.STUDENT, False, [res]))
        lines = out.getvalue().splitlines()
        start = lines.index(f"  07_pipeline/{items[0].name}: deadlock:")
        self.assertEqual(lines[start + 1:start + 5], [
            "      rank 0 blocked in send(dst=1, tag=kForwardTag (7), 512 floats) at "
            "exercises/07_pipeline/pipeline.cpp:61",
            "      rank 1 blocked in send(dst=0, tag=kBackwardTag (8), 512 floats) at "
            "exercises/07_pipeline/pipeline.cpp:71",
            "      rank 2 blocked in wait on irecv(src=1, tag=kForwardTag (7), 512 floats) (started at "
            "exercises/07_pipeline/pipeline.cpp:66)",
            "      rank 3 finished"])
        self.assertTrue(lines[start + 5].startswith("      hint: two neighbouring stages both send first"))
        self.assertTrue(all(len(line) <= 112 for line in lines[start + 5:start + 10]), lines[start + 5:])

    def test_a_second_deadlock_says_its_hint_is_as_above(self) -> None:
        reason = runner._headline([f"t.cpp:1: Failure\n{SEVEN_DEADLOCK}"], "")
        mod = mf.load().modules["07_pipeline"]
        items = mod.items(False)
        res = ModuleResult(mod, items=[ItemResult(items[0], False, reason, "", 0.1),
                                       ItemResult(items[1], False, reason, "", 0.1)])
        grade._find_unfinished(res, ROOT)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.print_table(GradeRun("student", Mode.STUDENT, False, [res]))
        text = out.getvalue()
        self.assertEqual(text.count("hint: two neighbouring stages both send first"), 1)
        second = text.split(f"07_pipeline/{items[1].name}: deadlock:")[1]
        self.assertIn("rank 1 blocked in send(dst=0, tag=kBackwardTag (8), 512 floats) at "
                      "exercises/07_pipeline/pipeline.cpp:71", second)
        self.assertIn("      hint: as above", second)

    def test_a_module_without_names_or_advice_keeps_the_backends_words(self) -> None:
        text = SEVEN_DEADLOCK.split('"')[1]
        self.assertEqual(deadlock.explain(text, {}, {}), text)
        named = deadlock.explain(text, {8: "kBackwardTag"}, {})
        self.assertIn("tag=7,", named)
        self.assertIn("tag=kBackwardTag (8),", named)
        self.assertIn("exchange step", named)
        self.assertEqual(deadlock.explain("all_reduce gave 3, expected 6 (tag=7)", {7: "k"}, {}),
                         "all_reduce gave 3, expected 6 (tag=7)")


class TestFailingLine(unittest.TestCase):
    """A failing item's line carries its first concrete mismatch, numbers at what they mean."""

    def test_a_heading_ending_in_a_colon_gets_the_mismatch_under_it(self) -> None:
        failure = ("test_collectives.cpp:88: Failure\nFailed\nall_reduce_ring, world size 2, count 1:\n"
                   "  rank 0: op sum, call 1 of 2: first wrong element at index 0 of 1: got 3, expected 6\n"
                   "  rank 1: op sum, call 1 of 2: first wrong element at index 0 of 1: got 3, expected 6")
        self.assertEqual(runner._headline([failure], ""),
                         "all_reduce_ring, world size 2, count 1: rank 0: op sum, call 1 of 2: "
                         "first wrong element at index 0 of 1: got 3, expected 6")
        # A long heading is shortened, never the mismatch.
        long = failure.replace("all_reduce_ring, world size 2, count 1:", "x" * 300 + ":")
        line = runner._headline([long], "")
        self.assertLessEqual(len(line), 240)
        self.assertTrue(line.endswith("first wrong element at index 0 of 1: got 3, expected 6"), line)
        # A line that says it all is taken alone.
        one = "t.cpp:1: Failure\nFailed\nbroadcast_ring, world size 3: rank 2 got 1, expected 2\n  more"
        self.assertEqual(runner._headline([one], ""), "broadcast_ring, world size 3: rank 2 got 1, expected 2")

    def test_numbers_are_rounded_to_what_they_mean(self) -> None:
        failure = ("t.cpp:9: Failure\nFailed\nall_reduce_ring, world size 4: simulated time "
                   "14.199999999999999 us, but the algorithm costs 28.399999999999999 us")
        self.assertEqual(runner._headline([failure], ""),
                         "all_reduce_ring, world size 4: simulated time 14.2 us, but the algorithm costs 28.4 us")
        r = runner.round_numbers
        self.assertEqual(r("got 0.10000000149011612, expected 0.20000000298023224"), "got 0.1, expected 0.2")
        self.assertEqual(r("1.4199999999999999e-05 s"), "1.42e-05 s")
        self.assertEqual(r("0.123456789012345678"), "0.123456789012")
        # Short numbers, versions and places are left as they are; a real difference stays.
        self.assertEqual(r("12.5 us, v1.2.3, t.cpp:12, 0.5"), "12.5 us, v1.2.3, t.cpp:12, 0.5")
        self.assertEqual(r("got 14.200001, expected 14.2"), "got 14.200001, expected 14.2")
        self.assertNotEqual(r("got 1.0000001192092896"), "got 1")   # float32's next after 1

    def test_the_terminal_shows_the_whole_reason(self) -> None:
        mod = mf.load().modules["03_collectives"]
        items = mod.items(False)
        reason = "all_reduce_ring, world size 2, count 1: rank 0: op sum, call 1 of 2: " + "y" * 100 + \
            ": first wrong element at index 0 of 1: got 3, expected 6"
        res = ModuleResult(mod, items=[ItemResult(items[0], False, reason, "", 0.1)])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.print_table(GradeRun("student", Mode.STUDENT, False, [res]))
        self.assertIn(f"03_collectives/{items[0].name}: {reason}", out.getvalue())


class TestStudentRepository(unittest.TestCase):
    """Nothing in a student repository tells the student to use what it does not contain."""

    def test_the_release_points_at_nothing_left_out(self) -> None:
        from pydistlab.commands import release
        files = release.release_files()
        self.assertEqual(release.instructor_only_mentions(files), [])
        # The kit's own texts do offer the reference: the release rewrote them.
        six = files["exercises/06_data_parallel/README.md"]
        self.assertIsInstance(six, bytes)
        self.assertIn(b"./distlab run 06_data_parallel --world-size 4 -- --sync manual", six)
        self.assertIn("--solutions", (ROOT / "exercises/06_data_parallel/README.md").read_text())

    def test_rewrites_and_a_planted_mention(self) -> None:
        from pydistlab.commands import release
        st = release.student_text
        self.assertEqual(st("Run `./distlab run 01_threads` (add `--solutions` for the reference; about 5 s) and"),
                         "Run `./distlab run 01_threads` (about 5 s) and")
        self.assertEqual(st("./distlab run 05_mlp\n./distlab run 05_mlp --solutions     # the reference\nnext\n"),
                         "./distlab run 05_mlp\nnext\n")
        self.assertEqual(st("`./distlab run 08_parameter_server --solutions --world-size 5 -- --sweep`"),
                         "`./distlab run 08_parameter_server --world-size 5 -- --sweep`")
        self.assertEqual(st("changed\n(`docs/instructor-guide.md`, \"The self-test and CI\")."), "changed.")
        planted = {"exercises/07_pipeline/README.md": b"# 07\n\nCompare: ./distlab grade --hidden 07_pipeline\n",
                   "docs/07_pipeline.md": st("see docs/authoring.md for the layout\n").encode(),
                   "grader/hints/07_pipeline.toml": b'idea = "diff against solutions with --solutions"\n',
                   "libdist/src/x.cpp": b"// --solutions is fine in a source students do not read\n"}
        self.assertEqual(release.instructor_only_mentions(planted), [
            "docs/07_pipeline.md:1: see docs/authoring.md for the layout",
            "exercises/07_pipeline/README.md:3: Compare: ./distlab grade --hidden 07_pipeline",
            'grader/hints/07_pipeline.toml:1: idea = "diff against solutions with --solutions"'])

    def test_instructor_flags_leave_a_student_repositorys_help(self) -> None:
        from unittest import mock

        from pydistlab import cli
        with mock.patch.object(cli, "is_release", return_value=True):
            text = cli.parser().format_help() + "".join(
                sub.format_help() for action in cli.parser()._subparsers._group_actions   # type: ignore[union-attr]
                for sub in action.choices.values())
        for flag in ("--solutions", "--hidden", "--submission"):
            self.assertNotIn(flag, text)
        with mock.patch.object(cli, "is_release", return_value=False):
            grade_help = cli.parser()._subparsers._group_actions[0].choices["grade"].format_help()  # type: ignore[union-attr]
        self.assertIn("--solutions", grade_help)


if __name__ == "__main__":
    unittest.main()
