"""Beyond the demo's size, on the local control plane: a checkpoint root holding a
committed step of 150 GiB (a sparse file) gives RestoreAtRisk=True/ProxyMemory in the
status write that first lists the step (one scan), with its size, and one Warning Event;
the same root with the controller out of the data path (Pathways persistence) does not.
The operator runs as `etj operator`; the jobs are suspended (no pods: only the scan)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from elastic_api.checkpoints import COMMIT_MARKER, GIB
from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.faults import wait_for
from tests.support.article_job import (
    condition,
    events,
    submit,
)
from tests.support.waiting import wait_status

# One operator for the module's tests (integration/conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("running_operator")]

STEP = 4000
SIZE = 150 * GIB


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    yield api_client
    api_client.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Orbax's local layout of one committed 150 GiB step: two sparse array files (no
    disk used) and the commit marker, plus an older step left by the keep."""
    root = tmp_path / "ckpt"
    for step, size in ((STEP - 1000, GIB), (STEP, SIZE)):
        items = root / str(step) / "items"
        items.mkdir(parents=True)
        for i, part in enumerate((size // 3, size - size // 3)):
            with open(items / f"d{i}", "wb") as f:
                f.truncate(part)
        (root / str(step) / COMMIT_MARKER).write_text("")
    assert os.stat(root / str(STEP) / "items" / "d1").st_blocks < 1024  # sparse indeed
    return root


def first_listing(api: client.ApiClient, ns: str) -> dict:
    """The first status that lists the step (the watch sees every version)."""
    return wait_status(api, ns, lambda s: (s.get("checkpoint") or {}).get(
        "latestCommittedStep") == STEP, f"status.checkpoint.latestCommittedStep {STEP}",
        timeout=60)


def test_a_150_gib_checkpoint_through_the_controller_is_at_risk_within_one_scan(
        api: client.ApiClient, ns: str, root: Path) -> None:
    submit(api, ns, suspend=True,
           checkpoint={"directory": str(root), "persistence": False})
    st = first_listing(api, ns)
    assert st["checkpoint"]["latestCommittedBytes"] == SIZE
    assert st["checkpoint"]["latestCommittedFiles"] == 3  # two arrays and the marker
    risk = condition(st, C.RESTORE_AT_RISK)
    assert (risk["status"], risk["reason"]) == ("True", Reason.PROXY_MEMORY), risk
    assert "150 GiB" in risk["message"] and "100G" in risk["message"], risk
    assert "spec.checkpoint.persistence: true" in risk["message"]
    wait_for(lambda: events(api, ns, Reason.RESTORE_AT_RISK), 30, "a RestoreAtRisk Event")
    # A newer, larger step: still at risk, the message follows, no second Event.
    bigger = root / str(STEP + 1000)
    (bigger / "items").mkdir(parents=True)
    with open(bigger / "items" / "d0", "wb") as f:
        f.truncate(SIZE + 10 * GIB)
    (bigger / COMMIT_MARKER).write_text("")
    st = wait_status(api, ns, lambda s: s["checkpoint"].get("latestCommittedStep") == STEP + 1000,
                     "the newer step listed", timeout=60)
    assert "160 GiB" in condition(st, C.RESTORE_AT_RISK)["message"]
    assert len(events(api, ns, Reason.RESTORE_AT_RISK)) == 1


def test_the_same_checkpoint_with_pathways_persistence_is_not_at_risk(
        api: client.ApiClient, ns: str, root: Path) -> None:
    submit(api, ns, suspend=True, checkpoint={"directory": str(root), "persistence": True})
    st = first_listing(api, ns)
    assert st["checkpoint"]["latestCommittedBytes"] == SIZE
    risk = condition(st, C.RESTORE_AT_RISK)
    assert (risk["status"], risk["reason"]) == ("False", Reason.HOSTS_RESTORE), risk
    assert not events(api, ns, Reason.RESTORE_AT_RISK)
