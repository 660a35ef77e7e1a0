"""reconciler.Reconciler against a stand-in Kube (an in-memory API server that records
each request): an admitted job whose children the API server refuses is reported once,
not retried as an error; API errors are told apart by their parsed Status; the JobSet
is read once per reconcile; a failed checkpoint scan keeps the last good step; the status
write is conditional on the job's version and a change's Events are posted once; each
phase of a reconcile is timed once."""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import CheckpointStatus
from elastic_api.names import (
    COMPLETION_INDEX_LABEL,
    GROUP,
    JOB_INDEX_LABEL,
    PLURAL,
    REPLICATED_JOB_LABEL,
    WORKER_REPLICATED_JOB,
)
from elastic_operator.client.kube import ApiError, NotLeading
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.metrics import RECONCILE_PHASES
from elastic_operator.model.objects import (
    ObservedJob,
    ObservedPod,
    jobset_from_dict,
    node_from_dict,
    pod_from_dict,
)
from elastic_operator.model.result import AT_ONCE, PAST_DUE_S, Result
from elastic_operator.watch.node_index import NodeIndex
from tests.builders import (
    T0,
    JobSetWrapper,
    NodeWrapper,
    PodWrapper,
    WorkerPod,
    at,
    head_pod,
    iso,
)
from tests.support.clock import FakeClock
from tests.support.executors import Deferred, Inline
from tests.support.stand_in_kube import (
    POD_CACHE_READ,
    WORKER_JOB_CACHE_READ,
    Looks,
    StandInKube,
    api_error,
    condition,
    reconciler,
    the_job,
)

# What JobSet's webhook answers for a maxRestarts beyond int32 (HTTP 400). Admission now
# refuses such a spec; a job admitted under an older CRD still carries it, and this path
# stays for what admission cannot check (e.g. a duplicate env name, refused by JobSet's schema).
WEBHOOK_REFUSAL = api_error(
    400, "BadRequest",
    'admission webhook "mjobset.kb.io" denied the request: json: cannot unmarshal number '
    "2147483648 into Go struct field FailurePolicy.spec.failurePolicy.maxRestarts of type "
    "int32")
JOB_GONE = api_error(404, "NotFound", f'{PLURAL}.{GROUP} "train" not found',
                     name="train", group=GROUP, kind=PLURAL)
NAMESPACE_GONE = api_error(404, "NotFound", 'namespaces "ml" not found', name="ml",
                           kind="namespaces")
NAMESPACE_TERMINATING = api_error(
    403, "Forbidden", "serviceaccounts \"train-trainer\" is forbidden: unable to create new "
    "content in namespace ml because it is being terminated", name="train-trainer",
    kind="serviceaccounts", causes=[{"type": "NamespaceTerminating", "field":
                                     "metadata.namespace"}])


def errors(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("etj_reconcile_errors_total") or 0.0


def test_a_refused_jobset_is_reported_once_as_invalid_spec() -> None:
    kube = StandInKube(the_job(maxRestarts=2**31))
    kube.fail["create JobSet"] = WEBHOOK_REFUSAL
    rec, metrics = reconciler(kube)
    for _ in range(3):  # the first reconcile, then two resyncs
        assert rec.reconcile("ml", "train").ok
    assert len(kube.patches) == 1 and errors(metrics) == 0
    status = kube.job["status"]
    assert status["observedGeneration"] == 1
    applied = condition(status, ConditionType.SPEC_APPLIED)
    assert (applied["status"], applied["reason"]) == ("False", Reason.INVALID_SPEC)
    assert applied["message"].startswith(
        "the API server refused the JobSet train rendered from this spec (HTTP 400): "
        'admission webhook "mjobset.kb.io" denied the request: json: cannot unmarshal')


def test_a_failure_that_may_pass_is_an_error_to_retry() -> None:
    kube = StandInKube(the_job())
    kube.fail["create JobSet"] = api_error(500, "InternalError", "etcd timeout")
    rec, metrics = reconciler(kube)
    assert rec.reconcile("ml", "train").ok is False
    assert kube.patches == [] and errors(metrics) == 1


@pytest.mark.parametrize(("error", "benign"), [
    (JOB_GONE, True),  # the job was deleted while we looked
    (NAMESPACE_TERMINATING, True),
    (NAMESPACE_GONE, False),  # a 404, but not of the job
    (api_error(403, "Forbidden", 'elastictrainingjobs.elastic.pathways.dev "train" is '
               'forbidden: User "op" cannot patch resource', name="train", group=GROUP,
               kind=PLURAL), False),  # RBAC: retried, and counted
])
def test_api_errors_are_told_apart_by_their_status(error: ApiError, benign: bool) -> None:
    kube = StandInKube(the_job())
    kube.fail["patch_job_status"] = error
    rec, metrics = reconciler(kube)
    assert rec.reconcile("ml", "train").ok is benign
    assert errors(metrics) == (0 if benign else 1)


def test_an_error_body_that_merely_mentions_a_reason_is_not_that_error() -> None:
    """A message quoting NamespaceTerminating or a webhook denial is not one: only the
    Status's own fields count."""
    quoted = api_error(403, "Forbidden", 'admission webhook "x" denied the request: '
                       "NamespaceTerminating", kind="pods")
    assert quoted.denied_by_webhook and not quoted.namespace_terminating
    rbac = api_error(403, "Forbidden", 'pods is forbidden: User "u" cannot create: '
                     'message: admission webhook "x" denied the request', kind="pods")
    assert not rbac.denied_by_webhook and not rbac.refuses_object
    assert not ApiError(404, "Not Found", f'"kind":"{PLURAL}"').is_not_found(GROUP, PLURAL)
    assert ApiError(500, "Internal", "<html>not a Status</html>").message.startswith("<html>")


def test_creating_the_jobset_reads_it_once_and_uses_what_the_create_returned() -> None:
    kube = StandInKube(the_job())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("get_jobset") == 1
    assert kube.created == ["Role", "RoleBinding", "JobSet"]
    status = kube.job["status"]
    assert status["jobSetName"] == "train"  # the JobSet seen is the one just created
    assert condition(status, ConditionType.SPEC_APPLIED)["reason"] == Reason.APPLIED


def test_a_jobset_left_by_a_deleted_job_of_the_same_name_is_not_taken_for_its_own(
        ) -> None:
    """MultiKueue recreates its copy in a worker cluster at once after taking the job
    back: the old copy's JobSet may still be there, waiting for the garbage collector.
    Taken for the new copy's own, it went with the collector and the copy failed
    (JobSetLost): the multicluster test's resume-after-suspend flake."""
    pods = (WorkerPod(0, 0).build(),)  # the old JobSet's pods, same job-name label
    kube = StandInKube(the_job(), JobSetWrapper("train", "ml").owner("old-copy-uid").obj())
    rec, _ = reconciler(kube, pods=pods)
    assert rec.reconcile("ml", "train").ok
    assert kube.created == []  # nothing created beside another's JobSet
    status = kube.job["status"]
    assert "jobSetName" not in status and not status.get("slices")
    applied = condition(status, ConditionType.SPEC_APPLIED)
    assert (applied["status"], applied["reason"]) == ("False", Reason.JOBSET_NAME_CONFLICT)
    assert "owned by another object" in applied["message"]
    assert condition(status, ConditionType.READY)["reason"] == Reason.JOBSET_NOT_CREATED
    # Collected: the job's own JobSet is created, and the job runs (no JobSetLost).
    kube.jobset = None
    assert rec.reconcile("ml", "train").ok
    assert kube.created == ["Role", "RoleBinding", "JobSet"]
    assert kube.jobset is not None and kube.jobset["metadata"]["ownerReferences"][0][
        "uid"] == "u-1"
    assert kube.job["status"]["jobSetName"] == "train"
    assert "Failed" not in {c["type"] for c in kube.job["status"]["conditions"]
                            if c["status"] == "True"}


def test_a_suspend_reads_the_jobset_once_and_uses_the_patch_response() -> None:
    job = the_job(suspend=True)
    kube = StandInKube(job, JobSetWrapper("train", "ml").owner("u-1").obj())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("get_jobset") == 1 and "patch_jobset_suspend" in kube.calls
    suspended = condition(kube.job["status"], ConditionType.SUSPENDED)
    assert suspended["reason"] == Reason.SUSPENDED  # the patched JobSet says so already


def test_a_restarted_operator_makes_sure_of_the_trainer_rbac_once() -> None:
    kube = StandInKube(the_job(), JobSetWrapper("train", "ml").owner("u-1").obj())
    rec, _ = reconciler(kube)
    assert rec.reconcile("ml", "train").ok and rec.reconcile("ml", "train").ok
    assert kube.created == ["Role", "RoleBinding"]


def test_a_failed_checkpoint_scan_keeps_the_last_committed_step() -> None:
    """docs/operations.md: the last good latestCommittedStep is kept, the error shown."""
    job = the_job()
    job["status"] = {"checkpoint": {"directory": "gs://b/ckpt", "latestCommittedStep": 100,
                                    "incompleteSteps": [200],
                                    "observedAt": "2026-11-29T11:59:00Z"}}
    kube = StandInKube(job, JobSetWrapper("train", "ml").owner("u-1").obj())

    def failing(directory: str, now: datetime) -> CheckpointStatus:
        return CheckpointStatus(directory=directory, observed_at=now,
                                error="cannot list gs://b/ckpt: permission denied")

    rec, _ = reconciler(kube, failing)
    assert rec.reconcile("ml", "train").ok  # starts the scan (it finishes at once)
    assert rec.reconcile("ml", "train").ok  # publishes it
    checkpoint = kube.job["status"]["checkpoint"]
    assert checkpoint["latestCommittedStep"] == 100 and checkpoint["incompleteSteps"] == [200]
    assert checkpoint["error"] == "cannot list gs://b/ckpt: permission denied"
    assert all(p["status"].get("checkpoint", {}).get("latestCommittedStep", 100) is not None
               for p in kube.patches)


# --- one writer per change: conditional status writes, Events posted once ---------------

HOSTS_2X4 = 2  # v5e 2x4: 2 hosts per slice


def a_slice_goes_down() -> tuple[StandInKube, tuple[ObservedPod, ...]]:
    """A job whose one slice was Ready, and pods that show host 1 failed."""
    job = the_job()
    job["status"] = {"slices": [{"index": 0, "state": "Ready", "restarts": 0}]}
    kube = StandInKube(job, JobSetWrapper("train", "ml").owner("u-1").workers(1, HOSTS_2X4)
                       .obj())
    pods = (WorkerPod(0, 0).build(), WorkerPod(0, 1).failed(at(5)).build())
    return kube, pods


def test_a_write_in_between_makes_the_reconcile_read_again_and_count_once() -> None:
    """The trainer reports between our read and our write: the conditional write is
    refused, the reconcile reads again at once, and the slice is counted down once."""
    kube, pods = a_slice_goes_down()
    interleaved = iter([True])
    kube.before_patch = lambda: next(interleaved, False) and kube.write_training(
        {"step": 7, "observedAt": "2026-11-29T12:00:06Z"})
    rec, metrics = reconciler(kube, pods=pods)
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("get_job") == 2 and kube.calls.count("patch_job_status") == 2
    status = kube.job["status"]
    assert status["slices"][0]["restarts"] == 1 and status["counters"]["sliceFailures"] == 1
    assert status["training"]["step"] == 7  # the trainer's write stands
    assert [e.reason for e in kube.events] == [Reason.SLICE_DOWN, Reason.SLICE_REPLACING]
    assert errors(metrics) == 0
    # The refused write's Events were never posted (they go out after the write).
    assert metrics.get_sample_value("etj_events_already_posted_total") == 0


def test_a_change_recomputed_after_a_failed_write_posts_its_events_once() -> None:
    """Events go out after the status write that carries the change: a write that fails
    posts nothing, and the change computed again posts each Event once."""
    kube, pods = a_slice_goes_down()
    kube.fail["patch_job_status"] = api_error(500, "InternalError", "etcd timeout")
    rec, metrics = reconciler(kube, pods=pods)
    assert rec.reconcile("ml", "train").ok is False
    assert kube.events == [] and "post_event" not in kube.calls
    del kube.fail["patch_job_status"]
    assert rec.reconcile("ml", "train").ok
    assert [e.reason for e in kube.events] == [Reason.SLICE_DOWN, Reason.SLICE_REPLACING]
    assert kube.job["status"]["counters"]["sliceFailures"] == 1
    assert metrics.get_sample_value("etj_events_already_posted_total") == 0
    assert metrics.get_sample_value("etj_slice_failures_total",
                                    {"namespace": "ml", "job": "train"}) == 1
    assert metrics.get_sample_value("etj_slice_replacements_total", {
        "namespace": "ml", "job": "train", "action": "Replace"}) == 1


def test_conflicts_that_never_end_are_an_error_to_retry() -> None:
    kube, pods = a_slice_goes_down()
    kube.before_patch = lambda: kube.write_training({"step": 1})
    rec, metrics = reconciler(kube, pods=pods)
    assert rec.reconcile("ml", "train").ok is False
    assert kube.calls.count("patch_job_status") == 3 and errors(metrics) == 1


class JobCache:
    """The job cache: the job as the watch last delivered it (`catch_up`: the watch
    delivers what the API server now holds)."""

    def __init__(self, kube: StandInKube) -> None:
        self.kube = kube
        self.seen = copy.deepcopy(kube.job)

    def catch_up(self) -> None:
        self.seen = copy.deepcopy(self.kube.job)

    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.seen)


def test_the_job_is_read_from_its_cache() -> None:
    kube, pods = a_slice_goes_down()
    cache = JobCache(kube)
    rec, metrics = reconciler(kube, pods=pods, jobs=cache)
    assert rec.reconcile("ml", "train").ok
    assert "get_job" not in kube.calls and kube.calls.count("patch_job_status") == 1
    # Our write comes back through the watch: no news, and the cache is current again.
    cache.catch_up()
    assert rec.reads.own_writes.wrote("ml", "train", kube.job["metadata"]["resourceVersion"])
    assert rec.reconcile("ml", "train").ok
    assert "get_job" not in kube.calls and errors(metrics) == 0


def test_until_our_write_comes_back_through_the_cache_the_job_is_read_as_it_left_it(
) -> None:
    """A write conditional on the version the cache still holds would only be refused:
    the next reconcile reads the job as our write's response returned it, with no GET (a
    job reconciled back to back, one slice failure after another, paid one each time)."""
    kube, pods = a_slice_goes_down()
    cache = JobCache(kube)
    rec, _ = reconciler(kube, pods=pods, jobs=cache)
    assert rec.reconcile("ml", "train").ok  # our status write; the cache has the old job
    kube.calls.clear()
    healthy = (WorkerPod(0, 0).build(), WorkerPod(0, 1).replacement(at(7)).pending().build())
    rec.reads.reader.pod_source = lambda _ns, _name: healthy  # type: ignore[attr-defined]
    assert rec.reconcile("ml", "train").ok  # a change (Restarting) written on our own version
    assert "get_job" not in kube.calls and kube.calls.count("patch_job_status") == 1
    assert kube.job["status"]["slices"][0]["state"] == "Restarting"
    cache.catch_up()  # the cache holds our write now (say, after a relist)
    kube.calls.clear()
    assert rec.reconcile("ml", "train").ok
    assert "get_job" not in kube.calls


def test_a_write_of_someone_else_after_ours_is_read_fresh() -> None:
    """The trainer wrote after our write (the job watch said so while we wrote): the
    job is read fresh, not as our write left it (a write on that would be refused)."""
    kube, pods = a_slice_goes_down()
    cache = JobCache(kube)
    rec, _ = reconciler(kube, pods=pods, jobs=cache)
    patch = kube.patch_job_status

    def patch_then_trainer(namespace: str, name: str, body: dict[str, Any],
                           resource_version: str | None = None) -> dict[str, Any] | None:
        written = patch(namespace, name, body, resource_version)
        kube.write_training({"step": 9})
        # The watch:
        rec.reads.own_writes.wrote(namespace, name, kube.job["metadata"]["resourceVersion"])
        return written

    kube.patch_job_status = patch_then_trainer  # type: ignore[method-assign]
    assert rec.reconcile("ml", "train").ok
    kube.patch_job_status = patch  # type: ignore[method-assign]
    kube.calls.clear()
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("get_job") == 1 and kube.calls.count("patch_job_status") < 2


def test_a_job_cache_behind_another_writer_costs_one_refused_write_and_a_fresh_read() -> None:
    """The trainer reported after the version the cache holds: the write conditional on
    it is refused (409), the reconcile reads the job fresh, and counts the slice once."""
    kube, pods = a_slice_goes_down()
    cache = JobCache(kube)
    kube.write_training({"step": 7, "observedAt": "2026-11-29T12:00:06Z"})
    rec, metrics = reconciler(kube, pods=pods, jobs=cache)
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("patch_job_status") == 2 and kube.calls.count("get_job") == 1
    status = kube.job["status"]
    assert status["slices"][0]["restarts"] == 1 and status["counters"]["sliceFailures"] == 1
    assert status["training"]["step"] == 7 and errors(metrics) == 0


def test_the_jobset_comes_from_its_cache_and_a_miss_is_checked_with_a_get() -> None:
    """Not in the cache is no proof of absence (just created, not seen yet): a GET
    decides, or the job would be reported JobSetLost, for good."""
    stored = JobSetWrapper("train", "ml").owner("u-1").obj()
    job = the_job()
    job["status"] = {"jobSetName": "train"}
    kube = StandInKube(job, stored)
    cached = jobset_from_dict(stored)
    rec, _ = reconciler(kube, jobsets=lambda _ns, _name: cached)
    assert rec.reconcile("ml", "train").ok
    assert "get_jobset" not in kube.calls
    rec, _ = reconciler(kube, jobsets=lambda _ns, _name: None)
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("get_jobset") == 1
    assert condition(kube.job["status"], ConditionType.FAILED)["status"] == "False"


def test_the_watch_event_of_our_own_write_is_known_as_ours() -> None:
    """The job cache delivers our status write back as a change of the job: at exactly
    the version our write produced it is no news (a trainer's write makes another
    version)."""
    kube, pods = a_slice_goes_down()
    rec, _ = reconciler(kube, pods=pods)
    assert rec.reconcile("ml", "train").ok
    ours = kube.job["metadata"]["resourceVersion"]
    assert rec.reads.own_writes.wrote("ml", "train", ours)
    kube.write_training({"step": 3})
    assert not rec.reads.own_writes.wrote("ml", "train", kube.job["metadata"]["resourceVersion"])
    assert not rec.reads.own_writes.wrote("ml", "other", ours)
    assert not rec.reads.own_writes.wrote("ml", "train", None)
    rec.memory.forget_job(("ml", "train"))
    assert not rec.reads.own_writes.wrote("ml", "train", ours)


# --- Events after the status write, exactly once across a crash (the outbox) --------------


class Died(BaseException):
    """The operator process died here (SIGKILL): nothing after it runs, nothing catches
    it (a BaseException, as the reconciler catches Exception)."""


class DyingKube(StandInKube):
    """Dies right after the status write is applied, or at the n-th Event post (1-based),
    once; `after_patch` runs after a write is applied (another replica, in between)."""

    def __init__(self, job: dict[str, Any], jobset: dict[str, Any] | None = None, *,
                 die_after_patch: bool = False, die_at_post: int | None = None) -> None:
        super().__init__(job, jobset)
        self.die_after_patch = die_after_patch
        self.die_at_post = die_at_post
        self.after_patch: Callable[[], None] = lambda: None
        # The counters the job's status had when each Event was posted.
        self.status_at_post: list[dict[str, Any]] = []

    def patch_job_status(self, namespace: str, name: str, patch: dict[str, Any],
                         resource_version: str | None = None) -> dict[str, Any] | None:
        written = super().patch_job_status(namespace, name, patch, resource_version)
        self.after_patch()
        if self.die_after_patch:
            self.die_after_patch = False
            raise Died
        return written

    def post_event(self, job: dict[str, Any], event: StatusEvent, now: datetime,
                   name: str | None = None) -> bool:
        if self.die_at_post is not None and self.calls.count("post_event") + 1 == \
                self.die_at_post:
            self.die_at_post = None
            raise Died
        self.status_at_post.append(copy.deepcopy(self.job.get("status", {}).get("counters")))
        return super().post_event(job, event, now, name)


def dying(**how: Any) -> tuple[DyingKube, tuple[ObservedPod, ...]]:
    kube, pods = a_slice_goes_down()
    return DyingKube(kube.job, kube.jobset, **how), pods


SLICE_DOWN_EVENTS = [Reason.SLICE_DOWN, Reason.SLICE_REPLACING]


def test_events_are_posted_after_the_status_write_that_carries_them() -> None:
    """Whoever sees the SliceDown Event finds the failure counted in the status."""
    kube, pods = dying()
    rec, _ = reconciler(kube, pods=pods)
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.index("patch_job_status") < kube.calls.index("post_event")
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS
    assert all(c is not None and c["sliceFailures"] == 1 for c in kube.status_at_post)
    outbox = kube.job["status"]["pendingEvents"]  # the write carried them
    assert [(e["name"], e["reason"]) for e in outbox] == list(
        zip(kube.event_names, SLICE_DOWN_EVENTS, strict=True))


def test_a_leader_that_dies_after_the_write_leaves_its_events_to_the_next() -> None:
    """The crash window: the status (the failure counted) is written, the process dies
    before posting. The next leader sees no transition (the slice is Down already), but
    finds the Events in the outbox: it posts each once (after its write: its follow-ups)
    and its next write clears it."""
    kube, pods = dying(die_after_patch=True)
    old, _ = reconciler(kube, pods=pods)
    with pytest.raises(Died):
        old.reconcile("ml", "train")
    assert kube.events == [] and kube.job["status"]["counters"]["sliceFailures"] == 1
    assert [e["reason"] for e in kube.job["status"]["pendingEvents"]] == SLICE_DOWN_EVENTS

    new, metrics = reconciler(kube, pods=pods)
    assert new.reconcile("ml", "train").ok
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS
    status = kube.job["status"]
    assert status["counters"]["sliceFailures"] == 1 and status["slices"][0]["restarts"] == 1
    assert metrics.get_sample_value("etj_events_already_posted_total") == 0
    # The failure was counted by the leader that computed it, not again (a job's counters
    # are exported at 0 from its first status write).
    assert metrics.get_sample_value("etj_slice_failures_total",
                                    {"namespace": "ml", "job": "train"}) == 0
    assert new.reconcile("ml", "train").ok  # nothing left to post
    assert "pendingEvents" not in kube.job["status"]  # cleared by the new leader's write
    assert len(kube.events) == 2 and kube.calls.count("post_event") == 2


def test_a_leader_that_dies_between_two_posts_leaves_the_rest_posted_once() -> None:
    kube, pods = dying(die_at_post=2)
    old, _ = reconciler(kube, pods=pods)
    with pytest.raises(Died):
        old.reconcile("ml", "train")
    assert [e.reason for e in kube.events] == [Reason.SLICE_DOWN]
    new, metrics = reconciler(kube, pods=pods)
    assert new.reconcile("ml", "train").ok
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS
    assert metrics.get_sample_value("etj_events_already_posted_total") == 1  # the 409


def test_a_stalled_leader_that_posts_after_the_new_one_is_refused_its_copies() -> None:
    """Leader election is not fencing: the old leader wrote, stalled, and the new one
    reconciled (posting the outbox) before the old one went on to post: 409s."""
    kube, pods = dying()
    new, new_metrics = reconciler(kube, pods=pods)
    takeover = iter([True])
    kube.after_patch = lambda: next(takeover, False) and new.reconcile("ml", "train")
    old, old_metrics = reconciler(kube, pods=pods)
    assert old.reconcile("ml", "train").ok
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS
    assert new_metrics.get_sample_value("etj_events_already_posted_total") == 0
    assert old_metrics.get_sample_value("etj_events_already_posted_total") == 2


class FencedKube(DyingKube):
    """Posts an Event only while `may_write()`, as KubeClient.request does for every write."""

    def post_event(self, job: dict[str, Any], event: StatusEvent, now: datetime,
                   name: str | None = None) -> bool:
        if not self.may_write():
            self.calls.append("post_event (not sent)")
            raise NotLeading("POST events: not sent")
        return super().post_event(job, event, now, name)


def test_a_leader_deposed_after_its_status_write_sends_nothing_more() -> None:
    """Frozen (SIGSTOP) right after the status write, past its renew deadline: woken, its
    reconcile goes on, but the fence stops its first Event; the reconcile ends there
    (no error to retry), and the new leader posts the outbox, each Event once."""
    kube, pods = dying()
    fenced = FencedKube(kube.job, kube.jobset)
    leads = [True]
    fenced.may_write = lambda: leads[0]
    fenced.after_patch = lambda: leads.__setitem__(0, False)
    old, old_metrics = reconciler(fenced, pods=pods)
    assert old.reconcile("ml", "train").ok
    assert fenced.events == [] and fenced.calls[-1] == "post_event (not sent)"
    assert old_metrics.get_sample_value("etj_reconcile_errors_total") == 0
    fenced.may_write = lambda: True  # the new leader's
    new, _ = reconciler(fenced, pods=pods)
    assert new.reconcile("ml", "train").ok
    assert [e.reason for e in fenced.events] == SLICE_DOWN_EVENTS


def test_the_outbox_costs_no_request_when_the_next_write_clears_it() -> None:
    """The next write clears the outbox, whatever change it carries; a reconcile with no
    change of its own writes the clearing alone, once."""
    kube, failed = a_slice_goes_down()
    healthy = (WorkerPod(0, 0).build(), WorkerPod(0, 1).build())
    restarting = (WorkerPod(0, 0).build(), WorkerPod(0, 1).replacement(at(7)).pending().build())
    seen = [healthy]
    rec, _ = reconciler(kube, pods=lambda: seen[-1])
    for _ in range(3):  # the first writes, the second publishes the checkpoint scan
        assert rec.reconcile("ml", "train").ok
    writes = kube.calls.count("patch_job_status")
    assert writes == 2, "steady: no write"

    def step(pods: tuple[ObservedPod, ...]) -> tuple[int, int, dict[str, Any] | None]:
        """(status writes, Event posts, the write's status) of one reconcile."""
        seen.append(pods)
        writes, posts = kube.calls.count("patch_job_status"), kube.calls.count("post_event")
        assert rec.reconcile("ml", "train").ok
        wrote = kube.calls.count("patch_job_status") - writes
        return (wrote, kube.calls.count("post_event") - posts,
                kube.patches[-1]["status"] if wrote else None)

    wrote, posted, status = step(failed)  # the change, with its Events in the write
    assert (wrote, posted) == (1, 2) and status is not None and len(status["pendingEvents"]) == 2
    wrote, posted, status = step(restarting)  # the next change clears the outbox
    assert (wrote, posted) == (1, 0) and status is not None
    assert status["pendingEvents"] is None and status["slices"][0]["state"] == "Restarting"
    assert step(restarting)[:2] == (0, 0)

    wrote, posted, status = step(healthy)  # Ready again: SliceRestored
    assert (wrote, posted) == (1, 1) and status is not None
    assert [e["reason"] for e in status["pendingEvents"]] == [Reason.SLICE_RESTORED]
    wrote, posted, status = step(healthy)  # nothing else changed: the clearing alone
    assert (wrote, posted) == (1, 0) and status is not None and status["pendingEvents"] is None
    assert step(healthy)[:2] == (0, 0)


def test_an_event_the_api_server_failed_to_take_is_tried_again_by_the_next_reconcile(
) -> None:
    kube, pods = a_slice_goes_down()
    kube.fail["post_event"] = api_error(500, "InternalError", "etcd timeout")
    rec, _ = reconciler(kube, pods=pods)
    assert rec.reconcile("ml", "train").ok  # an Event is best effort: no reconcile error
    assert kube.events == []
    del kube.fail["post_event"]
    assert rec.reconcile("ml", "train").ok  # posted after its write
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS
    assert rec.reconcile("ml", "train").ok  # and cleared by the next
    assert "pendingEvents" not in kube.job["status"]
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS


def test_an_event_refused_for_now_stays_in_the_outbox_across_the_next_write() -> None:
    """API Priority and Fairness refuses a slice failure's Events (429) and still
    refuses them when the next reconcile writes a new change (the slice Restarting):
    that write keeps them in the outbox instead of dropping them unposted, and each is
    posted once when the API server takes them (a soak came up 2 SliceReplacing short)."""
    kube, failed = a_slice_goes_down()
    restarting = (WorkerPod(0, 0).build(), WorkerPod(0, 1).replacement(at(7)).pending().build())
    seen = [failed]
    rec, _ = reconciler(kube, pods=lambda: seen[-1])
    kube.fail["post_event"] = api_error(429, "TooManyRequests", "throttled")
    assert rec.reconcile("ml", "train").ok
    seen.append(restarting)
    writes = kube.calls.count("patch_job_status")
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.count("patch_job_status") == writes + 1
    status = kube.job["status"]
    assert status["slices"][0]["state"] == "Restarting" and kube.events == []
    assert [e["reason"] for e in status["pendingEvents"]] == SLICE_DOWN_EVENTS
    del kube.fail["post_event"]
    for _ in range(3):
        assert rec.reconcile("ml", "train").ok
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS
    assert "pendingEvents" not in kube.job["status"]


@pytest.mark.parametrize("trainer_writes_meanwhile", [False, True])
def test_our_write_coming_back_before_its_response_is_still_ours(
        trainer_writes_meanwhile: bool) -> None:
    """The job cache's watch may deliver our status write before the write's response
    reaches the reconciler: still no news (no second reconcile); a version someone else
    wrote meanwhile wakes the job once the write returns."""
    kube, pods = a_slice_goes_down()
    looks = Looks()
    rec, _ = reconciler(kube, pods=pods, wake=looks.wake)
    woken = looks.delays
    answers: list[bool] = []
    patch = kube.patch_job_status

    def patch_then_watch(namespace: str, name: str, body: dict[str, Any],
                         resource_version: str | None = None) -> dict[str, Any] | None:
        written = patch(namespace, name, body, resource_version)
        assert written is not None
        answers.append(rec.reads.own_writes.wrote(namespace, name,
                                            written["metadata"]["resourceVersion"]))
        if trainer_writes_meanwhile:
            kube.write_training({"step": 9})
            rec.reads.own_writes.wrote(namespace, name, kube.job["metadata"]["resourceVersion"])
        return written

    kube.patch_job_status = patch_then_watch  # type: ignore[method-assign]
    assert looks.reconciled(rec.reconcile("ml", "train"))
    assert answers == [True]
    assert [d for d in woken if d == 0.0] == ([0.0] if trainer_writes_meanwhile else [])


# --- slice replacement: the intent is written before the operator acts --------------------


class ReplacingKube(StandInKube):
    """A running one-slice job (v5e 2x4: 2 hosts) whose host 1 failed."""

    JOB_UID = "worker-0-uid"

    def __init__(self) -> None:
        jobset = JobSetWrapper("train", "ml").owner("u-1").workers(1, 2).obj()
        super().__init__(the_job(), jobset)
        self.deleted: list[tuple[str, str]] = []
        self.job_deleting = False
        self.cache_stale = False

    @classmethod
    def pods(cls) -> tuple[ObservedPod, ...]:
        """As the pod cache holds them: host 1 failed, on Ready nodes n0 and n1."""
        pods = []
        for host in (0, 1):
            pod = (PodWrapper.worker(0, host, job="train", namespace="ml")
                   .labels({"batch.kubernetes.io/controller-uid": cls.JOB_UID})
                   .on_node(f"n{host}"))
            pod = pod.failed(T0) if host == 1 else pod.running()
            pods.append(pod_from_dict(pod.obj()))
        return tuple(pods)

    @staticmethod
    def nodes() -> NodeIndex:
        """As the node cache holds them."""
        index = NodeIndex()
        for name in ("n0", "n1"):
            index.node_seen(node_from_dict(NodeWrapper(name).ready().obj()))
        return index

    def worker_jobs(self, namespace: str, jobset: str) -> tuple[ObservedJob, ...]:
        """The worker-Job cache: slice 0's Job, as it last saw it (`cache_stale`: from
        before our delete)."""
        self.calls.append(WORKER_JOB_CACHE_READ)
        return (ObservedJob(name="train-worker-0", uid=self.JOB_UID, slice_index=0,
                            deleting=self.job_deleting and not self.cache_stale,
                            backoff_limit=10),)

    def delete_job(self, namespace: str, name: str, uid: str) -> bool:
        self._call("delete_job")
        self.deleted.append((name, uid))
        self.job_deleting = True
        return True


def test_the_replacement_is_recorded_before_the_job_is_deleted_and_only_once() -> None:
    kube = ReplacingKube()
    rec, _ = reconciler(kube, pods=kube.pods(), nodes=kube.nodes())
    assert rec.reconcile("ml", "train").ok
    assert kube.calls.index("patch_job_status") < kube.calls.index("delete_job")
    # The Events last: whoever sees SliceReplacing finds the Job deleted.
    assert kube.calls.index("delete_job") < kube.calls.index("post_event")
    record = kube.job["status"]["slices"][0]["replacement"]
    assert (record["action"], record["jobUid"]) == ("Replace", ReplacingKube.JOB_UID)
    assert kube.deleted == [("train-worker-0", ReplacingKube.JOB_UID)]
    assert rec.reconcile("ml", "train").ok  # the Job is being deleted now: nothing more
    assert len(kube.deleted) == 1 and kube.job["status"]["slices"][0]["restarts"] == 1
    assert "list_worker_jobs" not in kube.calls  # read from the cache, never listed


def test_forget_drops_everything_remembered_of_the_job() -> None:
    """What the reconciler remembers of a job is one JobMemory: forgetting a deleted job
    drops all of it at once, the head pods handed over for a trainer restart too, and a
    follow-up that ends after it brings none of it back."""
    kube = ReplacingKube()
    kube.job["status"] = {"progress": {"since": iso(T0), "restart": {
        "requestedAt": iso(T0), "podName": "train-head-0-0", "podUid": "head-uid",
        "reason": "ProgressDeadlineExceeded"}}}
    head = replace(head_pod(name="train-head-0-0"), uid="head-uid")
    later = Deferred()
    rec, _ = reconciler(kube, pods=(*kube.pods(), head), nodes=kube.nodes(), follow_ups=later)
    assert rec.reconcile("ml", "train").ok
    remembered = rec.memory.peek(("ml", "train"))
    assert remembered is not None and remembered.restarted_pods == {"head-uid"}
    assert remembered.deleted_jobs == {ReplacingKube.JOB_UID} and remembered.posting
    assert remembered.written == kube.job["metadata"]["resourceVersion"]
    assert remembered.children_ensured == "u-1" and remembered.last_write is not None
    rec.memory.forget_job(("ml", "train"))
    assert rec.memory.peek(("ml", "train")) is None and len(rec.memory) == 0
    assert later.run() > 0  # the restart, the Job deletion and the Events, after it
    assert kube.deleted == [("train-worker-0", ReplacingKube.JOB_UID)]
    assert rec.memory.peek(("ml", "train")) is None and len(rec.memory) == 0


def test_a_reconcile_returns_when_to_look_at_the_job_again() -> None:
    """The progress deadline comes due in 500 s: the reconcile's Result asks for a look a
    little after it, and nothing paced; the work queue keeps it (work_queue.py)."""
    job = the_job()
    job["status"] = {"progress": {"step": 5, "since": iso(at(-100)), "advanced": True,
                                  "deadlineSeconds": 600}}
    kube = StandInKube(job, JobSetWrapper("train", "ml").owner("u-1").workers(1, 2).obj())
    rec, _ = reconciler(kube, pods=(WorkerPod(0, 0).build(), WorkerPod(0, 1).build()))
    assert rec.reconcile("ml", "train") == Result(requeue_after=500 + PAST_DUE_S)


def test_a_job_deleted_is_not_deleted_again_before_the_cache_sees_it() -> None:
    """The worker-Job cache may still show the Job as it was before our delete when the
    next reconcile runs (its watch lags the pods'): that Job is being deleted all the
    same, and is not deleted a second time."""
    kube = ReplacingKube()
    kube.cache_stale = True
    rec, _ = reconciler(kube, pods=kube.pods(), nodes=kube.nodes())
    for _ in range(3):
        assert rec.reconcile("ml", "train").ok
    assert kube.deleted == [("train-worker-0", ReplacingKube.JOB_UID)]


def test_no_delete_when_the_intent_could_not_be_written() -> None:
    kube = ReplacingKube()
    kube.fail["patch_job_status"] = api_error(500, "InternalError", "etcd timeout")
    rec, metrics = reconciler(kube, pods=kube.pods(), nodes=kube.nodes())
    assert rec.reconcile("ml", "train").ok is False
    assert "delete_job" not in kube.calls and errors(metrics) == 1


# --- after the status write: the follow-ups (replacement writes, Events) ----------------


def test_the_status_write_is_the_last_request_a_reconcile_waits_for() -> None:
    """A job's reconciles run one after another: whatever a reconcile sends after its
    status write delays the next slice failure's. The worker Job's DELETE and the Events
    are handed to the follow-up runner, in that order (whoever sees SliceReplacing finds
    the Job deleted)."""
    kube = ReplacingKube()
    later = Deferred()
    rec, _ = reconciler(kube, pods=kube.pods(), nodes=kube.nodes(), follow_ups=later)
    assert rec.reconcile("ml", "train").ok
    assert kube.calls[-2:] == ["patch_job_status", WORKER_JOB_CACHE_READ]
    assert "delete_job" not in kube.calls and "post_event" not in kube.calls
    assert kube.job["status"]["slices"][0]["replacement"]["jobUid"] == ReplacingKube.JOB_UID
    before = len(kube.calls)
    assert later.run() == 2
    assert kube.calls[before:] == ["delete_job", "post_event", "post_event"]
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS


def test_a_job_handed_over_for_deletion_is_not_deleted_twice() -> None:
    """The next reconcile may run before the follow-up's DELETE has gone out: the Job
    counts as being deleted from the moment it was handed over."""
    kube = ReplacingKube()
    later = Deferred()
    rec, _ = reconciler(kube, pods=kube.pods(), nodes=kube.nodes(), follow_ups=later)
    assert rec.reconcile("ml", "train").ok
    assert rec.reconcile("ml", "train").ok
    later.run()
    assert kube.deleted == [("train-worker-0", ReplacingKube.JOB_UID)]


def test_a_whole_reconcile_runs_with_no_work_queue_at_all() -> None:
    """A reconcile asks the work queue nothing and changes nothing in it (issue 70): built
    with no queue anywhere (no wake, no news, the follow-ups inline with nobody to tell),
    a slice failure is read, computed, written, replaced and told, and all it wants of a
    queue is in its Result: a version someone else wrote during its status write is a
    look at once, and a pass cut short for the news its caller tells it hands back the
    rest of the reconcile."""
    kube = ReplacingKube()
    rec, _ = reconciler(kube, pods=kube.pods(), nodes=kube.nodes())
    patch = kube.patch_job_status

    def patch_then_the_trainer_writes(namespace: str, name: str, body: dict[str, Any],
                                      resource_version: str | None = None
                                      ) -> dict[str, Any] | None:
        written = patch(namespace, name, body, resource_version)
        kube.write_training({"step": 9})  # its version reaches the job cache meanwhile
        rec.reads.own_writes.wrote(namespace, name, kube.job["metadata"]["resourceVersion"])
        return written

    kube.patch_job_status = patch_then_the_trainer_writes  # type: ignore[method-assign]
    result = rec.reconcile("ml", "train")
    kube.patch_job_status = patch  # type: ignore[method-assign]
    assert result.ok and result.again is None and result.requeue_after == AT_ONCE
    assert kube.job["status"]["slices"][0]["state"] == "Down"
    assert kube.deleted == [("train-worker-0", ReplacingKube.JOB_UID)]
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS
    reads = kube.calls.count(POD_CACHE_READ)
    started = rec.reconcile("ml", "train", requeued=lambda: (True, True))  # paced, requeued
    assert started.ok and started.again is not None
    assert kube.calls.count(POD_CACHE_READ) == reads  # stopped at the end of its read
    finished = started.again()
    assert finished.ok and finished.again is None
    assert kube.calls.count(POD_CACHE_READ) == reads + 1


def test_a_delete_that_failed_in_a_follow_up_is_planned_again() -> None:
    kube = ReplacingKube()
    kube.fail["delete_job"] = api_error(500, "InternalError", "etcd timeout")
    looks = Looks()
    runner = Inline(requeue=looks.wake)
    rec, metrics = reconciler(kube, pods=kube.pods(), nodes=kube.nodes(), follow_ups=runner)
    assert looks.reconciled(rec.reconcile("ml", "train"))
    # The follow-up's outcome failed: the work queue retries the job after its backoff
    # (counted once, with the reconcile's failures: test_operator_work_queue.py).
    assert kube.deleted == [] and errors(metrics) == 1
    assert [o.ok for o in runner.outcomes] == [False, True]  # the DELETE, the Events
    del kube.fail["delete_job"]
    assert looks.reconciled(rec.reconcile("ml", "train"))
    assert kube.deleted == [("train-worker-0", ReplacingKube.JOB_UID)]


def test_a_delete_still_queued_deletes_nothing_a_pod_failing_meanwhile_is_counted() -> None:
    """Issue #33: the DELETE waits behind a throttled follow-up; the Job controller
    replaces the failed pod (the slice Ready again on the same Job), then another pod of
    that Job fails. The Job is live, so that is a second failure, not the teardown: the
    status counts it (the Job handed over for deletion is planned as being deleted, no
    second DELETE, but the status reads it as it is)."""
    kube = ReplacingKube()
    later = Deferred()
    seen = [kube.pods()]
    rec, _ = reconciler(kube, pods=lambda: seen[-1], nodes=kube.nodes(), follow_ups=later)
    assert rec.reconcile("ml", "train").ok
    assert kube.job["status"]["slices"][0]["restarts"] == 1

    def pod(host: int, name: str, failed: bool) -> ObservedPod:
        wrapper = (PodWrapper(f"train-worker-0-{host}{name}", "ml", "train")
                   .labels({"batch.kubernetes.io/controller-uid": ReplacingKube.JOB_UID,
                            REPLICATED_JOB_LABEL: WORKER_REPLICATED_JOB,
                            JOB_INDEX_LABEL: "0", COMPLETION_INDEX_LABEL: str(host)})
                   .on_node(f"n{host}").created(at(30 if name else 0)))
        wrapper = wrapper.failed(at(40)) if failed else wrapper.running(since=at(31))
        return pod_from_dict(wrapper.obj())

    seen.append((pod(0, "", False), pod(1, "-b", False)))  # replaced: Ready again
    assert rec.reconcile("ml", "train").ok
    assert kube.job["status"]["slices"][0]["state"] == "Ready"
    seen.append((pod(0, "", True), pod(1, "-b", False)))  # host 0 of the live Job fails
    assert rec.reconcile("ml", "train").ok
    slice0 = kube.job["status"]["slices"][0]
    assert (slice0["state"], slice0["restarts"]) == ("Down", 2)
    assert kube.job["status"]["counters"]["sliceFailures"] == 2
    later.run()
    assert kube.deleted == [("train-worker-0", ReplacingKube.JOB_UID)]  # once


def restarting_pods() -> tuple[ObservedPod, ...]:
    """a_slice_goes_down's slice a moment later: host 1's replacement pod Pending."""
    return (WorkerPod(0, 0).build(), WorkerPod(0, 1).replacement(at(7)).pending().build())


def test_an_event_on_its_way_stays_in_the_outbox_and_is_handed_over_once() -> None:
    """A write made while a change's Events are still being posted keeps them in the
    outbox (a crash now would lose them otherwise); they are handed over once, and the
    first write after they went out clears them."""
    kube, failed = a_slice_goes_down()
    seen = [failed]
    later = Deferred()
    rec, metrics = reconciler(kube, pods=lambda: seen[-1], follow_ups=later)
    assert rec.reconcile("ml", "train").ok
    outbox = [e["name"] for e in kube.job["status"]["pendingEvents"]]
    seen.append(restarting_pods())
    assert rec.reconcile("ml", "train").ok
    status = kube.job["status"]
    assert status["slices"][0]["state"] == "Restarting"
    assert [e["name"] for e in status["pendingEvents"]] == outbox
    assert later.run() == 1 and [e.reason for e in kube.events] == SLICE_DOWN_EVENTS
    assert rec.reconcile("ml", "train").ok
    assert "pendingEvents" not in kube.job["status"] and later.run() == 0
    assert metrics.get_sample_value("etj_events_already_posted_total") == 0


def test_a_leader_that_dies_with_its_events_on_their_way_leaves_them_to_the_next() -> None:
    kube, failed = a_slice_goes_down()
    seen = [failed]
    old, _ = reconciler(kube, pods=lambda: seen[-1], follow_ups=Deferred())
    assert old.reconcile("ml", "train").ok
    seen.append(restarting_pods())
    assert old.reconcile("ml", "train").ok  # another write; then the process dies
    new, _ = reconciler(kube, pods=lambda: seen[-1])
    assert new.reconcile("ml", "train").ok  # posted after its write, cleared by the next
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS
    assert new.reconcile("ml", "train").ok
    assert "pendingEvents" not in kube.job["status"]
    assert [e.reason for e in kube.events] == SLICE_DOWN_EVENTS


def test_our_earlier_write_coming_back_late_is_still_ours() -> None:
    """Reconciled back to back, the job is written again before the job watch delivers
    the write before: that version, when it comes, is our own still (no news: no wake,
    no GET), and the cache holding it, our last write's response stands in for the job."""
    kube, failed = a_slice_goes_down()
    seen = [failed]
    cache = JobCache(kube)
    looks = Looks()
    rec, _ = reconciler(kube, pods=lambda: seen[-1], jobs=cache, wake=looks.wake)
    woken = looks.delays
    assert looks.reconciled(rec.reconcile("ml", "train"))  # the first write; the watch is behind
    first = copy.deepcopy(kube.job)
    patch = kube.patch_job_status

    def patch_then_late_watch(namespace: str, name: str, body: dict[str, Any],
                              resource_version: str | None = None) -> dict[str, Any] | None:
        written = patch(namespace, name, body, resource_version)
        # Comes now:
        rec.reads.own_writes.wrote(namespace, name, first["metadata"]["resourceVersion"])
        return written

    kube.patch_job_status = patch_then_late_watch  # type: ignore[method-assign]
    seen.append(restarting_pods())
    assert looks.reconciled(rec.reconcile("ml", "train"))  # the second write
    kube.patch_job_status = patch  # type: ignore[method-assign]
    assert 0.0 not in woken
    assert rec.reads.own_writes.wrote("ml", "train", first["metadata"]["resourceVersion"])
    cache.seen = first  # the cache holds the first write
    kube.calls.clear()
    seen.append((WorkerPod(0, 0).build(), WorkerPod(0, 1).replacement(at(7)).build()))
    assert looks.reconciled(rec.reconcile("ml", "train"))
    assert "get_job" not in kube.calls and kube.calls.count("patch_job_status") == 1
    assert kube.job["status"]["slices"][0]["state"] == "Ready"


class TickingClock(FakeClock):
    """Each monotonic() read is a second later: every timed stretch takes time."""

    def monotonic(self) -> float:
        self.ticks += 1.0
        return self.ticks


def test_a_reconcile_times_each_phase_once_within_its_duration() -> None:
    kube = StandInKube(the_job())
    rec, registry = reconciler(kube, clock=TickingClock(T0))
    assert rec.reconcile("ml", "train").ok and kube.patches  # through to the status write

    def count(name: str, **labels: str) -> float:
        return registry.get_sample_value(f"{name}_count", labels) or 0.0

    assert {p: count("etj_reconcile_phase_seconds", phase=p) for p in RECONCILE_PHASES} \
        == dict.fromkeys(RECONCILE_PHASES, 1.0)
    assert count("etj_reconcile_cpu_seconds") == count("etj_reconcile_duration_seconds") == 1
    phases = sum(registry.get_sample_value("etj_reconcile_phase_seconds_sum", {"phase": p})
                 or 0.0 for p in RECONCILE_PHASES)
    assert 0 < phases < (registry.get_sample_value("etj_reconcile_duration_seconds_sum") or 0)


def test_a_reconcile_of_a_job_being_deleted_times_no_phase() -> None:
    kube = StandInKube(the_job())
    kube.job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    rec, registry = reconciler(kube, clock=TickingClock(T0))
    assert rec.reconcile("ml", "train").ok and kube.patches == []
    assert all((registry.get_sample_value("etj_reconcile_phase_seconds_count", {"phase": p})
                or 0.0) == 0 for p in RECONCILE_PHASES)
    assert registry.get_sample_value("etj_reconcile_cpu_seconds_count") == 1


def test_a_job_that_changes_at_every_try_is_retried_with_a_warning_not_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """A trainer reporting faster than a reconcile writes makes every conditional write
    refused (409): contention, not a bug. The reconcile fails (retried after the backoff,
    counted) and says so in one line, without the traceback of an unexpected error."""
    kube, pods = a_slice_goes_down()
    rec, metrics = reconciler(kube, pods=pods)

    def always_changed(*_args: Any, **_kwargs: Any) -> Any:
        raise ApiError(409, "Conflict", '{"kind":"Status","reason":"Conflict"}')

    kube.patch_job_status = always_changed  # type: ignore[method-assign]
    with caplog.at_level("WARNING", logger="elastic_operator"):
        assert rec.reconcile("ml", "train").ok is False
    assert errors(metrics) == 1
    (record,) = [r for r in caplog.records if "changed at each" in r.getMessage()]
    assert record.levelname == "WARNING" and record.exc_info is None
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
