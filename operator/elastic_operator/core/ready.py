"""The Ready condition and status.phase: the first rule of the cascade that applies.

Ready summarizes the other conditions; the phase is what `kubectl get etj` shows.
Table-tested in tests/unit/test_status_ready.py (one row per rule).
"""
from __future__ import annotations

from dataclasses import dataclass

from elastic_api.conditions import Phase, Reason
from elastic_api.models import ConditionStatus
from elastic_operator.core.wording import fmt_slices


@dataclass(frozen=True)
class JobSummary:
    """What the cascade looks at, from the other conditions and the slices."""

    num_slices: int
    ready_slices: int = 0
    failure_message: str | None = None  # None: not failed
    succeeded: bool = False
    suspended: bool = False  # spec.suspend
    jobset_exists: bool = True
    down_slices: tuple[int, ...] = ()
    recovering: bool = False
    restarting: bool = False  # a slice is Restarting (replacement pods not ready)
    degraded: bool = False
    active_slices: int | None = None  # the trainer's report
    # Queued (Kueue): the Admitted condition's (reason, message).
    queued_because: tuple[str, str] | None = None


@dataclass(frozen=True)
class Readiness:
    status: ConditionStatus
    reason: str
    message: str
    phase: str


def readiness(s: JobSummary) -> Readiness:
    if s.failure_message is not None:
        return Readiness("False", Reason.FAILED, s.failure_message, Phase.FAILED)
    if s.succeeded:
        return Readiness("False", Reason.SUCCEEDED, "the job has finished", Phase.SUCCEEDED)
    if s.suspended:
        return Readiness("False", Reason.SUSPENDED, "spec.suspend is true", Phase.SUSPENDED)
    if s.queued_because is not None:
        return Readiness("False", s.queued_because[0], s.queued_because[1], Phase.QUEUED)
    if not s.jobset_exists:
        return Readiness("False", Reason.JOBSET_NOT_CREATED, "the JobSet does not exist yet",
                         Phase.PENDING)
    if s.down_slices:
        return Readiness("False", Reason.SLICE_DOWN, f"{fmt_slices(s.down_slices)} down",
                         Phase.SLICE_DOWN)
    if s.recovering:
        return Readiness("False", Reason.RECOVERING, "waiting for training to resume",
                         Phase.RECOVERING)
    counted = f"{s.ready_slices}/{s.num_slices} slices ready"
    if s.ready_slices < s.num_slices:
        phase = Phase.DEGRADED if s.degraded else \
            Phase.RECOVERING if s.restarting else Phase.PENDING
        return Readiness("False", Reason.SLICES_NOT_READY, counted, phase)
    if s.degraded:
        return Readiness("True", Reason.DEGRADED,
                         f"training on {s.active_slices} of {s.num_slices} slices",
                         Phase.DEGRADED)
    return Readiness("True", Reason.ALL_SLICES_READY, counted, Phase.RUNNING)
