"""The operator's folders import as they say (docs/architecture.md, "Inside the
operator"): each unit (a folder of operator/elastic_operator/, or app.py or render.py
beside them) ends its docstring with the line "May import: ...", the units it imports,
and imports exactly those; the units so drawn have no circle and at most 8 floors. The
pure core imports nothing that does I/O, and only one module each holds the Kubernetes
client (elastic_api.kube.KubeClient), kopf, Google Cloud Storage and prometheus_client.
Inside the core, each module imports only those listed above it in core/__init__.py."""
from __future__ import annotations

import ast
import re
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.support.import_graph import circles, import_graph

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "elastic_operator"
# The top-level modules that are units of their own; every other unit is a folder.
TOP_MODULES = {"app", "render"}
# The most floors (units in the longest chain of imports) the operator may have.
MAX_FLOORS = 8
# Third-party libraries that do I/O, and the modules allowed each (folder/module).
ONLY_IN = {"kubernetes": set(), "urllib3": set(),
           "kopf": {"entry/handlers", "entry/operator_cli"},
           "google": {"checkpoints/listing"},
           "prometheus_client": {"metrics/metrics", "metrics/job_metrics",
                                 "metrics/state_metrics", "entry/operator_cli"}}
CORE_MAY_IMPORT = {"elastic_api", "pydantic"}
# Names of the shared Kubernetes layer (elastic_api.kube) only client/kube.py may import:
# the client that sends requests. The rest (Informer, Backoff, ApiError) is for everyone.
KUBE_ONLY = {"KubeClient": {"client/kube"}, "client": {"client/kube"}}
CORE = PACKAGE / "core"
# The core's modules, lowest first, as its __init__.py lists them ("- name: what").
CORE_ORDER = re.findall(r"^- (\w+):", ast.get_docstring(ast.parse(
    (CORE / "__init__.py").read_text())) or "", re.MULTILINE)


def unit(path: Path) -> str:
    """The unit of a module: its folder, or its own name at the top."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0] if len(rel.parts) > 1 else rel.name


def name(path: Path) -> str:
    """folder/module, as ONLY_IN and KUBE_ONLY spell it."""
    return path.relative_to(PACKAGE).with_suffix("").as_posix()


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


def units() -> set[str]:
    return {unit(p) for p in modules()}


def unit_docstring(me: str) -> str:
    path = PACKAGE / (f"{me}.py" if me in TOP_MODULES else f"{me}/__init__.py")
    return ast.get_docstring(ast.parse(path.read_text())) or ""


@cache
def declared() -> dict[str, set[str]]:
    """Unit -> the units its docstring's last line says it may import."""
    out = {}
    for me in units():
        found = re.search(r"^May import: (.*)$", unit_docstring(me), re.MULTILINE)
        assert found, f"{me}: its docstring has no line 'May import: ...'"
        out[me] = {word for word in re.findall(r"\w+", found.group(1).split("(")[0])
                   if word != "nothing"}
    return out


@cache
def actual() -> dict[str, set[str]]:
    """Unit -> the units its modules import (lazily, under TYPE_CHECKING, or not)."""
    out: dict[str, set[str]] = {me: set() for me in units()}
    graph = import_graph({"elastic_operator": PACKAGE})
    for me, imported in graph.items():
        parts = me.split(".")[1:]
        if not parts:
            continue
        for other in imported:
            theirs = other.split(".")[1:]
            if theirs and theirs[0] != parts[0]:
                out[parts[0]].add(theirs[0])
    return out


def imports(path: Path) -> set[str]:
    """Every module path imported, lazily or not (relative imports are not used)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_every_unit_says_what_it_may_import() -> None:
    """Each folder is a package whose docstring says what it does and what it imports."""
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert all((PACKAGE / f / "__init__.py").exists() for f in folders)
    assert units() == folders | TOP_MODULES
    for me, others in declared().items():
        assert others <= units(), f"{me} may import {others - units()}: no such unit"


@pytest.mark.parametrize("me", sorted(units()))
def test_units_import_exactly_what_they_say(me: str) -> None:
    """The line is the picture: nothing imported that it does not name, nothing named
    that is not imported (a stale arrow would hide the real direction)."""
    assert actual()[me] == declared()[me], (
        f"{me} imports {sorted(actual()[me])}, its docstring says {sorted(declared()[me])}")


def test_units_have_no_circle_and_few_floors() -> None:
    graph = declared()
    assert circles(graph) == []

    @cache
    def floor(me: str) -> int:
        return 1 + max((floor(other) for other in graph[me]), default=0)

    top = max(units(), key=floor)
    assert floor(top) <= MAX_FLOORS, f"{top} stands on floor {floor(top)}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_io_libraries_only_where_allowed(path: Path) -> None:
    me = name(path)
    for imported in imports(path):
        top = imported.partition(".")[0]
        if top in ONLY_IN:
            assert me in ONLY_IN[top], f"{me} imports {imported}; only {ONLY_IN[top]} may"
        elif unit(path) == "core" and top != "elastic_operator":
            assert top in CORE_MAY_IMPORT or top in sys.stdlib_module_names, (
                f"core imports {imported}: the core stays pure")


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_kube_py_holds_the_client(path: Path) -> None:
    me = name(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("elastic_api.kube"):
            for alias in node.names:
                allowed = KUBE_ONLY.get(alias.name)
                assert allowed is None or me in allowed, (
                    f"{me} imports {alias.name} from {node.module}: only {allowed} may send "
                    "requests")


def test_core_lists_every_module_once() -> None:
    """core/__init__.py names each module of the core (the reader's map, in order)."""
    assert sorted(CORE_ORDER) == sorted(p.stem for p in CORE.glob("*.py")
                                        if p.name != "__init__.py")
    assert len(CORE_ORDER) == len(set(CORE_ORDER))


CORE_IMPORTS = {name.removeprefix("elastic_operator.core."): {
    other.removeprefix("elastic_operator.core.") for other in imported
    if other.startswith("elastic_operator.core.")}
    for name, imported in import_graph({"elastic_operator": PACKAGE}).items()
    if name.startswith("elastic_operator.core.")}


@pytest.mark.parametrize("me", sorted(CORE_IMPORTS))
def test_core_modules_import_only_those_listed_above_them(me: str) -> None:
    """Lazy and `if TYPE_CHECKING:` imports count: no circle hides inside the core."""
    position = {name: i for i, name in enumerate(CORE_ORDER)}
    for other in sorted(CORE_IMPORTS[me]):
        assert position[other] < position[me], (
            f"core/{me}.py imports core/{other}.py, listed after it in core/__init__.py: "
            "a core module imports only those listed above it (no import circle)")


def test_the_reconciler_imports_at_most_20_modules() -> None:
    """reconciler.py names ports (reconcile/ports.py: reads, writes; the job memory), not
    every module behind them: a reader of the pass sees its steps, not its wiring."""
    assert len(imports(PACKAGE / "reconcile" / "reconciler.py")) <= 20
