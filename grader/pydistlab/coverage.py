"""How much of a module's contract its promise ledger quotes (`./distlab promises`).

The contract a student reads is split into sentences: the comments of the reference headers
(solutions/<module>/*.hpp; comment markers stripped, code lines ignored) and the prose of the
module's README (solutions/<module>/README.md; headings, fenced code blocks, tables and HTML
comments left out). A sentence is covered when some row of the module's ledger
(grader/hidden/<module>/promises.toml) overlaps it: the row's `says` contains the sentence, the
sentence contains the `says`, or the two share a run of RUN consecutive words. Both sides go through
promises.normalise, the normalisation the ledger's checker matches `says` against `where` with.
An uncovered sentence is a promise nobody ledgered, or a sentence that promises nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import promises
from .paths import ROOT

#: Consecutive words a `says` and a sentence must share (when neither contains the other).
RUN = 8

#: Words whose final full stop does not end a sentence.
_ABBREVIATIONS = {"e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "resp.", "no.", "fig.", "eq."}
#: A sentence ends at . ! ? (closing quotes and brackets after it included) before white space.
_END = re.compile(r"""[.!?]["')\]]*(?=\s|$)""")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
#: Markers that open a header comment and are no part of its sentence ("TODO. Runs ...", "Given.").
_MARKER = re.compile(r"^\s*(?:TODO|Given)[.:]?(?=\s|$)")
#: The last words of a trailing comment that the next line's comment continues.
_OPEN_END = {"a", "an", "the", "and", "or", "of", "to", "in", "is", "are", "be", "by", "for", "with",
             "while", "from", "at", "on", "as", "that", "which", "than", "its", "their"}


@dataclass(frozen=True)
class Sentence:
    file: str       # relative to the kit's root
    line: int       # the line it starts on
    text: str       # normalised (promises.normalise)


def _split(chunks: list[tuple[int, str]], file: str) -> list[Sentence]:
    """Sentences of one paragraph, given as (line number, text) pieces in order."""
    out: list[Sentence] = []
    words: list[tuple[int, str]] = []
    for number, text in chunks:
        words.extend((number, w) for w in text.split())
    start = 0
    for i, (_, w) in enumerate(words):
        end = _END.search(w)
        if end and end.end() == len(w) and w.lower() not in _ABBREVIATIONS and not re.fullmatch(r"\d+\.", w):
            out.append(_sentence(words[start:i + 1], file))
            start = i + 1
    if start < len(words):
        out.append(_sentence(words[start:], file))
    return [s for s in out if s.text]


def _sentence(words: list[tuple[int, str]], file: str) -> Sentence:
    return Sentence(file, words[0][0], promises.normalise(" ".join(w for _, w in words)))


def _continues(text: str) -> bool:
    words = text.split()
    return bool(words) and (words[-1].endswith(",") or words[-1].lower() in _OPEN_END)


def header_sentences(text: str, file: str) -> list[Sentence]:
    """The sentences of a header's comments: a paragraph ends at a blank comment line, a code line
    or a list item; a comment after code on the same line is a paragraph of its own."""
    paragraphs: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    in_block = after_trailing = False

    def close() -> None:
        nonlocal current
        if current:
            paragraphs.append(current)
        current = []

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        comment: str | None = None
        trailing = False
        if in_block:
            end = line.find("*/")
            comment = line if end < 0 else line[:end]
            in_block = end < 0
            comment = re.sub(r"^\*+(?!/)", "", comment)
        elif line.startswith("//"):
            comment = re.sub(r"^/+!?<?", "", line)
        elif line.startswith("/*"):
            end = line.find("*/", 2)
            comment = line[2:] if end < 0 else line[2:end]
            in_block = end < 0
            comment = re.sub(r"^[*!]+<?", "", comment)
        elif "//" in line and not line.startswith("#"):
            code, _, after = line.partition("//")
            if code.count('"') % 2 == 0 and not code.startswith("}"):   # not in a string; not "} // namespace"
                comment, trailing = re.sub(r"^/*!?<?", "", after), True
        if comment is None:
            close()
            after_trailing = False
            continue
        comment = _MARKER.sub("", comment)
        if trailing or (after_trailing and current):
            # A comment after code: a paragraph of its own, unless the comment before it (after
            # code too) breaks off mid-sentence ("... x = 0 is a" / "fixed point ...").
            if not (after_trailing and current and _continues(current[-1][1])):
                close()
            current.append((number, comment))
            after_trailing = True
            continue
        after_trailing = False
        if not comment.strip() or set(comment.strip()) <= set("-=*/_~#"):
            close()
            continue
        if _LIST_ITEM.match(comment):
            close()
        current.append((number, comment))
    close()
    # A section title ("// 1. Start and join.") is one numbered line: it promises nothing.
    paragraphs = [p for p in paragraphs if not (len(p) == 1 and re.match(r"\s*\d+\.\s", p[0][1]))]
    return [s for p in paragraphs for s in _split(p, file)]


def readme_sentences(text: str, file: str) -> list[Sentence]:
    """The sentences of a README's prose: headings, fenced code blocks, tables, HTML comments and
    the Questions sections (questions to think about, no rules) are left out; a paragraph ends at
    a blank line or a list item."""
    paragraphs: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    fenced = html = questions = False

    def close() -> None:
        nonlocal current
        if current:
            paragraphs.append(current)
        current = []

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("```") or line.startswith("~~~"):
            fenced = not fenced
            close()
            continue
        if fenced:
            continue
        if html or line.startswith("<!--"):
            html = "-->" not in line
            close()
            continue
        if line.startswith("#"):
            questions = bool(re.match(r"#+\s*Questions\b", line))
        if questions or not line or line.startswith("#") or line.startswith("|") or set(line) <= set("-=*_"):
            close()
            continue
        if _LIST_ITEM.match(line):
            close()
            line = _LIST_ITEM.sub("", line)
        current.append((number, line))
    close()
    return [s for p in paragraphs for s in _split(p, file)]


def contract(module: str, root: Path = ROOT) -> list[Sentence]:
    """Every sentence of the module's headers' comments and README prose, in file order."""
    base = root / "solutions" / module
    found: list[Sentence] = []
    for f in sorted(base.glob("*.hpp")) if base.is_dir() else []:
        found += header_sentences(f.read_text(errors="replace"), str(f.relative_to(root)))
    readme = base / "README.md"
    if readme.is_file():
        found += readme_sentences(readme.read_text(errors="replace"), str(readme.relative_to(root)))
    return found


def _words(text: str) -> tuple[str, ...]:
    """Words for the shared-run rule: lower case, punctuation at their edges dropped."""
    return tuple(w for w in (w.strip(".,;:!?()[]\"'").lower() for w in text.split()) if w)


def _runs(words: tuple[str, ...], n: int = RUN) -> set[tuple[str, ...]]:
    return {words[i:i + n] for i in range(len(words) - n + 1)}


def covers(says: str, sentence: str) -> bool:
    """The coverage rule: a ledger row's `says` overlaps a sentence (both normalised here)."""
    a, b = promises.normalise(says), promises.normalise(sentence)
    if not a or not b:
        return False
    if b in a or a in b:
        return True
    return bool(_runs(_words(a)) & _runs(_words(b)))


@dataclass
class Coverage:
    module: str
    sentences: list[Sentence]
    uncovered: list[Sentence]

    @property
    def covered(self) -> int:
        return len(self.sentences) - len(self.uncovered)

    def line(self) -> str:
        return summary_line(self.module, len(self.sentences), self.covered)


def summary_line(name: str, total: int, covered: int) -> str:
    percent = f"{100 * covered / total:.0f}%" if total else "-"
    return f"{name}: {total} sentences, {covered} covered by a promise row ({percent})"


def coverage(module: str, root: Path = ROOT) -> Coverage:
    rows, _ = promises.load(module, root)
    sentences = contract(module, root)
    uncovered = [s for s in sentences if not any(covers(p.says, s.text) for p in rows)]
    return Coverage(module, sentences, uncovered)


def overall(found: list[Coverage]) -> str:
    return summary_line("all modules", sum(len(c.sentences) for c in found), sum(c.covered for c in found))
