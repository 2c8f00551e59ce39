"""Layering check (``make lint``): the intra-package import graph of ``spark_eventbus`` has no
cycle, only ``spark_eventbus/redisio/`` imports redis-py, no module but the entry points
(``jobs``) imports the package root, and the module map of ``docs/architecture.md`` agrees
with the code: every module has a row, every row a module, each row's "may import" column
names exactly the package modules it imports (``errors`` aside: every module may), and no
module imports one of a layer above its own.

It also keeps redis-py's private names out (``redisio/`` uses redis-py's public API only: a
private name can move or change in any release, and then a fast path is silently not taken or
every batch fails): no import from a ``redis._…`` module or of a ``_name`` from redis-py, no
attribute ``obj._name`` but of ``self``/``cls``, and no ``_name`` method defined in a subclass of
a redis-py class (an override of its internals).

``python scripts/check_imports.py --table`` prints what each module imports, in the table's
notation, to fill a new row in.

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


DOC = ROOT / "docs" / "architecture.md"
# The layers of the module map, bottom up: a module imports only from its own or lower ones.
LAYERS = ("pure core", "Redis access", "reader", "writers", "entry points")
# Every module may use the error tree without saying so.
ANYWHERE = {"errors"}


def short(module: str) -> str:
    """``spark_eventbus.redisio.group`` → ``redisio.group``; the root is ``__init__``."""
    return module[len(PACKAGE) + 1:] if module != PACKAGE else "__init__"


def table_rows() -> dict[str, tuple[str, set[str] | None]]:
    """The module map's rows: module (short name) → (layer, the modules it may import)."""
    text = DOC.read_text()
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, set[str] | None]] = {}
    layer = ""
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[1].startswith("-") or cells[1] == "module":
            continue
        layer = cells[0] or layer
        path = cells[1].strip("`")
        if not path.endswith(".py"):
            continue  # lua/*.lua
        name = path[:-3].replace("/", ".")
        name = name[:-len(".__init__")] if name.endswith(".__init__") else name
        if cells[3] == "its own modules":  # a package's __init__: its re-exports
            rows[name] = (layer, None)
            continue
        allowed = set() if cells[3] in ("nothing", "—") else {
            "__init__" if part.strip() == "the package root" else part.strip().strip("`")
            for part in cells[3].split(",") if part.strip()}
        rows[name] = (layer, allowed)
    return rows


def check_table(graph: dict[str, set[str]]) -> list[str]:
    rows = table_rows()
    problems = []
    actual = {short(m): {short(d) for d in deps} - ANYWHERE for m, deps in graph.items()}
    for name in sorted(set(actual) - set(rows)):
        problems.append(f"{name}: no row in docs/architecture.md's module map (its layer, one "
                        f"sentence, may import: {', '.join(sorted(actual[name])) or 'nothing'})")
    for name in sorted(set(rows) - set(actual)):
        problems.append(f"{name}: a row in docs/architecture.md's module map, but no module")
    for name in sorted(set(rows) & set(actual)):
        layer, allowed = rows[name]
        if layer not in LAYERS:
            problems.append(f"{name}: layer {layer!r} is not one of {', '.join(LAYERS)}")
            continue
        if allowed is not None and allowed != actual[name]:
            problems.append(
                f"{name}: docs/architecture.md says it may import "
                f"{', '.join(sorted(allowed)) or 'nothing'}; it imports "
                f"{', '.join(sorted(actual[name])) or 'nothing'}")
        for dep in sorted(actual[name]):
            if dep in rows and rows[dep][0] in LAYERS and \
                    LAYERS.index(rows[dep][0]) > LAYERS.index(layer):
                problems.append(f"{name} ({layer}) imports {dep} ({rows[dep][0]}): a layer "
                                "above its own")
    return problems


def private_redis_names(path: Path) -> list[str]:
    """Uses of redis-py's private names in ``path`` (see the module's docstring)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    from_redis: set[str] = {"redis"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "redis":
            parts = (node.module or "").split(".")
            from_redis.update(a.asname or a.name for a in node.names)
            if any(p.startswith("_") for p in parts) or any(
                    a.name.startswith("_") for a in node.names):
                found.append(f"line {node.lineno}: from {node.module} import "
                             f"{', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "redis" and any(
                        p.startswith("_") for p in a.name.split(".")):
                    found.append(f"line {node.lineno}: import {a.name}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"line {node.lineno}: .{node.attr}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {ast.unparse(b).split(".")[0] for b in node.bases}
        if not bases & from_redis:
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name.startswith("_") \
                    and not item.name.startswith("__"):
                found.append(f"line {item.lineno}: {node.name}.{item.name} overrides a "
                             "private method")
        # self._name that this class never sets: the redis-py base class's private state
        own = {t.attr for n in ast.walk(node) if isinstance(n, ast.Assign | ast.AnnAssign)
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
               if isinstance(t, ast.Attribute)}
        for n in ast.walk(node):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) \
                    and n.value.id == "self" and n.attr.startswith("_") \
                    and not n.attr.startswith("__") and n.attr not in own:
                found.append(f"line {n.lineno}: {node.name} reads its redis-py base's "
                             f"self.{n.attr}")
    return found


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
        for use in private_redis_names(path) if name.startswith(f"{PACKAGE}.redisio") else ():
            problems.append(f"{name}: redis-py's private name, {use}: use its public API")
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
    if "--table" in sys.argv:
        for name, deps in sorted(graph.items()):
            print(f"{short(name)}: {', '.join(sorted(short(d) for d in deps) ) or 'nothing'}")
        return 0
    problems += check_table(graph)
    for problem in problems:
        print(f"check_imports: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
