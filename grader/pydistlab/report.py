"""Grading reports: Gradescope results.json, JUnit XML, Markdown, and the terminal table."""
from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .results import GradeRun, ModuleResult

OUTPUT_LIMIT = 10 * 1024  # per test in results.json / junit (Gradescope shows it to students)


def _fmt(x: float) -> str:
    return f"{x:g}"


def _cap(text: str, limit: int = OUTPUT_LIMIT) -> str:
    text = text.replace("\x00", "")
    # XML 1.0 cannot carry most control characters; keep \t \n \r.
    text = "".join(c if c in "\t\n\r" or ord(c) >= 32 else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "\n... (output truncated)"


def module_status(m: ModuleResult) -> str:
    if m.status != "graded":
        return m.status
    return "full marks" if m.score >= m.max_score else "graded"


def summary_lines(run: GradeRun) -> list[str]:
    lines = [f"distlab grade ({run.mode}{', with hidden tests' if run.hidden else ''}): "
             f"{_fmt(run.score)} / {_fmt(run.max_score)} points in {run.seconds:.1f} s"]
    for n in run.notes:
        lines.append(f"note: {n}")
    for m in run.modules:
        line = f"{m.module.name}: {_fmt(m.score)} / {_fmt(m.max_score)} ({module_status(m)})"
        lines.append(line)
        if m.status != "graded":
            lines.append("  " + m.message.splitlines()[0] if m.message else "")
        for n in m.notes:
            lines.append(f"  note: {n.splitlines()[0]}")
    return lines


def results_json(run: GradeRun) -> dict[str, Any]:
    tests: list[dict[str, Any]] = []
    for m in run.modules:
        by_name = {i.item.name: i for i in m.items}
        for item in m.module.items(run.hidden):
            r = by_name.get(item.name)
            if r is None:
                passed, out = False, (f"{m.status}: {m.message}" if m.message else m.status)
            else:
                passed = r.passed
                out = ("passed" if r.passed else f"failed: {r.reason}") + (f"\n\n{r.output}" if r.output else "")
            if m.notes:
                out += "\n\n" + "\n".join(f"note: {n}" for n in m.notes)
            tests.append({
                "name": item.full_name,
                "score": item.points if passed else 0,
                "max_score": item.points,
                "status": "passed" if passed else "failed",
                "output": _cap(out),
                "tags": [m.module.name, item.tier],
                "visibility": "after_published" if item.tier == "hidden" else "visible",
            })
    return {
        "score": run.score,
        "execution_time": round(run.seconds, 2),
        "output": "\n".join(summary_lines(run)),
        "stdout_visibility": "visible",
        "tests": tests,
    }


def junit_xml(run: GradeRun) -> ET.ElementTree:
    root = ET.Element("testsuites", name="distlab grade", time=f"{run.seconds:.3f}")
    total = failures = 0
    for m in run.modules:
        items = m.module.items(run.hidden)
        suite = ET.SubElement(root, "testsuite", name=m.module.name, tests=str(len(items)),
                              failures=str(m.failed), errors="0",
                              time=f"{m.build_seconds + m.test_seconds:.3f}")
        by_name = {i.item.name: i for i in m.items}
        for item in items:
            r = by_name.get(item.name)
            case = ET.SubElement(suite, "testcase", classname=m.module.name, name=item.name,
                                 time=f"{r.seconds if r else 0:.3f}")
            ET.SubElement(case, "properties")
            props = case.find("properties")
            assert props is not None
            ET.SubElement(props, "property", name="points", value=_fmt(item.points))
            ET.SubElement(props, "property", name="tier", value=item.tier)
            total += 1
            if r is None or not r.passed:
                failures += 1
                msg = (r.reason if r else f"{m.status}: {(m.message or '').splitlines()[0] if m.message else ''}")
                f = ET.SubElement(case, "failure", message=_cap(msg, 500))
                f.text = _cap(r.output if r else m.message)
        if m.notes:
            out = ET.SubElement(suite, "system-out")
            out.text = _cap("\n".join(m.notes))
    root.set("tests", str(total))
    root.set("failures", str(failures))
    tree = ET.ElementTree(root)
    ET.indent(tree)
    return tree


def markdown(run: GradeRun) -> str:
    md = [f"# distlab grade: {_fmt(run.score)} / {_fmt(run.max_score)}", "",
          f"Mode: {run.mode}{' (with hidden tests)' if run.hidden else ''}; "
          f"graded in {run.seconds:.1f} s.", ""]
    for n in run.notes:
        md.append(f"> **Note:** {n}")
    if run.notes:
        md.append("")
    md += ["| module | points | passed | failed | time | status |", "|---|---:|---:|---:|---:|---|"]
    for m in run.modules:
        md.append(f"| {m.module.name} | {_fmt(m.score)} / {_fmt(m.max_score)} | {m.passed} | {m.failed} "
                  f"| {m.build_seconds + m.test_seconds:.1f} s | {module_status(m)} |")
    for m in run.modules:
        md += ["", f"## {m.module.name}: {_fmt(m.score)} / {_fmt(m.max_score)}", ""]
        if m.status != "graded":
            md += [f"**{m.status}**", "", "```", m.message.replace("```", "'''"), "```"]
        for n in m.notes:
            md.append(f"- note: {n.splitlines()[0]}")
        if m.notes:
            md.append("")
        by_name = {i.item.name: i for i in m.items}
        if m.items:
            md += ["| test | points | result |", "|---|---:|---|"]
            for item in m.module.items(run.hidden):
                r = by_name.get(item.name)
                res = "passed" if r and r.passed else f"failed: {(r.reason if r else m.status)}"
                res = res.replace("|", "\\|").replace("\n", " ")
                tier = " (hidden)" if item.tier == "hidden" else ""
                md.append(f"| {item.name}{tier} | {_fmt(r.score if r else 0)} / {_fmt(item.points)} | {res} |")
            for r in m.items:
                if not r.passed and r.output.strip():
                    # The reason and the output may quote the submission: no markup gets through.
                    md += ["", f"<details><summary>{r.item.name}: {html.escape(r.reason)}</summary>", "", "```",
                           _cap(r.output, 4000).replace("```", "'''"), "```", "</details>"]
    return "\n".join(md) + "\n"


def write_all(run: GradeRun, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results_json(run), indent=2) + "\n", encoding="utf-8")
    junit_xml(run).write(out / "junit.xml", encoding="utf-8", xml_declaration=True)
    (out / "report.md").write_text(markdown(run), encoding="utf-8")


def print_table(run: GradeRun) -> None:
    rows = [("module", "points", "passed", "failed", "time", "status")]
    for m in run.modules:
        rows.append((m.module.name, f"{_fmt(m.score)}/{_fmt(m.max_score)}", str(m.passed), str(m.failed),
                     f"{m.build_seconds + m.test_seconds:.1f}s", module_status(m)))
    rows.append(("total", f"{_fmt(run.score)}/{_fmt(run.max_score)}",
                 str(sum(m.passed for m in run.modules)), str(sum(m.failed for m in run.modules)),
                 f"{run.seconds:.1f}s", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print()
    for n in run.notes:
        print(f"note: {n}")
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) if j in (0, 5) else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0 or i == len(rows) - 2:
            print("  ".join("-" * w for w in widths))
    warnings = sorted(set(run.warnings))
    if warnings:
        print(f"\ncompiler warnings ({len(warnings)}; they cost no points, but read them):")
        for w in warnings[:5]:
            print(f"  {w[:160]}")
    for m in run.modules:
        if m.status != "graded":
            print(f"\n{m.module.name}: {m.status}\n  " + "\n  ".join(m.message.splitlines()[:12]))
        for n in m.notes:
            print(f"{m.module.name}: note: {n.splitlines()[0]}")
        for r in m.items:
            if not r.passed:
                reason = r.reason if len(r.reason) <= 110 else r.reason[:107] + "..."
                print(f"  {r.item.full_name}: {reason}")
