"""The writes of a quarantine and of its end (replacement_writes.py, pool_warden.py), against a Kube
that records them: the label comes with who and why (annotation, Events on the job and
the node); the warden asks whether the jobs a quarantine rests on still exist, releases
it once one is gone, and never on a failed read."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from elastic_api.conditions import Reason
from elastic_api.names import (
    QUARANTINE_CAUSE_ANNOTATION,
    QUARANTINE_LABEL,
    QUARANTINED_AT_ANNOTATION,
)
from elastic_operator.client.kube import Kube
from elastic_operator.core.plan import QuarantinePool, ReleasePool
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.model.objects import QuarantineCause, quarantine_cause_from
from elastic_operator.watch.node_index import NodeIndex
from elastic_operator.writes.node_actions import NodeActionLimiter
from elastic_operator.writes.pool_warden import PoolWarden
from elastic_operator.writes.replacement_writes import ReplacementWrites
from tests.builders import HOSTS, at, tpu_node
from tests.support.clock import FakeClock
from tests.support.stand_in_kube import api_error

NODES = tuple(f"tpu-1-{h}" for h in range(HOSTS))
CAUSE = QuarantineCause((("ns-a/crashy", "uid-a"),), "pod p exited with code 42")


class NodeKube(Kube):
    """Nodes' labels and annotations, the jobs that exist, and the Events posted."""

    def __init__(self, jobs: dict[str, str]) -> None:
        super().__init__(None)
        self.jobs = jobs  # "<namespace>/<name>" -> uid
        self.labels: dict[str, dict[str, str | None]] = {}
        self.annotations: dict[str, dict[str, str | None]] = {}
        self.events: list[tuple[str, StatusEvent]] = []
        self.gets: list[str] = []
        self.get_fails = False

    def label_node(self, name: str, labels: dict[str, str | None],
                   annotations: dict[str, str | None]) -> None:
        self.labels.setdefault(name, {}).update(labels)
        self.annotations.setdefault(name, {}).update(annotations)

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets.append(f"{namespace}/{name}")
        if self.get_fails:
            raise api_error(503, "ServiceUnavailable", "etcd is down")
        uid = self.jobs.get(f"{namespace}/{name}")
        return {"metadata": {"name": name, "uid": uid}} if uid is not None else None

    def post_event(self, job: dict[str, Any], event: StatusEvent, now: datetime,
                   name: str | None = None) -> bool:
        self.events.append((f"{job['kind']}/{job['metadata']['name']}", event))
        return True


JOB = {"apiVersion": "elastic.pathways.dev/v1alpha1", "kind": "ElasticTrainingJob",
       "metadata": {"name": "crashy", "namespace": "ns-a", "uid": "uid-a"}}


def test_a_quarantine_is_labelled_with_its_cause_and_told_on_the_job_and_the_node() -> None:
    kube = NodeKube({})
    replacer = ReplacementWrites(kube, OperatorMetrics(CollectorRegistry()), NodeActionLimiter())
    replacer.execute(JOB, (QuarantinePool("tpu-1", Reason.HARDWARE_FAILURE, NODES, 1, CAUSE),),
                     at(10))
    for node in NODES:
        assert kube.labels[node] == {QUARANTINE_LABEL: Reason.HARDWARE_FAILURE}
        assert quarantine_cause_from(kube.annotations[node][QUARANTINE_CAUSE_ANNOTATION]) == \
            CAUSE
    assert {where for where, _ in kube.events} == {"ElasticTrainingJob/crashy", "Node/tpu-1-0"}
    assert all("by ns-a/crashy: pod p exited with code 42" in e.message
               for _, e in kube.events)
    replacer.execute(JOB, (ReleasePool("tpu-1", Reason.HARDWARE_FAILURE, NODES, None,
                                       "its evidence is withdrawn"),), at(20))
    for node in NODES:
        assert kube.labels[node] == {QUARANTINE_LABEL: None}
        assert kube.annotations[node][QUARANTINE_CAUSE_ANNOTATION] is None
        assert kube.annotations[node][QUARANTINED_AT_ANNOTATION] is None
    assert [e.reason for _, e in kube.events][-2:] == [Reason.POOL_RELEASED] * 2


def warden(kube: NodeKube, reason: str = Reason.HARDWARE_FAILURE,
           clock: FakeClock | None = None) -> PoolWarden:
    index = NodeIndex()
    for node in NODES:
        index.node_seen(tpu_node(node, quarantined=reason, quarantined_at=at(0),
                                 quarantine_cause=CAUSE))
    return PoolWarden(kube, index, OperatorMetrics(CollectorRegistry()),
                      clock=clock or FakeClock(at(60), 0.0))


def test_the_warden_releases_a_quarantine_once_a_job_it_rests_on_is_gone() -> None:
    kube, clock = NodeKube({"ns-a/crashy": "uid-a"}), FakeClock(at(60), 0.0)
    w = warden(kube, clock=clock)
    assert w.sweep() == [] and kube.gets == ["ns-a/crashy"]
    clock.ticks = 29.0
    assert w.sweep() == [] and kube.gets == ["ns-a/crashy"]  # seen to exist: not asked again
    kube.jobs["ns-a/crashy"] = "uid-new"  # deleted, and a job of that name created since
    clock.ticks = 31.0
    (release,) = w.sweep()
    assert release.pool == "tpu-1" and "ns-a/crashy no longer exists" in release.message
    assert all(kube.labels[n] == {QUARANTINE_LABEL: None} for n in NODES)


def test_the_warden_never_releases_on_a_failed_read_nor_node_evidence() -> None:
    kube = NodeKube({})
    kube.get_fails = True
    assert warden(kube).sweep() == [] and kube.gets == ["ns-a/crashy"]
    kube.get_fails = False
    # A quarantine on node evidence is not the jobs' to end: nobody is asked about.
    assert warden(kube, Reason.NODE_NOT_READY).sweep() == [] and len(kube.gets) == 1
