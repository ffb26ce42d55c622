"""`./distlab audit SUBMISSION... | --submissions DIR | --solutions [--module M] [--json FILE]`.

Reads each submission's owned files as grading does (submission.py: a folder or a .zip), lists
the constructs no honest solution needs (audit/rules.py) with file:line and why, and, with two or
more submissions, the pairs that share most of their code in a module (audit/similarity.py).
Prints a table of finding counts per submission, then the details and the pairs. Exit status 0
when nothing was found, 1 when a finding or a pair was listed, 2 when the audit could not run.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from .. import manifest as mf, submission
from ..audit import core, similarity
from ..batch import submissions_in
from ..errors import DistlabError
from ..paths import ROOT, SOLUTIONS, is_release


def _solutions(owned: list[str]) -> submission.Submission:
    """The reference solutions as one submission (each owned exercises/ path read from solutions/)."""
    sub = submission.Submission(label="solutions")
    for o in owned:
        p = SOLUTIONS / o.split("/", 1)[-1]
        if o.startswith("exercises/") and p.is_file():
            sub.files[o] = p.read_bytes()
    return sub


def load_all(a: argparse.Namespace, owned: list[str]) -> list[submission.Submission]:
    subs: list[submission.Submission] = []
    if a.solutions:
        if is_release():
            raise DistlabError("--solutions: this is a student repository, without solutions/")
        subs.append(_solutions(owned))
    paths = [Path(p) for p in a.paths]
    if a.submissions:
        paths += submissions_in(Path(a.submissions).resolve())
    for p in paths:
        if not p.exists():
            raise DistlabError(f"{p}: no such file or folder (give a submission's folder or .zip)")
        subs.append(submission.load(p.resolve(), owned, label=p.stem if p.is_file() else p.resolve().name))
    if not subs:
        raise DistlabError("nothing to audit: give submissions (folders or .zip files), "
                           "--submissions DIR or --solutions")
    labels = Counter(s.label for s in subs)
    seen: Counter[str] = Counter()
    for s in subs:   # two submissions of one name (a/alice, b/alice.zip) are told apart
        if labels[s.label] > 1:
            seen[s.label] += 1
            s.label = f"{s.label}#{seen[s.label]}"
    return subs


def print_table(audits: list[core.SubmissionAudit]) -> None:
    rules = sorted({f.rule for a in audits for f in a.findings})
    width = max([len("submission")] + [len(a.label) for a in audits])
    print(f"{'submission':<{width}}  files  findings" + "".join(f"  {r}" for r in rules))
    for a in audits:
        counts = Counter(f.rule for f in a.findings)
        print(f"{a.label:<{width}}  {a.files:>5}  {len(a.findings):>8}" +
              "".join(f"  {counts.get(r, 0) or '.':>{len(r)}}" for r in rules))


def print_details(audits: list[core.SubmissionAudit]) -> None:
    for a in audits:
        if not (a.findings or a.problems):
            continue
        print(f"\n{a.label}:")
        for p in a.problems:
            print(f"  ({p})")
        for f in a.findings:
            print(f"  {f.file}:{f.line}  [{f.rule}] {f.what}: {f.why}")


def print_pairs(pairs: list[similarity.Pair], threshold: float, n: int) -> None:
    if n < 2:
        return
    print(f"\nsimilar pairs (a module's code beyond the stub shared at {threshold:.0%} or more):")
    if not pairs:
        print("  none")
    for p in pairs:
        print(f"  {p.score:5.0%}  {p.a}  ~  {p.b}  {p.module} ({p.shared} of {p.smaller} fingerprints)")


def main(a: argparse.Namespace) -> int:
    if not 0 < a.threshold <= 1:
        raise DistlabError(f"--threshold {a.threshold}: a fraction in (0, 1], e.g. 0.8")
    man = mf.load()
    modules = man.select(a.module or [])
    auditor = core.Auditor(modules, ROOT)
    subs = load_all(a, auditor.owned)
    audits = [auditor.audit(s) for s in subs]
    pairs = similarity.similar_pairs({x.label: x.prints for x in audits}, a.threshold) if len(audits) > 1 else []
    print_table(audits)
    print_details(audits)
    print_pairs(pairs, a.threshold, len(audits))
    allowed = sum(x.allowed for x in audits)
    if allowed:
        print(f"\n({allowed} construct(s) accepted by the modules' audit_allow in grader/manifest.toml)")
    if a.json:
        out = Path(a.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"threshold": a.threshold, "submissions": [x.as_dict() for x in audits],
                                   "similar": [p.as_dict() for p in pairs]}, indent=1) + "\n",
                       encoding="utf-8")
        print(f"written {out}")
    return 1 if pairs or any(x.findings for x in audits) else 0
