"""What the submission's own object files may define: nothing that replaces a part of the test
program at link time, and no code that runs before the kit's own initialisers.

The objects compiled from a submission's files are linked into trusted test programs, beside the
tests, GoogleTest, the kit's library and the C and C++ runtimes. A definition there wins over (or
clashes with) the one those parts rely on: symbol interposition. So, read with binutils (`nm`,
`readelf`) after the untrusted compile, an object may not define

  - a strong global symbol in a namespace the tests, GoogleTest, the kit's libraries or the
    standard library own (`testing::`, `distlab::` (its support library and `distlab::testing`),
    `dist::`, `std::`, `__gnu_cxx::`,
    `__cxxabiv1::`): a strong definition replaces the test's or library's inline or weak copy;
  - a weak symbol in `testing::` or `distlab::testing::` (an inline test helper of its own);
  - any symbol, weak or strong, whose signature names a `testing::` or `distlab::testing::` type,
    template arguments included (`std::vector<testing::TestPartResult>::_M_realloc_insert`: a
    weak `std::` instance over GoogleTest's own types, which GoogleTest's copy would meet);
  - a mangled symbol the C and C++ runtimes' shared libraries export (libstdc++, libc, libm,
    libgcc_s) as a strong definition (`operator new`, ...) or as a weak one outside a COMDAT group
    (`__attribute__((weak))`): a definition in the program interposes the library's for every
    caller. A weak COMDAT copy is what the headers' inline members emit (C++20 `basic_string`'s
    `append`, `_M_replace`, ... in every object that uses them) and is allowed: an `inline`
    explicit specialization of such a member looks the same to this rule (see the instructor
    guide's threat table);
  - a C-level symbol that is `main`, a reserved name (`_x`, `__x`) or one the C/C++ runtime
    defines (`write`, `fopen`, `exit`, ...): it would replace the library's for the whole program;

nor refer to (nm `U`) a symbol in `testing::` or `distlab::testing::` or one over their types (a
submission may not use GoogleTest, e.g. install a `ScopedFakeTestPartResultReporter` that swallows
every failure), nor define an indirect function (STT_GNU_IFUNC, nm `i`: its resolver runs while the
dynamic loader relocates the program, before any initialiser), nor hold sections that run before
the kit's own earliest initialiser: `.init` / `.fini` (DT_INIT's code runs before every
`.init_array` entry; only the C runtime's crti/crtn have them), `.preinit_array`, prioritized
`.init_array.NNNNN` / `.ctors.NNNNN` (and their `fini`/`dtors` twins); in a sanitizer build
(an object that calls `__tsan_init` or `__asan_init`) the sanitizer's own priority 99 is allowed.

Weak definitions in `std::` and `dist::` are otherwise allowed: every object that uses a template
or an inline function of those headers has them. What keeps a hostile one of those from replacing
the copy a trusted part of the program uses is the link order: the test programs load GoogleTest
and the kit's libraries whole before the module's library (cmake/DistlabModule.cmake,
distlab_link_trusted_first), and the linker keeps the first copy of a weak or COMDAT symbol.
"""
from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

STRONG_FORBIDDEN = ("testing::", "distlab::", "dist::", "std::", "__gnu_cxx::", "__cxxabiv1::")
WEAK_FORBIDDEN = ("testing::", "distlab::testing::")
EARLY_SECTION = re.compile(r"\.(init|fini|preinit_array|(init_array|fini_array|ctors|dtors)\.\d+)$")
SANITIZER_SECTION = re.compile(r"\.(init_array|fini_array)\.00099$")
RUNTIMES = ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1")
_SPECIAL = re.compile(r"^(vtable for |typeinfo for |typeinfo name for |VTT for |construction vtable for |"
                      r"guard variable for |TLS init function for |TLS wrapper function for |"
                      r"non-virtual thunk to |virtual thunk to |covariant return thunk to |"
                      r"transaction clone for |reference temporary #\d+ for )+")
_TESTING_TYPE = re.compile(r"(?:^|[^\w:])(?:distlab::)?testing::")
_OPERATOR = re.compile(r"operator(<=>|<<=|>>=|<<|>>|<=|>=|->\*|->|<|>|\(\)|\[\])")


def _run(argv: list[str], data: str | None = None) -> str:
    r = subprocess.run(argv, input=data, capture_output=True, text=True, errors="replace",
                       stdin=None if data is not None else subprocess.DEVNULL)
    return r.stdout if r.returncode == 0 else ""


@cache
def runtime_symbols() -> frozenset[str]:
    """The C-level names the C and C++ runtimes define (dynamic symbols, versions dropped)."""
    names: set[str] = set()
    for lib in RUNTIMES:
        path = _run(["c++", f"-print-file-name={lib}"]).strip()
        if path and Path(path).is_file():
            for line in _run(["nm", "-D", "--defined-only", "-P", path]).splitlines():
                names.add(line.split(" ", 1)[0].split("@", 1)[0])
    return frozenset(names)


def qualified_name(demangled: str) -> str:
    """The qualified name a demangled symbol defines (return type, parameters and special
    prefixes left out): "bool testing::internal::F<int>(int)" -> "testing::internal::F<int>"."""
    s = _OPERATOR.sub("operator@", _SPECIAL.sub("", demangled)).replace("[abi:cxx11]", "")
    depth, cut, last_space = 0, len(s), -1
    for i, c in enumerate(s):
        if c in "<([":
            if c == "(" and depth == 0:
                cut = i
                break
            depth += 1
        elif c in ">)]":
            depth -= 1
        elif c == " " and depth == 0:
            last_space = i
    return s[last_space + 1:cut].strip()


def symbols(obj: Path) -> list[tuple[str, str, str, str]]:
    """(nm type, mangled name, qualified name, demangled name) of each global or weak symbol obj
    defines."""
    rows = []
    for line in _run(["nm", "--defined-only", "-P", str(obj)]).splitlines():
        parts = line.split()
        if len(parts) >= 2 and (parts[1].isupper() or parts[1] in "uvwi"):
            rows.append((parts[1], parts[0]))
    demangled = _run(["c++filt"], "\n".join(m for _, m in rows) + "\n").splitlines() if rows else []
    if len(demangled) != len(rows):
        demangled = [m for _, m in rows]
    return [(t, m, qualified_name(d), d) for (t, m), d in zip(rows, demangled)]


def undefined(obj: Path) -> list[tuple[str, str]]:
    """(mangled, demangled) of each symbol obj refers to without defining it (nm `U`)."""
    names = [ln.split()[0] for ln in _run(["nm", "-u", "-P", str(obj)]).splitlines() if ln.split()]
    demangled = _run(["c++filt"], "\n".join(names) + "\n").splitlines() if names else []
    return list(zip(names, demangled if len(demangled) == len(names) else names))


def comdat_symbols(obj: Path) -> set[str]:
    """The names of the symbols obj defines in a section of a COMDAT group (inline and template
    instances as the compiler emits them)."""
    grouped = {int(i) for i in re.findall(r"^\s*\[\s*(\d+)\]\s+\S", _run(["readelf", "-gW", str(obj)]), re.M)}
    names = set()
    for line in _run(["readelf", "-sW", str(obj)]).splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[6].isdigit() and int(parts[6]) in grouped:
            names.add(parts[7])
    return names


def sections(obj: Path) -> list[str]:
    return re.findall(r"^\s*\[\s*\d+\]\s+(\S+)", _run(["readelf", "-SW", str(obj)]), re.M)


def object_problem(obj: Path, source: str) -> str:
    """"" when obj (compiled from the submitted file source) may be linked into the tests."""
    if not obj.is_file():
        return ""
    # A sanitizer's own constructor (ThreadSanitizer, AddressSanitizer builds) runs at priority 99.
    sanitized = re.search(r"^(__tsan_init|__asan_init)", _run(["nm", "-u", "-P", str(obj)]), re.M) is not None
    for name in sections(obj):
        if EARLY_SECTION.match(name) and not (sanitized and SANITIZER_SECTION.match(name)):
            return (f"{source}: the object holds the section `{name}`: code that runs before the kit's "
                    f"own initialisers (`__attribute__((constructor(N)))`, `init_priority`, a `.init` "
                    f"section) is not allowed")
    for line in _run(["readelf", "-sW", str(obj)]).splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[3] == "IFUNC":
            return (f"{source}: defines the indirect function (IFUNC) `{parts[7]}`: its resolver runs while the "
                    f"program is being loaded, before the kit's own initialisers; call an ordinary function")
    runtime = runtime_symbols()
    comdat = comdat_symbols(obj)
    for kind, mangled, name, full in symbols(obj):
        shown = full if len(full) <= 160 else full[:157] + "..."
        weak = kind in "WwVvu"             # u: GNU unique (an inline variable, a static in an inline function)
        if not mangled.startswith("_Z"):
            if (mangled == "main" or mangled.startswith("_") or mangled in runtime) and \
                    not (sanitized and mangled.startswith("__odr_asan")):
                return (f"{source}: defines the C-level symbol `{mangled}`, which the test program takes from "
                        f"GoogleTest or the C/C++ runtime: it would replace theirs for the whole program "
                        f"(make it `static` or put it in your module's namespace)")
            continue
        if mangled in runtime and not (weak and mangled in comdat):
            return (f"{source}: defines `{shown}` (`{mangled}`), which the C++ runtime's shared library "
                    f"exports: the program's copy would replace the library's for every caller (use the "
                    f"standard library as it is; put helpers of your own in your module's namespace)")
        scope = name.lstrip(":")
        if scope.startswith(WEAK_FORBIDDEN if weak else STRONG_FORBIDDEN):
            return (f"{source}: defines `{name}` ({'weak' if weak else 'strong'} symbol `{mangled}`): a "
                    f"submission may not define anything in `{scope.split('::')[0]}::`; at link time it "
                    f"would replace the copy the tests, GoogleTest or the kit's library use")
        if _TESTING_TYPE.search(full):
            return (f"{source}: defines `{shown}` (`{mangled}`), which names a type of GoogleTest or of the "
                    f"kit's test helpers: it could take the place of the tests' own copy at link time; a "
                    f"submission may not instantiate or define code over the test framework's types")
    for _mangled, full in undefined(obj):
        if _TESTING_TYPE.search(full):
            shown = full if len(full) <= 160 else full[:157] + "..."
            return (f"{source}: calls GoogleTest's testing::... (`{shown}`): a submission may not use the test "
                    f"framework or the kit's test helpers")
    return ""


def check_objects(build: Path, objects: dict[str, str]) -> str:
    """The first problem of the objects (build-relative path -> src-relative source), or ""."""
    for obj, source in sorted(objects.items()):
        problem = object_problem(build / obj, source)
        if problem:
            return problem
    return ""


def check_module_objects(plan_objects: dict[str, str], build: Path, sources: dict[str, list[str]]) -> dict[str, str]:
    """module -> why its objects may not be linked into the tests, for each module whose
    submitted sources (src-relative) compiled to objects with a problem. plan_objects: the
    build's objects (build-relative) -> their sources (BuildPlan.objects)."""
    refused: dict[str, str] = {}
    for module, files in sources.items():
        problem = check_objects(build, {o: s for o, s in plan_objects.items() if s in files})
        if problem:
            refused[module] = problem
    return refused
