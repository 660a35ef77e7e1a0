"""The layout the README and docs/architecture.md ("Packages") describe, checked against
the code: which package may import which, and no function too long to read at once."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "elastic_api": ROOT / "api" / "elastic_api",
    "elastic_operator": ROOT / "operator" / "elastic_operator",
    "elastic_trainer": ROOT / "trainer" / "elastic_trainer",
    "elastic_devtools": ROOT / "devtools" / "elastic_devtools",
}
# What each package may import of the others (the arrows of the picture).
ALLOWED = {
    "elastic_api": set(),
    "elastic_operator": {"elastic_api"},
    "elastic_trainer": {"elastic_api"},
    "elastic_devtools": {"elastic_api", "elastic_operator", "elastic_trainer"},
}
MAX_FUNCTION_LINES = 80


def imported_packages(path: Path) -> set[str]:
    """Our packages that a module imports, at top level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {n.split(".")[0] for n in names if n.split(".")[0] in PACKAGES}
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_imports_go_one_way(package: str) -> None:
    wrong = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) - ALLOWED[package]
                                            - {package})
        for path in PACKAGES[package].rglob("*.py")
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def long_functions(path: Path, root: Path = ROOT) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length})")
    return out


@pytest.mark.parametrize("package", ["elastic_api", "elastic_operator", "elastic_trainer"])
def test_no_function_is_longer_than_a_screen(package: str) -> None:
    assert [f for p in sorted(PACKAGES[package].rglob("*.py")) for f in long_functions(p)] == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import json\nimport elastic_operator.render\n"
                      "def f():\n    from elastic_trainer import loop\n"
                      + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert imported_packages(module) == {"elastic_operator", "elastic_trainer"}
    assert long_functions(module, tmp_path) == [f"m.py:3 f ({MAX_FUNCTION_LINES + 2})"]
