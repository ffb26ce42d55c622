"""`./distlab golden [MODULE...] [--check]`: regenerate the reference outputs in
grader/golden/<module>/ from the solutions, or check that they reproduce (golden.py says the
convention and the tolerances)."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from .. import cmake, deps, manifest as mf, workspace as ws
from ..errors import DistlabError
from ..golden import GOLDEN, compare_file
from ..paths import ROOT, is_release, rel


def _modules_with_generators(man: mf.Manifest, names: list[str], known: set[str]) -> list[tuple[mf.Module, str]]:
    picked = man.select(names) if names else [man.modules[n] for n in man.order if n in man.modules]
    out = []
    for m in picked:
        target = m.golden_target or f"golden_{m.name}"
        if target in known:
            out.append((m, target))
        elif names:
            raise DistlabError(f"{m.name} has no reference-output generator (no CMake target {target})")
    return out


def run_generators(names: list[str], check: bool, quiet: bool = False) -> tuple[int, int]:
    """Regenerates (or checks) the reference outputs; returns (modules ok, modules failed)."""
    if is_release():
        raise DistlabError("reference outputs are generated from solutions/, which a student "
                           "repository does not have")
    deps.ensure()
    say = ws.Progress(quiet)
    # The solutions workspace of the grader (shared with `grade --solutions`), locked throughout.
    with ws.solutions_tree(say, hidden=(ROOT / "grader" / "hidden").is_dir()) as tb:
        ws.configure(tb, tb.build, ws.BASE_CACHE, say)
        man = mf.load()
        gens = _modules_with_generators(man, names, cmake.targets(tb.build))
        if not gens:
            print("no module has a reference-output generator (a CMake target golden_<module>)")
            return 0, 0
        return _run(tb, gens, check)


def _run(tb: ws.TreeBuild, gens: list[tuple[mf.Module, str]], check: bool) -> tuple[int, int]:
    """Builds and runs each generator in tb, then writes its outputs or checks them."""
    ok = bad = 0
    for m, target in gens:
        r = cmake.build(tb.build, [target])
        if not r.ok:
            print(f"{m.name}: the generator {target} does not build:\n{tb.first_errors(r.output)}")
            bad += 1
            continue
        with tempfile.TemporaryDirectory(prefix="distlab-golden-") as tmp:
            outdir = Path(tmp)
            try:
                p = subprocess.run([str(tb.build / "bin" / target), str(outdir), *m.golden_args],
                                   cwd=tb.src, capture_output=True, text=True, timeout=600)
            except subprocess.TimeoutExpired:
                print(f"{m.name}: {target} ran longer than 600 s")
                bad += 1
                continue
            if p.returncode != 0:
                print(f"{m.name}: {target} failed (status {p.returncode}):\n{(p.stdout + p.stderr)[-2000:]}")
                bad += 1
                continue
            produced = {f.relative_to(outdir).as_posix(): f for f in outdir.rglob("*") if f.is_file()}
            dest = GOLDEN / m.name
            if check:
                stored = {f.relative_to(dest).as_posix(): f for f in dest.rglob("*") if f.is_file()} \
                    if dest.is_dir() else {}
                problems = [f"{n}: stored but no longer produced" for n in sorted(set(stored) - set(produced))]
                problems += [f"{n}: produced but not stored (run ./distlab golden {m.name})"
                             for n in sorted(set(produced) - set(stored))]
                for n in sorted(set(produced) & set(stored)):
                    d = compare_file(produced[n].read_bytes(), stored[n].read_bytes(), n,
                                     m.golden_rtol, m.golden_atol, m.golden_terms)
                    if d:
                        problems.append(d)
                if problems:
                    bad += 1
                    print(f"{m.name}: reference outputs do NOT reproduce ({len(problems)} problems):")
                    for pr in problems[:10]:
                        print(f"  {pr}")
                else:
                    ok += 1
                    print(f"{m.name}: {len(produced)} reference outputs reproduce")
            else:
                if dest.exists():
                    shutil.rmtree(dest)
                dest.mkdir(parents=True)
                for n, f in produced.items():
                    (dest / n).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(f, dest / n)
                ok += 1
                print(f"{m.name}: wrote {len(produced)} files to {rel(dest)}")
    return ok, bad


def main(names: list[str], check: bool) -> int:
    ok, bad = run_generators(names, check)
    return 1 if bad else 0
