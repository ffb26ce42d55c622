"""Owned headers judged on the compiler's view (the rules are in header_rule.py).

Each submitted owned header is preprocessed by the kit's own compiler, with the include flags of
the module's test compile command (from the compile database), in the same view the submission's
own files are compiled in (so it cannot read hidden files either) and under a short time, memory
and output limit. From `c++ -E -dD` output the line markers (`# N "file" flags`) tell which
lines the header itself contributes; only those are judged:

  - no #define or #undef beyond the kit's versions of the header (their include guards);
  - no #pragma (`#pragma once` is consumed by the preprocessor);
  - direct includes only of standard headers (system headers named in STD_HEADERS) or of the
    files the kit's versions include;
  - the tokens: header_rule.shape() (asm, extern "C", attributes, namespaces, global names) and
    header_code.problems() (no `testing`, no operators and no dynamically initialised
    namespace-scope variables beyond the kit's versions).

A preprocessor error, a timeout or an unreadable output refuses the header with the reason (fail
closed). Results are cached by content and flags, so the ThreadSanitizer build does not redo them.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import subprocess
import tempfile
from pathlib import Path

from .. import manifest as mf
from .bwrap import BuildPlan
from .cpp_tokens import Token, directives, iter_tokens, tokenize
from .header_code import problems as code_problems
from .header_rule import HEADER_SUFFIXES, STD_HEADERS, _code, check_header, kit_shape, kit_versions, shape

PREPROCESS_TIMEOUT_S = 20
PREPROCESS_MEMORY_MB = 2048
PREPROCESS_OUTPUT_MB = 64
_cache: dict[str, str] = {}


def compile_flags(plan: BuildPlan, module: str) -> tuple[str, list[str]]:
    """The compiler and the flags that decide what a header preprocesses to (-I, -isystem,
    -iquote, -D, -U, -std) of the module's first test source, else of its own sources."""
    cmds = plan.commands
    cmd = next((c for s, c in sorted(cmds.items()) if s.startswith(f"grader/tests/{module}/")), "") or \
        next((c for s, c in sorted(cmds.items()) if s.startswith(f"exercises/{module}/")), "")
    argv = shlex.split(cmd) if cmd else ["c++", "-std=gnu++20"]
    guard = next((i for i, a in enumerate(argv) if Path(a).name == "compile_guard.py"), -1)
    if guard >= 0:   # the grading trees' compiler launcher: <python> ... compile_guard.py compile <compiler> ...
        argv = argv[guard + 2:]
    flags: list[str] = []
    args = iter(argv[1:])
    for a in args:
        if a in ("-I", "-isystem", "-iquote", "-idirafter", "-D", "-U"):
            flags += [a, next(args, "")]
        elif a.startswith(("-I", "-isystem", "-iquote", "-idirafter", "-D", "-U", "-std=")):
            flags.append(a)
    return argv[0], flags


#: What a test includes before the module's header: GoogleTest and the kit's test helpers. The
#: header is preprocessed after them, as in the tests, so that a test macro it uses (EXPECT_..., whose
#: expansion names ::testing) is judged as the tests compile it, not as an unknown name.
AS_THE_TESTS_SEE_IT = ("#include <gtest/gtest.h>\n"
                       "#if __has_include(\"distlab_testing.hpp\")\n#include \"distlab_testing.hpp\"\n#endif\n")


def preprocess(header: Path, compiler: str, flags: list[str], prefix: list[str], cwd: Path) -> tuple[str, str]:
    """(the `-E -dD` output of a file that includes the tests' own headers, then header; "" or why
    it failed). The output and errors go to files, not pipes: `#include "/proc/self/fd/1"` reads a
    finite file."""
    argv = [*prefix, "prlimit", f"--as={PREPROCESS_MEMORY_MB << 20}", f"--cpu={PREPROCESS_TIMEOUT_S}",
            f"--fsize={PREPROCESS_OUTPUT_MB << 20}", "--core=0", "--",
            compiler, *flags, "-E", "-dD", "-fno-diagnostics-show-caret", "-x", "c++", "-"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=cwd,
                             start_new_session=True)
        try:
            p.communicate((AS_THE_TESTS_SEE_IT + f'#include "{header}"\n').encode(), timeout=PREPROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return "", (f"the preprocessor did not finish in {PREPROCESS_TIMEOUT_S} s (does it include a "
                        f"device, a pipe or a file under /proc?)")
        out.seek(0)
        err.seek(0)
        text = out.read(PREPROCESS_OUTPUT_MB << 20).decode("utf-8", "replace")
        errors = err.read(100_000).decode("utf-8", "replace")
    if p.returncode != 0:
        lines = [ln.strip() for ln in errors.splitlines() if ln.strip()]
        first = [ln for ln in lines if "error" in ln or "fatal" in ln][:3] or lines[-3:]
        return "", "the preprocessor failed: " + " / ".join(first)[:600]
    return text, ""


_MARKER = re.compile(r'# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)$')


Include = tuple[int, str, set[str]]    # (line, path, line marker flags)


def header_lines(output: str, header: Path) -> tuple[list[Token], list[tuple[int, str]], list[Include]] | None:
    """What the header itself contributes to preprocessor output: (its tokens, its directives
    left in the output (#define, #undef, #pragma), the files it includes directly (line, path,
    marker flags)), or None when the output never enters it. Line numbers are the header's own,
    from the line markers.

    Outside the header (the built-ins, the standard and kit headers it includes: trusted text)
    only line markers are read, line by line; inside it the output is tokenized, so that a raw
    string of the header cannot hold a line that looks like a marker or a directive."""
    stack = [False]                   # per open file: is it the header (entered from the main file)
    tokens: list[Token] = []
    kept: list[tuple[int, str]] = []
    includes: list[Include] = []
    base, base_at = 1, 0              # the header's line at the output line base_at + 1
    pos, line, n = 0, 1, len(output)
    entered = False

    def marker(m: re.Match[str], at: int) -> None:
        nonlocal base, base_at, entered
        name, flags = m.group(2), set(m.group(3).split())
        in_header = len(stack) == 2 and stack[-1]
        if "1" in flags:
            if in_header:
                includes.append((base + at - base_at - 1, name, flags))
            stack.append(len(stack) == 1 and Path(name) == header)
            entered = entered or stack[-1]
        elif "2" in flags and len(stack) > 1:
            stack.pop()
        if len(stack) == 2 and stack[-1]:
            base, base_at = int(m.group(1)), at

    def flush(line_tokens: list[Token]) -> None:
        if line_tokens and line_tokens[0].text == "#" and line_tokens[0].kind == "punct":
            kept.append((line_tokens[0].line, " ".join(x.text for x in line_tokens[1:])))
        else:
            tokens.extend(line_tokens)

    while pos < n:
        if not (len(stack) == 2 and stack[-1]):
            eol = output.find("\n", pos)
            eol = n if eol < 0 else eol
            m = _MARKER.match(output, pos, eol)
            if m:
                marker(m, line)
            pos, line = eol + 1, line + 1
            continue
        current: list[Token] = []
        for t in iter_tokens(output, pos, line):
            if t.bol:
                flush(current)
                current = []
            if t.bol and t.text == "#":
                eol = output.find("\n", t.pos)
                eol = n if eol < 0 else eol
                m = _MARKER.match(output, t.pos, eol)
                if m:
                    marker(m, t.line)
                    pos, line = eol + 1, t.line + 1
                    break
            current.append(Token(t.kind, t.text, base + t.line - base_at - 1, t.bol, t.pos))
        else:
            pos = n
        flush(current)
    return (tokens, kept, includes) if entered else None


def judge(name: str, output: str, header: Path, kit_texts: list[str]) -> str:
    """"" when what the header contributes to the compiler's output is allowed, else the reason."""
    seen = header_lines(output, header)
    if seen is None:     # fail closed: nothing of the header was judged
        return f"{name}: the preprocessor's output does not show this header, so it cannot be checked"
    tokens, kept, includes = seen
    allowed = {d for v in kit_texts for _, d in directives(tokenize(v))}
    for line, d in kept:
        if d not in allowed:
            return (f"{name}:{line}: the compiler sees `#{d[:80]}` in this header: an owned header may not "
                    f"define, undefine or pragma anything beyond what the kit's version has")
    specs = {d.split(" ", 1)[1].replace(" ", "").strip('"<>') for d in allowed if d.startswith("include ")}
    for line, path, flags in includes:
        if "3" in flags and Path(path).name in STD_HEADERS:
            continue
        if any(path.endswith("/" + s) for s in specs):
            continue
        return (f"{name}:{line}: includes `{path}`: an owned header may include only standard headers "
                f"(`#include <vector>`) and the files the kit's version includes")
    problems = shape(tokens, kit_shape(kit_texts)).problems + \
        code_problems(tokens, [_code(tokenize(v)) for v in kit_texts])
    if problems:
        line, what = min(problems, key=lambda p: p[0])     # on one line, the namespace rules' reason first
        return f"{name}:{line}: {what}"
    return ""


def check_one(owned: str, module: str, plan: BuildPlan, prefix: list[str], kit: Path) -> str:
    """"" when the submitted owned header at plan.src/owned may be compiled into the tests."""
    path = plan.src / owned
    data = path.read_bytes()
    texts = kit_versions(owned, module, kit)
    text = data.decode("utf-8", "replace")
    if text in texts:
        return ""                      # the kit's own stub or reference
    problem = check_header(owned, text, texts)
    if problem:
        return problem
    compiler, flags = compile_flags(plan, module)
    key = hashlib.sha256(repr((owned, data, texts, compiler, flags, AS_THE_TESTS_SEE_IT)).encode()).hexdigest()
    if key not in _cache:
        output, failed = preprocess(path, compiler, flags, prefix, plan.build)
        _cache[key] = f"{owned}: {failed}" if failed else judge(owned, output, path, texts)
    return _cache[key]


def check_owned_headers(plan: BuildPlan, modules: list[mf.Module], prefix: list[str], kit: Path) -> dict[str, str]:
    """module name -> why its submitted owned header is refused (modules whose headers may be
    compiled into the tests are left out). prefix: the untrusted build view (bwrap or uid)."""
    refused: dict[str, str] = {}
    for mod in modules:
        for owned in mod.owned:
            if owned.endswith(HEADER_SUFFIXES) and (plan.src / owned).is_file():
                problem = check_one(owned, mod.name, plan, prefix, kit)
                if problem:
                    refused[mod.name] = problem
                    break
    return refused
