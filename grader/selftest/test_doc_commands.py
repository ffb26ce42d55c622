"""Every `./distlab ...` command shown in the README files and docs/ is one the CLI accepts.

Cheap (nothing is built or run): each command line of a code block is parsed with the CLI's own
parser, its module names must be modules of the manifest, and a `run MODULE --backend mpi|nccl`
must name a program that takes --backend (its main.cpp adds the launch flags). A renamed flag or
command, or a module that was renamed, then fails here instead of in a student's terminal. The
self-test's `commands` step runs them (grader/pydistlab/doc_commands.py); the tests below also
check that its list of commands it leaves out matches the docs and that a failing command fails.

Run: python3 -m unittest discover -s grader/selftest -p 'test_doc_commands.py' -v
"""
from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "grader"))

from pydistlab import cli, doc_commands as dc, manifest as mf  # noqa: E402


class DocCommands(unittest.TestCase):
    def test_every_documented_command_parses(self) -> None:
        man = mf.load()
        commands = dc.doc_commands()
        self.assertGreater(len(commands), 10)
        for c in commands:
            where, line, argv = c.where, c.line, c.argv
            if c.is_pattern:
                continue   # a usage pattern (MODULE, FILE.png, ...), not an example
            with self.subTest(where=where, command=line):
                after = argv[argv.index("--") + 1:] if "--" in argv else []
                head = argv[:argv.index("--")] if "--" in argv else argv
                err = io.StringIO()
                try:
                    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                        args, unknown = cli.parser().parse_known_args(head)
                except SystemExit:
                    self.fail(f"{where}: the CLI rejects `{line}`: {err.getvalue().strip()}")
                if not getattr(args, "passthrough", False):
                    self.assertEqual(unknown + after, [], f"{where}: unknown arguments in `{line}`")
                names = ([args.module] if getattr(args, "module", None) else []) + \
                    list(getattr(args, "modules", None) or [])
                for name in names:
                    try:
                        module = mf.resolve_name(name, man.order)
                    except Exception as e:  # noqa: BLE001 (the manifest's own error says why)
                        self.fail(f"{where}: `{line}`: {e}")
                    if args.command == "run" and (args.backend or "threads") != "threads":
                        main = ROOT / "solutions" / module / "main.cpp"
                        if not main.is_file():
                            main = ROOT / "exercises" / module / "main.cpp"
                        text = main.read_text(encoding="utf-8")
                        self.assertTrue("add_launch_options" in text,
                                        f"{where}: `{line}`: {module}'s program has no --backend flag")

    def test_not_run_list_matches_the_docs(self) -> None:
        """Each entry of NOT_RUN leaves out a documented command (no stale entry), and every
        documented `run`, `hint` and `doctor` example is run."""
        commands = [c for c in dc.doc_commands() if not c.is_pattern]
        for key in dc.NOT_RUN:
            with self.subTest(key=key):
                self.assertTrue(any(" ".join(c.argv) == key or " ".join(c.argv).startswith(key + " ")
                                    for c in commands), f"NOT_RUN[{key!r}] matches no documented command")
        for c in commands:
            if c.argv[0] in ("run", "hint", "doctor"):
                self.assertEqual(dc.not_run_reason(c), "", f"{c.where}: `{c.line}` is not run")

    def test_a_failing_command_fails(self) -> None:
        """A documented command that fails (here: a hint for a function that does not exist) is
        reported as failed, with its exit status and output; `run` gets --solutions."""
        bad = dc.DocCommand("README.md:1", "./distlab hint 03_collectives no_such_function",
                            ["hint", "03_collectives", "no_such_function"])
        with tempfile.TemporaryDirectory() as tmp:
            o = dc.run_one(bad, Path(tmp), cap_s=60)
        self.assertFalse(o.ok)
        self.assertIn("exit status", o.detail)
        run = dc.DocCommand("x.md:2", "./distlab run 05_mlp -- --bench 3", ["run", "05_mlp", "--", "--bench", "3"])
        self.assertEqual(dc.runnable_argv(run, Path("/t")), ["run", "--solutions", "05_mlp", "--", "--bench", "3"])
        self.assertEqual(dc.same_key(["run", "--solutions", "05_mlp"]), dc.same_key(["run", "05_mlp", "--solutions"]))


if __name__ == "__main__":
    unittest.main()
