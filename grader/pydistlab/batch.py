"""`./distlab grade --submissions DIR --csv grades.csv`: grade every submission in a folder.

Each subfolder or .zip of DIR is one submission (its name is the student's id). All of them are
graded in the same clean tree one after the other, so each costs only the files that differ.
Reports go to OUT/<name>/ (default: next to the CSV, in <csv stem>-reports/)."""
from __future__ import annotations

import csv
import time
import traceback
from pathlib import Path

from . import grade, manifest as mf, report
from .errors import DistlabError
from .paths import rel
from .results import Mode


def submissions_in(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise DistlabError(f"--submissions {folder}: not a folder")
    subs = [p for p in sorted(folder.iterdir())
            if not p.name.startswith(".") and (p.is_dir() or p.suffix.lower() == ".zip")]
    if not subs:
        raise DistlabError(f"--submissions {folder}: no subfolders or .zip files in it")
    return subs


def main(folder: Path, csv_path: Path | None, modules: list[str], hidden: bool,
         out: Path | None, jobs: int, sandbox_mode: str = "auto") -> int:
    subs = submissions_in(folder.resolve())
    man = mf.load()
    selected = [m.name for m in man.select(modules)]
    csv_path = (csv_path or Path("grades.csv")).resolve()
    out = (out or csv_path.with_name(csv_path.stem + "-reports")).resolve()
    rows: list[dict[str, str]] = []
    header = ["submission", *selected, "total", "max", "status"]
    t0 = time.monotonic()
    for i, sub in enumerate(subs, start=1):
        name = sub.stem if sub.is_file() else sub.name
        print(f"[{i}/{len(subs)}] {name} ...", end=" ", flush=True)
        row = {"submission": name}
        try:
            run = grade.grade(modules, Mode.SUBMISSION, sub, grade.GradeOptions(
                hidden=hidden, jobs=jobs, quiet=True, sandbox=sandbox_mode))
            report.write_all(run, out / name)
            by_mod = {m.module.name: m for m in run.modules}
            for n in selected:
                row[n] = f"{by_mod[n].score:g}" if n in by_mod else ""
            row["total"] = f"{run.score:g}"
            row["max"] = f"{run.max_score:g}"
            problems = [m.module.name + " " + m.status for m in run.modules if m.status != "graded"]
            if run.notes:
                problems.insert(0, run.notes[0].split(":")[0])
            row["status"] = "ok" if not problems else "; ".join(problems)
            print(f"{run.score:g}/{run.max_score:g} ({run.seconds:.0f} s)" +
                  ("" if row["status"] == "ok" else f" [{row['status']}]"), flush=True)
        except DistlabError as e:
            row.update({n: "" for n in selected}, total="", max="", status=f"error: {e}".splitlines()[0])
            print(row["status"], flush=True)
        except Exception as e:  # one bad submission must not stop the batch
            row.update({n: "" for n in selected}, total="", max="", status=f"grader error: {e}")
            print(row["status"], flush=True)
            traceback.print_exc()
        rows.append(row)
        # Write after each submission so an interrupted batch keeps what it graded.
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            w.writerows(rows)
    total = time.monotonic() - t0
    print(f"\n{len(rows)} submissions graded in {total:.0f} s ({total / max(1, len(rows)):.1f} s per "
          f"submission): gradebook {rel(csv_path)}, reports in {rel(out)}/")
    return 0
