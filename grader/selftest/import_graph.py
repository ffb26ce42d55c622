"""The import graph of pydistlab, and a check that it has no cycle.

Every import counts, wherever it is written (module level, inside a function, under
TYPE_CHECKING): a cycle hidden in a function is still a cycle a reader has to untangle.

Run: python3 grader/selftest/import_graph.py   (exit status 1 and the cycle when there is one;
also checked by the grader's self-test, test_grader.TestPackage).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pydistlab"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(current: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module name of `from <level dots><name> import ...` written in current."""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports."""
    files = {module_name(p, package): p for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts}
    root = package.name
    edges: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_package, node.level, node.module) if node.level else (node.module or "")
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                if t in files and t != mod and (t == root or t.startswith(root + ".")):
                    edges[mod].add(t)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str]:
    """One cycle as [a, b, ..., a], or [] when the graph is acyclic."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return []

    for m in sorted(edges):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return []


def main() -> int:
    edges = graph()
    cycle = find_cycle(edges)
    if cycle:
        print("import cycle: " + " -> ".join(cycle))
        return 1
    print(f"pydistlab: {len(edges)} modules, {sum(map(len, edges.values()))} imports, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
