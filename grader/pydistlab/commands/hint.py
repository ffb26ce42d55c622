"""`./distlab hint MODULE [FUNCTION] [--level N]`: progressive hints for an exercise function.

Level 1 is the idea, 2 the structure, 3 the details; each level is shown with the ones before it.
Without FUNCTION, lists the module's functions that have hints.
"""
from __future__ import annotations

import argparse
import textwrap

from .. import hints as hn, manifest as mf
from ..errors import DistlabError

TITLES = ("the idea", "the structure", "the details")


def _say(text: str, indent: str = "  ") -> None:
    print(textwrap.fill(text, width=100, initial_indent=indent, subsequent_indent=indent,
                        break_long_words=False, break_on_hyphens=False))


def main(a: argparse.Namespace) -> int:
    man = mf.load()
    module = mf.resolve_name(a.module, man.order)
    hints = hn.load(module)
    if not a.function:
        print(f"{module}: functions with hints (./distlab hint {module} FUNCTION [--level 1|2|3]):")
        width = max(len(n) for n in hints) if hints else 0
        for name, h in hints.items():
            print(f"  {name:<{width}}  {h.readme}".rstrip())
        return 0
    if not 1 <= a.level <= len(hn.LEVELS):
        raise DistlabError(f"--level must be 1 (the idea), 2 (the structure) or 3 (the details), "
                           f"not {a.level}")
    h = hn.find(hints, module, a.function)
    print(f"{module} {h.function}" + (f"  (read: {h.readme})" if h.readme else ""))
    for level in range(1, a.level + 1):
        print(f"hint {level} of {len(hn.LEVELS)}, {TITLES[level - 1]}:")
        _say(h.levels[level - 1])
    if a.level < len(hn.LEVELS):
        print(f"more: ./distlab hint {module} {a.function} --level {a.level + 1}")
    return 0
