"""Which of our modules imports which, as the source spells it, and the circles in that
graph. Every import statement counts: at the top of a module, inside a function (a lazy
import), or under `if TYPE_CHECKING:` (a circle that only the type checker follows still
ties the modules into one unit that none can be read or tested without)."""
from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path


def module_names(package: str, folder: Path) -> dict[str, Path]:
    """Every module of the package in `folder`, by dotted name (a package's __init__.py by
    the package's own name)."""
    out = {}
    for path in sorted(folder.rglob("*.py")):
        parts = [package, *path.relative_to(folder).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    """The module of ours that `import name` loads: itself, or the nearest one above it.
    (Every import runs the __init__.py of the packages above too; those edges are left
    out, or a package that re-exports its modules would be a circle with each.)"""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _base(me: str, path: Path, level: int) -> str:
    """The package a relative import of `level` dots in module `me` starts from."""
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    return ".".join(package[:len(package) - (level - 1)])


def imported(me: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of ours that module `me` (at `path`) imports, anywhere in it."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(filter(None, [_base(me, path, node.level), base]))
            # `from pkg import mod` loads pkg.mod; `from mod import Name`, mod.
            names += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                      for alias in node.names]
    found = {_resolve(name, known) for name in names if name}
    return {m for m in found if m is not None and m != me}


def import_graph(packages: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, over every package given (name ->
    folder)."""
    known: dict[str, Path] = {}
    for package, folder in packages.items():
        known |= module_names(package, folder)
    return {me: imported(me, path, known) for me, path in known.items()}


def circles(graph: Mapping[str, set[str]]) -> list[str]:
    """One circle of each group of modules that import one another (a strongly connected
    component of more than one module), as `a -> b -> ... -> a`."""
    return [_one_circle(group, graph) for group in _components(graph) if len(group) > 1]


def _components(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                out.append(group)
    return out


def _one_circle(group: set[str], graph: Mapping[str, set[str]]) -> str:
    """A shortest way from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    for node in queue:  # breadth first: the queue grows while it is read
        for child in sorted(graph.get(node, ()) & group):
            if child == start:
                return " -> ".join([*paths[node], start])
            if child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    raise AssertionError(f"no circle through {start} in {sorted(group)}")
