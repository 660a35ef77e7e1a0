"""core.wakes.may_wait: a worker pod change that only brings it nearer to serving may wake
its job at the progress interval; anything that may be a failure, and any change of the
head pod, wakes it at once. core.wakes.job_may_wait: a worker Job's change that is its
slice's recorded replacement running its course may wait for the next progress write."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from elastic_operator.core.wakes import job_may_wait, may_wait
from elastic_operator.model.objects import ObservedJob
from tests.builders import T0, WorkerPod, head_pod, worker_job

RUNNING = WorkerPod(0, 1)
PENDING = RUNNING.pending()
LATER = T0 + timedelta(seconds=30)


@pytest.mark.parametrize(("old", "new"), [
    (None, PENDING),  # created
    (None, RUNNING.not_ready()),  # created, seen first when already started
    (PENDING.on_node(None), PENDING),  # scheduled
    (PENDING, RUNNING.not_ready()),  # started
    (RUNNING.not_ready(), RUNNING),  # Ready
    (RUNNING.not_ready(), RUNNING.not_ready(LATER)),  # another look, no worse
], ids=["created", "created-started", "scheduled", "started", "ready", "same-state"])
def test_a_worker_coming_nearer_to_serving_may_wait(old: WorkerPod | None,
                                                    new: WorkerPod) -> None:
    assert may_wait(old.build() if old else None, new.build())


@pytest.mark.parametrize(("old", "new"), [
    (RUNNING, None),  # gone
    (RUNNING, RUNNING.failed(LATER)),
    (RUNNING, RUNNING.not_ready(LATER)),  # lost Ready
    (RUNNING.not_ready(), PENDING),  # back to Pending
    (RUNNING, RUNNING.deleting(LATER)),
    (RUNNING, RUNNING.disrupted("DeletionByTaintManager")),
    (RUNNING, RUNNING.evicted("The node was low on memory")),
    (PENDING, RUNNING.failed_by_kueue()),
    (RUNNING, RUNNING.replacement(LATER)),  # another pod under the same name: a new UID
    (None, RUNNING.failed(LATER)),  # seen first when it had failed already
], ids=["gone", "failed", "lost-ready", "back-to-pending", "deleting", "disrupted",
        "evicted", "failed-by-kueue", "new-uid", "first-seen-failed"])
def test_what_may_be_a_failure_wakes_at_once(old: WorkerPod | None,
                                             new: WorkerPod | None) -> None:
    assert not may_wait(old.build() if old else None, new.build() if new else None)


def test_a_container_that_ended_wakes_at_once_even_when_the_pod_still_runs() -> None:
    before = RUNNING.build()
    ended = replace(before, terminated_at=LATER, terminated_reason="Error")
    assert not may_wait(before, ended)
    assert not may_wait(None, ended)
    # The same container end, seen again as the container restarted in place: no news.
    assert may_wait(replace(ended, ready=False), ended)


def test_a_container_restarted_in_its_pod_wakes_at_once_even_back_ready() -> None:
    """Seen only Ready again with its restartCount one higher (the restart between two
    events): a failure to count at once, not progress to pace."""
    before = RUNNING.build()
    assert not may_wait(before, replace(before, restarts=1))
    assert not may_wait(before, replace(before, ready=False, restarting=True))


def test_the_head_pod_always_wakes_at_once() -> None:
    """Its `main` container is the trainer: what it reports is read at once."""
    assert not may_wait(None, head_pod(created=T0))
    assert not may_wait(head_pod(created=T0), head_pod(created=T0))


@pytest.mark.parametrize(("old", "new"), [
    (RUNNING, RUNNING.deleting(LATER)),
    (RUNNING.deleting(LATER), RUNNING.deleting(LATER).failed(LATER)),  # its container killed
    (RUNNING.deleting(LATER), None),  # gone
], ids=["deleting", "killed", "gone"])
def test_a_worker_jobs_teardown_may_wait(old: WorkerPod, new: WorkerPod | None) -> None:
    """Its Job is being deleted: a failure already known ends; without that, at once."""
    before, after = old.build(), new.build() if new else None
    assert may_wait(before, after, torn_down=True)
    assert not may_wait(before, after)


def test_a_head_pod_is_never_teardown() -> None:
    assert not may_wait(head_pod(created=T0), None, torn_down=True)


OLD, NEW = worker_job(0), worker_job(0, gen=1)  # the Job replaced, and its successor


@pytest.mark.parametrize(("old", "new"), [
    (OLD, replace(OLD, deleting=True)),  # the replacement's DELETE, seen
    (replace(OLD, deleting=True), replace(OLD, deleting=True, deleted_at=T0)),
    (replace(OLD, deleting=True), None),  # gone
    (OLD, None),
    (None, NEW),  # JobSet made its successor
])
def test_a_recorded_replacement_running_its_course_may_wait(
        old: ObservedJob | None, new: ObservedJob | None) -> None:
    assert job_may_wait(old, new, OLD.uid)
    assert not job_may_wait(old, new, None)  # no replacement recorded: news


@pytest.mark.parametrize(("old", "new"), [
    (NEW, replace(NEW, failed_pods=1)),  # the successor failed a pod: counted from it
    (None, replace(NEW, failed_pods=1)),
    (None, replace(NEW, finished="Failed")),
    (OLD, replace(OLD, backoff_limit=0)),  # a GiveUp's Job, failing as made to
    (OLD, replace(OLD, finished="Failed")),
    (None, replace(OLD, uid="another", deleting=True)),
])
def test_anything_else_a_worker_job_does_is_news(old: ObservedJob | None,
                                                 new: ObservedJob | None) -> None:
    assert not job_may_wait(old, new, OLD.uid)
