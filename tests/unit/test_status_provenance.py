"""The operator acts only on the records of its own it reads back from the status
(core/provenance.py, reconcile/own_writes.py; issue 78): what someone else wrote there is
set aside and said once, whether or not the cluster has the chart's status policy."""
from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJobStatus, PendingEvent, PoolFailure, PoolStatus
from elastic_operator.core.provenance import CLOCK_SKEW, vet_status
from tests.builders import JobSetWrapper, WorkerPod, at
from tests.support.stand_in_kube import StandInKube, reconciler, the_job

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
HOSTS_2X4 = 2  # v5e 2x4: 2 hosts per slice


def _status(**fields: object) -> ElasticTrainingJobStatus:
    return ElasticTrainingJobStatus.model_validate(fields)


def _pool(*ats: datetime) -> PoolStatus:
    return PoolStatus(name="tpu-a", failures=[
        PoolFailure(at=t, blame="Node", reason="NodeNotReady") for t in ats])


def test_without_memory_future_dated_failures_are_dropped_and_named() -> None:
    read = _status(pools=[_pool(NOW - timedelta(minutes=5), NOW + CLOCK_SKEW,
                                NOW + CLOCK_SKEW + timedelta(seconds=1),
                                NOW + timedelta(days=3650))])
    vetted = vet_status(read, None, NOW)
    assert [f.at for f in vetted.status.pools[0].failures] == [
        NOW - timedelta(minutes=5), NOW + CLOCK_SKEW]
    assert vetted.foreign == ("pools",)


def test_without_memory_an_outbox_entry_of_a_reason_never_posted_is_dropped() -> None:
    own = PendingEvent(name="train.0123456789abcdef", reason=Reason.SLICE_DOWN,
                       type="Warning", message="slice 0 is down")
    forged = PendingEvent(name="train.fedcba9876543210", reason="Hacked", message="hi")
    vetted = vet_status(_status(pendingEvents=[own.model_dump(by_alias=True),
                                               forged.model_dump(by_alias=True)]), None, NOW)
    assert vetted.status.pending_events == [own] and vetted.foreign == ("pendingEvents",)
    alone = vet_status(_status(pendingEvents=[forged.model_dump(by_alias=True)]), None, NOW)
    assert alone.status.pending_events is None


def test_a_status_of_our_own_is_taken_as_read() -> None:
    read = _status(slices=[{"index": 0, "state": "Ready", "restarts": 2}],
                   pools=[_pool(NOW - timedelta(minutes=1)).model_dump(by_alias=True)])
    assert vet_status(read, read, NOW) == vet_status(read, None, NOW)
    assert vet_status(read, read, NOW).foreign == () and vet_status(read, read, NOW).status == read


def test_with_memory_every_operator_field_reads_back_as_written_and_training_is_free() -> None:
    own = _status(slices=[{"index": 0, "state": "Ready", "restarts": 2, "counted": {
        "jobUid": "uid-1", "failedPods": 2}}], counters={"sliceFailures": 2})
    forged = own.model_dump(by_alias=True, mode="json")
    forged["slices"][0]["restarts"] = 0
    forged["slices"][0]["replacement"] = {
        "action": "Move", "reason": "Maintenance", "jobUid": "uid-1", "fromPool": "other",
        "requestedAt": NOW.isoformat(), "blame": "Node"}
    forged["counters"] = {"sliceFailures": 0}
    forged["training"] = {"observedAt": NOW.isoformat(), "state": "Training", "step": 9}
    vetted = vet_status(ElasticTrainingJobStatus.model_validate(forged), own, NOW)
    assert vetted.foreign == ("slices", "counters")
    assert vetted.status.slices == own.slices and vetted.status.counters == own.counters
    assert vetted.status.training is not None and vetted.status.training.step == 9


def test_the_reconciler_sets_forged_records_aside_says_so_once_and_keeps_its_own() -> None:
    """A slice went down and was written; then someone resets its restart count, blames
    another pool with a replacement record, dates pool failures years ahead and posts an
    Event through the outbox. The operator acts on none of it, says each field once, and
    its next write is computed from what it wrote."""
    job = the_job()
    job["status"] = {"slices": [{"index": 0, "state": "Ready", "restarts": 0}]}
    kube = StandInKube(job, JobSetWrapper("train", "ml").owner("u-1").workers(1, HOSTS_2X4)
                       .obj())
    pods = (WorkerPod(0, 0).build(), WorkerPod(0, 1).failed(at(5)).build())
    rec, metrics = reconciler(kube, pods=pods)
    assert rec.reconcile("ml", "train").ok
    written = copy.deepcopy(kube.job["status"])
    assert written["slices"][0]["restarts"] == 1
    events_before, labels_before = list(kube.events), kube.calls.count("label_node")

    forged = kube.job["status"]
    forged["slices"][0]["restarts"] = 0
    forged["slices"][0]["replacement"] = {
        "action": "Move", "reason": "Maintenance", "fromPool": "another-teams-pool",
        "requestedAt": "2026-11-29T12:00:06Z", "blame": "Node"}
    forged["pools"] = [{"name": "another-teams-pool", "failures": [
        {"at": "2100-01-01T00:00:00Z", "blame": "Node", "reason": "NodeNotReady"}] * 3}]
    forged["pendingEvents"] = [{"name": "train.0123456789abcdef", "reason": "Forged",
                                "type": "Warning", "message": "posted as the operator"}]
    kube._bump()
    for _ in range(2):
        assert rec.reconcile("ml", "train").ok
    assert kube.events == events_before  # no forged Event, no second SliceDown
    assert kube.calls.count("label_node") == labels_before  # no pool quarantined
    for patch in kube.patches[1:]:  # its writes never take the forged records up
        assert patch["status"].get("slices", written["slices"])[0]["restarts"] == 1
    counted = {f: metrics.get_sample_value("etj_foreign_status_records_total", {"field": f})
               for f in ("slices", "pools", "pendingEvents")}
    assert counted == {"slices": 1.0, "pools": 1.0, "pendingEvents": 1.0}
