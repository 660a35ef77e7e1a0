"""A crash of `main` on the local control plane, recovered the way its API server allows
(issue 81): from Kubernetes 1.35 (`make test`, 1.37) the head's main carries container
restart rules and the kubelet (kwok here) restarts it in its pod, charged to the JobSet's
budget, no JobSet restart; before (`make test-compat`, 1.32) the operator renders the
head without them (1.32 would refuse the head Job), the crash fails the head pod and
JobSet restarts, and MainRestartsInPlace says so, with one Warning Event. One test: the
expectation comes from the server's version."""
from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.names import HEAD_REPLICATED_JOB, MAIN_CONTAINER, REPLICATED_JOB_LABEL
from elastic_devtools.localcluster import faults
from elastic_devtools.localcluster.faults import wait_for
from elastic_operator.core.server_features import RESTART_RULES_FROM, minor_of
from tests.support.article_job import (
    condition,
    events,
    get_jobset,
    submit,
)
from tests.support.server_version import git_version
from tests.support.waiting import wait_running, wait_status

# One operator for the module's tests (integration/conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("running_operator")]

TIMEOUT = 120


def server_keeps_restart_rules(api: client.ApiClient) -> tuple[bool, str]:
    """The local control plane never turns alpha gates on: 1.35 or newer keeps them."""
    git = git_version(api)
    minor = minor_of({"gitVersion": git})
    assert minor is not None, git
    return minor >= RESTART_RULES_FROM, git


def running_heads(api: client.ApiClient, ns: str) -> list[Any]:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"{REPLICATED_JOB_LABEL}={HEAD_REPLICATED_JOB}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None
            and p.status.phase == "Running"]


def head_pod(api: client.ApiClient, ns: str) -> Any:
    live = running_heads(api, ns)
    assert len(live) == 1, [(p.metadata.name, p.status.phase) for p in live]
    return live[0]


def jobset_restarts(api: client.ApiClient, ns: str) -> int:
    return int(((get_jobset(api, ns) or {}).get("status") or {}).get("restarts") or 0)


def main_restarts(st: dict[str, Any]) -> int:
    return int(((st.get("budgets") or {}).get("mainRestarts") or {}).get("total") or 0)


def test_a_crash_of_main_is_recovered_the_way_the_server_allows(
        api: client.ApiClient, ns: str) -> None:
    in_place, version = server_keeps_restart_rules(api)
    submit(api, ns, maxRestarts=3)
    st = wait_running(api, ns)
    said = wait_status(api, ns, lambda s: condition(s, C.MAIN_RESTARTS_IN_PLACE),
                       "MainRestartsInPlace set")
    said = condition(said, C.MAIN_RESTARTS_IN_PLACE)
    head = head_pod(api, ns)
    main = next(c for c in head.spec.containers if c.name == MAIN_CONTAINER)
    # What the server stored: the rule exactly where it keeps it (else 1.32 refuses it).
    assert (main.restart_policy_rules is not None) == in_place, (version, main)
    if in_place:
        assert said["status"] == "True" and said["reason"] == Reason.CONTAINER_RESTART_RULES
        assert events(api, ns, Reason.RESTART_RULES_UNSUPPORTED) == []
        faults.restart_container(api, ns, head.metadata.name, exit_code=1, down="1s")
        st = wait_status(api, ns, lambda s: main_restarts(s) == 1,
                         "main's restart in place charged", TIMEOUT)
        assert head_pod(api, ns).metadata.uid == head.metadata.uid
        assert jobset_restarts(api, ns) == 0
        return
    assert said["status"] == "False" and said["reason"] == Reason.RESTART_RULES_UNSUPPORTED
    assert version in said["message"] and "restarts the whole JobSet" in said["message"]
    assert "from Kubernetes 1.35" in said["message"]
    warned = wait_for(lambda: events(api, ns, Reason.RESTART_RULES_UNSUPPORTED), 30,
                      "the RestartRulesUnsupported Event")
    assert warned == [said["message"]]
    faults.fail_pod(api, ns, head.metadata.name, exit_code=1, container=MAIN_CONTAINER)
    wait_for(lambda: jobset_restarts(api, ns) == 1, TIMEOUT, "the JobSet restarted")
    wait_for(lambda: [p for p in running_heads(api, ns) if p.metadata.uid != head.metadata.uid],
             TIMEOUT, "a new head pod Running")
    # Every slice back; the job then waits for the trainer's first step (none runs here).
    st = wait_status(api, ns, lambda s: (s.get("counters") or {}).get("jobSetRestarts") == 1
                     and all(x.get("state") == "Ready" for x in s.get("slices") or []),
                     "the JobSet restart counted, every slice Ready again", TIMEOUT)
    assert main_restarts(st) == 0
    # Said once: no second Event after the restart and the reconciles it caused.
    assert events(api, ns, Reason.RESTART_RULES_UNSUPPORTED) == [said["message"]]
    assert condition(st, C.MAIN_RESTARTS_IN_PLACE)["status"] == "False"
