"""A job whose `main` runs a program that reports nothing (spec.trainer.command; here the
trainer image's python asleep, as MaxText looks to the operator) loses a worker slice on
the local control plane: its recovery closes in the very status write that shows the
slice Ready again (`Recovering=False/RecoveredUnconfirmed`), nothing unmeasured is filled
in, and a report of a step after it confirms it (`Recovered`) (docs/design/
recovery.md; a head whose `main` died, and the other cases: tests/unit/
test_status_unreported.py)."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Phase, Reason
from elastic_api.names import GROUP, PLURAL, VERSION
from elastic_devtools.localcluster import faults
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from tests.builders import etj, iso
from tests.support.article_job import (
    JOB,
    condition,
    events,
    is_true,
    worker_pods,
    write_report,
)
from tests.support.waiting import job_version, wait_running, wait_status

# One operator for the module's tests (integration/conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("running_operator")]

SLEEPER = ["python3", "-c", "import time; time.sleep(10**9)"]


def submit_sleeper(api: client.ApiClient, ns: str) -> None:
    """The article's shape (3 slices of v5e 4x4, Pathways) with a `main` of its own."""
    job = (etj(JOB, namespace=None).backend("pathways").max_restarts(0)
           .spec(elastic={"maxSliceRestarts": 5},
                 checkpoint={"directory": "/tmp/etj-unreported-test/no-checkpoints-here"},
                 pathways={"gcsScratch": "gs://test-bucket/scratch"})
           .without("trainer").spec(trainer={"image": "trainer:test", "command": SLEEPER})
           .obj())
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                                 job)


def reason(status: dict[str, Any]) -> str:
    return str(condition(status, C.RECOVERING).get("reason"))


def test_a_silent_trainers_recovery_closes_with_its_slice_ready_again(
        api: client.ApiClient, ns: str, operator: OperatorProcess) -> None:
    submit_sleeper(api, ns)
    wait_running(api, ns)
    before = job_version(api, ns)
    faults.fail_pod(api, ns, worker_pods(api, ns, 2)[0].metadata.name)
    st = wait_status(api, ns, lambda s: is_true(s, C.SLICE_DOWN), "SliceDown True", timeout=30,
                     since=before)
    assert is_true(st, C.RECOVERING) and reason(st) == Reason.SLICE_DOWN
    assert "the trainer reports no elastic events" in condition(st, C.RECOVERING)["message"]

    # The first status that shows slice 2 Ready again has the recovery closed.
    st = wait_status(api, ns, lambda s: s["slices"][2]["state"] == "Ready",
                     "slice 2 Ready again", since=before)
    rec = condition(st, C.RECOVERING)
    assert (rec["status"], rec["reason"]) == ("False", Reason.RECOVERED_UNCONFIRMED), rec
    assert "progress is not confirmed" in rec["message"]
    assert st["phase"] == Phase.RUNNING and is_true(st, C.READY)
    last = st["lastRecovery"]
    assert last["closedBy"] == "Operator" and last["slices"] == [2]
    for unknown in ("resumedAt", "downtimeSeconds", "stepsLost", "restoredFromStep",
                    "restoreSource", "confirmedBy"):
        assert unknown not in last, last
    wait_for(lambda: events(api, ns, Reason.RECOVERED_UNCONFIRMED), 30,
             "a RecoveredUnconfirmed event")
    m = operator.metrics()
    assert m[f'etj_recoveries_unconfirmed_total{{namespace="{ns}"}}'] == 1
    assert m[f'etj_recovery_duration_seconds_count{{namespace="{ns}"}}'] == 0

    # A report of a step, made after the closure, confirms it.
    write_report(api, ns, {"observedAt": iso(datetime.now(UTC)), "state": "Training",
                           "step": 12})
    st = wait_status(api, ns, lambda s: reason(s) == Reason.RECOVERED, "Recovered",
                     timeout=30)
    assert st["lastRecovery"]["confirmedBy"] == "TrainingReport"
    assert st["lastRecovery"]["confirmedStep"] == 12
    assert "downtimeSeconds" not in st["lastRecovery"]
    wait_for(lambda: events(api, ns, Reason.RECOVERED), 30, "a Recovered event")
    assert operator.metrics()[f'etj_recovery_duration_seconds_count{{namespace="{ns}"}}'] == 0

