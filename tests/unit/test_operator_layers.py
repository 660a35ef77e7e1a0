"""The operator's modules import as docs/architecture.md draws them ("Inside the
operator"): downwards only, the pure core from nothing that does I/O, and only one
module each for the Kubernetes API (the shared client, elastic_api.kube.KubeClient),
kopf and Google Cloud Storage. Inside the core, each module imports only those listed
above it in core/__init__.py."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from tests.support.import_graph import import_graph

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "elastic_operator"

# Layer (as drawn) -> its modules, left to right: a module imports only from lower
# layers, or from its own layer further right. core/* is one unit in layer 1 (its own
# order: CORE_ORDER).
LAYERS: dict[int, list[str]] = {
    4: ["operator_cli", "render_cli", "handlers", "readiness", "app"],
    3: ["scheduler", "reconciler", "reconcile_pass", "dispatched", "status_writer",
        "schema_guard", "outbox", "own_writes", "pacer", "replacement_followups", "executor"],
    2: ["followups", "job_reader", "caches", "schema_watch", "election", "replacement_writes",
        "pool_warden", "scanner", "checkpoint_roots", "checkpoint_listing", "slice_index",
        "node_index", "node_actions", "kube", "kube_bodies", "metrics", "job_metrics",
        "state_metrics"],
    1: ["core", "render"],
    0: ["objects", "job_stores", "job_memory", "slice_memo", "result"],
}
POSITION = {name: (layer, i) for layer, names in LAYERS.items() for i, name in enumerate(names)}
# Third-party libraries that do I/O, and the one module allowed each.
ONLY_IN = {"kubernetes": set(), "urllib3": set(), "kopf": {"handlers", "operator_cli"},
           "google": {"checkpoint_listing"},
           "prometheus_client": {"metrics", "job_metrics", "state_metrics", "operator_cli"}}
CORE_MAY_IMPORT = {"elastic_api", "pydantic"}
# Names of the shared Kubernetes layer (elastic_api.kube) only kube.py may import: the
# client that sends requests. The rest (Informer, Backoff, ApiError) is for everyone.
KUBE_ONLY = {"KubeClient": {"kube"}, "client": {"kube"}}
CORE = PACKAGE / "core"
# The core's modules, lowest first, as its __init__.py lists them ("- name: what").
CORE_ORDER = re.findall(r"^- (\w+):", ast.get_docstring(ast.parse(
    (CORE / "__init__.py").read_text())) or "", re.MULTILINE)


def unit(path: Path) -> str:
    """The drawn unit of a module: `core` for core/*, else the module's name."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0] if len(rel.parts) > 1 else rel.name


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def imports(path: Path) -> set[str]:
    """Every module path imported, lazily or not (relative imports are not used)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "elastic_operator":
            names |= {f"elastic_operator.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_every_module_is_drawn() -> None:
    assert {unit(p) for p in modules()} == set(POSITION)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    me = unit(path)
    layer, index = POSITION[me]
    for name in imports(path):
        top, _, rest = name.partition(".")
        if top == "elastic_operator":
            other = rest.split(".")[0]
            if other == me:
                continue
            other_layer, other_index = POSITION[other]
            assert other_layer < layer or (other_layer == layer and other_index > index), (
                f"{me} (layer {layer}) imports {other} (layer {other_layer}): against the "
                "picture in docs/architecture.md")
        elif top in ONLY_IN:
            assert me in ONLY_IN[top], f"{me} imports {name}; only {ONLY_IN[top]} may"
        elif me == "core":
            assert top in CORE_MAY_IMPORT or top in sys.stdlib_module_names, (
                f"core imports {name}: the core stays pure")


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_kube_py_holds_the_client(path: Path) -> None:
    me = unit(path)
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
