"""`./distlab test`: the kit's self-test. Prints progress and ends with `N passed, N failed`.

Steps (each counts its checks):
  build      configure + build everything with the reference solutions (the grader's solutions
             tree, default-preset settings, so later steps reuse it) and run ctest on the kit's own
             tests (everything but the graded module tests, which `solutions` runs)
  commands   every cheap `./distlab ...` command of the README files and docs/ runs (`run` on the
             reference built by the build step; --backend mpi under mpirun where installed), each
             under a time limit; a failure names the file and line (grader/pydistlab/doc_commands.py,
             whose NOT_RUN lists the commands left to other steps, each with the reason)
  tsan       the threads backend's tests under ThreadSanitizer (the grader's TSan tree)
  nccl       where the CUDA toolkit with NCCL is installed: the NCCL backend and its tests compile
             and link (its own tree); the tests run and skip, with a message, where no GPU is seen
  solutions  ./distlab grade --solutions --hidden: every item must pass
  stubs      ./distlab grade on exercises/: every item must score zero, stubs compile
  sync       ./distlab check --stubs, and the transcription check: no formula of a solution region
             in a module's README, C++ comments and TODO texts, hint levels 1-2 or docs/NN_*.md
             (grader/pydistlab/transcription.py; grader/selftest/transcription.toml lists the
             modules whose findings are only listed, and the formulas a module may print), the
             promise ledgers (grader/pydistlab/promises.py) and, as information, how many
             sentences of the contracts a ledger row quotes (./distlab promises)
  golden     reference outputs reproduce (./distlab golden --check)
  release    ./distlab release writes a repository without solutions and hidden tests
  selftest   the grader's own unittests (grader/selftest) on planted submissions
  mutants    ./distlab mutants --fast: every instructor mutant (grader/mutants/) must lose points;
             one check per mutant, and the mutation score in the summary; two groups side by side
             in the solutions and exercises trees of the earlier steps (no workspace built from
             scratch), each mutant starting with the item that caught it last
             (grader/mutants/first_catches.json); a mutant caught before is not graded again
             while nothing its grade depends on has changed (its fingerprint, recorded in
             grader/mutants/caught.json, committed: commands/mutant_records.py), but for a spot
             check of one per module; --full grades every one
  lint       ruff (settings in ruff.toml) on grader/ and the distlab script; ruff is taken from
             PATH or installed with pip into build/tools/ruff, and the step is skipped, saying
             why, where neither works
  py310      where a Python 3.10 is installed (python3.10, or pyenv's): ./distlab --help and the
             grader's unit tests that need no build, plus two grades of the miniature kit, under it
             (tomli from pip in build/tools/py310; commands/selftest_python.py)
  clang      clang++ with libc++ (macOS's toolchain, checked on Linux): the kit, the reference and
             the public tests build with -Werror, the threads backend's and the modules' public
             tests pass, every stub file compiles warning-free (build/clang/, reused between runs;
             commands/selftest_platforms.py)
  mpihosts   root on Linux: an Open MPI job across two hosts made of two network namespaces and a
             veth pair (TCP only, restricted to it): 03's MPI tests pass and 06's training prints
             the losses of one host; skipped with the reason where namespaces are refused
             (commands/selftest_platforms.py)
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import re
import shutil
import subprocess
import sys
import time

from .. import coverage, deps, doc_commands, grade, manifest as mf, promises, transcription
from ..errors import DistlabError
from ..paths import BUILD, MANIFEST, ROOT, is_release, nproc
from ..results import Mode
from . import cxxformat, golden, release, selftest_platforms, selftest_python, stubs
from .selftest_build import step_build, step_nccl, step_tsan
from .tally import Tally

STEPS = ["build", "commands", "tsan", "nccl", "solutions", "stubs", "sync", "golden", "release", "selftest", "mutants",
         "lint", "py310", "format", "clang", "mpihosts"]
RUFF = "ruff==0.17.6"   # installed by the lint step when no ruff is on PATH


def step_commands(t: Tally) -> None:
    t.step("commands: the documented ./distlab commands run (README files, docs/)")
    t0 = time.monotonic()
    counts = {"ran": 0, "skipped": 0}
    # The programs first (the build step has built them: then this takes a second), so that no
    # command's time limit covers a build.
    from . import build
    targets = doc_commands.programs()
    build.ensure_built("default", True, targets)

    def one(cmd: doc_commands.DocCommand, o: doc_commands.Outcome, same_as: str) -> None:
        if o.skipped:
            counts["skipped"] += 1
            print(f"    {cmd.where}: {o.detail}", flush=True)
            return
        if not same_as:
            counts["ran"] += 1
            line = re.sub(r"\s+#.*$", "", cmd.line)
            print(f"    {'ok  ' if o.ok else 'FAIL'} {o.seconds:5.1f} s  {cmd.where}: {line}",
                  flush=True)
        t.check(o.ok, f"commands: {cmd.where}: `{cmd.line}`"
                + (f" (as at {same_as})" if same_as else ""), o.detail)

    doc_commands.run_all(one)
    left = sum(1 for c in doc_commands.doc_commands() if doc_commands.not_run_reason(c))
    print(f"    {counts['ran']} commands run in {time.monotonic() - t0:.0f} s; {counts['skipped']} skipped here; "
          f"{left} left to other steps or usage patterns (NOT_RUN in grader/pydistlab/doc_commands.py)",
          flush=True)


def step_solutions(t: Tally) -> None:
    t.step("solutions: ./distlab grade --solutions --hidden (every item full marks)")
    run = grade.grade([], Mode.SOLUTIONS, options=grade.GradeOptions(hidden=True))
    for n in run.notes:
        print(f"    note: {n}")
    if not run.modules:
        t.check(False, "the manifest lists graded modules")
    for m in run.modules:
        if m.status != "graded":
            t.check(False, f"{m.module.name} ({m.status})", m.message)
            continue
        for r in m.items:
            t.check(r.passed, f"solutions: {r.item.full_name}", f"{r.reason}\n{r.output[:1500]}")
        print(f"    {m.module.name}: {m.score:g}/{m.max_score:g}", flush=True)


def step_stubs(t: Tally) -> None:
    t.step("stubs: ./distlab grade on exercises/ (stubs compile, every item scores zero)")
    run = grade.grade([], Mode.STUDENT, options=grade.GradeOptions(quiet=True))
    for m in run.modules:
        if not t.check(m.status == "graded", f"stubs of {m.module.name} compile", m.message):
            continue
        for r in m.items:
            t.check(not r.passed and r.score == 0, f"stubs: {r.item.full_name} scores zero",
                    "the test passed on the stub: it cannot fail, or does not call the student's code")
        print(f"    {m.module.name}: {m.score:g}/{m.max_score:g}", flush=True)
    warnings = sorted({w for w in run.warnings})
    t.check(not warnings, "stubs compile warning-free", "\n".join(warnings[:15]))


def step_sync(t: Tally) -> None:
    t.step("sync: ./distlab check --stubs, and the promise ledgers")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            rc = stubs.check()
        except DistlabError as e:
            print(e)
            rc = 1
    t.check(rc == 0, "exercises/ in sync with solutions/", buf.getvalue())
    if rc == 0:
        print("    " + buf.getvalue().strip())
    # The promise ledgers (grader/hidden/<module>/promises.toml): every promise observed by a test,
    # every test observing a promise, every quotation found where the row says.
    for name in mf.load().modules:
        problems = promises.check(name)
        t.check(not problems, f"promises: {name}'s ledger covers its tests", "\n".join(problems[:40]))
        if not problems:
            print(f"    {promises.summary(name)}", flush=True)
    # How much of the contracts the ledgers quote (information, not a check: ./distlab promises
    # --uncovered lists the sentences no row quotes).
    print(f"    {coverage.overall([coverage.coverage(name) for name in mf.load().modules])}", flush=True)
    step_transcription(t)


def step_transcription(t: Tally) -> None:
    """No formula of a solution region in what a student reads (grader/pydistlab/transcription.py);
    the modules marked pending in grader/selftest/transcription.toml are listed, not failed."""
    config = transcription.load_config()
    for module in mf.load().order:
        found = transcription.findings(module, config)
        if module in config.pending:
            for f in found:
                print(f"    pending {f}", flush=True)
            continue
        for f in found:
            t.check(False, f"sync: {f}")
        if not found:
            t.check(True, f"sync: {module} prints no formula of its solution")


def step_golden(t: Tally) -> None:
    t.step("golden: reference outputs reproduce")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ok, bad = golden.run_generators([], check=True, quiet=True)
    text = buf.getvalue()
    print("    " + "\n    ".join(line for line in text.splitlines() if line.strip()))
    for _ in range(ok):
        t.check(True, "golden")
    if bad:
        t.check(False, f"golden: {bad} modules do not reproduce", text)


def step_release(t: Tally) -> None:
    t.step("release: the student repository has no solutions and no hidden tests")
    out = BUILD / "selftest-release"
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            release.main(str(out), force=True)
    except DistlabError as e:
        t.check(False, "release runs", str(e))
        return
    t.check(not (out / "solutions").exists(), "release: no solutions/")
    t.check(not (out / "grader" / "hidden").exists(), "release: no grader/hidden/ (hidden tests and items)")
    t.check(not (out / "grader" / "mutants").exists(), "release: no grader/mutants/ (the instructor mutants)")
    t.check(not (out / "grader" / "answers").exists(), "release: no grader/answers/ (the answer keys)")
    released = out / "grader" / "manifest.toml"
    t.check(released.is_file() and released.read_bytes() == MANIFEST.read_bytes(),
            "release: grader/manifest.toml is the kit's, unchanged")
    try:
        man = mf.load(released)
        kit = mf.load()
        t.check(all(x.tier == "public" for m in man.modules.values() for x in m.tests),
                "release: the manifest has no hidden tests")
        t.check({m.name: m.items(False) for m in man.modules.values()} ==
                {m.name: m.items(False) for m in kit.modules.values()},
                "release: the public items are the kit's")
    except DistlabError as e:
        t.check(False, "release: the manifest loads", str(e))
    leaks = [str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.suffix in (".cpp", ".hpp", ".h")
             and b"BEGIN SOLUTION" in p.read_bytes()]
    t.check(not leaks, "release: no solution markers", "\n".join(leaks))
    r = subprocess.run([sys.executable, str(out / "distlab"), "grade", "--solutions"], capture_output=True,
                       text=True, cwd=out)
    t.check(r.returncode != 0 and "student repository" in r.stderr,
            "release: grade --solutions refuses with a clear message", r.stdout + r.stderr)
    r = subprocess.run([sys.executable, str(out / "distlab"), "check", "--stubs"], capture_output=True,
                       text=True, cwd=out)
    t.check(r.returncode != 0 and "student repository" in (r.stdout + r.stderr),
            "release: sync/check refuse without solutions/", r.stdout + r.stderr)


def step_selftest(t: Tally) -> None:
    t.step("selftest: the grader's unittests on planted submissions (grader/selftest)")
    r = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", str(ROOT / "grader" / "selftest"),
                        "-v"], capture_output=True, text=True, cwd=ROOT, errors="replace")
    lines = r.stderr.splitlines()
    results = [line for line in lines if re.search(r" \.\.\. (ok|FAIL|ERROR|skipped.*)$", line)]
    for line in results:
        name = line.split(" ... ")[0]
        t.check(line.endswith(" ok") or " skipped" in line, f"selftest: {name}", "")
    ran = next((line for line in lines if line.startswith("Ran ")), "")
    print(f"    {ran}", flush=True)
    if r.returncode != 0:
        t.check(False, "selftest: unittest run succeeded", "\n".join(lines[-60:]))


def step_mutants(t: Tally) -> None:
    t.step("mutants: ./distlab mutants --fast (every instructor mutant must lose points)")
    from . import mutants
    t0 = time.monotonic()

    def one(o: mutants.Outcome) -> None:
        print(mutants.line(o), flush=True)
        t.check(o.caught, f"mutants: {o.module}/{o.name} is caught",
                o.problem or f"{o.mistake}\nit scored full marks: no test observes this mistake")

    # A mutant caught before, with nothing it depends on changed since (mutants.fingerprints), is
    # not graded again: its check passes as recorded (grader/mutants/caught.json, committed, so a
    # fresh clone in CI grades only what changed since the last local self-test). A spot check
    # grades SPOT_CHECK of those per module again, chosen afresh for each commit, so a record that
    # no longer holds is found. --full grades every one.
    found = mutants.discover([])
    prints = mutants.fingerprints(found)
    before = {} if t.full else mutants.caught_before()
    kept = [(m, f) for m, f in found
            if before.get(f"{m}/{f.name}", {}).get("fingerprint") == prints[f"{m}/{f.name}"]]
    spot = _spot_check(kept)
    kept = [x for x in kept if x not in spot]
    todo = [x for x in found if x not in kept]
    for m, f in kept:
        t.check(True, f"mutants: {m}/{f.name} is caught (as recorded)")
    if kept:
        when = max(before[f"{m}/{f.name}"]["when"] for m, f in kept)
        print(f"    {len(kept) + len(spot)} of {len(found)} mutants were caught before (last {when}, "
              f"grader/mutants/caught.json) and nothing they depend on has changed since; "
              f"{len(spot)} of them are graded again as a spot check, the others are not "
              f"(./distlab test --full grades them)", flush=True)
    # Two groups of modules side by side (a mutant is mostly one compile on one core), graded in
    # the trees that the build, solutions and stubs steps built (the reference's, with the hidden
    # tests and the ThreadSanitizer builds, and the stubs'), so that no workspace is built from
    # scratch: each mutant compiles its own file and links. Modules graded under
    # ThreadSanitizer go to the reference's tree, whose TSan build the solutions step made.
    tsan = {m.name: 0 for m in mf.load().modules.values() if "thread" in m.sanitizers}
    results = mutants.run_all(todo, fast=True, on_result=one, groups=2,
                              workspaces=["solutions", "exercises"], pinned=tsan) if todo else []
    mutants.record_caught(results, prints)
    rows = mutants.scores(results + [mutants.Outcome(m, f.name, caught_by=["(before)"]) for m, f in kept])
    for name, caught, total in rows:
        again = sum(1 for m, _ in kept if m == name or name == "overall")
        print(f"    {name}: {caught}/{total}" + (f" ({again} caught before)" if again else ""), flush=True)
    t.mutation_score = (*rows[-1][1:], len(kept))
    print(f"    {len(results)} mutants graded in {time.monotonic() - t0:.0f} s"
          + (f", {len(kept)} caught before" if kept else ""), flush=True)
    waiting = sorted((mutants.MUTANTS / "open").glob("*.patch"))
    if waiting:
        print(f"    {len(waiting)} more mutants escape and wait in grader/mutants/open/, not graded until "
              f"tests observe their promises (grader/mutants/README.md lists them)", flush=True)


SPOT_CHECK = 1   # mutants per module graded again although their record holds


def _spot_check(kept: list) -> list:
    """SPOT_CHECK of the recorded mutants of each module, drawn with the commit (or, outside git,
    the day) as the seed: each commit checks other ones."""
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    rng = random.Random(r.stdout.strip() if r.returncode == 0 else time.strftime("%Y-%m-%d"))
    out: list = []
    for name in dict.fromkeys(m for m, _ in kept):
        mine = [x for x in kept if x[0] == name]
        out += rng.sample(mine, min(SPOT_CHECK, len(mine)))
    return out


def _ruff() -> tuple[list[str], str]:
    """(the command that runs ruff, "") or ([], why there is none)."""
    on_path = shutil.which("ruff")
    if on_path:
        return [on_path], ""
    target = BUILD / "tools" / "ruff"
    why = selftest_python.pip_install(RUFF, target, target / "bin" / "ruff")
    return ([], why) if why else ([str(target / "bin" / "ruff")], "")


def step_lint(t: Tally) -> None:
    t.step("lint: ruff on grader/ and distlab (settings in ruff.toml)")
    ruff, why = _ruff()
    if not ruff:
        print(f"    skipped: no ruff here and it could not be installed: {why}\n"
              f"    (install it with `python3 -m pip install ruff`, then run ./distlab test --only lint)",
              flush=True)
        return
    r = subprocess.run([*ruff, "check", "--output-format", "concise", "grader", "distlab"], cwd=ROOT,
                       capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL)
    problems = [line for line in r.stdout.splitlines() if re.match(r"^\S+:\d+:\d+: ", line)]
    version = subprocess.run([*ruff, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"    {version}: {len(problems)} problems", flush=True)
    for line in problems:
        t.check(False, f"lint: {line}")
    if not problems:
        t.check(r.returncode == 0, "lint: grader/ and distlab are clean", r.stdout[-2000:] + r.stderr[-2000:])


def step_format(t: Tally) -> None:
    t.step("format: every hand-written C++ file as clang-format leaves it (.clang-format)")
    tool, why = cxxformat.clang_format(install=True)
    if not tool:
        print(f"    skipped: {why}", flush=True)
        return
    files = cxxformat.cxx_files()
    bad = cxxformat.unformatted(tool, files)
    print(f"    {tool}: {len(files) - len(bad)} of {len(files)} files formatted", flush=True)
    for f in bad:
        t.check(False, f"format: {f} (fix: ./distlab format)")
    if not bad:
        t.check(True, "format: the kit's C++ files are formatted")


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main(a: argparse.Namespace) -> int:
    if is_release():
        raise DistlabError("./distlab test is the kit's self-test and needs solutions/; in a student "
                           "repository run ./distlab grade")
    deps.ensure()
    only = [s.strip() for s in a.only.split(",")] if a.only else STEPS
    unknown = [s for s in only if s not in STEPS]
    if unknown:
        raise DistlabError(f"unknown step(s) {', '.join(unknown)}; steps: {', '.join(STEPS)}")
    t = Tally(full=bool(getattr(a, "full", False)))
    steps = {"build": step_build, "commands": step_commands, "tsan": step_tsan, "nccl": step_nccl,
             "solutions": step_solutions,
             "stubs": step_stubs, "sync": step_sync, "golden": step_golden, "release": step_release,
             "selftest": step_selftest, "mutants": step_mutants, "lint": step_lint,
             "py310": selftest_python.step_py310, "format": step_format,
             "clang": selftest_platforms.step_clang, "mpihosts": selftest_platforms.step_mpihosts}
    times: list[tuple[str, float, float]] = []   # (step, wall s, CPU s of this process and its children)
    for name in STEPS:
        if name not in only:
            continue
        w0, c0 = time.monotonic(), _cpu_seconds()
        try:
            steps[name](t)
        except DistlabError as e:
            t.check(False, f"step {name}", str(e))
        except Exception:  # a broken step must not hide the others
            import traceback
            t.check(False, f"step {name} crashed", traceback.format_exc())
        times.append((name, time.monotonic() - w0, _cpu_seconds() - c0))
    elapsed = time.monotonic() - t.t0
    print(f"\n== self-test finished in {elapsed / 60:.1f} min; per step, wall and CPU seconds "
          f"(user + system of this process and the processes it waited for: what runs inside the "
          f"sandbox's own PID namespace, the graded compiles and tests, is not counted; "
          f"{nproc()} cores, load average {os.getloadavg()[0]:.1f} now):")
    for name, wall, cpu in times:
        print(f"  {name:<10} {wall:7.0f} s wall {cpu:7.0f} s CPU")
    if t.mutation_score is not None:
        caught, total, before = t.mutation_score
        print(f"mutation score: {caught}/{total} mutants caught"
              + (f" ({before} of them caught before and not graded again: --full grades them)" if before else ""))
    if t.failures:
        print("failed checks:\n  " + "\n  ".join(t.failures[:50]))
    print(f"{t.passed} passed, {t.failed} failed", flush=True)
    return 0 if t.failed == 0 else 1
