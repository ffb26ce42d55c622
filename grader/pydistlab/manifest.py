"""The grader's manifest: grader/manifest.toml (its header comment documents the format) plus the
hidden items in grader/hidden/<module>/items.toml, which are loaded when present."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .compat import tomllib
from .errors import DistlabError
from .paths import MANIFEST

# The defaults, stated once (the manifest's header repeats them for its readers).
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_GOLDEN_RTOL = 1e-6
DEFAULT_GOLDEN_ATOL = 1e-9
DEFAULT_GOLDEN_TERMS = 1
# Resource limits of one test process (0 = none); a test that breaks one fails with its name.
DEFAULT_MEMORY_LIMIT_MB = 4096      # address space (not applied in the ThreadSanitizer build)
DEFAULT_PROCESS_LIMIT = 512         # processes and threads
DEFAULT_FILE_SIZE_LIMIT_MB = 256    # largest file a test may write
DEFAULT_CPU_LIMIT_S = 600           # CPU seconds, all threads together
TIERS = ("public", "hidden")
HIDDEN_ITEMS = "items.toml"     # grader/hidden/<module>/items.toml

MODULE_KEYS = {"owned", "prerequisites", "sanitizers", "test_binary", "timeout_s", "tests",
               "golden_target", "golden_args", "golden_rtol", "golden_atol",
               "golden_terms", "memory_limit_mb", "process_limit", "file_size_limit_mb",
               "cpu_limit_s", "audit_allow"}
HIDDEN_KEYS = {"binary", "tests"}
ITEM_KEYS = {"name", "filter", "points", "tier", "timeout_s"}


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
    golden_rtol: float = DEFAULT_GOLDEN_RTOL
    golden_atol: float = DEFAULT_GOLDEN_ATOL
    golden_terms: int = DEFAULT_GOLDEN_TERMS
    memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB
    process_limit: int = DEFAULT_PROCESS_LIMIT
    file_size_limit_mb: int = DEFAULT_FILE_SIZE_LIMIT_MB
    cpu_limit_s: int = DEFAULT_CPU_LIMIT_S
    audit_allow: list[str] = field(default_factory=list)   # constructs ./distlab audit accepts here

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


def _limit(sec: dict[str, Any], key: str, default: int, where: str) -> int:
    v = _num(sec.get(key, default), f"{where} {key}")
    if v < 0 or v != int(v):
        raise DistlabError(f"{where} {key}: a whole number >= 0 (0 = no limit), not {v!r}")
    return int(v)


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise DistlabError(f"{path} is not valid TOML: {e}") from None


def _check_keys(table: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise DistlabError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")


def _items(raw: object, m: Module, tier: str, where: str, seen: set[str]) -> list[TestItem]:
    """The items of one `tests` array; tier is "public" (the manifest) or "hidden" (items.toml)."""
    if not isinstance(raw, list):
        raise DistlabError(f"{where} tests: expected an array of tables")
    items = []
    for i, t in enumerate(raw):
        tw = f"{where} tests[{i}]"
        if not isinstance(t, dict):
            raise DistlabError(f"{tw}: expected a table {{ name = ..., filter = ..., points = ... }}")
        _check_keys(t, ITEM_KEYS, tw)
        for key in ("name", "filter", "points"):
            if key not in t:
                raise DistlabError(f"{tw}: missing '{key}'")
        given = str(t.get("tier", tier))
        if given not in TIERS:
            raise DistlabError(f"{tw}: tier must be \"public\" or \"hidden\", not {given!r}")
        if given != tier:
            raise DistlabError(f"{tw}: a {given} item belongs in " +
                               ("grader/manifest.toml" if given == "public" else
                                f"grader/hidden/{m.name}/{HIDDEN_ITEMS}") + " (drop its tier key)")
        if t["name"] in seen:
            raise DistlabError(f"{tw}: duplicate test name {t['name']!r}")
        seen.add(str(t["name"]))
        items.append(TestItem(module=m.name, name=str(t["name"]), filter=str(t["filter"]),
                              points=_num(t["points"], f"{tw} points"), tier=tier,
                              timeout_s=_num(t.get("timeout_s", m.timeout_s), f"{tw} timeout_s")))
    return items


def load(path: Path = MANIFEST) -> Manifest:
    """The manifest at path, with the hidden items of path's folder's hidden/<module>/ when present."""
    if not path.is_file():
        raise DistlabError(f"{path} is missing: run ./distlab from the kit's root folder")
    data = _read(path)
    kit = data.get("kit", {})
    order = list(kit.get("modules", []))
    raw = data.get("modules", {})
    for name in raw:
        if name not in order:
            order.append(name)
    hidden_dir = path.parent / "hidden"
    modules: dict[str, Module] = {}
    for name, sec in raw.items():
        where = f"{path.name} [modules.{name}]"
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise DistlabError(f"{where}: module names are letters, digits and _ only")
        _check_keys(sec, MODULE_KEYS, where)
        m = Module(name=name,
                   owned=[str(o) for o in sec.get("owned", [])],
                   prerequisites=[str(p) for p in sec.get("prerequisites", [])],
                   sanitizers=[str(s) for s in sec.get("sanitizers", [])],
                   test_binary=str(sec.get("test_binary", f"test_{name}")),
                   hidden_binary=f"test_{name}_hidden",
                   timeout_s=_num(sec.get("timeout_s", DEFAULT_TIMEOUT_S), f"{where} timeout_s"),
                   golden_target=str(sec.get("golden_target", "")),
                   golden_args=[str(a) for a in sec.get("golden_args", [])],
                   golden_rtol=_num(sec.get("golden_rtol", DEFAULT_GOLDEN_RTOL), f"{where} golden_rtol"),
                   golden_atol=_num(sec.get("golden_atol", DEFAULT_GOLDEN_ATOL), f"{where} golden_atol"),
                   golden_terms=int(_num(sec.get("golden_terms", DEFAULT_GOLDEN_TERMS),
                                         f"{where} golden_terms")),
                   memory_limit_mb=_limit(sec, "memory_limit_mb", DEFAULT_MEMORY_LIMIT_MB, where),
                   process_limit=_limit(sec, "process_limit", DEFAULT_PROCESS_LIMIT, where),
                   file_size_limit_mb=_limit(sec, "file_size_limit_mb", DEFAULT_FILE_SIZE_LIMIT_MB, where),
                   cpu_limit_s=_limit(sec, "cpu_limit_s", DEFAULT_CPU_LIMIT_S, where),
                   audit_allow=[str(a) for a in sec.get("audit_allow", [])])
        for o in m.owned:
            if o.startswith("/") or ".." in Path(o).parts:
                raise DistlabError(f"{where}: owned path {o!r} must be relative to the kit root")
        for s in m.sanitizers:
            if s != "thread":
                raise DistlabError(f"{where}: unknown sanitizer {s!r} (supported: \"thread\")")
        seen: set[str] = set()
        m.tests = _items(sec.get("tests", []), m, "public", where, seen)
        hidden_file = hidden_dir / name / HIDDEN_ITEMS
        if hidden_file.is_file():
            hw = f"grader/hidden/{name}/{HIDDEN_ITEMS}"
            hidden = _read(hidden_file)
            _check_keys(hidden, HIDDEN_KEYS, hw)
            m.hidden_binary = str(hidden.get("binary", m.hidden_binary))
            m.tests += _items(hidden.get("tests", []), m, "hidden", hw, seen)
        modules[name] = m
    for m in modules.values():
        for p in m.prerequisites:
            if p not in modules and p not in order:
                raise DistlabError(f"{path.name} [modules.{m.name}]: unknown prerequisite {p!r}")
    if hidden_dir.is_dir():
        for f in sorted(hidden_dir.glob(f"*/{HIDDEN_ITEMS}")):
            if f.parent.name not in modules:
                raise DistlabError(f"grader/hidden/{f.parent.name}/{HIDDEN_ITEMS}: no module "
                                   f"{f.parent.name} in {path.name}")
    return Manifest(modules=modules, order=order, path=path)
