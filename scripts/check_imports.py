"""Layering check (``make lint``): the intra-package import graph of ``spark_eventbus`` has no
cycle, only ``spark_eventbus/redisio/`` imports redis-py, no module but the entry points
(``jobs``) imports the package root, and ``docs/architecture.md`` agrees with the code:

* its *Rooms* table: each subpackage (room) on a floor, with the rooms it may import, all on
  lower floors; no module imports from a room its own room may not (the floors keep every
  arrow pointing down), and each room's ``__init__`` docstring ends with the same
  ``May import:`` line;
* its *Module map*: every module has a row, every row a module, each row's "may import" column
  names exactly the package modules it imports (``errors`` aside: every module may).

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
# Every module may use the error tree without saying so.
ANYWHERE = {"errors"}
BASE, ROOT_ROOM = "base", "root"  # errors.py and _version.py; the package's entry modules


def short(module: str) -> str:
    """``spark_eventbus.redisio.group`` → ``redisio.group``; the root is ``__init__``."""
    return module[len(PACKAGE) + 1:] if module != PACKAGE else "__init__"


def room_of(name: str) -> str:
    """The room of a module's short name: its subpackage, ``base`` for ``errors`` and
    ``_version``, ``root`` for the package's own entry modules (``source``, ``__init__``, …)."""
    if name in ("errors", "_version"):
        return BASE
    head, dot, _ = name.partition(".")
    return head if dot or (ROOT / PACKAGE / head).is_dir() else ROOT_ROOM


def _section(title: str) -> str:
    return DOC.read_text().split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _cells(section: str) -> list[list[str]]:
    out = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and not cells[1].startswith("-") and cells[1] not in ("module",
                                                                                 "room"):
            out.append(cells)
    return out


def _room_name(cell: str) -> str:
    """``core/`` → ``core``; *the package root* → ``root``; ``errors.py``… → ``base``."""
    cell = cell.strip().strip("`")
    if cell.startswith("errors.py"):
        return BASE
    return ROOT_ROOM if cell == "the package root" else cell.rstrip("/")


def rooms_table() -> dict[str, tuple[int, set[str]]]:
    """The Rooms table: room → (floor, the rooms it may import)."""
    rooms: dict[str, tuple[int, set[str]]] = {}
    for floor, room, _, allowed in _cells(_section("Rooms")):
        names = set() if allowed in ("nothing", "—") else {
            _room_name(part) for part in allowed.replace("every room", "").split(",")
            if part.strip()}
        rooms[_room_name(room)] = (int(floor), names)
    if "every room" in _section("Rooms"):  # the root may import every room below it
        top = rooms[ROOT_ROOM][0]
        rooms[ROOT_ROOM] = (top, {r for r, (f, _) in rooms.items() if f < top})
    return rooms


def table_rows() -> dict[str, set[str] | None]:
    """The module map's rows: module (short name) → the modules it may import."""
    rows: dict[str, set[str] | None] = {}
    for _, module, _, allowed in _cells(_section("Module map")):
        path = module.strip("`")
        if not path.endswith(".py"):
            continue  # redisio/lua/*.lua
        name = path[:-3].replace("/", ".")
        name = name[:-len(".__init__")] if name.endswith(".__init__") else name
        if allowed == "its own modules":  # a package's __init__: its re-exports
            rows[name] = None
            continue
        rows[name] = set() if allowed in ("nothing", "—") else {
            "__init__" if part.strip() == "the package root" else part.strip().strip("`")
            for part in allowed.split(",") if part.strip()}
    return rows


def check_rooms(actual: dict[str, set[str]]) -> list[str]:
    rooms = rooms_table()
    problems = []
    for room, (floor, allowed) in sorted(rooms.items()):
        for other in sorted(allowed):
            if other not in rooms:
                problems.append(f"room {room}: may import {other}, which is not a room")
            elif rooms[other][0] >= floor:
                problems.append(f"room {room} (floor {floor}) may import {other} (floor "
                                f"{rooms[other][0]}): a room may import only rooms below it")
        init = ROOT / PACKAGE / room / "__init__.py"
        if room not in (BASE, ROOT_ROOM):
            said = ast.get_docstring(ast.parse(init.read_text())) or "" if init.exists() else ""
            want = "May import: " + (", ".join(sorted(
                "the package root" if r == ROOT_ROOM else r for r in allowed)) or "nothing") + "."
            if want not in " ".join(said.split()):
                problems.append(f"{room}/__init__.py: its docstring must end with {want!r} "
                                "(the Rooms table of docs/architecture.md)")
    for name in sorted(actual):
        room = room_of(name)
        if room not in rooms:
            problems.append(f"{name}: room {room} has no row in docs/architecture.md's Rooms")
            continue
        for dep in sorted(actual[name]):
            other = room_of(dep)
            if other not in (room, BASE) and other not in rooms[room][1]:
                problems.append(f"{name} ({room}/) imports {dep} ({other}): {room}/ may "
                                f"import {', '.join(sorted(rooms[room][1])) or 'nothing'}")
    return problems


def check_table(graph: dict[str, set[str]]) -> list[str]:
    rows = table_rows()
    problems = []
    actual = {short(m): {short(d) for d in deps} - ANYWHERE for m, deps in graph.items()}
    for name in sorted(set(actual) - set(rows)):
        problems.append(f"{name}: no row in docs/architecture.md's module map (one sentence, "
                        f"may import: {', '.join(sorted(actual[name])) or 'nothing'})")
    for name in sorted(set(rows) - set(actual)):
        problems.append(f"{name}: a row in docs/architecture.md's module map, but no module")
    for name in sorted(set(rows) & set(actual)):
        allowed = rows[name]
        if allowed is not None and allowed != actual[name]:
            problems.append(
                f"{name}: docs/architecture.md says it may import "
                f"{', '.join(sorted(allowed)) or 'nothing'}; it imports "
                f"{', '.join(sorted(actual[name])) or 'nothing'}")
    return problems + check_rooms(actual)


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
