"""What an owned header may add (it is compiled into the tests)."""
from __future__ import annotations

import re
from pathlib import Path

from .. import manifest as mf

HEADER_SUFFIXES = (".hpp", ".h", ".hh", ".hxx", ".ipp", ".tpp", ".inl", ".cuh")

#: Standard library headers an owned header may add (C++20 and the C compatibility headers).
STD_HEADERS = set("""
algorithm any array atomic barrier bit bitset charconv chrono compare complex concepts
condition_variable coroutine deque exception execution expected filesystem format forward_list
fstream functional future initializer_list iomanip ios iosfwd iostream istream iterator latch
limits list locale map memory memory_resource mutex new numbers numeric optional ostream queue
random ranges ratio regex scoped_allocator semaphore set shared_mutex source_location span
sstream stack stdexcept stop_token streambuf string string_view syncstream system_error thread
tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray variant vector
version cassert cctype cerrno cfenv cfloat cinttypes climits clocale cmath csetjmp csignal
cstdarg cstddef cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype
""".split())


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, text) of each logical line, with backslash-newline splices
    joined and comments replaced by a space (string and character literals kept)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    out: list[tuple[int, str]] = []
    cur: list[str] = []
    line_no, start = 1, 1
    i, n = 0, len(text)
    in_block = False
    quote = ""

    def end_line() -> None:
        nonlocal cur, line_no, start
        out.append((start, "".join(cur)))
        cur = []
        line_no += 1
        start = line_no

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            line_no += 1
            continue
        if in_block:
            if text.startswith("*/", i):
                in_block = False
                cur.append(" ")
                i += 2
                continue
            if c == "\n":
                line_no += 1
            i += 1
            continue
        if quote:
            cur.append(c)
            if c == "\\" and i + 1 < n:
                cur.append(text[i + 1])
                i += 2
                continue
            if c == quote or c == "\n":
                quote = ""
            if c == "\n":
                end_line()
            i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    line_no += 1
                    i += 1
                i += 1
            continue
        if text.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if c in "\"'":
            quote = c
        if c == "\n":
            end_line()
            i += 1
            continue
        cur.append(c)
        i += 1
    if cur:
        out.append((start, "".join(cur)))
    return out


def _directives(text: str) -> list[tuple[int, str]]:
    """(line, normalised directive) of every preprocessor directive: "#" or "%:" first, spaces
    squeezed, e.g. "include <vector>", "pragma once"."""
    found = []
    for no, line in _logical_lines(text):
        s = line.strip()
        if s.startswith("#"):
            s = s[1:]
        elif s.startswith("%:"):
            s = s[2:]
        else:
            continue
        found.append((no, " ".join(s.split())))
    return found


def check_header(name: str, text: str, kit_versions: list[str]) -> str:
    """"" when the owned header `name` may be compiled into the tests, else the reason. It may
    hold any C++ code, the directives of the kit's own versions of that header (stub and
    reference), and `#include <h>` of standard headers; nothing else (no other #include, no
    #define or #undef, no #pragma but once, no _Pragma, #embed or #line)."""
    allowed = {d for v in kit_versions for _, d in _directives(v)}
    for no, d in _directives(text):
        if d in allowed:
            continue
        m = re.fullmatch(r"include\s*<([A-Za-z_][A-Za-z0-9_]*)>", d)
        if m and m.group(1) in STD_HEADERS:
            continue
        return (f"{name}:{no}: `#{d[:80]}` is not allowed in an owned header: the tests compile "
                f"against this file, so it may add only `#include <standard header>` lines to the "
                f"directives the kit's version has (no other #include, #define, #undef or #pragma)")
    for no, line in _logical_lines(text):
        if re.search(r"\b_Pragma\b", line):
            return f"{name}:{no}: _Pragma is not allowed in an owned header (it acts as a #pragma)"
    return ""


def _kit_versions(owned: str, module: str, root: Path) -> list[str]:
    """The kit's own texts of an owned file: the stub and the reference."""
    texts = []
    for p in (root / owned, root / "solutions" / module / Path(owned).relative_to(f"exercises/{module}")
              if owned.startswith(f"exercises/{module}/") else root / owned):
        try:
            texts.append(p.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    return texts


def check_owned_headers(mod: mf.Module, files: dict[str, bytes], root: Path) -> str:
    """check_header() of each owned header of mod in files ("" when all may be used)."""
    for owned in mod.owned:
        if owned.endswith(HEADER_SUFFIXES) and owned in files:
            problem = check_header(owned, files[owned].decode("utf-8", "replace"),
                                           _kit_versions(owned, mod.name, root))
            if problem:
                return problem
    return ""


