"""`./distlab new-module NAME`: the files it writes, in every place a module lives, and what they
hold (no build: fast). With DISTLAB_NEW_MODULE_E2E=1, also end to end on a copy of the kit: the
reference scores full marks with the hidden tests, the stub zero, exercises/ stays in sync and the
mutant is caught (builds the library and the module: minutes; docs/authoring.md has the times).

Run: python3 -m unittest discover -s grader/selftest -p test_new_module.py -v   (or ./distlab test)
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import tomllib
except ModuleNotFoundError:   # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "grader"))

from pydistlab import hints, manifest as mf, promises, stubs, tree  # noqa: E402
from pydistlab.audit import rules  # noqa: E402
from pydistlab.commands import mutants, new_module  # noqa: E402
from pydistlab.errors import DistlabError  # noqa: E402

NAME = "11_example"
#: Every place a module lives (docs/authoring.md): what new-module writes.
CREATED = ["docs/11_example.md",
           "grader/hidden/11_example/CMakeLists.txt", "grader/hidden/11_example/items.toml",
           "grader/hidden/11_example/promises.toml",
           "grader/hidden/11_example/test_example_hidden.cpp", "grader/hints/11_example.toml",
           "grader/mutants/11_example/add_subtracts/mutant.patch",
           "grader/tests/11_example/CMakeLists.txt", "grader/tests/11_example/test_example.cpp",
           "solutions/11_example/CMakeLists.txt", "solutions/11_example/README.md",
           "solutions/11_example/example.cpp", "solutions/11_example/example.hpp",
           "solutions/11_example/main.cpp",
           "exercises/11_example/CMakeLists.txt", "exercises/11_example/README.md",
           "exercises/11_example/example.cpp", "exercises/11_example/example.hpp",
           "exercises/11_example/main.cpp"]
EDITED = ["CMakeLists.txt", "README.md", "grader/manifest.toml", "grader/mutants/README.md"]


def small_kit(root: Path) -> None:
    """The files new-module edits, copied from this kit (it creates the rest)."""
    for p in EDITED:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / p, root / p)


class TestNewModuleFiles(unittest.TestCase):
    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="distlab-new-module-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        small_kit(self.root)

    def test_every_place_a_module_lives(self) -> None:
        before = {p: (self.root / p).read_text() for p in EDITED}
        written = new_module.create(self.root, NAME, "an example module")
        self.assertEqual(written, sorted(CREATED[:14]) + CREATED[14:] + EDITED)
        for p in EDITED:
            self.assertNotEqual((self.root / p).read_text(), before[p], p)
        man = mf.load(self.root / "grader/manifest.toml")
        self.assertEqual(man.order[-1], NAME)
        m = man.modules[NAME]
        self.assertEqual([(t.name, t.tier) for t in m.tests], [("add", "public"), ("hidden_add", "hidden")])
        self.assertEqual(m.owned, ["exercises/11_example/example.hpp", "exercises/11_example/example.cpp"])
        manifest_text = (self.root / "grader/manifest.toml").read_text()
        self.assertRegex(manifest_text, r"# BEGIN MODULE 11_example\n(.*\n)*# END MODULE 11_example\n$")
        cmake = (self.root / "CMakeLists.txt").read_text()
        self.assertRegex(cmake, r"set\(DISTLAB_MODULES [^)]*10_streams\s[^)]*\b11_example\)")  # appended last
        self.assertIn("| [11_example](exercises/11_example/) |", (self.root / "README.md").read_text())
        self.assertEqual(promises.check(NAME, self.root), [])

    def test_stub_hints_mutant_and_audit(self) -> None:
        new_module.create(self.root, NAME, "an example module")
        ref = (self.root / "solutions/11_example/example.cpp").read_text()
        stub = (self.root / "exercises/11_example/example.cpp").read_text()
        self.assertIn("return a + b;", ref)
        self.assertNotIn("return a + b;", stub)
        self.assertIn('DISTLAB_TODO("return the sum of the two arguments (README: Tasks, 1)");', stub)
        drift = stubs.compare(stubs.generate(self.root / "solutions"), self.root / "exercises")
        self.assertTrue(drift.empty())
        table = hints.load(NAME, self.root / "grader/hints")
        h = hints.find(table, NAME, "add")
        self.assertEqual(len(h.levels), 3)
        self.assertTrue(all(len(level) > 20 for level in h.levels))
        patch = (self.root / "grader/mutants/11_example/add_subtracts/mutant.patch").read_text().splitlines()
        self.assertTrue(patch[0].startswith("# MUTANT add_subtracts: "))
        mutated = mutants.apply_patch(ref.splitlines(), patch[1:])
        self.assertIn("  return a - b;", mutated)
        items = tomllib.loads((self.root / "grader/hidden/11_example/items.toml").read_text())
        self.assertEqual(items["tests"][0]["filter"], "HiddenAdd.*")
        self.assertIn("TEST(HiddenAdd, LargeNumbers)",
                      (self.root / "grader/hidden/11_example/test_example_hidden.cpp").read_text())
        self.assertIn("TEST(Add, SmallNumbers)", (self.root / "grader/tests/11_example/test_example.cpp").read_text())
        for f in ("example.hpp", "example.cpp"):
            path = f"exercises/11_example/{f}"
            self.assertEqual(rules.audit_text(path, (self.root / "solutions/11_example" / f).read_text(),
                                              (self.root / path).read_text()), [])

    def test_refuses_a_bad_or_taken_name_and_writes_nothing(self) -> None:
        before = sorted(p for p in self.root.rglob("*"))
        for bad in ("example", "1_example", "11-example", "11_Example", "03_collectives"):
            with self.subTest(bad), self.assertRaises(DistlabError) as e:
                new_module.create(self.root, bad)
            self.assertRegex(str(e.exception), "a module name is two digits|exists already")
        self.assertEqual(sorted(p for p in self.root.rglob("*")), before)
        (self.root / "README.md").write_text("no table here\n")
        with self.assertRaises(DistlabError) as e:
            new_module.create(self.root, NAME)
        self.assertIn("README.md", str(e.exception))
        self.assertFalse((self.root / "solutions").exists())


@unittest.skipUnless(os.environ.get("DISTLAB_NEW_MODULE_E2E"), "set DISTLAB_NEW_MODULE_E2E=1 (builds: minutes)")
class TestNewModuleEndToEnd(unittest.TestCase):
    def test_reference_full_stub_zero_mutant_caught(self) -> None:
        kit = Path(tempfile.mkdtemp(prefix="distlab-new-module-kit-"))
        self.addCleanup(shutil.rmtree, kit, True)
        tree.mirror({p: ROOT / p for p in tree.kit_files(ROOT)}, kit)
        os.chmod(kit / "distlab", 0o755)

        def distlab(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, str(kit / "distlab"), *args], cwd=kit, text=True,
                                  capture_output=True, stdin=subprocess.DEVNULL, timeout=3600)

        r = distlab("new-module", NAME)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for args, score in ((("--solutions", NAME, "--hidden"), 2), ((NAME,), 0)):
            out = kit / "report" / args[0].strip("-")
            r = distlab("grade", *args, "--out", str(out))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(json.loads((out / "results.json").read_text())["score"], score, r.stdout)
        r = distlab("check", "--stubs")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = distlab("mutants", NAME)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(re.search(r"caught +11_example/add_subtracts", r.stdout), r.stdout)


if __name__ == "__main__":
    unittest.main()
