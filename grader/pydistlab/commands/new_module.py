"""`./distlab new-module NN_topic [--title TEXT]`: a working empty module, in every place a module
lives (docs/authoring.md lists them):

  solutions/NN_topic/       CMakeLists.txt, topic.hpp, topic.cpp (one function in a BEGIN/END
                            SOLUTION region), main.cpp (run_NN_topic), README.md
  exercises/NN_topic/       regenerated from solutions/ (./distlab sync)
  grader/tests/NN_topic/    CMakeLists.txt and test_topic.cpp (the public test)
  grader/hidden/NN_topic/   CMakeLists.txt, test_topic_hidden.cpp and items.toml
  grader/manifest.toml      the module's section between BEGIN/END MODULE comments, and its name
                            in [kit] modules
  CMakeLists.txt            its name in DISTLAB_MODULES
  grader/hints/NN_topic.toml  the three levels of hints of its function
  grader/mutants/NN_topic/  one mutant (a patch of topic.cpp) and its line in the mutants README
  docs/NN_topic.md          the course notes; README.md: a row of the modules table

The reference scores full marks, the stub zero, and the mutant is caught. Nothing is written when
the name is taken or malformed, or when a file the command edits is not as expected.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path

from .. import manifest as mf, stubs
from ..errors import DistlabError
from ..paths import ROOT, is_release

NAME = re.compile(r"(?P<num>[0-9]{2})_(?P<topic>[a-z][a-z0-9_]*)")
MUTANT = "add_subtracts"


def _files(name: str, topic: str, title: str) -> dict[str, str]:
    """The new files, by path relative to the kit root."""
    s, g, h = f"solutions/{name}", f"grader/tests/{name}", f"grader/hidden/{name}"
    return {
        f"{s}/CMakeLists.txt": f"distlab_module({name} SOURCES {topic}.cpp MAIN main.cpp)\n",
        f"{s}/{topic}.hpp": f"""// {name}: {title}.
//
// Functions marked "TODO" are yours ({topic}.cpp); "given" ones are written for you.
#pragma once

namespace {topic} {{

/// TODO. The sum of a and b (README: Tasks, 1).
int add(int a, int b);

}}  // namespace {topic}
""",
        f"{s}/{topic}.cpp": f"""#include "{topic}.hpp"

#include "distlab/todo.hpp"

namespace {topic} {{

int add(int a, int b) {{
  // BEGIN SOLUTION: return the sum of the two arguments (README: Tasks, 1)
  return a + b;
  // END SOLUTION
}}

}}  // namespace {topic}
""",
        f"{s}/main.cpp": f"""// run_{name}: calls the module's function once.
//
//   ./distlab run {name} -- -a 2 -b 3
#include <CLI/CLI.hpp>

#include <cstdio>

#include "distlab/program.hpp"
#include "{topic}.hpp"

int main(int argc, char** argv) {{
  CLI::App app{{"{name}: {title}"}};
  int a = 2;
  int b = 3;
  app.add_option("-a", a, "the first term");
  app.add_option("-b", b, "the second term");
  CLI11_PARSE(app, argc, argv);
  return distlab::run_main([&] {{
    std::printf("add(%d, %d) = %d\\n", a, b, {topic}::add(a, b));
    return 0;
  }});
}}
""",
        f"{s}/README.md": f"""# {name}: {title}

Builds on: no earlier module's code (its tests run only this module's files).

The course notes are in `docs/{name}.md`. Files: `{topic}.hpp` (read it first) and `{topic}.cpp`
(your code). Run `./distlab run {name}` and `./distlab grade {name}`.

**Prerequisites: none.**

## Tasks

| # | function(s) | difficulty | importance |
|---|---|---|---|
| 1 | `add` | easy | a placeholder: replace it with the module's first task |
""",
        f"{g}/CMakeLists.txt": f"distlab_module_tests({name} TARGET test_{name} SOURCES test_{topic}.cpp)\n",
        f"{g}/test_{topic}.cpp": f"""// The public tests of {name} (its items in grader/manifest.toml filter them).
#include <gtest/gtest.h>

#include "{topic}.hpp"

TEST(Add, SmallNumbers) {{
  EXPECT_EQ({topic}::add(2, 3), 5);
  EXPECT_EQ({topic}::add(-4, 4), 0);
}}
""",
        f"{h}/CMakeLists.txt": f"distlab_module_tests({name} TARGET test_{name}_hidden SOURCES "
                               f"test_{topic}_hidden.cpp)\n",
        f"{h}/test_{topic}_hidden.cpp": f"""// The hidden tests of {name} (instructor only).
#include <gtest/gtest.h>

#include "{topic}.hpp"

TEST(HiddenAdd, LargeNumbers) {{ EXPECT_EQ({topic}::add(1 << 20, 1 << 20), 1 << 21); }}
""",
        f"{h}/items.toml": f"""# Hidden items of {name} (instructor only: release leaves grader/hidden/ out).
# Same keys as the items in grader/manifest.toml; appended after the public ones.
tests = [
  {{ name = "hidden_add", filter = "HiddenAdd.*", points = 1 }},
]
""",
        f"{h}/promises.toml": f"""# The promise ledger of {name} (instructors; grader/pydistlab/promises.py): one row
# per promise a student could break, the condition where breaking it shows, the tests observing it.

[[promise]]
id = "add.sum"
where = "{s}/{topic}.hpp"
says = "The sum of a and b"
kind = "values"
condition = "positive, negative and large arguments"
tests = ["Add.SmallNumbers", "hidden:HiddenAdd.LargeNumbers"]
""",
        f"grader/hints/{name}.toml": f'''# Hints for {name}, one table per exercise function, three levels each:
#   ./distlab hint {name} FUNCTION [--level 1|2|3]   (idea, structure, details)
# Written for students: they explain, they never give a line of the solution.

[add]
readme = "{name} README: Tasks, 1"
idea = """The function returns a value computed from both of its arguments: which arithmetic
operation does the header's comment ask for?"""
structure = """One expression, returned: no loop and no state are needed."""
details = """Integers in the tests stay far from the limits of int, so no overflow check is
needed; negative numbers must work too."""
''',
        f"docs/{name}.md": f"""# {name}: {title}

The course notes of the module: the ideas behind its tasks, with the references to read. The
tasks themselves are in `exercises/{name}/README.md`.
""",
    }


def _mutant(name: str, topic: str, reference: str) -> tuple[str, str]:
    """(path, text) of the module's one mutant: add subtracts."""
    path = f"solutions/{name}/{topic}.cpp"
    mutated = reference.replace("  return a + b;\n", "  return a - b;\n")
    diff = difflib.unified_diff(reference.splitlines(keepends=True), mutated.splitlines(keepends=True),
                                f"a/{path}", f"b/{path}", n=3)
    head = f"# MUTANT {MUTANT}: add returns the difference of its arguments instead of their sum.\n"
    return f"grader/mutants/{name}/{MUTANT}/mutant.patch", head + "".join(diff)


def _edit(text: str, where: str, old: str, new: str) -> str:
    if old not in text:
        raise DistlabError(f"{where}: expected to find {old.strip()[:60]!r} to add the module; edit it by "
                           f"hand (docs/authoring.md lists what goes there)")
    return text.replace(old, new, 1)


def _edits(root: Path, name: str, topic: str, title: str, order: list[str]) -> dict[str, str]:
    """The new contents of the files the module is added to."""
    out: dict[str, str] = {}
    man = (root / "grader/manifest.toml").read_text(encoding="utf-8")
    listed = "modules = [" + ", ".join(f'"{m}"' for m in order) + "]"
    man = _edit(man, "grader/manifest.toml [kit]", listed,
                "modules = [" + ", ".join(f'"{m}"' for m in [*order, name]) + "]")
    out["grader/manifest.toml"] = man.rstrip("\n") + f"""

# BEGIN MODULE {name}
# {title}. Hidden items: grader/hidden/{name}/items.toml.
[modules.{name}]
owned = ["exercises/{name}/{topic}.hpp", "exercises/{name}/{topic}.cpp"]
tests = [
  {{ name = "add", filter = "Add.*", points = 1 }},
]
# END MODULE {name}
"""
    cmake = (root / "CMakeLists.txt").read_text(encoding="utf-8")
    m = re.search(r"set\(DISTLAB_MODULES\b[^)]*\)", cmake)
    if m is None:
        raise DistlabError("CMakeLists.txt: no set(DISTLAB_MODULES ...) to add the module to")
    out["CMakeLists.txt"] = cmake[:m.end() - 1] + f"\n    {name})" + cmake[m.end():]
    readme = (root / "README.md").read_text(encoding="utf-8")
    rows = list(re.finditer(r"^\| \[[0-9]{2}_[a-z0-9_]+\]\(exercises/[^)]*\) \|.*$", readme, re.M))
    if not rows:
        raise DistlabError("README.md: no modules table (| [NN_topic](exercises/NN_topic/) | ... |) to add a row to")
    row = f"\n| [{name}](exercises/{name}/) | {title} ([notes](docs/{name}.md)) |"
    out["README.md"] = readme[:rows[-1].end()] + row + readme[rows[-1].end():]
    mreadme = root / "grader/mutants/README.md"
    if mreadme.is_file():
        out["grader/mutants/README.md"] = mreadme.read_text(encoding="utf-8").rstrip("\n") + f"""

### {name} (owned file `{topic}.cpp`)

| mutant | planted mistake | items that catch it |
|---|---|---|
| `{MUTANT}` | add returns the difference of its arguments instead of their sum. | add, hidden_add |
"""
    return out


def create(root: Path, name: str, title: str = "") -> list[str]:
    """Writes the module `name` into the kit at root; returns the paths written (relative)."""
    m = NAME.fullmatch(name)
    if m is None:
        raise DistlabError(f"{name!r}: a module name is two digits, '_' and a topic in lower case "
                           f"(letters, digits, '_'), e.g. 11_example")
    topic = m.group("topic")
    title = " ".join(title.split()) or "a new module (say here what it teaches)"
    if '"' in title or "\\" in title:
        raise DistlabError("--title: no quotes or backslashes (it goes into C++ and TOML strings)")
    manifest = mf.load(root / "grader/manifest.toml")
    taken = [p for p in (f"solutions/{name}", f"exercises/{name}", f"grader/tests/{name}",
                         f"grader/hidden/{name}", f"docs/{name}.md") if (root / p).exists()]
    if name in manifest.modules or name in manifest.order or taken:
        raise DistlabError(f"module {name} exists already ({', '.join(taken) or 'grader/manifest.toml'})")
    files = _files(name, topic, title)
    patch_path, patch = _mutant(name, topic, files[f"solutions/{name}/{topic}.cpp"])
    files[patch_path] = patch
    edits = _edits(root, name, topic, title, manifest.order)   # raises before anything is written
    for rel_, text in {**files, **edits}.items():
        (root / rel_).parent.mkdir(parents=True, exist_ok=True)
        (root / rel_).write_text(text, encoding="utf-8")
    stubs.sync(root / "solutions", root / "exercises")
    exercises = sorted(f"exercises/{p.relative_to(root / 'exercises').as_posix()}"
                       for p in (root / "exercises" / name).rglob("*") if p.is_file())
    return sorted(files) + exercises + sorted(edits)


def main(name: str, title: str = "") -> int:
    if is_release():
        raise DistlabError("new-module works in the instructors' kit (it writes solutions/ and the hidden tests)")
    written = create(ROOT, name, title)
    print(f"module {name} created:")
    for p in written:
        print(f"  {p}")
    print(f"next: ./distlab grade --solutions {name} --hidden (full marks), ./distlab grade {name} "
          f"(zero), ./distlab mutants {name} (caught); then replace the placeholder function "
          f"(docs/authoring.md)")
    return 0
