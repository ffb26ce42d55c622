"""`./distlab sync` and `./distlab check --stubs`: exercises/ regenerated from solutions/, or
checked against what sync would write (stubs.py generates the stubs)."""
from __future__ import annotations

from .. import stubs
from ..paths import CXX_EXTENSIONS


def sync() -> int:
    """`./distlab sync`: writes exercises/ and says what changed."""
    wanted = stubs.generate()
    drift = stubs.write(wanted)
    drift.print_files(missing="added", changed="updated", extra="removed")
    n = len(wanted)
    todo = sum(1 for p, d in wanted.items() if p.suffix in CXX_EXTENSIONS and b"DISTLAB_TODO(" in d)
    if drift.empty():
        print(f"exercises/ is up to date ({n} files, {todo} with TODOs)")
    else:
        print(f"exercises/ regenerated: {len(drift.missing)} added, {len(drift.changed)} updated, "
              f"{len(drift.extra)} removed ({n} files, {todo} with TODOs)")
    return 0


def check(max_diff_lines: int = 12) -> int:
    """`./distlab check --stubs`: 0 when exercises/ is exactly what sync would write, else 1 with a
    summary of the drift."""
    wanted = stubs.generate()
    drift = stubs.compare(wanted)
    if drift.empty():
        print(f"stubs in sync: exercises/ matches solutions/ ({len(wanted)} files)")
        return 0
    print("exercises/ drifted from solutions/ (exercises/ is generated: run ./distlab sync, "
          "and edit solutions/ instead):")
    drift.print_files(missing="missing", changed="differs", extra="extra", max_diff_lines=max_diff_lines)
    print(f"{len(drift.missing)} missing, {len(drift.extra)} extra, {len(drift.changed)} differ")
    return 1
