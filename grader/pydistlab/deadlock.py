"""A deadlock report as the student reads it: the threads backend's report ("deadlock: rank 0
blocked in send(dst=1, tag=7, 16 floats) at exercises/07_pipeline/pipeline.cpp:80; rank 1 ...
Hint: ...") with the tags by the names the module gives them (07's kForwardTag) and the module's
own advice in place of the backend's generic hint where grader/deadlock_advice.toml has one; in
the terminal one line per rank, so that every blocked call's file:line shows."""
from __future__ import annotations

import re
from pathlib import Path

from .compat import tomllib
from .paths import ROOT

ADVICE = ROOT / "grader" / "deadlock_advice.toml"
#: `inline constexpr int kForwardTag = 7;` in a module's header: a tag the module names.
TAG_CONSTANT = re.compile(r"^\s*(?:inline\s+)?(?:static\s+)?constexpr\s+int\s+(k\w*Tag\w*)\s*=\s*(\d+)\s*;",
                           re.M)
#: The backend's patterns (libdist/threads/diagnostics.cpp) that advice can replace, by key.
PATTERNS = {"both_send": "both send first"}
_HINT = " Hint: "


def tag_names(folder: Path) -> dict[int, str]:
    """The tags a module names in the headers of its folder (exercises/<module>/*.hpp): value ->
    name; a value named twice keeps its first name."""
    names: dict[int, str] = {}
    for header in sorted(folder.glob("*.hpp")):
        try:
            text = header.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for m in TAG_CONSTANT.finditer(text):
            names.setdefault(int(m.group(2)), m.group(1))
    return names


def load_advice(path: Path = ADVICE) -> dict[str, dict[str, str]]:
    """module -> pattern key -> advice (an absent file: none)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return {m: {k: " ".join(str(v).split()) for k, v in table.items() if k in PATTERNS}
            for m, table in data.items() if isinstance(table, dict)}


def explain(text: str, tags: dict[int, str], advice: dict[str, str]) -> str:
    """text with "deadlock:" in it rewritten: each tag the module names shown by name, and the
    backend's hint for a pattern the module advises on replaced by that advice. Any other text is
    returned as it is."""
    at = text.find("deadlock:")
    if at < 0:
        return text
    head, report = text[:at], text[at:]
    if tags:
        report = re.sub(r"\btag([= ])(\d+)\b",
                        lambda m: f"tag{m.group(1)}{tags[int(m.group(2))]} ({m.group(2)})"
                        if int(m.group(2)) in tags else m.group(0), report)
    body, _, hints = report.partition(_HINT)
    if hints and advice:
        parts = [h.strip() for h in (_HINT + hints).split(_HINT) if h.strip()]
        for i, h in enumerate(parts):
            for key, words in PATTERNS.items():
                if key in advice and words in h:
                    parts[i] = advice[key].rstrip(".") + "."
        report = body + "".join(_HINT + h for h in parts)
    return head + report


def terminal_lines(reason: str) -> list[str]:
    """A deadlock reason as lines: "deadlock:", then each rank's state (with its file:line), then
    each hint; [] for a reason that is not a deadlock report."""
    at = reason.find("deadlock:")
    if at < 0 or at > 40:
        return []
    body, _, hints = reason[at + len("deadlock:"):].partition(_HINT)
    ranks = [r.strip().rstrip(".") for r in re.split(r"; (?=rank \d+ )", body.strip()) if r.strip()]
    lines = [reason[:at] + "deadlock:"] + [f"  {r}" for r in ranks]
    lines += [f"  hint: {h.strip()}" for h in (_HINT + hints).split(_HINT) if h.strip()] if hints else []
    return lines
