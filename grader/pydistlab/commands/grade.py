"""`./distlab grade [MODULE...] [--solutions | --submission PATH | --submissions DIR]`.

Picks the mode from the arguments, grades (grade.py) and writes the reports (report.py) to
build/grade/<id>/report/ or --out; with --submissions, grades a folder of submissions (batch.py).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from .. import batch, grade, report, workspace as ws
from ..errors import DistlabError
from ..paths import rel
from ..results import Mode


def main(a: argparse.Namespace) -> int:
    if a.submissions:
        return batch.main(Path(a.submissions), Path(a.csv) if a.csv else None, a.modules, a.hidden,
                          Path(a.out) if a.out else None, a.jobs, a.sandbox)
    if a.csv:
        raise DistlabError("--csv goes with --submissions DIR (batch mode)")
    mode = Mode.SOLUTIONS if a.solutions else Mode.SUBMISSION if a.submission else Mode.STUDENT
    sub_path = Path(a.submission).resolve() if a.submission else None
    if sub_path is not None and not sub_path.exists():
        raise DistlabError(f"--submission {a.submission}: no such file or folder")
    # DISTLAB_GRADE_TREE names another tree under build/grade/ (e.g. to time a clean grade).
    custom = os.environ.get("DISTLAB_GRADE_TREE", "")
    if custom and not re.fullmatch(r"[A-Za-z0-9_.-]+", custom):
        raise DistlabError("DISTLAB_GRADE_TREE: letters, digits, '.', '_' and '-' only")
    run = grade.grade(a.modules, mode, sub_path, grade.GradeOptions(
        hidden=a.hidden, jobs=a.jobs, quiet=a.quiet, tree_prefix=custom, sandbox=a.sandbox,
        sanitize=a.sanitize or ""))
    out = Path(a.out).resolve() if a.out else ws.grade_root() / (custom or mode.tree_id) / "report"
    report.write_all(run, out)
    report.print_table(run, rel(out))
    sys.stdout.flush()
    return 0
