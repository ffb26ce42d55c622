"""Pairs of submissions that share most of their code: winnowed fingerprints, as MOSS does.

Each owned file becomes a sequence of normalised tokens (lexer.py: comments and whitespace gone,
every name that is not a keyword becomes `v`, numbers `n`, strings `s`), so renaming variables,
reformatting or rewording comments changes nothing. Every run of K tokens is hashed and, in each
window of W consecutive hashes, the smallest is kept (winnowing: a shared run of K + W - 1 tokens
or more is always seen). The fingerprints of the kit's stub (exercises/, given to everyone) are
subtracted, then two submissions' fingerprints of one module are compared:

    score = shared fingerprints / fingerprints of the smaller of the two

1.0: everything the smaller one wrote beyond the stub is also in the other. A module where either
side wrote fewer than MIN_FINGERPRINTS fingerprints of its own is not compared (too little code).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from itertools import combinations

from . import lexer
from .lexer import CHAR, IDENT, NUMBER, STRING

K = 12                 # tokens per hashed run
W = 8                  # window of hashes a fingerprint is chosen from
MIN_FINGERPRINTS = 8   # below this, a module has too little code of its own to compare
DEFAULT_THRESHOLD = 0.8

KEYWORDS = frozenset("""alignas alignof and asm auto bool break case catch char char8_t char16_t char32_t class
concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype default
delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline int long
mutable namespace new noexcept not nullptr operator or private protected public register reinterpret_cast
requires return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
std size_t""".split())


def normalise(text: str) -> list[str]:
    """The tokens of a C++ source with names, numbers and literals replaced by their kind."""
    out = []
    for t in lexer.lex(text).tokens:
        if t.kind == IDENT:
            out.append(t.text if t.text in KEYWORDS else "v")
        elif t.kind == NUMBER:
            out.append("n")
        elif t.kind in (STRING, CHAR):
            out.append("s")
        else:
            out.append(t.text)
    return out


def fingerprints(text: str, k: int = K, w: int = W) -> set[int]:
    """The winnowed fingerprints of a source (see the module docstring)."""
    toks = normalise(text)
    if len(toks) < k:
        return {zlib.crc32(" ".join(toks).encode())} if toks else set()
    hashes = [zlib.crc32(" ".join(toks[i:i + k]).encode()) for i in range(len(toks) - k + 1)]
    if len(hashes) <= w:
        return {min(hashes)}
    chosen: set[int] = set()
    for i in range(len(hashes) - w + 1):
        chosen.add(min(hashes[i:i + w]))
    return chosen


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    module: str
    score: float
    shared: int
    smaller: int    # fingerprints of the smaller side

    def as_dict(self) -> dict[str, object]:
        return {"a": self.a, "b": self.b, "module": self.module, "score": round(self.score, 3),
                "shared": self.shared, "fingerprints": self.smaller}


def similar_pairs(prints: dict[str, dict[str, set[int]]], threshold: float = DEFAULT_THRESHOLD) -> list[Pair]:
    """prints: submission -> module -> fingerprints (stub already subtracted). The pairs whose
    score in a module is at least threshold, highest first."""
    pairs: list[Pair] = []
    for a, b in combinations(sorted(prints), 2):
        for module in sorted(set(prints[a]) & set(prints[b])):
            fa, fb = prints[a][module], prints[b][module]
            smaller = min(len(fa), len(fb))
            if smaller < MIN_FINGERPRINTS:
                continue
            shared = len(fa & fb)
            score = shared / smaller
            if score >= threshold:
                pairs.append(Pair(a, b, module, score, shared, smaller))
    pairs.sort(key=lambda p: (-p.score, p.module, p.a, p.b))
    return pairs
