"""One pure function per condition.

Each function decides one condition from what it needs and nothing else; `compute_status`
(status.py) calls them. Failed and Succeeded are in failure.py, Ready in ready.py; the
setter and its transition rule in setter.py.
"""
from __future__ import annotations

from collections.abc import Sequence

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import (
    CLOSED_BY_OPERATOR,
    Condition,
    ElasticTrainingJob,
    RecoveryRecord,
    SliceStatus,
    TrainingReport,
)
from elastic_operator.core.ownership import owned_by_another, spec_drift
from elastic_operator.core.recovery import recovered_message
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.unreported import confirmed_message, unconfirmed_message
from elastic_operator.core.wording import first_of, fmt_slices, iso, plural
from elastic_operator.model.objects import ObservedJobSet

# The SliceDown condition names at most this many slices and why, then counts the rest.
MAX_SLICES_NAMED = 8


def slice_down_condition(setter: ConditionSetter, slices: list[SliceStatus],
                         terminal: bool) -> Condition:
    """True while any slice is Down: the message names each slice and why."""
    down = [s for s in slices if s.state == "Down"]
    if not down or terminal:
        return setter.false(ConditionType.SLICE_DOWN, Reason.NO_SLICE_DOWN)
    reasons = sorted({s.reason or Reason.SLICE_DOWN for s in down})
    return setter.true(ConditionType.SLICE_DOWN,
                       reasons[0] if len(reasons) == 1 else Reason.MULTIPLE_CAUSES,
                       first_of([f"slice {s.index}: {s.message or s.reason}" for s in down],
                                MAX_SLICES_NAMED, "slices down"))


def recovering_condition(
    setter: ConditionSetter, record: RecoveryRecord | None, recovering: bool,
    report: TrainingReport | None, terminal: bool, failure_message: str,
    waiting_for: str | None = None,
) -> Condition:
    """True from a failure until the trainer resumes (for a trainer that reports no
    elastic events, until the operator closes it: `waiting_for` says on what); False says
    how it ended."""
    if recovering and record is not None:
        source = Reason.ELASTIC_EVENT if record.elastic_event_id is not None \
            else Reason.SLICE_DOWN
        message = f"since {iso(record.detected_at)}"
        if record.slices:
            message = f"{fmt_slices(record.slices)} went down; " + message
        if report is not None and report.elastic_event is not None and \
                report.elastic_event.id == record.elastic_event_id:
            message += f"; trainer phase {report.elastic_event.phase}"
        elif waiting_for:
            message += f"; {waiting_for}"
        else:
            message += "; waiting for the trainer to report a step after the failure"
        return setter.true(ConditionType.RECOVERING, source, message)
    if record is not None and record.closed_by == CLOSED_BY_OPERATOR:
        if record.confirmed_by is None:
            return setter.false(ConditionType.RECOVERING, Reason.RECOVERED_UNCONFIRMED,
                                unconfirmed_message(record))
        return setter.false(ConditionType.RECOVERING, Reason.RECOVERED,
                            confirmed_message(record))
    if record is not None and not record.open:
        return setter.false(ConditionType.RECOVERING, Reason.RECOVERED,
                            recovered_message(record))
    if record is not None and terminal:
        return setter.false(ConditionType.RECOVERING, Reason.RECOVERY_FAILED,
                            failure_message or "the job finished")
    return setter.false(ConditionType.RECOVERING, Reason.NO_FAILURE)


def degraded_condition(setter: ConditionSetter, report: TrainingReport | None,
                       num_slices: int, terminal: bool, slow: str | None = None) -> Condition:
    """True while the trainer trains (or recovers) on fewer slices than the spec asks
    (FewerSlices, which explains slower steps too), or while its steps run slower than
    its own best for a sustained window (SlowSteps: `slow` says how, core/progressing.py)."""
    active = report.active_slices if report is not None else None
    if (active is not None and active < num_slices and not terminal and report is not None
            and report.state in ("Training", "Recovering")):
        return setter.true(ConditionType.DEGRADED, Reason.FEWER_SLICES,
                           f"training on {active} of {num_slices} slices"
                           + (f"; {slow}" if slow else ""))
    if slow is not None and not terminal:
        return setter.true(ConditionType.DEGRADED, Reason.SLOW_STEPS, slow)
    return setter.false(ConditionType.DEGRADED, Reason.ALL_SLICES_ACTIVE if active is not None
                        else Reason.NO_REPORT)


def slow_steps_events(previous: Condition | None, degraded: Condition) -> list[StatusEvent]:
    """The SlowSteps Warning, once per episode (when Degraded turns to SlowSteps)."""
    if degraded.status != "True" or degraded.reason != Reason.SLOW_STEPS:
        return []
    if previous is not None and previous.status == "True" \
            and previous.reason == Reason.SLOW_STEPS:
        return []
    return [StatusEvent(reason=Reason.SLOW_STEPS, type="Warning", message=degraded.message)]


def suspended_condition(setter: ConditionSetter, suspend: bool,
                        jobset: ObservedJobSet | None) -> Condition:
    """spec.suspend, and whether the JobSet is suspended yet."""
    if not suspend:
        return setter.false(ConditionType.SUSPENDED, Reason.NOT_SUSPENDED)
    done = jobset is None or jobset.suspended
    return setter.true(ConditionType.SUSPENDED, Reason.SUSPENDED if done else Reason.SUSPENDING,
                       "spec.suspend is true" + ("" if done else "; suspending the JobSet"))


def spec_applied_condition(
    setter: ConditionSetter, job: ElasticTrainingJob, jobset: ObservedJobSet | None,
    previous_jobset_name: str | None, terminal: bool,
) -> Condition:
    """Whether the JobSet runs the current spec (only spec.suspend applies in place)."""
    if jobset is not None and owned_by_another(job, jobset):
        return setter.false(ConditionType.SPEC_APPLIED, Reason.JOBSET_NAME_CONFLICT,
                            f"JobSet {jobset.name} exists and is owned by another object; "
                            "delete it or rename this job")
    drift = spec_drift(job, jobset.applied_spec) if jobset is not None else []
    if drift:
        return setter.false(
            ConditionType.SPEC_APPLIED, Reason.IMMUTABLE_SPEC_CHANGED,
            f"{', '.join(drift[:6])} changed after the JobSet was created and cannot be "
            "applied in place (only spec.suspend can); the running JobSet keeps the old "
            "spec. Delete and re-create the ElasticTrainingJob to apply it.")
    if jobset is None and not terminal and not previous_jobset_name:
        return setter.unknown(ConditionType.SPEC_APPLIED, Reason.JOBSET_NOT_CREATED)
    return setter.true(ConditionType.SPEC_APPLIED, Reason.APPLIED)


def training_report_condition(setter: ConditionSetter, report: TrainingReport | None,
                              problem: str | None) -> Condition:
    """Whether status.training parsed cleanly (the message names what was ignored)."""
    if problem:
        return setter.false(ConditionType.TRAINING_REPORT_VALID, Reason.INVALID_REPORT,
                            problem)
    if report is None:
        return setter.unknown(ConditionType.TRAINING_REPORT_VALID, Reason.NO_REPORT,
                              "the trainer has not reported yet")
    return setter.true(ConditionType.TRAINING_REPORT_VALID, Reason.VALID)


def spares_condition(setter: ConditionSetter, spares: list[str] | None,
                     wanted: int, slices: Sequence[SliceStatus] = ()) -> Condition:
    """Whether the healthy spare node pools are at least spec.tpu.spares; False with
    NoHealthyPool while a slice waits for one (the message says why each pool of the
    shape was refused)."""
    waiting = [s for s in slices if s.reason == Reason.NO_HEALTHY_POOL]
    if waiting:
        return setter.false(ConditionType.SPARES_AVAILABLE, Reason.NO_HEALTHY_POOL,
                            "; ".join(f"slice {s.index} waits for a node pool: {s.message}"
                                      for s in waiting))
    if spares is None:
        return setter.unknown(ConditionType.SPARES_AVAILABLE, Reason.NO_REPORT,
                              "no TPU node pools of this shape seen (spec.placement Any, or "
                              "none in the cluster)")
    have = f"{plural(len(spares), 'healthy spare node pool')}" + (
        f" ({', '.join(spares)})" if spares else "")
    if len(spares) >= wanted:
        return setter.true(ConditionType.SPARES_AVAILABLE, Reason.ENOUGH_SPARES,
                           f"{have}; spec.tpu.spares is {wanted}")
    return setter.false(ConditionType.SPARES_AVAILABLE, Reason.FEWER_SPARES,
                        f"{have}; spec.tpu.spares is {wanted}: a failed slice may wait for "
                        "its node pool to be repaired")
