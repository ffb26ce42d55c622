"""Grading reports: Gradescope results.json, JUnit XML, Markdown, and the terminal table."""
from __future__ import annotations

import html
import json
import re
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from . import deadlock, unfinished
from .paths import ROOT
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
    if m.score >= m.max_score:
        return "full marks"
    return f"blocked by {', '.join(m.blocked_by)}" if m.blocked_by else "graded"


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
        if m.blocked_by and m.status == "graded":
            lines.append(f"  {blocked_line(m)}")
        fns = unfinished_functions(m)
        if fns:
            lines.append(f"  not implemented yet: {', '.join(fns)}")
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
          f"graded in {run.seconds:.1f} s (building, all modules together: {run.build_seconds:.1f} s; "
          f"the time column is each module's test time).", ""]
    for n in run.notes:
        md.append(f"> **Note:** {n}")
    if run.notes:
        md.append("")
    md += ["| module | points | passed | failed | time | status |", "|---|---:|---:|---:|---:|---|"]
    for m in run.modules:
        md.append(f"| {m.module.name} | {_fmt(m.score)} / {_fmt(m.max_score)} | {m.passed} | {m.failed} "
                  f"| {m.test_seconds:.1f} s | {module_status(m)} |")
    for m in run.modules:
        md += ["", f"## {m.module.name}: {_fmt(m.score)} / {_fmt(m.max_score)}", ""]
        if m.status != "graded":
            md += [f"**{m.status}**", "", "```", m.message.replace("```", "'''"), "```"]
        if m.blocked_by and m.status == "graded":
            md.append(f"- {blocked_line(m)} (its tests run that module's code)")
        fns = unfinished_functions(m)
        if fns:
            md.append(f"- not implemented yet: {', '.join(fns)}")
        for n in m.notes:
            md.append(f"- note: {n.splitlines()[0]}")
        if m.notes or fns or m.blocked_by:
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


#: "not implemented at FILE:LINE: ..." (runner._headline's form of a TODO that threw).
_TODO = re.compile(r"not implemented(?: at (?P<file>[^\s:]+):(?P<line>\d+))?")


def _todo_function(reason: str, module: str = "") -> str | None:
    """For a reason that says a TODO was reached: the function not written yet (never the TODO's
    text: the report has it), "?" when the reason gives no place, "" when the TODO lies in
    another module's file (ModuleResult.blocked_by names it); None for any other reason."""
    m = _TODO.search(reason)
    if not m or reason.find("not implemented") > 40:
        return None
    if not m.group("file"):
        return "?"
    owner = unfinished.module_of_path(m.group("file"))
    if module and owner and owner != module:
        return ""
    name = unfinished.function_in_file(ROOT, m.group("file"), int(m.group("line")))
    return name or f"{Path(m.group('file')).name}:{m.group('line')}"


def blocked_line(m: ModuleResult) -> str:
    """"blocked by 05_mlp: MLP::forward, ..." for a module whose tests stopped in another
    module's unfinished functions; "" when none did."""
    return "; ".join(f"blocked by {p}: {', '.join(fns)}" for p, fns in m.blocked_by.items())


def unfinished_functions(m: ModuleResult) -> list[str]:
    """Every unfinished function of the module: those whose TODO markers are still in its files,
    then any other of its own that a test reached. Empty for a module with full marks."""
    if m.status != "graded" or m.score >= m.max_score:
        return []
    names = list(m.unfinished)   # (grade.py named them from the files as graded)
    for r in m.items:
        fn = None if r.passed else _todo_function(r.reason, m.module.name)
        if fn == "?":   # no file:line in the message: name the item instead
            fn = f"({r.item.name})"
        elif m.unfinished:
            continue
        if fn and fn not in names:
            names.append(fn)
    return names


def _crashed(reason: str) -> bool:
    return reason.startswith("crashed:") or "corrupted" in reason or "SIGSEGV" in reason \
        or "SIGABRT" in reason


def print_table(run: GradeRun, out_dir: str = "") -> None:
    """The terminal summary: the table, warnings from the student's own files, then what failed
    (first line of each diagnosis) and, collapsed, which functions are not written yet."""
    rows = [("module", "points", "passed", "failed", "tests", "status")]
    for m in run.modules:
        rows.append((m.module.name, f"{_fmt(m.score)}/{_fmt(m.max_score)}", str(m.passed), str(m.failed),
                     f"{m.test_seconds:.1f}s", module_status(m)))
    rows.append(("total", f"{_fmt(run.score)}/{_fmt(run.max_score)}",
                 str(sum(m.passed for m in run.modules)), str(sum(m.failed for m in run.modules)),
                 f"{sum(m.test_seconds for m in run.modules):.1f}s", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print()
    for n in run.notes:
        print(f"note: {n}")
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) if j in (0, 5) else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0 or i == len(rows) - 2:
            print("  ".join("-" * w for w in widths))
    print(f"{run.seconds:.1f} s in all: building {run.build_seconds:.1f} s (one build for every module "
          f"graded), then the tests (each module's test time above)")
    warnings = sorted(set(run.warnings))
    if warnings:
        print(f"\nwarnings in your files ({len(warnings)}; they cost no points, but read them):")
        for w in warnings[:5]:
            print(f"  {w[:160]}")
    todo: dict[str, list[str]] = {}
    not_started: dict[str, bool] = {}
    failed: list[str] = []
    crashed: list[str] = []
    hints_said: set[str] = set()
    for m in run.modules:
        if m.status != "graded":
            failed.append(f"{m.module.name}: {m.status}: " + "\n    ".join(m.message.splitlines()[:12]))
        first = len(failed)
        if m.blocked_by and m.status == "graded":
            first_pre = next(iter(m.blocked_by))
            failed.append(f"{m.module.name}: {blocked_line(m)} (its tests run your {first_pre} code, "
                          f"which is not finished: ./distlab grade {first_pre})")
        for r in m.items:
            if r.passed or _todo_function(r.reason, m.module.name) is not None:
                continue   # a TODO: listed below (its own) or in the "blocked by" line
            stuck = _said_once(deadlock.terminal_lines(r.reason), hints_said)
            reason = r.reason   # whole (runner keeps it to 240 characters, its mismatch included)
            failed.append(f"{r.item.full_name}: " + ("\n    ".join(stuck) if stuck else reason))
            if _crashed(r.reason):
                crashed.append(m.module.name)
        fns = unfinished_functions(m)
        if fns:
            todo[m.module.name] = fns
            not_started[m.module.name] = m.status == "graded" and m.passed == 0
        if len(failed) > first or m.status != "graded" or m.passed:
            # (A module of untouched stubs needs no note: its list of functions says it all; nor
            # does a prerequisite that its "blocked by" line already names.)
            notes = [n for n in m.notes if not any(n.startswith(f"builds on {p},") for p in m.blocked_by)]
            failed[first:first] = [f"{m.module.name}: note: {n.splitlines()[0]}" for n in notes]
    if failed:
        print(f"\nfailed ({sum(1 for line in failed if ': note: ' not in line)}):")
        for line in failed:
            print(f"  {line}")
    if crashed:
        mods = " ".join(sorted(set(crashed)))
        print(f"  a test crashed: ./distlab grade --sanitize address {mods} names the bad access "
              f"(your line first)")
    if todo:
        count = sum(len(v) for v in todo.values())
        print(f"\nnot implemented yet ({count} functions; each TODO says what to write, "
              f"./distlab hint MODULE FUNCTION helps):")
        several = len(run.modules) > 1
        for name, fns in todo.items():
            if several and not_started.get(name):
                # Grading several modules, one with no item passing yet is listed by its count:
                # `./distlab grade MODULE` names its functions when the student starts it.
                print(f"  {name}: {len(fns)} functions, none passing yet (./distlab grade {name} names them)")
            else:
                print(_wrapped(f"  {name}: ", fns, width=110))
    if out_dir:
        print(f"\nfull diagnosis: {out_dir}/report.md (also results.json, junit.xml)")


def _said_once(lines: list[str], said: set[str]) -> list[str]:
    """A deadlock's terminal lines with each hint wrapped at 110 columns, and a hint already
    printed for an earlier item shortened to "hint: as above"."""
    out: list[str] = []
    for line in lines:
        if not line.startswith("  hint: "):
            out.append(line)
        elif line in said:
            out.append("  hint: as above")
        else:
            said.add(line)
            out.append(textwrap.fill(line, width=104, subsequent_indent="        ",
                                     break_on_hyphens=False, break_long_words=False).replace("\n", "\n    "))
    return out


def _wrapped(head: str, names: list[str], width: int) -> str:
    """head + every name, comma-separated, wrapped at `width` columns (continuation lines indented
    under the first name; a name longer than the width gets a line of its own)."""
    indent = " " * len(head)
    lines, line = [], head
    for i, n in enumerate(names):
        piece = n + ("," if i < len(names) - 1 else "")
        if line.strip() and line not in (head,) and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = indent + piece
        else:
            line = line + ("" if line in (head,) else " ") + piece
    lines.append(line)
    return "\n".join(lines)
