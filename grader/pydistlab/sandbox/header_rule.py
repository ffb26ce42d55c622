"""What an owned header may add: it is compiled into the trusted test translation units.

Two views, both token-based (cpp_tokens), never line-based:

  check_header()      the header's own text: its preprocessor directives (a `#` that starts a
                      logical line, after splices, comments, raw strings and digraphs) may only
                      be those of the kit's versions of that header (stub and reference) and
                      `#include <standard header>`; no `_Pragma`. This is what keeps conditional
                      directives out (`#ifdef EXPECT_EQ` would let a header show the standalone
                      check one thing and a test another).
  token_problem()     what the compiler's preprocessor made of it (header_view.py runs it): the
                      header's tokens may not hold `asm`, `extern "C"` blocks, attributes that
                      place code or symbols (constructor, init_priority, section, alias, weak,
                      visibility, ...), a namespace the kit's versions do not open (so nothing is
                      declared in `testing`, `distlab::testing`, `dist` or `std`), an explicit
                      specialization or a definition of a qualified name outside the kit's
                      namespaces, nor declare at global scope a name the kit's versions do not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .cpp_tokens import Token, directives, logical_lines, tokenize

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

#: Attributes that change where code or a symbol goes, or when code runs.
FORBIDDEN_ATTRIBUTES = {"constructor", "destructor", "init_priority", "section", "alias", "weak",
                        "weakref", "visibility", "ifunc", "symver", "externally_visible"}
ASM = {"asm", "__asm", "__asm__"}

KEYWORDS = set("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export extern
false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
operator or or_eq private protected public register reinterpret_cast requires return short signed
sizeof static static_assert static_cast struct switch template this thread_local throw true try
typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
final override __extension__ __restrict __restrict__ __inline __inline__ __typeof__ __typeof
__signed__ __volatile__ __const __int128 __alignof__ size_t
""".split())


def check_header(name: str, text: str, kit_versions: list[str]) -> str:
    """"" when the owned header's own directives are allowed, else the reason: only the
    directives of the kit's own versions of that header (stub and reference) and `#include <h>`
    of standard headers (no other #include, no #define, #undef, #if, #pragma but the kit's,
    #line or #embed), and no _Pragma."""
    allowed = {d for v in kit_versions for _, d in directives(tokenize(v))}
    tokens = tokenize(text)
    for no, d in directives(tokens):
        if d in allowed:
            continue
        words = d.split(" ")
        if len(words) == 4 and words[:2] == ["include", "<"] and words[3] == ">" and words[2] in STD_HEADERS:
            continue
        shown = "include " + "".join(words[1:]) if words[0] == "include" else d
        return (f"{name}:{no}: `#{shown[:80]}` is not allowed in an owned header: the tests compile "
                f"against this file, so it may add only `#include <standard header>` lines to the "
                f"directives the kit's version has (no other #include, no #define, #undef, #if or #pragma)")
    for t in tokens:
        if t.text == "_Pragma":
            return f"{name}:{t.line}: _Pragma is not allowed in an owned header (it acts as a #pragma)"
    return ""


def kit_versions(owned: str, module: str, root: Path) -> list[str]:
    """The kit's own texts of an owned file: the stub and the reference."""
    texts = []
    paths = [root / owned]
    if owned.startswith(f"exercises/{module}/"):
        paths.append(root / "solutions" / module / Path(owned).relative_to(f"exercises/{module}"))
    for p in paths:
        try:
            texts.append(p.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    return texts


# ---- the compiler's view: what the header's tokens declare ---------------------------------

@dataclass
class Shape:
    """What a header declares where: the namespaces it opens at global scope, the names it
    declares at global scope, its global `using` statements and explicit specializations."""
    namespaces: set[str] = field(default_factory=set)
    names: dict[str, int] = field(default_factory=dict)              # name -> first line
    usings: dict[str, int] = field(default_factory=dict)             # statement -> line
    specializations: list[int] = field(default_factory=list)         # lines
    problems: list[tuple[int, str]] = field(default_factory=list)


def kit_shape(kit_texts: list[str]) -> Shape:
    """The union of the shapes of the kit's versions (their own tokens, directives left out)."""
    total = Shape()
    for text in kit_texts:
        s = shape(_code(tokenize(text)), None)
        total.namespaces |= s.namespaces
        total.names.update(s.names)
        total.usings.update(s.usings)
        if len(s.specializations) > len(total.specializations):
            total.specializations = s.specializations
    return total


def _code(tokens: list[Token]) -> list[Token]:
    return [t for ln in logical_lines(tokens) if not (ln[0].text == "#" and ln[0].kind == "punct") for t in ln]


def _balanced(tokens: list[Token], i: int, open_: str, close: str) -> int:
    """The index after the group that opens at tokens[i] (== open_)."""
    depth = 0
    for k in range(i, len(tokens)):
        depth += (tokens[k].text == open_) - (tokens[k].text == close)
        if depth == 0:
            return k + 1
    return len(tokens)


def _attribute_ids(tokens: list[Token], i: int) -> tuple[set[str], int]:
    """The identifiers of the attribute at tokens[i] (`__attribute__((...))` or `[[...]]`)."""
    if tokens[i].text in ("__attribute__", "__attribute"):
        end = _balanced(tokens, i + 1, "(", ")") if i + 1 < len(tokens) and tokens[i + 1].text == "(" else i + 1
    else:
        end = _balanced(tokens, i, "[", "]")
    return {t.text.strip("_") for t in tokens[i:end] if t.kind == "id"}, end


def shape(tokens: list[Token], kit: Shape | None) -> Shape:
    """The shape of a header's tokens; with kit (the kit's shape), the problems found too:
    (line, what is wrong)."""
    out = Shape()
    stack: list[str] = []          # one entry per open brace: "ns:<path>" or "{"
    paren = 0
    i, n = 0, len(tokens)

    def ns_path() -> str:
        return next((s[3:] for s in reversed(stack) if s.startswith("ns:")), "")

    while i < n:
        t = tokens[i]
        glob = not stack
        if t.text in ASM:
            out.problems.append((t.line, f"`{t.text}` is not allowed in an owned header (inline assembly "
                                         f"runs in the tests' build: `.incbin` reads files there)"))
        elif t.text == "_Pragma":
            out.problems.append((t.line, "_Pragma is not allowed in an owned header"))
        elif t.text in ("__attribute__", "__attribute") or (t.text == "[" and i + 1 < n and tokens[i + 1].text == "["):
            ids, end = _attribute_ids(tokens, i)
            bad = sorted(ids & FORBIDDEN_ATTRIBUTES)
            if bad:
                out.problems.append((t.line, f"the attribute `{bad[0]}` is not allowed in an owned header (it "
                                             f"decides where a symbol goes or when code runs)"))
            i = end
            continue
        elif t.text == "extern" and i + 1 < n and tokens[i + 1].kind == "str":
            out.problems.append((t.line, f"`extern {tokens[i + 1].text}` is not allowed in an owned header "
                                         f"(a declaration with C linkage can replace a library function)"))
        elif t.text == "namespace":
            k, parts = i + 1, []
            while k < n and tokens[k].text not in ("{", "=", ";"):
                if tokens[k].kind == "id" and tokens[k].text != "inline":
                    parts.append(tokens[k].text)
                elif tokens[k].text == "[":
                    k = _balanced(tokens, k, "[", "]") - 1
                k += 1
            if k < n and tokens[k].text == "{":
                path = "::".join([p for p in [ns_path()] if p] + (parts or ["(unnamed)"]))
                if glob:
                    out.namespaces.add(path)
                    if kit is not None and not _inside(path, kit.namespaces):
                        out.problems.append((t.line, _ns_problem(path, kit)))
                stack.append("ns:" + path)
                i = k + 1
                continue
            if glob and parts:            # an alias at global scope declares a global name
                out.names.setdefault(parts[0], t.line)
            i = k
            continue
        elif t.text == "{":
            stack.append("{")
        elif t.text == "}":
            if stack:
                stack.pop()
        elif glob and t.text in "([":
            paren += 1
        elif glob and t.text in ")]":
            paren = max(0, paren - 1)
        elif glob and paren == 0:
            i = _global_token(tokens, i, out, kit)
            continue
        i += 1
    if kit is not None:
        for name in sorted(set(out.names) - set(kit.names)):
            out.problems.append((out.names[name], f"declares `{name}` at global scope, which the kit's version of this "
                                       f"header does not: put what you add inside "
                                       f"{_where(kit)}"))
        for u in sorted(set(out.usings) - set(kit.usings)):
            out.problems.append((out.usings[u], f"`{u}` at global scope is not allowed (it changes which functions the "
                                    f"tests' unqualified calls find); put it inside {_where(kit)}"))
        if len(out.specializations) > len(kit.specializations):
            out.problems.append((out.specializations[len(kit.specializations)],
                                 "an explicit specialization (`template <>`) at global scope is not allowed "
                                    "(it can replace a test or library template); specialize inside "
                                    f"{_where(kit)}"))
    return out


def _global_token(tokens: list[Token], i: int, out: Shape, kit: Shape | None) -> int:
    """Reads the global-scope tokens at i: declared names, qualified declarators, `using` and
    `template <>`; returns the next index."""
    t, n = tokens[i], len(tokens)
    if t.text == "using":
        k = i
        while k < n and tokens[k].text != ";":
            k += 1
        out.usings.setdefault(" ".join(x.text for x in tokens[i:k + 1]), t.line)
        return k + 1
    if t.text == "template" and i + 2 < n and tokens[i + 1].text == "<" and tokens[i + 2].text == ">":
        out.specializations.append(t.line)
        return i + 3
    if t.text == "operator" and i + 1 < n:
        out.names.setdefault("operator" + tokens[i + 1].text, t.line)
        return i + 2
    if t.kind != "id" and t.text != "::":
        return i + 1
    # A (possibly qualified) name.
    k, parts = i, []
    if tokens[k].text == "::":
        k += 1
    while k < n and tokens[k].kind == "id":
        parts.append(tokens[k].text)
        if k + 1 < n and tokens[k + 1].text == "::":
            k += 2
            continue
        k += 1
        break
    if not parts:
        return k
    if len(parts) == 1 and tokens[i].text != "::":
        if parts[0] not in KEYWORDS and not (i > 0 and tokens[i - 1].text in (".", "->", "::")):
            out.names.setdefault(parts[0], t.line)
        return k
    after = k
    if after < n and tokens[after].text == "<":
        after = _balanced(tokens, after, "<", ">")
    root = parts[0]
    if kit is not None and after < n and tokens[after].text in ("(", "=", "{", ";", "[", ",") and \
            not _inside("::".join(parts[:-1]), kit.namespaces):
        out.problems.append((tokens[i].line, f"defines `{'::'.join(parts)}` outside the kit's namespaces: an "
                                             f"owned header may not declare or define anything in "
                                             f"`{root}` (the tests and their libraries live there)"))
    return k


def _inside(path: str, allowed: set[str]) -> bool:
    return any(path == a or path.startswith(a + "::") for a in allowed)


def _where(kit: Shape) -> str:
    ns = sorted(kit.namespaces)
    return f"namespace {ns[0]}" if ns else "a class the kit's header declares"


def _ns_problem(path: str, kit: Shape) -> str:
    allowed = ", ".join(sorted(kit.namespaces)) or "none"
    return (f"opens namespace `{path}`, which the kit's version of this header does not (it opens: "
            f"{allowed}): an owned header may not declare anything in another namespace (the tests' "
            f"helpers live in `distlab::testing`, GoogleTest in `testing`, the kit in `dist`)")
