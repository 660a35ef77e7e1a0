"""The largest jobs, as the status computation sees them (tests/builders.py's observed
values): the record job (199 slices of v5e 16x16, 64 hosts each: 12,736 worker pods)
and the largest slice (v5p 16x16x24: 1,536 hosts)."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus
from elastic_operator.core.status import compute_status
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.model.objects import Observed, ObservedPod
from tests.builders import WorkerPod, at, etj, healthy_pods, nodes_for, observe, observed_jobset

RECORD = (199, "v5e", "16x16", 64)  # slices, type, topology, hosts per slice
LARGEST_SLICE = (1, "v5p", "16x16x24", 1536)


def large_job(num_slices: int, tpu_type: str, topology: str) -> ElasticTrainingJob:
    """The article's job of this shape. Built past the model's own bounds (the slice cap
    is admission's business, tested there): only the status computation reads it."""
    base = etj().uid("uid-1").generation(1).tpu(tpu_type, topology, 1).build()
    tpu = base.spec.tpu.model_copy(update={"num_slices": num_slices})
    return base.model_copy(update={"spec": base.spec.model_copy(update={"tpu": tpu})})


class LargeRun:
    """A large job, its JobSet and nodes, and its status look by look."""

    def __init__(self, num_slices: int, tpu_type: str, topology: str, hosts: int) -> None:
        self.num_slices, self.hosts = num_slices, hosts
        self.job = large_job(num_slices, tpu_type, topology)
        self.jobset = replace(observed_jobset(self.job).build(), worker_hosts_per_slice=hosts)
        self.nodes = nodes_for(num_slices, hosts)
        self.status = ElasticTrainingJobStatus()

    def healthy(self) -> list[ObservedPod]:
        return healthy_pods(self.num_slices, self.hosts)

    def failed(self, hosts: dict[int, range | list[int]], at_: datetime) -> list[ObservedPod]:
        """Every pod healthy but those of `hosts` (slice -> its failed hosts)."""
        return [WorkerPod(i, h).failed(at_).build() if h in hosts.get(i, ()) else
                WorkerPod(i, h).build()
                for i in range(self.num_slices) for h in range(self.hosts)]

    def look(self, pods: list[ObservedPod], seconds: float
             ) -> tuple[ElasticTrainingJobStatus, list[StatusEvent]]:
        """The status computed from one look at `pods`, `seconds` after T0; kept."""
        observed: Observed = observe(pods, jobset=self.jobset, nodes=self.nodes)
        self.status, events = compute_status(self.job, observed, self.status, at(seconds))
        return self.status, events
