"""The layout the README and docs/architecture.md ("Packages") describe, checked against
the code: which package may import which, no import circle between modules, no function
too long to read at once, and no test module importing another (shared helpers live in
tests/support, fixtures in a conftest.py)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.import_graph import circles, import_graph

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "elastic_api": ROOT / "api" / "elastic_api",
    "elastic_operator": ROOT / "operator" / "elastic_operator",
    "elastic_trainer": ROOT / "trainer" / "elastic_trainer",
    "elastic_kubectl": ROOT / "kubectl" / "elastic_kubectl",
    "elastic_devtools": ROOT / "devtools" / "elastic_devtools",
}
# What each package may import of the others (the arrows of the picture).
ALLOWED = {
    "elastic_api": set(),
    "elastic_operator": {"elastic_api"},
    "elastic_trainer": {"elastic_api"},
    # The kubectl plugin reads what any user may read: no operator, no dev tools.
    "elastic_kubectl": {"elastic_api"},
    "elastic_devtools": {"elastic_api", "elastic_operator", "elastic_trainer", "elastic_kubectl"},
}
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 300  # the operator's and the trainer's: a class reads on a page or two


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


def test_no_import_circle() -> None:
    """No module of ours imports, through any chain, one that imports it back (in core/
    and bench/ too, and across packages): its lazy imports and its `if TYPE_CHECKING:`
    imports count. A helper two modules share lives below both."""
    assert circles(import_graph({**PACKAGES, "bench": ROOT / "bench",
                                 "hack": ROOT / "hack"})) == []


def long_functions(path: Path, root: Path = ROOT, kinds: tuple[type, ...] = (
        ast.FunctionDef, ast.AsyncFunctionDef), limit: int = MAX_FUNCTION_LINES) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, kinds):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length})")
    return out


# Every module we ship or run: the five packages, the benchmarks, the generators of
# hack/, and the tests (a scenario reads as its steps, each a named function).
MODULES = {
    **{name: sorted(path.rglob("*.py")) for name, path in PACKAGES.items()},
    "bench": sorted((ROOT / "bench").rglob("*.py")),
    "hack": sorted((ROOT / "hack").glob("*.py")),
    "tests": sorted((ROOT / "tests").rglob("*.py")),
}


@pytest.mark.parametrize("area", sorted(MODULES))
def test_no_function_is_longer_than_a_screen(area: str) -> None:
    assert MODULES[area], f"no modules found for {area}"
    assert [f for p in MODULES[area] for f in long_functions(p)] == []


@pytest.mark.parametrize("area", ["elastic_operator", "elastic_trainer"])
def test_no_class_is_longer_than_two_pages(area: str) -> None:
    assert MODULES[area], f"no modules found for {area}"
    assert [c for p in MODULES[area]
            for c in long_functions(p, kinds=(ast.ClassDef,), limit=MAX_CLASS_LINES)] == []


def imported_test_modules(path: Path, root: Path = ROOT) -> list[str]:
    """The test modules (test_*.py) and conftest.py files that a module imports: absolute
    (from the repository root, as pytest's pythonpath has it, or from the module's folder
    or one above it, as pytest's rootdir and conftest insertion have it) or relative."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names, level = [alias.name for alias in node.names], 0
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base] + [f"{base}.{alias.name}".lstrip(".") for alias in node.names]
            level = node.level
        else:
            continue
        folders = [path.parent, *(p for p in path.parents if p.is_relative_to(root))]
        bases = [root, *folders] if level == 0 else [path.parents[level - 1]]
        for name in filter(None, names):
            parts = name.split(".")
            if not (parts[-1].startswith("test_") or parts[-1] == "conftest"):
                continue
            for base_dir in bases:
                if base_dir.joinpath(*parts[:-1], parts[-1] + ".py").is_file():
                    found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
                    break
    return found


def test_no_test_module_imports_another() -> None:
    """A helper that two test modules need lives in tests/support (or tests/builders.py),
    a fixture in the conftest.py above both: importing a test module runs its module code
    again, registers its fixtures twice and ties one test file's edits to another's."""
    tests = ROOT / "tests"
    assert [f for p in sorted(tests.rglob("*.py")) for f in imported_test_modules(p)] == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import json\nimport elastic_operator.render\n"
                      "def f():\n    from elastic_trainer import loop\n"
                      + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert imported_packages(module) == {"elastic_operator", "elastic_trainer"}
    assert long_functions(module, tmp_path) == [f"m.py:3 f ({MAX_FUNCTION_LINES + 2})"]
    klass = tmp_path / "k.py"
    klass.write_text("class K:\n" + "    x = 1\n" * MAX_CLASS_LINES)
    assert long_functions(klass, tmp_path, (ast.ClassDef,), MAX_CLASS_LINES) == [
        f"k.py:1 K ({MAX_CLASS_LINES + 1})"]
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    for name in ("conftest.py", "unit/test_b.py", "unit/helpers.py", "unit/test_c.py"):
        (tmp_path / "tests" / name).write_text("")
    test_a = tmp_path / "tests" / "unit" / "test_a.py"
    test_a.write_text("from tests.unit.test_b import x\nfrom tests.unit import test_c, helpers\n"
                      "import tests.unit.test_b\nfrom . import test_c\nfrom .. import conftest\n"
                      "from conftest import y\nfrom test_b import z\n"
                      "from tests.unit.helpers import h\nfrom tests.unit.test_gone import w\n")
    assert imported_test_modules(test_a, tmp_path) == [
        "tests/unit/test_a.py:1 tests.unit.test_b", "tests/unit/test_a.py:2 tests.unit.test_c",
        "tests/unit/test_a.py:3 tests.unit.test_b", "tests/unit/test_a.py:4 test_c",
        "tests/unit/test_a.py:5 conftest", "tests/unit/test_a.py:6 conftest",
        "tests/unit/test_a.py:7 test_b"]


def test_the_circle_check_sees_hidden_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.a import A\n")
    (package / "a.py").write_text("from pkg.b import B\nA = 1\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nB = 2\n"
                                  "if TYPE_CHECKING:\n    from pkg.sub import c\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("def f():\n    from ..a import A\n")
    graph = import_graph({"pkg": package})
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.sub.c"},
                     "pkg.sub": set(), "pkg.sub.c": {"pkg.a"}}
    assert circles(graph) == ["pkg.a -> pkg.b -> pkg.sub.c -> pkg.a"]
    (package / "b.py").write_text("B = 2\n")
    assert circles(import_graph({"pkg": package})) == []


def test_no_two_test_modules_share_a_name() -> None:
    """The test directories have no __init__.py, so pytest imports each test module by its
    bare name: two files called test_x.py in different folders stop the whole run at
    collection ("import file mismatch"), but only when both folders are collected."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


LOOP_MAX_LINES = 400  # issue 80 item 4: the policies live beside the loop, not in it


def test_the_training_loop_stays_a_page() -> None:
    loop = PACKAGES["elastic_trainer"] / "loop.py"
    lines = len(loop.read_text().splitlines())
    assert lines <= LOOP_MAX_LINES, (
        f"trainer/elastic_trainer/loop.py has {lines} lines, more than {LOOP_MAX_LINES}: "
        "put the new policy in a module of its own that the loop composes (compose.py)")
