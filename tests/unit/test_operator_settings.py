"""The one definition of how each test and dev tool runs `etj operator`
(elastic_devtools/localcluster/operator_settings.py), and the cheap part of each long
target's guard (issue 36): every row is an operator `etj operator` starts, and the
operator of each target may list the checkpoint roots of the jobs it runs. The part that
needs a control plane is tests/integration/test_long_targets.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess
from elastic_devtools.localcluster.operator_settings import (
    MAXTEXT_E2E_NAMESPACE,
    SETTINGS,
    OperatorSettings,
)
from elastic_devtools.localcluster.versions import (
    COMPAT_VERSIONS_FILE,
    VERSIONS_FILE,
    parse_versions_env,
)
from elastic_operator.checkpoints.roots import CheckpointRoots
from elastic_operator.entry.operator_cli import add_arguments

ROOT = Path(__file__).resolve().parents[2]
MAXTEXT_FIXTURES = ROOT / "tests" / "fixtures" / "maxtext-0.2.5"
KIND_JOB = ROOT / "hack" / "kind" / "job.yaml"


def parsed(settings: OperatorSettings) -> Any:
    import argparse

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)
    return parser.parse_args(list(settings.args()))


def roots_of(settings: OperatorSettings) -> CheckpointRoots:
    """What that operator may list: its --checkpoint-roots, parsed as `etj operator` does."""
    return CheckpointRoots.parse(parsed(settings).checkpoint_roots)


@pytest.mark.parametrize("tool", sorted(SETTINGS))
def test_every_row_is_accepted_by_the_operator(tool: str) -> None:
    settings = SETTINGS[tool]
    args = parsed(settings)
    assert args.all_namespaces == (not settings.namespaces)
    assert args.namespace == list(settings.namespaces)
    roots_of(settings)  # raises on a bad rule
    proc = OperatorProcess(Path("kubeconfig"), Path("operator.log"), args=settings)
    assert proc.argv()[4:4 + len(settings.args())] == list(settings.args())


def test_make_test_keeps_its_flags() -> None:
    assert TEST_ARGS == ("--all-namespaces", "--resync-seconds", "5",
                         "--checkpoint-scan-seconds", "5",
                         "--quarantine-release-after-seconds", "5")


def test_the_chart_values_say_the_same() -> None:
    settings = SETTINGS["maxtext-e2e"]
    values = settings.helm_values()
    assert values == {
        "watchNamespaces": [MAXTEXT_E2E_NAMESPACE],
        "checkpointRoots": {MAXTEXT_E2E_NAMESPACE: ["/tmp/maxtext",
                                                    "gs://maxtext-e2e/maxtext"]},
        "operator": {"extraArgs": ["--resync-seconds", "5", "--checkpoint-scan-seconds",
                                   "2"]}}
    assert SETTINGS["kind-e2e"].helm_values() == {}  # the chart as a user installs it


def test_the_module_runs_on_its_own_for_hack_kind() -> None:
    """hack/kind/steps.sh runs the file with any python3 (no venv, no package)."""
    script = ROOT / "devtools" / "elastic_devtools" / "localcluster" / "operator_settings.py"
    out = subprocess.run([sys.executable, "-I", str(script), "maxtext-e2e", "--helm-values"],
                         capture_output=True, text=True, check=True, cwd="/")
    assert json.loads(out.stdout) == SETTINGS["maxtext-e2e"].helm_values()


# --- the long targets' jobs: their operator may list their roots ------------------------------


def maxtext_scenarios() -> list[Path]:
    found = sorted(MAXTEXT_FIXTURES.glob("scenario-*.yaml"))
    assert [p.name for p in found] == ["scenario-evaluation.yaml", "scenario-gcs.yaml",
                                       "scenario-local.yaml"]
    return found


@pytest.mark.parametrize("fixture", maxtext_scenarios(), ids=lambda p: p.stem)
def test_make_e2e_maxtext_may_list_its_scenarios_roots(fixture: Path) -> None:
    """The regression of issue 36: the e2e's operator was started without its gs:// root,
    and the gs:// scenario waited for a listing that was refused."""
    directory = yaml.safe_load(fixture.read_text())["spec"]["checkpoint"]["directory"]
    refused = roots_of(SETTINGS["maxtext-e2e"]).refusal(MAXTEXT_E2E_NAMESPACE, directory)
    assert refused is None, refused


def test_make_e2e_kind_may_list_its_jobs_root() -> None:
    job = yaml.safe_load(KIND_JOB.read_text())
    refused = roots_of(SETTINGS["kind-e2e"]).refusal(job["metadata"]["namespace"],
                                                     job["spec"]["checkpoint"]["directory"])
    assert refused is None, refused


def test_make_demo_may_list_its_root(tmp_path: Path) -> None:
    """The demo puts its checkpoints in its output directory (an absolute path)."""
    settings = SETTINGS["demo"]
    assert roots_of(settings).refusal(settings.namespaces[0], str(tmp_path / "ckpt")) is None


def test_make_test_compat_has_every_pin_the_build_reads() -> None:
    """make test-compat builds its binaries from versions-compat.env: the same keys as
    versions.env (less kind's, which make e2e-kind alone reads), an older Kubernetes
    minor, and JobSet and Kueue no newer than current (the Makefile's promise: the same
    where the current ones are the newest releases)."""
    current = parse_versions_env(VERSIONS_FILE.read_text(), VERSIONS_FILE.name)
    compat = parse_versions_env(COMPAT_VERSIONS_FILE.read_text(), COMPAT_VERSIONS_FILE.name)
    kind_only = {k for k in current if k.startswith("KIND_") or k == "PYTHON_IMAGE_PUBLIC"}
    assert set(compat) == set(current) - kind_only
    kube = "KUBERNETES_VERSION"
    assert release(compat[kube])[:2] < release(current[kube])[:2], (compat[kube], current[kube])
    for key in ("JOBSET_VERSION", "KUEUE_VERSION"):
        assert release(compat[key]) <= release(current[key]), (key, compat[key], current[key])


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("-")[0].split("."))
