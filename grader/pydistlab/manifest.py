"""The grader's manifest (grader/manifest.toml; its header comment documents the format)."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import DistlabError
from .paths import MANIFEST

DEFAULT_TIMEOUT_S = 60.0
TIERS = ("public", "hidden")


@dataclass(frozen=True)
class TestItem:
    """One graded item: one gtest filter run as its own process."""
    module: str
    name: str
    filter: str
    points: float
    tier: str
    timeout_s: float

    @property
    def full_name(self) -> str:
        return f"{self.module}/{self.name}"


@dataclass
class Module:
    name: str
    owned: list[str] = field(default_factory=list)
    prerequisites: list[str] = field(default_factory=list)
    sanitizers: list[str] = field(default_factory=list)
    test_binary: str = ""
    hidden_binary: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    tests: list[TestItem] = field(default_factory=list)
    golden_target: str = ""
    golden_args: list[str] = field(default_factory=list)
    golden_rtol: float = 1e-6
    golden_atol: float = 1e-9
    golden_terms: int = 1

    def items(self, hidden: bool) -> list[TestItem]:
        return [t for t in self.tests if t.tier == "public" or hidden]

    def max_points(self, hidden: bool) -> float:
        return sum(t.points for t in self.items(hidden))

    def binary_for(self, item: TestItem) -> str:
        return self.hidden_binary if item.tier == "hidden" else self.test_binary


@dataclass
class Manifest:
    modules: dict[str, Module]
    order: list[str]
    path: Path

    def select(self, names: list[str]) -> list[Module]:
        """The named modules (all with tests when names is empty), in course order."""
        if not names:
            return [self.modules[n] for n in self.order if n in self.modules and self.modules[n].tests]
        out = []
        for n in names:
            n = resolve_name(n, self.order)
            if n not in self.modules:
                raise DistlabError(f"module {n} has no [modules.{n}] section in {self.path.name} yet")
            out.append(self.modules[n])
        return sorted(out, key=lambda m: self.order.index(m.name))

    def prerequisites_closure(self, name: str) -> list[str]:
        """All modules `name` builds on, transitively, in course order."""
        seen: set[str] = set()
        stack = list(self.modules[name].prerequisites) if name in self.modules else []
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            if p in self.modules:
                stack.extend(self.modules[p].prerequisites)
        return [m for m in self.order if m in seen]


def resolve_name(name: str, order: list[str]) -> str:
    """Accepts '03_collectives', '03', 'collectives' or 'exercises/03_collectives/'."""
    n = name.strip().rstrip("/").split("/")[-1]
    if n in order:
        return n
    hits = [m for m in order if m.split("_", 1)[0] == n or m.split("_", 1)[-1] == n]
    if len(hits) == 1:
        return hits[0]
    raise DistlabError(f"unknown module {name!r}; modules: {', '.join(order)}")


def _num(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DistlabError(f"{where}: expected a number, got {v!r}")
    return float(v)


def load(path: Path = MANIFEST) -> Manifest:
    if not path.is_file():
        raise DistlabError(f"{path} is missing: run ./distlab from the kit's root folder")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise DistlabError(f"{path.name} is not valid TOML: {e}") from None
    kit = data.get("kit", {})
    order = list(kit.get("modules", []))
    raw = data.get("modules", {})
    for name in raw:
        if name not in order:
            order.append(name)
    modules: dict[str, Module] = {}
    for name, sec in raw.items():
        where = f"{path.name} [modules.{name}]"
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise DistlabError(f"{where}: module names are letters, digits and _ only")
        m = Module(name=name,
                   owned=[str(o) for o in sec.get("owned", [])],
                   prerequisites=[str(p) for p in sec.get("prerequisites", [])],
                   sanitizers=[str(s) for s in sec.get("sanitizers", [])],
                   test_binary=str(sec.get("test_binary", f"test_{name}")),
                   hidden_binary=str(sec.get("hidden_binary", f"test_{name}_hidden")),
                   timeout_s=_num(sec.get("timeout_s", DEFAULT_TIMEOUT_S), f"{where} timeout_s"),
                   golden_target=str(sec.get("golden_target", "")),
                   golden_args=[str(a) for a in sec.get("golden_args", [])],
                   golden_rtol=_num(sec.get("golden_rtol", 1e-6), f"{where} golden_rtol"),
                   golden_atol=_num(sec.get("golden_atol", 1e-9), f"{where} golden_atol"),
                   golden_terms=int(_num(sec.get("golden_terms", 1), f"{where} golden_terms")))
        for o in m.owned:
            if o.startswith("/") or ".." in Path(o).parts:
                raise DistlabError(f"{where}: owned path {o!r} must be relative to the kit root")
        for s in m.sanitizers:
            if s != "thread":
                raise DistlabError(f"{where}: unknown sanitizer {s!r} (supported: \"thread\")")
        seen: set[str] = set()
        for i, t in enumerate(sec.get("tests", [])):
            tw = f"{where} tests[{i}]"
            for key in ("name", "filter", "points"):
                if key not in t:
                    raise DistlabError(f"{tw}: missing '{key}'")
            tier = str(t.get("tier", "public"))
            if tier not in TIERS:
                raise DistlabError(f"{tw}: tier must be \"public\" or \"hidden\", not {tier!r}")
            if t["name"] in seen:
                raise DistlabError(f"{tw}: duplicate test name {t['name']!r}")
            seen.add(str(t["name"]))
            m.tests.append(TestItem(module=name, name=str(t["name"]), filter=str(t["filter"]),
                                    points=_num(t["points"], f"{tw} points"), tier=tier,
                                    timeout_s=_num(t.get("timeout_s", m.timeout_s), f"{tw} timeout_s")))
        modules[name] = m
    for m in modules.values():
        for p in m.prerequisites:
            if p not in modules and p not in order:
                raise DistlabError(f"{path.name} [modules.{m.name}]: unknown prerequisite {p!r}")
    return Manifest(modules=modules, order=order, path=path)


def strip_hidden(text: str) -> str:
    """The manifest text without hidden tests and hidden_binary keys (for `release`).

    Works on the text so comments and layout survive: drops every [[modules.X.tests]] table whose
    tier is "hidden" and every `hidden_binary = ...` line."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    block: list[str] = []
    in_test = False

    def flush() -> None:
        nonlocal block
        if block and not any(re.match(r'^\s*tier\s*=\s*["\']hidden["\']', l) for l in block):
            out.extend(block)
        block = []

    for line in lines:
        header = re.match(r"^\s*\[", line)
        if header:
            if in_test:
                flush()
            in_test = bool(re.match(r"^\s*\[\[\s*modules\.[^\]]+\.tests\s*\]\]", line))
        elif in_test and re.match(r"^\s*#\s*(BEGIN|END) MODULE", line):
            flush()
            in_test = False
        if re.match(r"^\s*hidden_binary\s*=", line):
            continue
        (block if in_test else out).append(line)
    if in_test:
        flush()
    return "".join(out)
