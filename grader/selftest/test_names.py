"""One name for the thread-simulated backend: "the threads backend".

It is selected as `dist::Backend::Threads` / `--backend threads`, lives in libdist/threads/, is
described in docs/threads_backend.md, its C++ namespace is `dist::detail::threads` and its CTest
label `threads_backend`. The names it had before (the old doc file's name, a "fake" namespace,
"engine" in the old comments: OLD_NAMES) must not come back in any tracked file: a student reading
the docs, the error texts and the sources should meet one name. Cheap: reads the tracked files.

Run: python3 -m unittest discover -s grader/selftest -p test_names.py -v   (or ./distlab test)
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: The old names, each with the name to write instead. The patterns are written so that this file
#: does not match them itself. "fake" alone is left alone: it means other things (a planted fake
#: source file in the grader's tests, for one).
OLD_NAMES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"fake[_ -]?dist", re.IGNORECASE),
     "'the threads backend' in prose, docs/threads_backend.md for the page, 'threads_backend' in "
     "CMake target and CTest label names"),
    (re.compile(r"threads\s+engine", re.IGNORECASE), "'the threads backend'"),
    (re.compile(r"thread-simulated\s+engine", re.IGNORECASE), "'the threads backend'"),
    (re.compile(r"detail\s*::\s*fake\b"), "dist::detail::threads"),
    (re.compile(r"\bnamespace\s+fake\b"), "namespace threads (dist::detail::threads)"),
    (re.compile(r"\bfake\s*::"), "threads:: (dist::detail::threads)"),
]

#: Folders never scanned when the kit is not a git checkout (build outputs, caches).
SKIPPED_DIRS = {".git", "build", "__pycache__", ".ruff_cache"}


def tracked_files(root: Path) -> list[Path]:
    """The files git tracks under root; every file but build outputs where root is no checkout."""
    try:
        r = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        r = None
    if r is not None and r.returncode == 0 and r.stdout:
        return [root / name for name in r.stdout.decode("utf-8", "replace").split("\0") if name]
    found = []
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        found += [Path(here) / f for f in files]
    return found


def old_names_in(text: str) -> list[tuple[int, str, str]]:
    """(line number, the old name as written, what to write instead) for every old name in text."""
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, instead in OLD_NAMES:
            hits += [(number, m.group(0), instead) for m in pattern.finditer(line)]
    return hits


def old_names_in_tree(root: Path) -> list[str]:
    """One line per old name in root's tracked files (and file names): where, what, what instead."""
    problems = []
    for path in tracked_files(root):
        rel = path.relative_to(root).as_posix()
        for _, name, instead in old_names_in(rel):
            problems.append(f"{rel}: the file name has the old name '{name}': rename it to {instead}")
        try:
            text = path.read_bytes().decode("utf-8", "replace")
        except OSError:
            continue  # listed by git but deleted in the working tree
        for number, name, instead in old_names_in(text):
            problems.append(f"{rel}:{number}: '{name}' is an old name of the threads backend: "
                            f"write {instead}")
    return problems


class OneName(unittest.TestCase):
    def test_no_old_name_in_tracked_files(self) -> None:
        problems = old_names_in_tree(ROOT)
        if problems:
            self.fail(f"{len(problems)} old name(s) of the threads backend in tracked files "
                      "(exercises/ is generated: edit solutions/ and run ./distlab sync):\n"
                      + "\n".join(problems[:40]))

    def test_the_page_has_the_new_name(self) -> None:
        self.assertTrue((ROOT / "docs" / "threads_backend.md").is_file())
        self.assertFalse((ROOT / "docs" / ("fake" + "_dist.md")).exists())
        self.assertIn("namespace dist::detail::threads {",
                      (ROOT / "libdist" / "threads" / "engine.hpp").read_text(encoding="utf-8"))
        self.assertIn("LABELS threads_backend",
                      (ROOT / "libdist" / "tests" / "CMakeLists.txt").read_text(encoding="utf-8"))

    def test_every_old_name_is_caught(self) -> None:
        planted = {
            "see docs/" + "fake" + "_dist.md": "fake" + "_dist",
            "**" + "fake" + "_dist**, the default": "fake" + "_dist",
            "Fake" + " dist reports it": "Fake" + " dist",
            "ctest -L " + "fake" + "-dist": "fake" + "-dist",
            "// The " + "threads" + " engine's core": "threads" + " engine",
            "the " + "Threads" + "\tEngine": "Threads" + "\tEngine",
            "the thread-simulated" + " engine": "thread-simulated" + " engine",
            "namespace dist::detail::" + "fake {": "detail::" + "fake",
            "}  // namespace " + "fake": "namespace " + "fake",
            "auto* e = " + "fake" + "::Engine::of_this_thread(r);": "fake" + "::",
        }
        for line, name in planted.items():
            with self.subTest(line=line):
                hits = old_names_in("first line\n" + line + "\n")
                self.assertTrue(hits, f"not caught: {line!r}")
                self.assertEqual(hits[0][:2], (2, name))
                self.assertTrue(hits[0][2])  # says what to write instead

    def test_the_new_names_and_other_fakes_pass(self) -> None:
        for line in ["the threads backend's deadlock report", "docs/threads_backend.md, section 4",
                     "namespace dist::detail::threads {", "namespace threads = ::dist::detail::threads;",
                     "using threads::Engine;", "ctest -L threads_backend", "--backend threads",
                     "dist::Backend::Threads", "distlab_module(01_fix SOURCES fake.cpp)",
                     "a fake submission", "the engine mutex", "Open MPI's progress engine"]:
            with self.subTest(line=line):
                self.assertEqual(old_names_in(line), [])

    def test_a_tree_with_an_old_name_is_reported_with_file_and_line(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "docs").mkdir()
            (root / "docs" / "ok.md").write_text("the threads backend\n", encoding="utf-8")
            (root / "docs" / "old.md").write_text("one\nsee " + "fake" + "_dist here\n", encoding="utf-8")
            (root / "build").mkdir()
            (root / "build" / "log.txt").write_text("fake" + "_dist\n", encoding="utf-8")
            problems = old_names_in_tree(root)  # no git checkout: every file but build/
            self.assertEqual(len(problems), 1, problems)
            self.assertTrue(problems[0].startswith("docs/old.md:2: '" + "fake" + "_dist'"), problems)
            self.assertIn("the threads backend", problems[0])


if __name__ == "__main__":
    unittest.main()
