"""Build strategies: how one build of a tree keeps the submission's code apart (the sandbox package).

Every strategy builds in two steps. First the untrusted sources (the owned files of the modules
graded from the student's code) are compiled where nothing secret can be read; then everything
else (the kit's library, references, tests, hidden tests) and the links are built from the kit's
own sources, and never compile an untrusted source again.

  Bubblewrap       the untrusted compile in a bubblewrap view without hidden tests or reference
                   sources; the trusted build in a view of the clean copy.
  UnprivilegedUid  no namespaces, as root: what the submission must not read is made root-only
                   (sandbox.lock_away) and its files are compiled as an unprivileged uid.
  NoSandbox        `--sandbox off` (or no unprivileged uid to lend): one plain build.
  TrustedOnly      the solutions without bubblewrap: every file is the kit's own, one plain build.

compile_untrusted() is the single place where untrusted files are compiled: per module, its
owned headers pass check_sources() first (judged on the compiler's view: sandbox.header_view) and
its objects pass check_objects() after (no symbol that replaces the tests', GoogleTest's, the kit's
or the runtime's, no initialiser that runs before the kit's: sandbox.symbols), when a submission is
graded (a student's own checkout and the reference are not judged). A refused module is not built.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import cmake, manifest as mf, sandbox, workspace as ws
from ..errors import DistlabError
from ..paths import ROOT, rel
from ..results import Mode
from .plan import TreePlan

#: The target of the module libraries' precompiled kit headers (DISTLAB_PCH; GCC and clang).
PCH_TARGET = "distlab_pch_lib"


@dataclass
class Untrusted:
    """What the untrusted compile did."""
    objects: dict[str, list[str]] = field(default_factory=dict)   # module -> its untrusted objects
    errors: dict[str, str] = field(default_factory=dict)          # module -> why it did not compile
    refused: dict[str, str] = field(default_factory=dict)         # module -> why it may not be built
    seconds: dict[str, float] = field(default_factory=dict)       # module -> its own compile time
    logs: list[str] = field(default_factory=list)                 # build outputs (for warnings)


class BuildStrategy:
    """The two steps of a build; this base class guards nothing (one plain build)."""
    #: A module built on one whose untrusted files did not compile is not built at all.
    stops_dependents = False
    #: The command the trusted build runs under.
    trusted_prefix: list[str] | None = None

    def __init__(self, tb: ws.TreeBuild, build_dir: Path, tree: TreePlan) -> None:
        self.tb, self.build_dir, self.tree = tb, build_dir, tree

    def up_to_date(self, targets: list[str]) -> bool:
        """Whether the build has nothing to do (no sandbox need start); False: build."""
        return False

    def compile_untrusted(self, modules: list[str], say: ws.Progress, label: str) -> Untrusted:
        """1. The untrusted sources of `modules` (those with any), each module's checked before
        and after its compile."""
        return Untrusted()

    def recompiled(self, targets: list[str], objects: dict[str, list[str]]) -> dict[str, str]:
        """Modules whose untrusted sources the trusted build would compile again -> why not built."""
        return {}

    def after_trusted(self) -> None:
        """After the trusted build (its new files may need guarding too)."""

    def check_sources(self, module: str, sources: list[str]) -> str:
        """Before the untrusted compile of module's sources: why they may not be compiled ("": ok)."""
        return ""

    def check_objects(self, module: str, objects: list[str]) -> str:
        """After the untrusted compile: why module's objects may not be linked ("": ok)."""
        return ""


class NoSandbox(BuildStrategy):
    """`--sandbox off`, or no way to isolate here: the submission's files build with the rest."""


class TrustedOnly(NoSandbox):
    """The solutions graded without bubblewrap: every file is the kit's own."""


class Sandboxed(BuildStrategy):
    """The untrusted compile first, in `untrusted_prefix`; the trusted build after."""
    untrusted_prefix: list[str] = []
    compile_together = False   # one ninja run for every module's files (both cores busy)

    def __init__(self, tb: ws.TreeBuild, build_dir: Path, tree: TreePlan, plan: sandbox.BuildPlan,
                 judged: dict[str, mf.Module] | None = None) -> None:
        super().__init__(tb, build_dir, tree)
        self.plan = plan
        self.judged = judged or {}   # the modules whose submitted files the rules judge

    def check_sources(self, module: str, sources: list[str]) -> str:
        if module not in self.judged:
            return ""
        return sandbox.check_owned_headers(self.plan, [self.judged[module]], self.untrusted_prefix,
                                           ROOT).get(module, "")

    def check_objects(self, module: str, objects: list[str]) -> str:
        if module not in self.judged:
            return ""
        return sandbox.check_objects(self.build_dir, {o: self.plan.objects[o] for o in objects})

    def up_to_date(self, targets: list[str]) -> bool:
        # Objects compiled under another strategy (bubblewrap's view is narrower than what the
        # unprivileged uid can read) are not reused: they are compiled again under this one.
        stamp = self.build_dir / ".distlab-untrusted-compile"
        if not stamp.is_file() or stamp.read_text() != type(self).__name__:
            for o in self.plan.objects_of({s for ss in self.tree.untrusted.values() for s in ss}):
                (self.build_dir / o).unlink(missing_ok=True)
            stamp.write_text(type(self).__name__)
        # A re-grade of unchanged files: ninja -n (which runs nothing) says there is nothing to
        # compile or link, so no sandbox needs to start for the build.
        idle = cmake.build(self.build_dir, targets, keep_going=True, dry_run=True)
        return idle.ok and "no work to do" in idle.output

    def compile_untrusted(self, modules: list[str], say: ws.Progress, label: str) -> Untrusted:
        done = Untrusted()
        self._precompile_kit_headers(say, label)
        for n in modules:
            objs = self.plan.objects_of(set(self.tree.untrusted.get(n, [])))
            if objs:
                done.objects[n] = objs
        for n in done.objects:
            problem = self.check_sources(n, self.tree.untrusted[n])
            if problem:
                done.refused[n] = problem
        todo = {n: objs for n, objs in done.objects.items() if n not in done.refused}
        together_ok = False
        if self.compile_together and len(todo) > 1:
            # Only when this fails is each module built on its own (what compiled is up to date),
            # to attribute the errors.
            say.status(f"compiling the student's own files in the sandbox{label}")
            r = cmake.build(self.build_dir, [o for objs in todo.values() for o in objs],
                            keep_going=True, prefix=self.untrusted_prefix)
            done.logs.append(r.output)
            together_ok = r.ok
        for n, objs in todo.items():
            if not together_ok:
                say.status(f"compiling {n}'s own files in the sandbox{label}")
                r = self._compile(n, objs)
                done.seconds[n] = r.seconds
                done.logs.append(r.output)
                if not r.ok:
                    done.errors[n] = self.tb.first_errors(r.output)
                    continue
            problem = self.check_objects(n, objs)
            if problem:
                done.refused[n] = problem
        return done

    def _compile(self, module: str, objects: list[str]) -> cmake.Result:
        return cmake.build(self.build_dir, objects, keep_going=True, prefix=self.untrusted_prefix)

    def _precompile_kit_headers(self, say: ws.Progress, label: str) -> None:
        """The module libraries' precompiled header (cmake/DistlabModule.cmake: kit headers only,
        never a module's own) is built by the trusted build before any untrusted compile, which
        reads it and finds it up to date; the untrusted compile never writes it (its outputs are
        the submission's objects, under the object-size limit)."""
        if PCH_TARGET not in cmake.targets(self.build_dir):
            return
        # Up to date (ninja -n runs nothing): no sandbox needs to start for it.
        idle = cmake.build(self.build_dir, [PCH_TARGET], dry_run=True)
        if idle.ok and "no work to do" in idle.output:
            return
        say.status(f"precompiling the kit's headers{label}")
        r = cmake.build(self.build_dir, [PCH_TARGET], prefix=self.trusted_prefix)
        if not r.ok:
            raise DistlabError(f"the kit's precompiled header does not build in {rel(self.build_dir)} "
                               f"(target {PCH_TARGET}); this is not caused by a submission:\n"
                               f"{self.tb.first_errors(r.output)}")

    def recompiled(self, targets: list[str], objects: dict[str, list[str]]) -> dict[str, str]:
        # Never compile an untrusted source outside its view: ninja -n lists what would run, and a
        # module whose files would be compiled again is not built.
        if not objects:
            return {}
        dry = cmake.build(self.build_dir, targets, keep_going=True, dry_run=True)
        leaks: dict[str, str] = {}
        for n, sources in self.tree.untrusted.items():
            if any(o in dry.output for o in self.plan.objects_of(set(sources))):
                leaks[n] = (f"{', '.join(sources)}: the build would compile it again outside "
                            f"the sandbox, so it was not built (tell your instructor)")
        return leaks


class Bubblewrap(Sandboxed):
    stops_dependents = True
    compile_together = True

    def __init__(self, tb: ws.TreeBuild, build_dir: Path, tree: TreePlan, plan: sandbox.BuildPlan,
                 judged: dict[str, mf.Module] | None = None) -> None:
        super().__init__(tb, build_dir, tree, plan, judged)
        decoy = tb.src.parent / "empty"
        decoy.write_bytes(b"")
        self.untrusted_prefix = sandbox.build_view(plan, untrusted=True, hide_sources=tree.hide, decoy=decoy)
        self.trusted_prefix = sandbox.build_view(plan, untrusted=False)


class UnprivilegedUid(Sandboxed):
    def __init__(self, tb: ws.TreeBuild, build_dir: Path, tree: TreePlan, plan: sandbox.BuildPlan,
                 uid: int, judged: dict[str, mf.Module] | None = None) -> None:
        super().__init__(tb, build_dir, tree, plan, judged)
        self.uid = uid
        sandbox.lock_away(plan, ROOT, tree.hide)
        self.untrusted_prefix = sandbox.uid_prefix(uid)
        self.trusted_prefix = sandbox.link_prefix()   # links of trusted parts with submitted objects

    def _compile(self, module: str, objects: list[str]) -> cmake.Result:
        folders = sorted({self.build_dir / Path(o).parent for o in objects})
        with sandbox.LentTo(self.build_dir, folders, self.uid,
                            [self.tb.src / f for f in self.tree.untrusted.get(module, [])]):
            return super()._compile(module, objects)

    def after_trusted(self) -> None:
        sandbox.lock_away(self.plan, ROOT, self.tree.hide)   # the new test programs too


def choose(status: sandbox.Status, mode: Mode, tb: ws.TreeBuild, build_dir: Path,
           tree: TreePlan, man: mf.Manifest) -> BuildStrategy:
    """The strategy for one build of the tree (configured already: it reads the build's plan).
    A submission's modules are judged (check_sources, check_objects); a student's own checkout
    and the reference are not."""
    judged = {n: man.modules[n] for n in tree.untrusted if n in man.modules} if mode is Mode.SUBMISSION else {}
    if mode is Mode.SOLUTIONS and not status.isolated:
        return TrustedOnly(tb, build_dir, tree)
    if status.isolated:
        return Bubblewrap(tb, build_dir, tree, sandbox.BuildPlan.read(tb.src, build_dir), judged)
    if status.limited:
        plan = sandbox.BuildPlan.read(tb.src, build_dir)
        uid = sandbox.build_uid(plan, status)
        if uid is not None:
            return UnprivilegedUid(tb, build_dir, tree, plan, uid, judged)
    return NoSandbox(tb, build_dir, tree)
