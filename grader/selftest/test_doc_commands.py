"""Every `./distlab ...` command shown in the README files and docs/ is one the CLI accepts.

Cheap (nothing is built or run): each command line of a code block is parsed with the CLI's own
parser, its module names must be modules of the manifest, and a `run MODULE --backend mpi|nccl`
must name a program that takes --backend (its main.cpp adds the launch flags) and does not
refuse any backend but threads. A renamed flag or
command, a module that was renamed, or an example that cannot work then fails here instead of
in a student's terminal.

Run: python3 -m unittest discover -s grader/selftest -p 'test_doc_commands.py' -v
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "grader"))

from pydistlab import cli, manifest as mf  # noqa: E402

#: Commands that only parse in the instructors' kit are still checked here (this is the kit).
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "exercises").glob("*/README.md"))]


def doc_commands() -> list[tuple[str, str]]:
    """(where, command line) for every `./distlab ...` line inside a fenced code block."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        inside = False
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            if line.lstrip().startswith("```"):
                inside = not inside
                continue
            text = line.strip()
            if inside and text.startswith("./distlab "):
                found.append((f"{doc.relative_to(ROOT)}:{number}", text))
    return found


def words(line: str) -> list[str]:
    """The arguments of a documented command: comments and [optional] parts dropped."""
    line = re.sub(r"\s#.*$", "", line)
    line = re.sub(r"\[[^\]]*\]", "", line)
    return shlex.split(line)[1:]


class DocCommands(unittest.TestCase):
    def test_every_documented_command_parses(self) -> None:
        man = mf.load()
        commands = doc_commands()
        self.assertGreater(len(commands), 10)
        for where, line in commands:
            argv = words(line)
            if any(w.isupper() or "..." in w for w in argv):
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
                        self.assertFalse("use --backend threads" in text,
                                         f"{where}: `{line}`: {module}'s program runs on threads only")


if __name__ == "__main__":
    unittest.main()
