"""The versions the docs say the tests run are the ones pinned (issue 81: they had drifted
to Kubernetes 1.34, JobSet v0.10.1 and Kueue v0.17.0 after the pins moved): docs/gke.md's
"What the tests run" table, docs/operations.md's "Supported versions" table, README.md's
and the Makefile's sentences against versions.env (`make test`) and versions-compat.env
(`make test-compat`), and the JobSet and Kueue releases the install commands fetch
against what `make test` runs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastic_devtools.localcluster.versions import (
    COMPAT_VERSIONS_FILE,
    VERSIONS_FILE,
    parse_versions_env,
)

REPO = Path(__file__).resolve().parents[2]
CURRENT = parse_versions_env(VERSIONS_FILE.read_text())
COMPAT = parse_versions_env(COMPAT_VERSIONS_FILE.read_text(), COMPAT_VERSIONS_FILE.name)
PINS = {"Kubernetes": "KUBERNETES_VERSION", "JobSet": "JOBSET_VERSION",
        "Kueue": "KUEUE_VERSION"}


def _doc(name: str) -> str:
    return (REPO / name).read_text()


def _table(text: str, header: str) -> dict[str, list[str]]:
    """The rows of the Markdown table under `header`: first cell -> the others."""
    lines = text.splitlines()
    start = lines.index(header)
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def _minor(version: str) -> str:
    return ".".join(version.removeprefix("v").split(".")[:2])


def test_gke_md_says_what_the_tests_run() -> None:
    rows = _table(_doc("docs/gke.md"), "| | `make test` | `make test-compat` |")
    assert set(rows) == set(PINS)
    for name, key in PINS.items():
        assert rows[name] == [CURRENT[key], COMPAT[key]], (
            f"docs/gke.md, \"What the tests run\": {name} is {rows[name]}, the pins say "
            f"{CURRENT[key]} (versions.env) and {COMPAT[key]} (versions-compat.env)")
    oldest = min((CURRENT["KUBERNETES_VERSION"], COMPAT["KUBERNETES_VERSION"]),
                 key=lambda v: tuple(int(x) for x in _minor(v).split(".")))
    assert f"Nothing here runs a Kubernetes before {_minor(oldest)}" in _doc("docs/gke.md")


def test_operations_md_supported_versions_are_the_pins() -> None:
    text = _doc("docs/operations.md")
    rows = _table(text, "| | `make test` (current) | `make test-compat` (oldest GKE minor) |")
    for name, key in PINS.items():
        current, compat = rows[name]
        assert current.split(" ")[0] == CURRENT[key], (name, current)
        assert compat == ("the same" if COMPAT[key] == CURRENT[key] else COMPAT[key]), (
            name, compat)
    assert (f"Tested on {_minor(CURRENT['KUBERNETES_VERSION'])} and "
            f"{_minor(COMPAT['KUBERNETES_VERSION'])}") in text


@pytest.mark.parametrize("doc", ["docs/gke.md", "docs/operations.md"])
def test_the_install_commands_fetch_the_tested_releases(doc: str) -> None:
    text = _doc(doc)
    for project, key in (("jobset", "JOBSET_VERSION"), ("kueue", "KUEUE_VERSION")):
        found = set(re.findall(
            rf"kubernetes-sigs/{project}/releases/download/(v[0-9.]+)/", text))
        assert found <= {CURRENT[key]}, (doc, project, found)
        assert found or project == "kueue", (doc, project)  # Kueue is optional


def test_readme_and_makefile_name_the_minors_each_target_runs() -> None:
    current, compat = (_minor(p["KUBERNETES_VERSION"]) for p in (CURRENT, COMPAT))
    readme = " ".join(_doc("README.md").split())
    assert f"`make test` runs on Kubernetes {current}" in readme
    assert f"`make test-compat` runs every test again on Kubernetes {compat}" in readme
    makefile = _doc("Makefile")
    comment = makefile[:makefile.index("\ntest-compat:")].rsplit("\n\n", 1)[-1]
    comment = " ".join(line.lstrip("# ") for line in comment.splitlines())
    assert f"Kubernetes {compat}," in comment and f"runs Kubernetes {current})" in comment
    assert f"make test-compat - every test on Kubernetes {compat}," in makefile


def test_the_compat_pin_is_older_than_restart_rules_so_both_recoveries_are_tested() -> None:
    """`make test-compat` runs where main cannot restart in place and `make test` where it
    can: tests/integration/test_main_crash.py proves each (issue 81)."""
    from elastic_operator.core.server_features import RESTART_RULES_FROM, judge

    def version(pins: dict[str, str]) -> tuple[int, ...]:
        return tuple(int(x) for x in _minor(pins["KUBERNETES_VERSION"]).split("."))

    assert version(COMPAT) < RESTART_RULES_FROM <= version(CURRENT)
    assert not judge({"gitVersion": COMPAT["KUBERNETES_VERSION"]}, None).restart_rules
