"""The restart budgets in the status (elastic_api.budgets has the rule that spends them):
status.budgets, what each budget holds now and why that count; the JobSet's restarts
charged as they are seen; the JobSet ended once its own budget is spent within its
window. Pure.

Where each budget is spent: a slice's restarts by slice replacement (its failures in
slices[].recentFailures, core/replacement.py), the trainer restarts for stalls by
core/progress.py (their times here, in stallRestarts.recent), the trainer's elastic
events by the trainer (status.training.retryTimes), the JobSet's restarts here. The times
live in the status: a restarted operator goes on counting from them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from elastic_api.budgets import Budget, Budgets, budgets_of
from elastic_api.conditions import Reason
from elastic_api.models import (
    BudgetStatus,
    ElasticTrainingJobSpec,
    ElasticTrainingJobStatus,
    RestartBudgets,
    SliceStatus,
    TrainingReport,
)
from elastic_api.names import HEAD_REPLICATED_JOB, child_job_name
from elastic_operator.core.events import StatusEvent
from elastic_operator.core.plan import EndJobSet
from elastic_operator.observed import ObservedPod


@dataclass(frozen=True)
class Spending:
    """What this reconcile saw happen to the budgets the operator spends itself."""

    jobset_restarts_before: int  # counters.jobSetRestarts as stored
    jobset_restarts_now: int  # as the JobSet says (never fewer)
    stall_restarted: bool  # a trainer restart for a stall recorded in this reconcile
    terminal: bool  # the job finished: nothing is charged any more


def recent_stall_restarts(previous: ElasticTrainingJobStatus) -> tuple[datetime, ...]:
    """When the trainer restarts for stalls that count now came (as stored)."""
    budgets = previous.budgets
    return tuple(budgets.stall_restarts.recent) if budgets is not None else ()


def track_budgets(spec: ElasticTrainingJobSpec, previous: ElasticTrainingJobStatus,
                  slices: Sequence[SliceStatus], spending: Spending,
                  now: datetime) -> tuple[RestartBudgets, list[StatusEvent]]:
    """status.budgets after this reconcile, and the Event of a JobSet budget just spent."""
    budgets = budgets_of(spec)
    before = previous.budgets
    stall = _stalls(budgets.stall_restarts, before, previous.counters.stall_restarts,
                    spending, now)
    jobset, events = _jobset(budgets, before, spending, now)
    return RestartBudgets(
        slice_restarts=_slices(budgets.slice_restarts, slices, now),
        elastic_retries=_retries(budgets.elastic_retries, previous.training, now),
        stall_restarts=stall, jobset_restarts=jobset), events


def _status(budget: Budget, used: int, recent: Sequence[datetime] = (),
            spent_at: datetime | None = None, slice_: int | None = None,
            last_at: datetime | None = None) -> BudgetStatus:
    return BudgetStatus(allowed=budget.allowed, window_seconds=budget.window_seconds,
                        derived=budget.derived, rule=budget.describe(), used=used,
                        slice=slice_, recent=list(recent), spent_at=spent_at,
                        last_at=last_at)


def jobset_restarted_at(previous: ElasticTrainingJobStatus, restarts_now: int,
                        now: datetime) -> datetime | None:
    """When the JobSet last restarted, as far as the operator saw: now, if its count
    went up since the status before."""
    if restarts_now > previous.counters.jobset_restarts:
        return now
    budgets = previous.budgets
    return budgets.jobset_restarts.last_at if budgets is not None else None


def _slices(budget: Budget, slices: Sequence[SliceStatus], now: datetime) -> BudgetStatus:
    """The slice that has spent the most of its budget; when one was last given up on."""
    used = {s.index: budget.used(s.restarts, s.recent_failures, now) for s in slices}
    most = max(used, key=lambda i: (used[i], -i), default=None)
    spent = [s.replacement.requested_at for s in slices
             if s.replacement is not None and s.replacement.action == "GiveUp"]
    return _status(budget, used[most] if most is not None else 0,
                   spent_at=max(spent, default=None), slice_=most)


def _retries(budget: Budget, report: TrainingReport | None, now: datetime) -> BudgetStatus:
    """The trainer's budget, as its report says it spent it."""
    if report is None:
        return _status(budget, 0)
    times = report.retry_times or []
    used = budget.allowed - report.retries_remaining \
        if report.retries_remaining is not None and budget.window_seconds is None \
        else budget.used(0, times, now)
    spent = report.observed_at if report.state == "Failed" \
        and report.reason == Reason.ELASTIC_RETRIES_EXHAUSTED else None
    return _status(budget, max(0, used), budget.recent(times, now), spent)


def _stalls(budget: Budget, before: RestartBudgets | None, total: int, spending: Spending,
            now: datetime) -> BudgetStatus:
    previous = before.stall_restarts if before is not None else None
    times = list(previous.recent) if previous is not None else []
    spent_at = previous.spent_at if previous is not None else None
    if spending.stall_restarted:
        times.append(now)
        total += 1
    recent = budget.recent(times, now) if budget.window_seconds is not None else ()
    return _status(budget, budget.used(total, recent, now), recent, spent_at)


def _jobset(budgets: Budgets, before: RestartBudgets | None, spending: Spending,
            now: datetime) -> tuple[BudgetStatus, list[StatusEvent]]:
    """The JobSet's restarts, each charged when first seen (several at once when the
    operator was away: each at the time seen, which counts them sooner, never later). A
    count over the whole run is JobSet's own: nothing to charge."""
    budget = budgets.jobset_restarts
    previous = before.jobset_restarts if before is not None else None
    times = list(previous.recent) if previous is not None else []
    spent_at = previous.spent_at if previous is not None else None
    new = max(0, spending.jobset_restarts_now - spending.jobset_restarts_before)
    last_at = now if new else (previous.last_at if previous is not None else None)
    if budget.window_seconds is None:
        return _status(budget, spending.jobset_restarts_now, (), spent_at,
                       last_at=last_at), []
    events: list[StatusEvent] = []
    for _ in range(0 if spending.terminal else new):
        charge = budget.charge(0, times, now)
        times = list(charge.recent)
        if not charge.allowed and spent_at is None:
            spent_at = now
            events.append(StatusEvent(
                reason=Reason.MAX_RESTARTS_EXCEEDED, type="Warning",
                message=f"the JobSet restarted {charge.used} times within "
                        f"{_since(times, now)} (allowed: {budget.describe()}): a crash "
                        "loop; ending it (its head Job's deadline), the job fails"))
    recent = budget.recent(times, now)
    return _status(budget, len(recent), recent, spent_at, last_at=last_at), events


def _since(times: Sequence[datetime], now: datetime) -> str:
    seconds = (now - min(times)).total_seconds() if times else 0.0
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def plan_end_jobset(namespace: str, jobset: str, status: ElasticTrainingJobStatus,
                    head_pods: Sequence[ObservedPod]) -> EndJobSet | None:
    """End the JobSet (its head Job) once its restart budget is spent within its window,
    level-based: planned while the budget says spent and a head pod names its Job."""
    budgets = status.budgets
    spent = budgets.jobset_restarts if budgets is not None else None
    if spent is None or spent.spent_at is None or spent.window_seconds is None:
        return None
    heads = [p for p in head_pods if p.job_uid and p.replicated_job == HEAD_REPLICATED_JOB
             and not p.terminating]
    if not heads:
        return None
    newest = max(heads, key=lambda p: (p.created_at is not None, p.created_at or 0, p.name))
    return EndJobSet(namespace, child_job_name(jobset, HEAD_REPLICATED_JOB, 0),
                     newest.job_uid or "", spent.used)
