"""`./distlab`: the command line. This file only parses; each command lives in its own module,
commands/<command>.py (`sync` and `check --stubs`: commands/stubs.py)."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from .errors import DistlabError
from .paths import is_release


def kit_only(text: str) -> str:
    """The help of an option that needs what only the instructors' kit has (solutions/, the hidden
    tests, submissions): left out of a student repository's --help, where it refuses to run."""
    return argparse.SUPPRESS if is_release() else text


EPILOG = """\
common commands:
  ./distlab grade [MODULE...]     build and grade your exercises (report in build/grade/.../report)
  ./distlab run MODULE            run a module's program (--world-size N, --trace FILE ...)
  ./distlab hint MODULE [FUNC]    hints for an exercise function, one level at a time (--level 2, 3)
  ./distlab submit                pack your files for upload
  ./distlab doctor                what is installed, what is missing
  ./distlab grade --sanitize address MODULE   a crash: AddressSanitizer names the bad access
"""
INSTRUCTOR_EPILOG = """\
instructors:
  ./distlab test                  the kit's self-test (last line: N passed, N failed)
  ./distlab mutants [MODULE...]   grade the instructor mutants: which mistakes the tests catch
  ./distlab sync | check --stubs  regenerate / verify exercises/ from solutions/
  ./distlab release OUT           write the student repository
  ./distlab audit --submissions DIR   suspicious constructs (file:line) and pairs sharing their code
  ./distlab new-module NN_topic   create a working empty module in every place a module lives
  ./distlab promises [MODULE] --uncovered   contract sentences no promise-ledger row quotes
"""


def _cmd_sync(a: argparse.Namespace) -> int:
    from .commands import stubs
    return stubs.sync()


def _cmd_check(a: argparse.Namespace) -> int:
    from .commands import stubs
    if not a.stubs:
        raise DistlabError("say what to check: ./distlab check --stubs")
    return stubs.check()


def _cmd_doctor(a: argparse.Namespace) -> int:
    from .commands import doctor
    return doctor.main(install=a.install, grading_only=a.grading)


def _cmd_build(a: argparse.Namespace) -> int:
    from .commands import build
    return build.main(a.preset, a.solutions, a.target, a.verbose)


def _cmd_run(a: argparse.Namespace) -> int:
    from .commands import run
    return run.main(a)


def _cmd_bench(a: argparse.Namespace) -> int:
    if a.what == "loop":
        from .commands import bench_loop
        return bench_loop.main(a)
    if a.what == "selftest":
        from .commands import bench_selftest
        return bench_selftest.main(a)
    if a.what == "gradescope":
        from .commands import bench_gradescope
        return bench_gradescope.main(a)
    from .commands import bench
    return bench.main(a)


def _cmd_grade(a: argparse.Namespace) -> int:
    from .commands import grade
    return grade.main(a)


def _cmd_hint(a: argparse.Namespace) -> int:
    from .commands import hint
    return hint.main(a)


def _cmd_submit(a: argparse.Namespace) -> int:
    from .commands import submit
    return submit.main(a.output, a.modules, a.reference)


def _cmd_release(a: argparse.Namespace) -> int:
    from .commands import release
    return release.main(a.out, force=a.force)


def _cmd_gradescope_zip(a: argparse.Namespace) -> int:
    from .commands import gradescope_zip
    return gradescope_zip.main(a.out)


def _cmd_golden(a: argparse.Namespace) -> int:
    from .commands import golden
    return golden.main(a.modules, check=a.check)


def _cmd_format(a: argparse.Namespace) -> int:
    from .commands import cxxformat
    return cxxformat.main(check=a.check)


def _cmd_mutants(a: argparse.Namespace) -> int:
    from .commands import mutants
    return mutants.main(a)


def _cmd_audit(a: argparse.Namespace) -> int:
    from .commands import audit
    return audit.main(a)


def _cmd_new_module(a: argparse.Namespace) -> int:
    from .commands import new_module
    return new_module.main(a.name, title=a.title)


def _cmd_promises(a: argparse.Namespace) -> int:
    from .commands import promises
    return promises.main(a)


def _cmd_test(a: argparse.Namespace) -> int:
    from .commands import selftest
    return selftest.main(a)


#: Commands of the instructors' kit only: a student repository (./distlab release) has no
#: solutions/, hidden tests or mutants for them to work on, so they are not offered there.
INSTRUCTOR_ONLY = {"sync", "check", "release", "gradescope-zip", "golden", "mutants", "test", "audit",
                   "new-module", "promises"}


def _instructor_only(name: str) -> Callable[[argparse.Namespace], int]:
    def refuse(_a: argparse.Namespace) -> int:
        raise DistlabError(f"./distlab {name} is an instructor command: this is a student repository, "
                           f"without the solutions, hidden tests and mutants it works on")
    return refuse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="./distlab", description="distlab: build, run, grade and "
                                "release the parallel-programming course kit.",
                                epilog=EPILOG + ("" if is_release() else INSTRUCTOR_EPILOG),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_: str) -> argparse.ArgumentParser:
        if name in INSTRUCTOR_ONLY and is_release():
            # Not offered in a student repository (not listed), but named when asked for.
            sp = sub.add_parser(name, add_help=False, prefix_chars="\0")   # every word an argument
            sp.add_argument("rest", nargs="*")
            sp.set_defaults(func=_instructor_only(name))
            return argparse.ArgumentParser(add_help=False)   # its options go nowhere
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.set_defaults(func=fn)
        return sp

    d = add("doctor", _cmd_doctor, "report compilers, libraries and backends found, and what is missing")
    d.add_argument("--install", action="store_true", help="install missing Debian packages")
    d.add_argument("--grading", action="store_true",
                   help="with --install: only what grading needs (no plotting packages; Gradescope's setup)")

    b = add("build", _cmd_build, "configure and build the kit with a CMake preset")
    b.add_argument("--preset", default="default", choices=["default", "native", "debug", "tsan"])
    b.add_argument("--solutions", action="store_true",
                   help=kit_only("build solutions/ instead of exercises/ (default preset: in "
                                 "build/grade/solutions/build, the tree `grade --solutions` uses; other "
                                 "presets: build/<preset>-solutions)"))
    b.add_argument("--target", action="append", default=[], help="build only this target (repeatable)")
    b.add_argument("--verbose", "-v", action="store_true",
                   help="show the compiler's output (by default only a failed build's first error)")

    r = add("run", _cmd_run, "build and run a module's program: ./distlab run MODULE [-- ARGS]")
    r.add_argument("module")
    r.add_argument("--solutions", action="store_true", help=kit_only("run the reference implementation"))
    r.add_argument("--preset", default="default", choices=["default", "native", "debug", "tsan"])
    r.add_argument("--backend", default=None, help="threads (default), mpi or nccl")
    r.add_argument("-n", "--np", type=int, default=None, dest="np",
                   help="number of ranks (mpi: processes started by mpirun; threads: --world-size)")
    r.add_argument("--hostfile", default=None, help="mpirun --hostfile")
    r.set_defaults(passthrough=True)

    be = add("bench", _cmd_bench, "benchmarks: ./distlab bench collectives|pipeline|ps|fsdp [--plot FILE.png] [ARGS]; "
                                  "./distlab bench loop: the student's loop timed on a fresh copy; "
                                  "./distlab bench selftest: ./distlab test on a fresh copy, again, and after an edit; "
                                  "./distlab bench gradescope: setup.sh and run_autograder under Gradescope's "
                                  "default resources (0.5 CPU, 768 MB)")
    be.add_argument("what", choices=["collectives", "pipeline", "ps", "fsdp", "loop", "selftest", "gradescope"])
    be.add_argument("--keep", default=None, metavar="DIR",
                    help="loop, selftest, gradescope: make the fresh copy in DIR/kit (default: a new temporary folder)")
    be.add_argument("--plot", default=None, metavar="FILE.png",
                    help="collectives: simulated time vs size per algorithm (from run_03_collectives --csv); "
                         "pipeline: bubble fraction and peak stash vs microbatches per schedule "
                         "(from run_07_pipeline --sweep --csv); "
                         "ps: step time vs workers per layout and test loss vs simulated time per mode "
                         "(from run_08_parameter_server --sweep --compare --csv); "
                         "fsdp: peak memory per rank vs dp and step time vs prefetch window "
                         "(from run_11_fsdp --sweep --csv)")
    be.add_argument("--no-mpi", action="store_true", help="skip the Open MPI comparison")
    be.add_argument("--cpus", default="0.5", help="gradescope: the CPU quota (default 0.5)")
    be.add_argument("--memory-mb", default="768", help="gradescope: the memory limit in MB (default 768)")
    be.add_argument("--setup-unlimited", action="store_true",
                    help="gradescope: run setup.sh without the CPU quota (the memory limit stays)")
    be.add_argument("--no-setup", action="store_true",
                    help="gradescope: grade again in the image an earlier run set up in --keep DIR")
    be.set_defaults(passthrough=True)

    g = add("grade", _cmd_grade, "build and grade exercises on a clean copy of the kit")
    g.add_argument("modules", nargs="*", metavar="MODULE")
    # (A student repository hides these three; argparse cannot print a group whose members are all
    # hidden, and there they only refuse, grade.py.)
    src = g if is_release() else g.add_mutually_exclusive_group()
    src.add_argument("--solutions", action="store_true", help=kit_only("grade the reference solutions"))
    src.add_argument("--submission", metavar="PATH", help=kit_only("grade a folder or .zip of student files"))
    src.add_argument("--submissions", metavar="DIR", help=kit_only("batch: grade every subfolder / zip of DIR"))
    g.add_argument("--csv", metavar="FILE", help="batch mode: write the gradebook here")
    g.add_argument("--hidden", action="store_true", help=kit_only("also run the instructor-only hidden tests"))
    g.add_argument("--out", metavar="DIR", help="report folder (default build/grade/<id>/report)")
    g.add_argument("--jobs", "-j", type=int, default=0, help="parallel test processes (default: cores)")
    g.add_argument("--quiet", action="store_true", help="no progress lines, only the table")
    g.add_argument("--sanitize", choices=["address"], default=None,
                   help="build and run the tests under AddressSanitizer and UndefinedBehaviorSanitizer "
                        "(own build, build/grade/<id>/build-asan): a bad memory access or undefined "
                        "behaviour fails the test with its kind and your file:line")
    g.add_argument("--sandbox", choices=["auto", "on", "limits", "off"], default="auto",
                   help="compile and run submitted code in the sandbox: auto (bubblewrap where it "
                        "works, else resource limits only, with the reason), on (bubblewrap or stop), "
                        "limits (no bubblewrap: limits and, as root, an unprivileged uid), "
                        "off (for timing only)")

    h = add("hint", _cmd_hint, "hints for an exercise function: ./distlab hint MODULE [FUNCTION] "
            "[--level N] (1 the idea, 2 the structure, 3 the details; no FUNCTION: list them)")
    h.add_argument("module")
    h.add_argument("function", nargs="?", default=None)
    h.add_argument("--level", "-l", type=int, default=1, help="1 the idea (default), 2 the structure, 3 the details")

    s = add("submit", _cmd_submit, "pack your owned files into a zip for upload")
    s.add_argument("modules", nargs="*", metavar="MODULE", help="only these modules (default all)")
    s.add_argument("-o", "--output", default="submission.zip")
    s.add_argument("--reference", action="store_true",
                   help="instructors: pack the reference's version of the owned files (full marks)")

    add("sync", _cmd_sync, "regenerate exercises/ from solutions/ (solution regions become TODOs)")
    c = add("check", _cmd_check, "consistency checks: --stubs (exercises/ in sync with solutions/)")
    c.add_argument("--stubs", action="store_true")

    rl = add("release", _cmd_release, "write the student repository to OUT (no solutions, no hidden tests)")
    rl.add_argument("out")
    rl.add_argument("--force", action="store_true", help="replace OUT if it exists")

    gz = add("gradescope-zip", _cmd_gradescope_zip, "build the Gradescope autograder zip")
    gz.add_argument("out", nargs="?", default="build/autograder.zip")

    go = add("golden", _cmd_golden, "regenerate reference outputs in grader/golden/ from solutions/")
    go.add_argument("modules", nargs="*", metavar="MODULE")
    go.add_argument("--check", action="store_true",
                    help="do not write: check that the stored outputs reproduce")

    fm = add("format", _cmd_format, "format the kit's hand-written C++ files with clang-format (.clang-format)")
    fm.add_argument("--check", action="store_true", help="do not write: list the files that are not formatted")

    mu = add("mutants", _cmd_mutants, "grade every instructor mutant (grader/mutants/) with the hidden "
             "tests: caught or ESCAPED, by which items, and the mutation score")
    mu.add_argument("modules", nargs="*", metavar="MODULE[/MUTANT]",
                    help="modules, or single mutants as MODULE/MUTANT (default: every mutant)")
    mu.add_argument("--jobs", "-j", type=int, default=0, help="parallel test processes (default: cores)")
    mu.add_argument("--fast", action="store_true",
                    help="stop each mutant at its first failing item (caught or not, sooner; the self-test's mode)")
    mu.add_argument("--groups", type=int, default=1,
                    help="grade this many groups of modules side by side, each in its own workspace "
                         "(build/grade/mutants-<i>/); default 1: one after another in build/grade/mutants/")
    mu.add_argument("--save-first-catches", action="store_true",
                    help="record each caught mutant's first catching item in grader/mutants/first_catches.json "
                         "(later runs start with it)")
    mu.add_argument("--workspace", default="mutants", help=argparse.SUPPRESS)
    mu.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one JSON line per mutant

    au = add("audit", _cmd_audit, "list constructs no honest solution needs (asm, /proc, syscalls, "
             "signals, fds, exit, files, environment, test names...) in submissions' owned files, "
             "with file:line, and the pairs of submissions that share most of their code")
    au.add_argument("paths", nargs="*", metavar="SUBMISSION", help="a submission's folder or .zip")
    au.add_argument("--submissions", metavar="DIR", help="every subfolder / zip of DIR, as grade does")
    au.add_argument("--solutions", action="store_true", help=kit_only("also audit the reference solutions"))
    au.add_argument("--module", action="append", default=[], metavar="MODULE",
                    help="only this module's owned files (repeatable; default all)")
    au.add_argument("--json", metavar="FILE", help="also write the findings and pairs as JSON")
    au.add_argument("--threshold", type=float, default=0.8,
                    help="list pairs sharing at least this fraction of a module's code beyond the stub "
                         "(default 0.8)")

    nm = add("new-module", _cmd_new_module, "create a module NN_topic in every place a module lives "
             "(solutions, exercises, tests, hidden tests, manifest, hints, mutant, docs), with one trivial "
             "function: the reference scores full marks, the stub zero")
    nm.add_argument("name", metavar="NN_topic")
    nm.add_argument("--title", default="", help="one line saying what the module teaches")

    pr = add("promises", _cmd_promises, "how much of each module's contract (header comments, README "
             "prose) its promise ledger quotes: sentences, and those covered by a row "
             "(grader/hidden/<module>/promises.toml)")
    pr.add_argument("modules", nargs="*", metavar="MODULE", help="only these modules (default all)")
    pr.add_argument("--uncovered", action="store_true",
                    help="also list every sentence no row quotes, with its file and line")

    t = add("test", _cmd_test, "the kit's self-test (last line: N passed, N failed)")
    t.add_argument("--only", default=None,
                   help="comma-separated steps: build,commands,tsan,nccl,solutions,stubs,sync,golden,release,"
                        "selftest,mutants,lint,format")
    t.add_argument("--full", action="store_true",
                   help="grade every mutant, also those caught before (grader/mutants/caught.json) with "
                        "nothing they depend on changed since")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `run` and `bench` pass what follows `--` (and options distlab does not know) to the program.
    after: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, after = argv[:i], argv[i + 1:]
    p = parser()
    args, unknown = p.parse_known_args(argv)
    if getattr(args, "passthrough", False):
        args.args = unknown + after
    elif unknown or after:
        p.error(f"unrecognized arguments: {' '.join(unknown + after)}")
    if not getattr(args, "func", None):
        parser().print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except DistlabError as e:
        print(f"distlab {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`./distlab hint ... | head`): stop quietly, like other commands do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
