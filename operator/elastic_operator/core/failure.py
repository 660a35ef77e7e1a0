"""Whether the job has finished: Failed (with why) or Succeeded. Both are sticky: once
True they stay, whatever the cluster shows later; a new failure posts one Event."""
from __future__ import annotations

from dataclasses import dataclass

from elastic_api.budgets import budgets_of
from elastic_api.conditions import TRAINER_FAILURE_REASONS, ConditionType, Reason
from elastic_api.models import (
    Condition,
    ElasticTrainingJobSpec,
    ElasticTrainingJobStatus,
    RestartBudgets,
    SliceStatus,
    TrainingReport,
)
from elastic_api.names import HEAD_REPLICATED_JOB, JOBSET_FAIL_JOBSET_MESSAGE, child_job_name
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import fmt_slices
from elastic_operator.model.objects import Observed, ObservedJobSet


@dataclass(frozen=True)
class Failure:
    reason: str
    message: str


@dataclass(frozen=True)
class Outcome:
    """How the job ended, if it did."""

    succeeded: bool = False
    failure: Failure | None = None
    new_failure: bool = False  # failed in this reconcile (post an Event)

    @property
    def terminal(self) -> bool:
        return self.succeeded or self.failure is not None

    @property
    def failure_message(self) -> str:
        return self.failure.message if self.failure is not None else ""


def terminal_condition(status: ElasticTrainingJobStatus, type_: str) -> Condition | None:
    """The status's Succeeded or Failed condition if it is True. Both are sticky, so any
    True one counts, not only the first of its type: a status with two (a hand edit, an
    older operator) stays finished, and every reader (the status computation, the plan,
    the replacement) agrees that it is."""
    return next((c for c in status.conditions if c.type == type_ and c.status == "True"),
                None)


def is_terminal(status: ElasticTrainingJobStatus) -> bool:
    """The job has finished (Succeeded or Failed), as its status says."""
    return any(terminal_condition(status, t) is not None
               for t in (ConditionType.SUCCEEDED, ConditionType.FAILED))


def decide_outcome(spec: ElasticTrainingJobSpec, observed: Observed,
                   previous: ElasticTrainingJobStatus) -> Outcome:
    jobset = observed.jobset
    succeeded = terminal_condition(previous, ConditionType.SUCCEEDED) is not None or (
        jobset is not None and jobset.terminal_state == "Completed")
    failed = terminal_condition(previous, ConditionType.FAILED)
    if failed is not None:
        return Outcome(succeeded, Failure(failed.reason, failed.message))
    if succeeded:
        return Outcome(succeeded=True)
    failure = (trainer_failure(previous.training)
               or jobset_failure(spec, observed, previous.slices, previous.budgets)
               or lost_jobset_failure(jobset, previous.jobset_name))
    return Outcome(failure=failure, new_failure=failure is not None)


def trainer_failure(report: TrainingReport | None) -> Failure | None:
    """The trainer gave up (its elastic retries or timeout): its reason is the job's."""
    if report is None or report.state != "Failed" or report.reason not in \
            TRAINER_FAILURE_REASONS:
        return None
    return Failure(report.reason, report.message or f"the trainer reported {report.reason}")


def jobset_failure(spec: ElasticTrainingJobSpec, observed: Observed,
                   slices: list[SliceStatus] | None = None,
                   budgets: RestartBudgets | None = None) -> Failure | None:
    """The JobSet failed: its restart budget ran out (JobSet's count over the run, or the
    operator's: per window, or with main's restarts in place; `budgets`, the status's), or
    the head failed; led by the slices whose own restart budget was spent (`slices`: the
    status's), as they caused it."""
    jobset = observed.jobset
    if jobset is None or jobset.terminal_state != "Failed":
        return None
    budget = budgets_of(spec).jobset_restarts
    counted = budgets.jobset_restarts if budgets is not None else None
    main_in_place = budgets.main_restarts.total if budgets and budgets.main_restarts else 0
    head = next((r for r in jobset.replicated_jobs if r.name == HEAD_REPLICATED_JOB), None)
    head_pod_failed = any(p.replicated_job == HEAD_REPLICATED_JOB and p.failed
                          for p in observed.pods)
    message = f"JobSet {jobset.name} failed after {jobset.restarts} restarts"
    if main_in_place:
        message += f" and {main_in_place} of main in place"
    if (counted is not None and counted.spent_at is not None) or _ended_head(jobset):
        reason = Reason.MAX_RESTARTS_EXCEEDED
        used = counted.used if counted is not None else jobset.restarts + main_in_place
        # Many restarts within a window are a crash loop; over the whole run, a count spent.
        spent = "a crash loop" if budget.window_seconds is not None else "the budget spent"
        message += (f", {used} of them {budget.span()}: {spent} (allowed: "
                    f"{budget.describe()}); the operator ended the head Job")
    else:
        reason = Reason.JOBSET_FAILED
        if head_pod_failed or (head is not None and head.failed > 0):
            reason = Reason.HEAD_FAILED
        elif budget.window_seconds is None and jobset.restarts >= budget.allowed:
            reason = Reason.MAX_RESTARTS_EXCEEDED
        message += f" ({budget.short()})"
    if jobset.failed_message:
        message += f": {jobset.failed_message}"
    return Failure(reason, _budget_spent(spec, slices or []) + message)


def _ended_head(jobset: ObservedJobSet) -> bool:
    """JobSet's message names its FailJobSet rule's action on the head Job: the operator
    ended it for the budget (the one such rule rendered, elastic_api.names
    JOBSET_BUDGET_RULE), though the status no longer says so (written by a release that
    kept no budgets)."""
    said = jobset.failed_message or ""
    return JOBSET_FAIL_JOBSET_MESSAGE in said and \
        child_job_name(jobset.name, HEAD_REPLICATED_JOB, 0) in said


def _budget_spent(spec: ElasticTrainingJobSpec, slices: list[SliceStatus]) -> str:
    """`slice 1 failed (SliceHung) with its restart budget spent (maxSliceRestarts 0), so `,
    or nothing: the slices the operator gave up on (their Job left to fail)."""
    spent = [s for s in slices if s.replacement is not None and s.replacement.action == "GiveUp"]
    if not spent:
        return ""
    reasons = ", ".join(sorted({s.replacement.reason for s in spent if s.replacement}))
    its = "its" if len(spent) == 1 else "their"
    return (f"{fmt_slices(s.index for s in spent)} failed ({reasons}) with {its} restart "
            f"budget spent ({budgets_of(spec).slice_restarts.short()}), so ")


def lost_jobset_failure(jobset: ObservedJobSet | None,
                        previous_name: str | None) -> Failure | None:
    """The JobSet existed and was deleted behind the operator's back."""
    if jobset is not None or not previous_name:
        return None
    return Failure(Reason.JOBSET_LOST,
                   f"JobSet {previous_name} was deleted outside the operator; it is not "
                   "recreated. Delete and re-create the ElasticTrainingJob to start over.")


def failure_events(outcome: Outcome) -> list[StatusEvent]:
    if outcome.failure is None or not outcome.new_failure:
        return []
    return [StatusEvent(reason=outcome.failure.reason, message=outcome.failure.message,
                        type="Warning")]


def succeeded_condition(setter: ConditionSetter, outcome: Outcome,
                        jobset_name: str | None) -> Condition:
    if not outcome.succeeded:
        return setter.false(ConditionType.SUCCEEDED, Reason.NOT_FINISHED)
    for cond in setter.previous:  # sticky: kept exactly as first written
        if cond.type == ConditionType.SUCCEEDED and cond.status == "True":
            return cond
    return setter.true(ConditionType.SUCCEEDED, Reason.JOBSET_COMPLETED,
                       f"JobSet {jobset_name} completed")


def failed_condition(setter: ConditionSetter, outcome: Outcome) -> Condition:
    if outcome.failure is None:
        return setter.false(ConditionType.FAILED, Reason.NOT_FAILED)
    return setter.true(ConditionType.FAILED, outcome.failure.reason, outcome.failure.message)
