"""A reconcile in progress starts over for news (core/startover.py): a pass started for
progress only starts over at the end of any phase before its status write when the job is
named at once meanwhile, one that may carry a failure only once its status shows none, and
a reconcile starts over at most once. The work queue's side is in
test_operator_work_queue.py; here the rule, and the reconciler against a scripted queue."""
from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from elastic_api.conditions import ConditionType
from elastic_api.models import ElasticTrainingJobStatus, SliceStatus
from elastic_operator.app import queued_reconcile
from elastic_operator.core.startover import Change, pass_change, start_over
from elastic_operator.model.objects import ObservedPod
from tests.builders import JobSetWrapper, WorkerPod, at
from tests.support.stand_in_kube import (
    POD_CACHE_READ,
    StandInKube,
    condition,
    reconciler,
    the_job,
)

HOSTS_2X4 = 2  # v5e 2x4: 2 hosts per slice


@pytest.mark.parametrize(("news", "run_paced", "change", "expected"), [
    (False, True, None, False),  # nothing new: finish
    (False, True, "progress", False),
    (True, True, None, True),  # progress only so far: start over before it knows
    (True, False, None, False),  # may carry a failure: not before its status is known
    (True, False, "none", True),
    (True, False, "progress", True),
    (True, True, "change", False),  # a change found is written, news or not
    (True, False, "change", False),
])
def test_the_rule(news: bool, run_paced: bool, change: Change | None,
                  expected: bool) -> None:
    assert start_over(requeued=news, run_paced=run_paced, change=change) is expected


def status(*slices: tuple[str, int]) -> ElasticTrainingJobStatus:
    return ElasticTrainingJobStatus(slices=[
        SliceStatus(index=i, state=state, ready_hosts=ready, hosts=4)
        for i, (state, ready) in enumerate(slices)])


def test_what_a_pass_would_write() -> None:
    before = status(("Restarting", 1), ("Ready", 4))
    assert pass_change(before, before.model_copy(deep=True), []) == "none"
    assert pass_change(before, status(("Restarting", 3), ("Ready", 4)),
                       []) == "progress"
    assert pass_change(before, status(("Restarting", 1), ("Down", 4)),
                       []) == "change"
    assert pass_change(before, before, [object()]) == "change"  # Events: a change


# --- the reconciler against a scripted work queue, wired as app.py wires the real one -------


class ScriptedQueue:
    """The work queue as a reconcile sees it: news once `news` is set (the pod cache
    naming the job), a run paced or not; `cover` clears the news, as WorkQueue.cover."""

    def __init__(self, *, run_paced: bool) -> None:
        self.news, self.run_paced, self.covered = False, run_paced, 0

    def running(self, namespace: str, name: str) -> tuple[bool, bool]:
        return self.news, self.run_paced

    def cover(self, namespace: str, name: str) -> None:
        self.covered += 1
        self.news, self.run_paced = False, self.run_paced and not self.news


def a_failure_during_the_pass(queue: ScriptedQueue, *, fail: bool = True) -> Any:
    """Pods as the cache holds them: both hosts Ready at the first read; right after it
    host 1 fails (`fail`) and the job is named at once (queue.news)."""
    reads = []

    def pods() -> tuple[ObservedPod, ...]:
        reads.append(1)
        if len(reads) == 1:
            queue.news = True
            return (WorkerPod(0, 0).build(), WorkerPod(0, 1).build())
        return (WorkerPod(0, 0).build(),
                WorkerPod(0, 1).failed(at(5)).build() if fail else WorkerPod(0, 1).build())
    return pods


def a_running_job() -> StandInKube:
    job = the_job()
    job["status"] = {"slices": [{"index": 0, "state": "Ready", "restarts": 0}]}
    return StandInKube(job, JobSetWrapper("train", "ml").owner("u-1").workers(1, HOSTS_2X4)
                       .obj())


def started_over(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("etj_reconcile_started_over_total")


def test_a_failure_named_during_a_paced_pass_is_written_by_that_reconcile() -> None:
    """The pass was started for progress; a pod fails after its read: it starts over at
    the end of that phase, and the one reconcile writes the slice down (once)."""
    kube, queue = a_running_job(), ScriptedQueue(run_paced=True)
    rec, registry = reconciler(kube, pods=a_failure_during_the_pass(queue))
    reconcile = queued_reconcile(rec, queue)
    assert reconcile("ml", "train").ok
    assert kube.calls.count(POD_CACHE_READ) == 2 and queue.covered == 1
    assert started_over(registry) == 1
    assert len(kube.patches) == 1
    status = kube.job["status"]
    assert status["slices"][0]["state"] == "Down" and status["counters"]["sliceFailures"] == 1
    assert condition(status, ConditionType.SLICE_DOWN)["status"] == "True"


def test_a_pass_that_may_carry_a_failure_finishes_and_writes_it() -> None:
    """Started for a change (not paced), its status a change (the job's first): news
    during it does not hold that write back; the news runs after, as before."""
    job = the_job()
    kube = StandInKube(job, JobSetWrapper("train", "ml").owner("u-1").workers(1, HOSTS_2X4)
                       .obj())
    queue = ScriptedQueue(run_paced=False)
    rec, registry = reconciler(kube, pods=a_failure_during_the_pass(queue))
    reconcile = queued_reconcile(rec, queue)
    assert reconcile("ml", "train").ok
    assert kube.calls.count(POD_CACHE_READ) == 1 and queue.covered == 0
    assert started_over(registry) == 0 and len(kube.patches) == 1
    assert queue.news  # left to the work queue: the job runs again


def test_a_pass_with_nothing_to_write_starts_over_once_its_status_says_so() -> None:
    """Not paced, but its status equals the stored one: it starts over at its status."""
    kube, queue = a_running_job(), ScriptedQueue(run_paced=False)
    healthy = (WorkerPod(0, 0).build(), WorkerPod(0, 1).build())
    rec, registry = reconciler(kube, pods=lambda: healthy)
    reconcile = queued_reconcile(rec, queue)
    for _ in range(2):  # the first scan of the checkpoint lands in the second
        assert reconcile("ml", "train").ok
    written = len(kube.patches)
    assert reconcile("ml", "train").ok and len(kube.patches) == written  # settled
    kube.calls.clear()
    queue.news = True
    assert reconcile("ml", "train").ok
    assert kube.calls.count(POD_CACHE_READ) == 2 and queue.covered == 1
    assert started_over(registry) == 1 and len(kube.patches) == written  # none again


class EndlessNews(ScriptedQueue):
    """Named at once again whatever the reconcile covers."""

    def running(self, namespace: str, name: str) -> tuple[bool, bool]:
        return True, True


def test_a_reconcile_starts_over_at_most_once() -> None:
    kube, queue = a_running_job(), EndlessNews(run_paced=True)
    rec, registry = reconciler(kube, pods=a_failure_during_the_pass(queue, fail=False))
    reconcile = queued_reconcile(rec, queue)
    assert reconcile("ml", "train").ok
    assert queue.covered == 1 and started_over(registry) == 1
    assert kube.calls.count(POD_CACHE_READ) == 1  # started over at the end of its read
    assert len(kube.patches) == 1  # the second pass finished and wrote
