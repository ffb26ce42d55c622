"""`./distlab release OUT`: the student repository (no solutions/, no hidden tests).

What is left out: solutions/, grader/hidden/ (the hidden tests and their items.toml), the mutants
of the reference (grader/mutants/: solutions with one planted mistake each), the grader's own
self-tests, the Gradescope autograder and the instructors' guides (docs/instructor-guide.md,
docs/authoring.md; README.md loses its links to them); every other file, grader/manifest.toml
included, is copied unchanged. In the student repository `./distlab --help` lists only the
students' commands (cli.py). The result builds and grades on its own (./distlab grade there grades the stubs
to zero)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from .. import manifest as mf, stubs, tree
from ..errors import DistlabError
from ..paths import CXX_EXTENSIONS, LEFT_OUT, ROOT, is_release


def student_readme(text: str) -> str:
    """README.md as students get it: without the list entries that point at the instructors' guides
    (left out) and without the quickstart line of the self-test (an instructors' command)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if line.startswith("* "):
            skipping = any(f"({doc})" in line for doc in LEFT_OUT if doc.endswith(".md"))
        elif not line.startswith("  "):
            skipping = False
        if skipping or line.startswith("./distlab test "):
            continue
        out.append(line)
    return "".join(out)


#: What a student repository does not contain, as the kit's texts may point at it: the
#: instructors' flags (they refuse in a student repository) and the guides left out.
INSTRUCTOR_ONLY = re.compile(r"--solutions\b|--hidden\b|--submissions?\b|docs/instructor-guide\.md|"
                             r"docs/authoring\.md|\binstructor-guide\.md|\bauthoring\.md")
#: Rewrites of the kit's texts for students, in order (multi-line: they match across a wrapped
#: line). A command's --solutions goes (the student's own version prints the same once it is
#: right); the parentheses that offered the reference or an instructors' guide go whole.
_STUDENT_REWRITES = [
    (re.compile(r"\s*\(add `--solutions` for the reference; ([^)]*)\)"), r" (\1)"),
    (re.compile(r"\s*\(`--solutions` for the reference\)"), ""),
    (re.compile(r"\s*\(`\./distlab run --solutions [\w-]+`\s+for the reference\)"), ""),
    (re.compile(r"\s*\(with\s+`--solutions`: `build/grade/solutions/build`\)"), ""),
    (re.compile(r"\s*\(`docs/(?:instructor-guide|authoring)\.md`(?:, \"[^\"]*\")?\)"), ""),
    (re.compile(r"^.*\./distlab \w+ [\w-]+ --solutions\s+(?:# )?the reference\s*\n", re.M), ""),
    (re.compile(r" \[--solutions\]"), ""),
    (re.compile(r"(\./distlab \w+(?: [\w./=-]+)*?) --solutions(?= |`|$)", re.M), r"\1"),
]


def student_text(text: str) -> str:
    """A text of the kit (a .md file, a program's comments) as students get it: nothing in it tells
    them to use what their repository does not contain (INSTRUCTOR_ONLY)."""
    for pattern, replacement in _STUDENT_REWRITES:
        text = pattern.sub(replacement, text)
    return text


def _is_student_text(name: str) -> bool:
    """The files students read for instructions: Markdown, the module programs (their usage
    comments), the hints and the deadlock advice."""
    return name.endswith(".md") or (name.startswith("exercises/") and name.endswith("/main.cpp")) or \
        name.startswith("grader/hints/") or name == "grader/deadlock_advice.toml"


def release_files() -> dict[str, Path | bytes]:
    """The kit's files that go to students: relative path -> file (README.md: student_readme();
    every text students read for instructions: student_text())."""
    files: dict[str, Path | bytes] = {name: ROOT / name for name in tree.kit_files(ROOT)
                                      if not name.startswith(LEFT_OUT)}
    if "README.md" in files:
        files["README.md"] = student_readme((ROOT / "README.md").read_text(encoding="utf-8")).encode()
    for name, src in files.items():
        if _is_student_text(name):
            text = src.decode("utf-8") if isinstance(src, bytes) else src.read_text(encoding="utf-8")
            new = student_text(text)
            if new != text:
                files[name] = new.encode()
    return files


def instructor_only_mentions(files: dict[str, Path | bytes]) -> list[str]:
    """"path:line: text" for each line of a student-read text of the release that points at what a
    student repository does not contain (INSTRUCTOR_ONLY)."""
    found = []
    for name, src in sorted(files.items()):
        if not _is_student_text(name):
            continue
        data = src if isinstance(src, bytes) else src.read_bytes()
        for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if INSTRUCTOR_ONLY.search(line):
                found.append(f"{name}:{i}: {line.strip()[:120]}")
    return found


def main(out: str, force: bool = False) -> int:
    if is_release():
        raise DistlabError("this already is a student repository (no solutions/); release from the kit")
    dest = Path(out).resolve()
    if dest == ROOT or ROOT in dest.parents and not str(dest).startswith(str(ROOT / "build")):
        raise DistlabError(f"{out} is inside the kit; pick a folder outside it (or under build/)")
    drift = stubs.compare(stubs.generate())
    if not drift.empty():
        raise DistlabError("exercises/ is not in sync with solutions/: run ./distlab sync (and "
                           "./distlab check --stubs) before releasing")
    if dest.exists() and any(dest.iterdir()) and not force:
        raise DistlabError(f"{out} exists and is not empty; add --force to replace its contents")
    files = release_files()
    leaks = [n for n, src in files.items() if Path(n).suffix in CXX_EXTENSIONS and
             b"BEGIN SOLUTION" in (src.read_bytes() if isinstance(src, Path) else src)]
    if leaks:
        raise DistlabError("solution markers would be released in: " + ", ".join(leaks))
    mentions = instructor_only_mentions(files)
    if mentions:
        raise DistlabError("these lines would tell students to use what their repository does not "
                           "contain (reword them, or teach student_text() in "
                           "grader/pydistlab/commands/release.py to):\n  " + "\n  ".join(mentions))
    if dest.exists() and force:
        for child in dest.iterdir():
            if child.name == ".git":
                continue
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    tree.mirror(files, dest) if not (dest / ".git").exists() else _copy_keep_git(files, dest)
    man = mf.load(dest / "grader" / "manifest.toml")
    n_items = sum(len(m.tests) for m in man.modules.values())
    print(f"released {len(files)} files to {dest} ({len(man.modules)} modules, {n_items} public tests; "
          f"left out: {', '.join(LEFT_OUT)})")
    print(f"next: cd {out} && git init && git add -A && git commit -m 'distlab course kit' "
          f"(students run ./distlab grade there)")
    return 0


def _copy_keep_git(files: dict[str, Path | bytes], dest: Path) -> None:
    for name, src in files.items():
        data = src.read_bytes() if isinstance(src, Path) else src
        tree.write_if_changed(dest / name, data, src.stat().st_mode if isinstance(src, Path) else None)
