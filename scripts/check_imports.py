"""Layering check (``make lint``): the intra-package import graph of ``spark_eventbus`` has no
cycle, only ``spark_eventbus/redisio/`` imports redis-py, and no module but the entry points
(``jobs``) imports the package root.

Built with :mod:`ast` from the source (nothing is imported). Every import counts, lazy ones in
functions too (a lazy import hides a cycle, it does not remove it); imports under
``if TYPE_CHECKING:`` do not, since they never run. Prints the cycles and the offenders, exits 1.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "spark_eventbus"
# Programs on top of the package, which use it as users do (``from spark_eventbus import ...``).
ENTRY_POINTS = (f"{PACKAGE}.jobs", f"{PACKAGE}.__main__")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(path: Path, modules: set[str]) -> tuple[set[str], set[str]]:
    """(package modules ``path`` imports, external top-level packages it imports)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    inner: set[str] = set()
    outer: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from . import x` names a module x; `from .m import f` names module m
            targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in modules else stem
                       for a in node.names]
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target != name:
                    inner.add(target)
            else:
                outer.add(target.partition(".")[0])
    return inner, outer


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def main() -> int:
    paths = sorted((ROOT / PACKAGE).rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    problems: list[str] = []
    for path in paths:
        name = module_name(path)
        graph[name], outer = imports_of(path, modules)
        if "redis" in outer and not name.startswith(f"{PACKAGE}.redisio"):
            problems.append(f"{name} imports redis: only {PACKAGE}.redisio may")
        if PACKAGE in graph[name] and not name.startswith(ENTRY_POINTS):
            problems.append(f"{name} imports the package root: import the module that "
                            "defines the name (an arrow up the layers)")
    # A package's __init__ importing its own submodules is how packages re-export; a submodule
    # importing a sibling through the package is the same edge seen from below, so the
    # package → submodule edges are left out.
    for name, deps in graph.items():
        graph[name] = {d for d in deps if not d.startswith(name + ".")}
    for cycle in find_cycles(graph):
        problems.append("import cycle: " + " <-> ".join(cycle))
    for problem in problems:
        print(f"check_imports: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
