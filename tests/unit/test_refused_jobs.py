"""A Job the API server refuses to create from our JobSet is named at once (issue 81 item
1): a Job missing past a grace is dry-run as JobSet would create it (at most once an
interval per job), and a refusal is the False JobsCreated condition naming the Job, the
field and the server's words, with one Warning Event; True once the Jobs exist."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from elastic_api.conditions import ConditionType, Reason
from elastic_api.kube import ApiError
from elastic_api.names import JOB_INDEX_LABEL, JOBSET_NAME_LABEL, REPLICATED_JOB_LABEL
from elastic_operator.client.kube import Kube
from elastic_operator.core.refused_jobs import (
    DRY_RUN_INTERVAL_S,
    GRACE_S,
    dry_run_wait,
    expected_jobs,
    missing_jobs,
    missing_since,
    refusal,
)
from elastic_operator.core.status import compute_status
from elastic_operator.model.job_memory import JobMemories
from elastic_operator.model.objects import ObservedJob, RefusedJob
from elastic_operator.render import render_jobset
from elastic_operator.watch.job_refusals import JobRefusals
from tests.builders import article_job, at, head_pod, healthy_pods, observe

JOB = article_job(num_slices=2)
JOBSET = render_jobset(JOB)
NAME = JOBSET["metadata"]["name"]
HEAD, W0, W1 = f"{NAME}-pathways-head-0", f"{NAME}-worker-0", f"{NAME}-worker-1"
INVALID = {"kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422,
           "message": f'jobs.batch "{W1}" is invalid: spec.template.spec.containers[0].'
                      'restartPolicy: Forbidden: may not be set for non-init containers',
           "details": {"causes": [{"reason": "FieldValueForbidden",
                                   "field": "spec.template.spec.containers[0].restartPolicy",
                                   "message": "may not be set for non-init containers"}]}}


def seen(*indices: int, head: bool = True) -> Any:
    """Observed: the head pod (its Job exists) and these worker Jobs in the cache."""
    pods = [head_pod(), *healthy_pods(2)] if head else healthy_pods(2)
    return observe(pods=pods, jobs=workers(*indices))


def workers(*indices: int) -> dict[int, ObservedJob]:
    return {i: ObservedJob(name=f"{NAME}-worker-{i}", uid=f"u{i}", slice_index=i)
            for i in indices}


def test_the_jobs_are_built_as_jobset_builds_them():
    jobs = expected_jobs(JOBSET, restarts=2)
    assert list(jobs) == [HEAD, W0, W1]
    worker = jobs[W1]
    for meta in (worker["metadata"], worker["spec"]["template"]["metadata"]):
        assert meta["labels"][JOBSET_NAME_LABEL] == NAME
        assert meta["labels"][REPLICATED_JOB_LABEL] == "worker"
        assert meta["labels"][JOB_INDEX_LABEL] == "1"
        assert meta["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "2"
    template = JOBSET["spec"]["replicatedJobs"][1]["template"]["spec"]
    assert worker["spec"]["template"]["spec"] == template["template"]["spec"]
    assert worker["metadata"]["namespace"] == JOBSET["metadata"]["namespace"]


def test_missing_jobs_are_the_worker_jobs_not_cached_and_a_head_without_pods():
    expected = expected_jobs(JOBSET)
    assert missing_jobs(JOBSET, expected, seen(0)) == [W1]
    assert missing_jobs(JOBSET, expected, seen(0, 1)) == []
    # No head pod: its Job is missing; the workers wait for it (dependsOn), none missing.
    assert missing_jobs(JOBSET, expected, seen(head=False)) == [HEAD]
    # A head not Ready yet: the workers are not created yet either.
    assert missing_jobs(JOBSET, expected, observe(
        pods=[replace(head_pod(), ready=False)], jobs={})) == []
    jobset = seen().jobset
    assert jobset is not None
    suspended = replace(jobset, suspended=True)
    assert missing_jobs(JOBSET, expected, observe(pods=[], jobset=suspended)) == []


def test_a_dry_run_is_due_past_the_grace_then_once_an_interval():
    since = missing_since({}, [W1], at(0))
    assert since == {W1: at(0)} and missing_since(since, [W1], at(9)) == since
    assert missing_since(since, [], at(9)) == {}
    assert dry_run_wait({}, None, at(0)) is None
    assert dry_run_wait(since, None, at(1)) == GRACE_S - 1
    assert dry_run_wait(since, None, at(GRACE_S)) == 0.0
    assert dry_run_wait(since, at(GRACE_S), at(GRACE_S + 1)) == DRY_RUN_INTERVAL_S - 1


def test_a_refusal_names_the_field_and_the_servers_words():
    said = refusal(W1, 422, INVALID)
    assert said == RefusedJob(W1, "spec.template.spec.containers[0].restartPolicy",
                              str(INVALID["message"]))
    webhook = {"message": 'admission webhook "x" denied the request: no'}
    assert refusal(W1, 403, webhook) == RefusedJob(W1, "", webhook["message"])
    rbac = {"message": 'jobs.batch is forbidden: User "op" cannot create resource "jobs"'}
    assert refusal(W1, 403, rbac) is None  # the operator's permission, not the Job
    assert refusal(W1, 409, {"message": "already exists"}) is None


def condition(status: Any) -> Any:
    return next((c for c in status.conditions if c.type == ConditionType.JOBS_CREATED), None)


def test_the_condition_names_the_job_and_clears_once_it_exists():
    never, _ = compute_status(JOB, observe(), None, at(0))
    assert condition(never) is None
    refused = (RefusedJob(W1, "spec.template.spec.containers[0].restartPolicy", "Forbidden"),)
    status, events = compute_status(JOB, observe(refused_jobs=refused), None, at(10))
    said = condition(status)
    assert said.status == "False" and said.reason == Reason.JOB_REFUSED
    assert W1 in said.message and "containers[0].restartPolicy" in said.message
    assert "Forbidden" in said.message
    warned = [e for e in events if e.reason == Reason.JOB_REFUSED]
    assert len(warned) == 1 and warned[0].type == "Warning"
    again, events = compute_status(JOB, observe(refused_jobs=refused), status, at(20))
    assert condition(again) == said and not [e for e in events
                                              if e.reason == Reason.JOB_REFUSED]
    cleared, _ = compute_status(JOB, observe(), again, at(30))
    assert condition(cleared).status == "True"
    assert condition(cleared).reason == Reason.ALL_JOBS_CREATED


class RefusingKube(Kube):
    """Answers every dry run of a Job with `INVALID` and counts them."""

    def __init__(self) -> None:
        super().__init__(None)
        self.dry_runs: list[str] = []

    def dry_run_job(self, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
        self.dry_runs.append(job["metadata"]["name"])
        raise ApiError(422, "Unprocessable Entity", json.dumps(INVALID))


def test_the_dry_run_is_sent_past_the_grace_once_an_interval_and_kept_till_the_job_exists():
    kube, memory = RefusingKube(), JobMemories()
    refusals, key = JobRefusals(kube, memory), ("default", JOB.metadata.name)
    missing = seen(0)
    assert refusals.look(key, JOBSET, missing, at(0)) == ((), GRACE_S)
    assert kube.dry_runs == []
    found, wait = refusals.look(key, JOBSET, missing, at(GRACE_S))
    assert kube.dry_runs == [W1] and wait == DRY_RUN_INTERVAL_S
    assert [(r.name, r.field) for r in found] == [
        (W1, "spec.template.spec.containers[0].restartPolicy")]
    assert refusals.look(key, JOBSET, missing, at(GRACE_S + 1))[0] == found
    assert kube.dry_runs == [W1]  # not again within the interval
    assert refusals.look(key, JOBSET, seen(0, 1), at(GRACE_S + 2)) \
        == ((), None)
