"""Restart in place or recreate: what a slice failure's evidence calls for. Pure.

A slice whose failure the evidence does not lay on its hosts keeps its pods: the kubelet
runs the exited container again in the same pod (restartPolicy OnFailure), on the same
node, with the same pod uid, IP and volumes, and no API request but its own status
writes. Recreating the worker Job instead costs every pod of the slice a delete, a
create, a schedule and a start: 237 s for one 1,536-host slice on the local control
plane (docs/benchmarks.md). Evidence against the hosts (a node NotReady or gone,
unhealthy chips, the node's lifecycle, maintenance, a hardware code the job declares, a
pool quarantined for other jobs' failures) still recreates the slice, on a spare pool
when one is free, as does a pod that ended (nothing is left to restart in place).

`ROWS` is the table docs/api.md prints ("Restart in place or move"), one row per case,
in the order `case_of` tries them; `decide` is the one entry point. A restart in place
that does not bring the slice back within spec.recovery.inPlaceDeadlineSeconds falls
back to recreation (`timed_out`), once.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from elastic_api.conditions import Reason
from elastic_api.models import RecoverySpec, SliceReplacement
from elastic_operator.core.blame import Evidence
from elastic_operator.model.objects import ObservedPod

Placement = Literal["InPlace", "Recreate"]


@dataclass(frozen=True)
class Row:
    """One row of the table: a case of failure, where its pods go, and why."""

    case: str
    placement: Placement
    why: str

    @property
    def in_place(self) -> bool:
        return self.placement == "InPlace"


# The table, in the order the cases are tried (the first that applies decides).
ROWS: tuple[Row, ...] = (
    Row("NodeNotReady", "Recreate", "a node of the slice is NotReady or gone: its host may "
        "be dead, and a pod on it cannot be restarted there"),
    Row("DeviceUnhealthy", "Recreate", "the kubelet reports TPU chips unhealthy, or refused "
        "a pod for its devices"),
    Row("NodeDisruption", "Recreate", "the node's lifecycle ended the pod (the taint "
        "manager, the pod garbage collector, a node shutdown)"),
    Row("Maintenance", "Recreate", "GKE is stopping the host (maintenance, impending "
        "termination)"),
    Row("SliceSlow", "Recreate", "the trainer measured the slice slow: a slow host is its "
        "hardware's, and a restart leaves it as slow"),
    Row("SliceHung", "Recreate", "the trainer found the slice hung while its pods stay "
        "Ready: none of its processes exits, and the operator cannot restart a pod's "
        "containers short of a request per pod (docs/design/in-place-restart.md)"),
    Row("HardwareReported", "Recreate", "the worker's exit code or reason is one the job "
        "declares a hardware failure (spec.recovery.hardwareExitCodes, hardwareReasons)"),
    Row("PoolQuarantined", "Recreate", "the slice's node pool is quarantined (other jobs' "
        "failures there): the slice leaves it"),
    Row("PodEnded", "Recreate", "a pod of the slice failed, was deleted or evicted, or is "
        "gone: nothing is left to restart in place"),
    Row("HostNotReady", "Recreate", "a pod runs but is not Ready, and no container of it "
        "exited: nothing restarts it in place"),
    Row("InPlaceOff", "Recreate", "it would restart in place, but spec.recovery."
        "restartInPlace is false"),
    Row("ProcessExited", "InPlace", "a worker container exited on a healthy node with a code "
        "the job does not declare a hardware failure: the kubelet runs it again in its pod"),
    Row("RestartedUnseen", "InPlace", "a worker container restarted in its pod between two "
        "looks (its restartCount grew): it is back where it stood"),
    Row("InPlaceTimedOut", "Recreate", "a restart in place did not bring the slice back "
        "within spec.recovery.inPlaceDeadlineSeconds (once: the recreation is not undone)"),
)
BY_CASE = {row.case: row for row in ROWS}

# Evidence reasons against the hosts (core/blame.py), by the case they are.
_NODE_CASES = {Reason.NODE_NOT_READY: "NodeNotReady", Reason.DEVICE_UNHEALTHY: "DeviceUnhealthy",
               Reason.NODE_DISRUPTION: "NodeDisruption", Reason.MAINTENANCE: "Maintenance"}
# The trainer's requests (core/hung.py): its own evidence, which the pods do not show.
_REQUESTED = {Reason.SLICE_SLOW: "SliceSlow", Reason.SLICE_HUNG: "SliceHung"}


@dataclass(frozen=True)
class Failure:
    """What the decision reads of one slice failure."""

    evidence: Evidence  # the strongest of its broken hosts (core/blame.py), or the trainer's
    reason: str  # the slice's failure reason (status.slices[].reason), e.g. SliceHung
    broken: Sequence[ObservedPod]  # its hosts' newest pods that are down
    pool_quarantined: bool = False  # the pool it runs on carries the quarantine label
    restarted_unseen: bool = False  # counted from restart counts no look saw

    @property
    def all_restarting(self) -> bool:
        """Every down host's pod is still there, running its containers again."""
        return bool(self.broken) and all(p.restarting and not p.failed and not p.terminating
                                         for p in self.broken)


def case_of(failure: Failure, recovery: RecoverySpec) -> str:
    """The table's case for a failure: the first that applies, in ROWS' order
    (InPlaceTimedOut is decided later, by `timed_out`)."""
    evidence = failure.evidence
    if evidence.blame == "Node":
        return _NODE_CASES.get(evidence.reason, "NodeNotReady")
    if failure.reason in _REQUESTED:
        return _REQUESTED[failure.reason]
    if evidence.blame == "Reported":
        return "HardwareReported"
    if failure.pool_quarantined:
        return "PoolQuarantined"
    if failure.broken and not failure.all_restarting:
        return "PodEnded"
    if not failure.broken and not failure.restarted_unseen:
        return "HostNotReady" if failure.reason == Reason.HOST_NOT_READY else "PodEnded"
    if not recovery.in_place_allowed:
        return "InPlaceOff"
    return "ProcessExited" if failure.broken else "RestartedUnseen"


def decide(failure: Failure, recovery: RecoverySpec) -> Row:
    """Where the failed slice's pods go, and why (a row of ROWS)."""
    return BY_CASE[case_of(failure, recovery)]


def timed_out(record: SliceReplacement, recovery: RecoverySpec, now: datetime) -> bool:
    """A restart in place the slice has not come back from within the deadline."""
    deadline = timedelta(seconds=recovery.in_place_deadline)
    return record.action == "RestartInPlace" and now >= record.requested_at + deadline


def due_in(record: SliceReplacement, recovery: RecoverySpec, now: datetime) -> float | None:
    """Seconds until a restart in place times out (None: not one)."""
    if record.action != "RestartInPlace":
        return None
    deadline = record.requested_at + timedelta(seconds=recovery.in_place_deadline)
    return max(0.0, (deadline - now).total_seconds())
