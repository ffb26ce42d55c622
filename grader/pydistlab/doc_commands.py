"""The `./distlab ...` commands shown in the README files and docs/: found, parsed and run.

The self-test's `commands` step runs every documented command that is cheap (see NOT_RUN for the
ones it leaves to other steps, each with the reason), so an example that stopped working fails
there, naming the file and line it comes from, instead of in a student's terminal:
  * `run MODULE ...` runs with the documented flags on the reference (`--solutions` added: the
    build step has built every program in the grader's solutions tree), on the threads backend or,
    for `--backend mpi`, under mpirun where mpirun is installed (skipped, saying so, where not);
  * the other cheap commands (hint, doctor, check, submit, gradescope-zip) run as written;
  * each runs in a fresh temporary folder (files it writes, e.g. --trace, land there) under a
    time limit (CAP_S), two at a time, and must exit 0 without printing an error or
    "(not implemented yet)".
grader/selftest/test_doc_commands.py parses every command with the CLI's own parser (no run).
"""
from __future__ import annotations

import concurrent.futures
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import manifest as mf
from .paths import ROOT

#: The seconds one documented command may take (the slowest, 06 under mpirun with 4 processes,
#: takes about 30 s on a busy 2-core machine).
CAP_S = 120

#: Documented commands that the `commands` step does not run, by subcommand or by the start of the
#: command line, each with the reason (what covers it instead). Every other one is run.
NOT_RUN: dict[str, str] = {
    "test": "the self-test itself",
    "grade": "a whole grade of the kit (minutes): the solutions and stubs steps grade every module, "
             "the selftest step grades planted submissions, batches and --sanitize",
    "mutants": "grades every mutant (minutes): the mutants step runs it",
    "golden": "the golden step runs it (--check)",
    "release": "writes a repository outside the kit: the release step runs it into build/",
    "sync": "rewrites exercises/: the sync step runs `check --stubs`",
    "bench": "benchmarks with plots (minutes, matplotlib); `bench loop` and `bench selftest` make a fresh copy "
             "of the kit",
    "audit alice.zip": "example submissions that the kit does not have: test_audit.py audits planted ones",
    "audit --submissions": "an example batch folder that the kit does not have: test_audit.py audits a batch",
    "new-module": "adds a module to the kit: test_new_module.py creates one in a copy of the kit",
    "build --preset debug": "a second whole build, with AddressSanitizer (minutes)",
    "build --preset tsan": "a second whole build, with ThreadSanitizer (minutes): the tsan step builds "
                           "the threads backend's tests with it",
}


@dataclass
class DocCommand:
    where: str          # "docs/backends.md:38"
    line: str           # the command as documented
    argv: list[str]     # its arguments after ./distlab: comments and [optional] parts dropped

    @property
    def is_pattern(self) -> bool:
        """A usage pattern (MODULE, FILE.png, sync|async, ...), not an example to run."""
        return any(w.isupper() or "..." in w or "|" in w for w in self.argv)


def doc_files() -> list[Path]:
    """The README files and docs/ (commands that only parse in the instructors' kit included)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "exercises").glob("*/README.md"))]


def words(line: str) -> list[str]:
    """The arguments of a documented command: comments and [optional] parts dropped."""
    line = re.sub(r"\s#.*$", "", line)
    line = re.sub(r"\[[^\]]*\]", "", line)
    return shlex.split(line)[1:]


def doc_commands() -> list[DocCommand]:
    """Every `./distlab ...` line inside a fenced code block, with its file and line."""
    found: list[DocCommand] = []
    for doc in doc_files():
        inside = False
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            if line.lstrip().startswith("```"):
                inside = not inside
                continue
            text = line.strip()
            if inside and text.startswith("./distlab "):
                found.append(DocCommand(f"{doc.relative_to(ROOT)}:{number}", text, words(text)))
    return found


def not_run_reason(cmd: DocCommand) -> str:
    """Why the `commands` step does not run this command ("" when it does)."""
    if cmd.is_pattern:
        return "a usage pattern, not an example"
    text = " ".join(cmd.argv)
    for key, why in NOT_RUN.items():
        if text == key or text.startswith(key + " "):
            return why
    return ""


def runnable_argv(cmd: DocCommand, tmp: Path) -> list[str]:
    """The arguments the step runs: `run` on the reference (--solutions added); the zips of
    `submit` and `gradescope-zip` written into tmp instead of the kit's tree."""
    argv = list(cmd.argv)
    if argv and argv[0] == "run" and "--solutions" not in argv:
        argv.insert(1, "--solutions")
    if argv[:1] == ["submit"] and not {"-o", "--output"} & set(argv):
        argv += ["--output", str(tmp / "submission.zip")]
    if argv[:1] == ["gradescope-zip"] and len(argv) == 2:
        argv[1] = str(tmp / Path(argv[1]).name)
    return argv


#: The options of `./distlab run` that take a value (the module is the first other word).
_RUN_VALUED = {"--preset", "--backend", "-n", "--np", "--hostfile"}


def programs() -> list[str]:
    """The run_<module> targets that the documented `run` commands start."""
    man = mf.load()
    found: set[str] = set()
    for cmd in doc_commands():
        if cmd.argv[:1] != ["run"] or not_run_reason(cmd):
            continue
        words = iter(cmd.argv[1:cmd.argv.index("--")] if "--" in cmd.argv else cmd.argv[1:])
        for w in words:
            if w in _RUN_VALUED:
                next(words, None)
            elif not w.startswith("-"):
                found.add(f"run_{mf.resolve_name(w, man.order)}")
                break
    return sorted(found)


def same_key(argv: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Commands that differ only in the order of ./distlab's own arguments run once."""
    cut = argv.index("--") if "--" in argv else len(argv)
    return tuple(sorted(argv[:cut])), tuple(argv[cut:])


@dataclass
class Outcome:
    ok: bool
    seconds: float
    detail: str   # why it failed, or why it was skipped ("" when it ran fine)
    skipped: bool = False


_BAD = re.compile(r"^\s*(error:|\(not implemented yet\)|terminate called|Traceback )|\bdistlab: error\b",
                  re.MULTILINE)


def run_one(cmd: DocCommand, tmp: Path, cap_s: float = CAP_S) -> Outcome:
    """Runs the command (runnable_argv) in the empty folder tmp; ok when it exits 0 within cap_s
    and prints no error."""
    argv = runnable_argv(cmd, tmp)
    mpi = "--backend" in argv and argv[argv.index("--backend") + 1:][:1] == ["mpi"]
    if mpi and not shutil.which("mpirun"):
        return Outcome(True, 0.0, "skipped: mpirun is not installed", skipped=True)
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, str(ROOT / "distlab"), *argv], cwd=tmp, capture_output=True,
                           text=True, errors="replace", timeout=cap_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
        return Outcome(False, time.monotonic() - t0,
                       f"still running after {cap_s:.0f} s (the limit per documented command); "
                       f"its last output:\n{out[-800:]}")
    seconds = time.monotonic() - t0
    text = r.stdout + r.stderr
    bad = _BAD.search(text)
    if r.returncode != 0 or bad:
        why = f"exit status {r.returncode}" if r.returncode != 0 else f"it printed `{bad.group(0).strip()}`"
        return Outcome(False, seconds, f"{why}; its output ends:\n{text[-1500:]}")
    return Outcome(True, seconds, "")


def _run_in_tmp(cmd: DocCommand, cap_s: float) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="distlab-doc-") as tmp:
        return run_one(cmd, Path(tmp), cap_s)


def run_all(on_result: Callable[[DocCommand, Outcome, str], None], cap_s: float = CAP_S,
            jobs: int = 2) -> None:
    """Runs every documented command that NOT_RUN does not leave out, once per distinct command,
    `jobs` at a time (most of a command's time is waiting: mpirun starting, ranks blocked);
    on_result(command, outcome, same_as) as each finishes (same_as: where an identical command
    ran, for a repeat)."""
    first: dict[tuple[tuple[str, ...], tuple[str, ...]], DocCommand] = {}
    repeats: dict[str, list[DocCommand]] = {}
    for cmd in doc_commands():
        if not_run_reason(cmd):
            continue
        key = same_key(runnable_argv(cmd, Path("/")))
        if key in first:
            repeats.setdefault(first[key].where, []).append(cmd)
        else:
            first[key] = cmd
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_run_in_tmp, cmd, cap_s): cmd for cmd in first.values()}
        for done in concurrent.futures.as_completed(futures):
            cmd, outcome = futures[done], done.result()
            on_result(cmd, outcome, "")
            for again in repeats.get(cmd.where, []):
                on_result(again, outcome, cmd.where)
