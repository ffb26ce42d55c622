"""What an owned header's code may do inside the trusted test objects (compiler's view).

An owned header's inline code is compiled into the tests' own translation units, where the
object rule (symbols.py) does not look. So, on the tokens the header itself contributes to the
preprocessor's output (header_view.header_lines), beyond header_rule.shape():

  - no `testing` identifier (GoogleTest's namespace, `distlab::testing`): a header may not
    construct GoogleTest's fake reporter or call the tests' helpers;
  - no `operator` the kit's versions of the header do not declare, compared as (operator,
    following tokens): `operator==`, `operator double`, `operator()` ... A type with always-true
    comparison operators or a conversion the tests' EXPECT_* pick through argument-dependent
    lookup changes what a test means. Copy/move assignment (`operator=`) is allowed;
  - no namespace-scope variable, nor static data member of a class, whose initialiser (after `=`,
    or in braces) calls a function (`inline const int x = f();`, `static int y{g()}`,
    `static inline int z = h();` in a class, a called lambda): dynamic initialisation runs before
    the kit's test main reads its control line. `constexpr` and `constinit` variables are constant
    initialised and allowed.

Each is allowed where the kit's versions (stub and reference) have the same thing.
"""
from __future__ import annotations

from .cpp_tokens import Token

_CLASS_KEYS = {"class", "struct", "union", "enum"}
_NOT_CALLS = {"sizeof", "alignof", "decltype", "noexcept", "static_assert", "typeid", "requires",
              "static_cast", "const_cast", "reinterpret_cast", "dynamic_cast", "operator", "return",
              "if", "while", "for", "switch", "catch", "throw", "alignas", "__attribute__"}


def operators(tokens: list[Token]) -> dict[str, int]:
    """(`operator` followed by its symbol or conversion type) -> first line."""
    found: dict[str, int] = {}
    n = len(tokens)
    for i, t in enumerate(tokens):
        if t.text != "operator" or t.kind != "id":
            continue
        k = i + 1
        if k >= n:
            break
        words = [tokens[k].text]
        if tokens[k].text in ("(", "["):
            words.append(tokens[k + 1].text if k + 1 < n else "")
        elif tokens[k].kind == "id" or tokens[k].text == "::":      # a conversion type, new, delete
            k += 1
            while k < n and tokens[k].text not in ("(", ";", "{", "=") and len(words) < 8:
                words.append(tokens[k].text)
                k += 1
        spaced = tokens[i + 1].kind == "id" or tokens[i + 1].text == "::"
        found.setdefault("operator" + (" " + " ".join(words) if spaced else "".join(words)), t.line)
    return found


def dynamic_inits(tokens: list[Token], members: bool = False) -> dict[str, int]:
    """Namespace-scope declarations, and static data members of the classes declared there, whose
    initialiser calls something: text -> line. members: tokens are a class body."""
    found: dict[str, int] = {}
    decl: list[Token] = []
    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        if t.text == "namespace":
            k = i + 1
            while k < n and tokens[k].text not in ("{", ";", "="):
                k += 1
            if k < n and tokens[k].text == "{":
                decl = []
                i = k + 1
                continue
        if t.text == "}":
            decl = []
        elif t.text == ";":
            _judge(decl, found, members)
            decl = []
        elif t.text == "{":
            end = _group_end(tokens, i, "{", "}")
            words = {x.text for x in decl}
            top = set(_top(decl))   # (`class` in a template's parameter list names no class here)
            initialiser = "=" in top or (bool(decl) and decl[-1].kind == "id" and "(" not in words
                                         and not top & (_CLASS_KEYS | {"operator"}))
            if initialiser:
                decl += tokens[i:end]
            elif "(" in words and not top & _CLASS_KEYS:   # a function body ends the declaration
                decl = []
            else:                                            # a class or enum body: its static members
                for d, line in dynamic_inits(tokens[i + 1:end - 1], True).items():
                    found.setdefault(d, line)
                decl += [t, tokens[end - 1]]
            i = end
            continue
        else:
            decl.append(t)
        i += 1
    return found


def _top(decl: list[Token]) -> list[str]:
    """The texts of decl's tokens outside parentheses and angle brackets."""
    out, depth = [], 0
    for t in decl:
        if t.text in ("(", "[", "<"):
            depth += 1
        elif t.text in (")", "]", ">") and depth:
            depth -= 1
        elif depth == 0:
            out.append(t.text)
    return out


def _group_end(tokens: list[Token], i: int, open_: str, close: str) -> int:
    depth = 0
    for k in range(i, len(tokens)):
        depth += (tokens[k].text == open_) - (tokens[k].text == close)
        if depth == 0:
            return k + 1
    return len(tokens)


def _judge(decl: list[Token], found: dict[str, int], members: bool) -> None:
    words = {t.text for t in decl}
    if not decl or words & {"constexpr", "constinit", "using", "typedef", "friend", "static_assert", "concept"}:
        return
    if members and "static" not in words:     # a default member initialiser runs in the constructor
        return
    start = next((k for k, t in enumerate(decl) if t.text in ("=", "{")), -1)
    if start < 0 or ("=" not in _top(decl) and decl[start].text != "{"):
        return
    init = decl[start:]
    if any(b.text == "(" and ((a.kind == "id" and a.text not in _NOT_CALLS) or a.text in (")", "}"))
           for a, b in zip(init, init[1:])):
        found.setdefault(" ".join(t.text for t in decl), decl[0].line)


def problems(tokens: list[Token], kit_tokens: list[list[Token]]) -> list[tuple[int, str]]:
    """(line, what is wrong) for the header's tokens against the kit's versions' tokens."""
    out: list[tuple[int, str]] = []
    kit_ids = {t.text for v in kit_tokens for t in v if t.kind == "id"}
    if "testing" not in kit_ids:
        for t in tokens:
            if t.kind == "id" and t.text == "testing":
                out.append((t.line, "names `testing` (GoogleTest's namespace or the kit's `distlab::testing`): "
                                    "an owned header's code runs inside the tests, so it may not use the test "
                                    "framework or the tests' helpers"))
                break
    kit_ops = {op for v in kit_tokens for op in operators(v)}
    for op, line in sorted(operators(tokens).items(), key=lambda x: x[1]):
        if op not in kit_ops and op != "operator=":
            out.append((line, f"declares `{op}`, which the kit's version of this header does not: an operator "
                              f"or conversion of your own can change what the tests' comparisons mean (write a "
                              f"named function instead)"))
            break
    kit_inits = {d for v in kit_tokens for d in dynamic_inits(v)}
    for d, line in sorted(dynamic_inits(tokens).items(), key=lambda x: x[1]):
        if d not in kit_inits:
            out.append((line, f"`{d[:80]}`: a namespace-scope variable whose initialiser calls a function runs "
                              f"code before the tests start (dynamic initialisation); make it `constexpr`, or "
                              f"compute the value inside a function"))
            break
    return out
