"""The restart budgets in the status (elastic_api.budgets has the rule that spends them):
status.budgets, what each budget holds now and why that count; the JobSet's restarts
charged as they are seen; the JobSet ended once its own budget is spent within its
window. Pure.

Where each budget is spent: a slice's restarts by slice replacement (its failures in
slices[].recentFailures, core/replacement.py), the trainer restarts for stalls by
core/progressing.py (their times here, in stallRestarts.recent), the trainer's elastic
events by the trainer (status.training.retryTimes), the JobSet's restarts here, and with
them main's restarts in place (a crash of the program restarts main in its head pod,
core/trainer_restarts.py; once it cost a JobSet restart, and it counts as one). The times
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
    CountedMainRestarts,
    ElasticTrainingJobSpec,
    ElasticTrainingJobStatus,
    RestartBudgets,
    SliceStatus,
    TrainingReport,
)
from elastic_api.names import HEAD_REPLICATED_JOB, child_job_name
from elastic_operator.core.plan import EndHeadJob
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.trainer_restarts import live_head
from elastic_operator.model.objects import ObservedPod


@dataclass(frozen=True)
class Spending:
    """What this reconcile saw happen to the budgets the operator spends itself."""

    jobset_restarts_before: int  # counters.jobSetRestarts as stored
    jobset_restarts_now: int  # as the JobSet says (never fewer)
    stall_restarted: bool  # a trainer restart for a stall recorded in this reconcile
    terminal: bool  # the job finished: nothing is charged any more
    # The running head pod whose main restarts in place: (its uid, main's restartCount).
    head: tuple[str, int] | None = None
    # A stall restart in place the operator asked for (status.progress.restart): (the
    # pod's uid, main's restartCount when asked). Its restart is the stall budget's.
    asked: tuple[str, int | None] | None = None


def head_restarts(pods: Sequence[ObservedPod]) -> tuple[str, int] | None:
    """The running head pod whose main restarts in place, and main's restartCount there."""
    head = live_head(pods)
    if head is None or not head.uid or not head.main_restarts_in_place:
        return None
    return head.uid, head.main.restart_count if head.main is not None else 0


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
    main, main_in_place = _main_restarts(before, spending)
    jobset, events = _jobset(budgets, before, spending, main_in_place, main.total if main else 0,
                             now)
    return RestartBudgets(
        slice_restarts=_slices(budgets.slice_restarts, slices, now),
        elastic_retries=_retries(budgets.elastic_retries, previous.training, now),
        stall_restarts=stall, jobset_restarts=jobset, main_restarts=main), events


def _main_restarts(before: RestartBudgets | None, spending: Spending,
                   ) -> tuple[CountedMainRestarts | None, int]:
    """main's restarts in place as now counted, and how many of them are new (not charged
    yet): its restartCount above the count charged for the same pod (all of a new pod's)."""
    counted = before.main_restarts if before is not None else None
    if spending.head is None:
        return counted, 0
    uid, count = spending.head
    charged = counted.restarts if counted is not None and counted.pod_uid == uid else 0
    new = 0 if spending.terminal else max(0, count - charged)
    if new and spending.asked is not None and spending.asked[0] == uid \
            and spending.asked[1] is not None and charged <= spending.asked[1] < count:
        new -= 1  # the restart the operator asked for a stall: not a crash
    total = (counted.total if counted is not None else 0) + new
    return CountedMainRestarts(pod_uid=uid, restarts=max(count, charged), total=total), new



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
            main_in_place: int, main_in_place_total: int,
            now: datetime) -> tuple[BudgetStatus, list[StatusEvent]]:
    """The JobSet's restarts and main's restarts in place (`main_in_place` new ones, of
    `main_in_place_total` over the run), each charged when first seen (several at once when
    the operator was away: each at the time seen, which counts them sooner, never later).
    A count over the whole run is JobSet's own, plus main's restarts in place."""
    budget = budgets.jobset_restarts
    previous = before.jobset_restarts if before is not None else None
    times = list(previous.recent) if previous is not None else []
    spent_at = previous.spent_at if previous is not None else None
    new = max(0, spending.jobset_restarts_now - spending.jobset_restarts_before)
    last_at = now if new else (previous.last_at if previous is not None else None)
    events: list[StatusEvent] = []
    if budget.window_seconds is None:
        used = spending.jobset_restarts_now + main_in_place_total
        if main_in_place and used > budget.allowed and spent_at is None:
            spent_at = now
            events.append(_spent_event(used, main_in_place_total, budget, "over the run"))
        return _status(budget, used, (), spent_at, last_at=last_at), events
    for _ in range(0 if spending.terminal else new + main_in_place):
        charge = budget.charge(0, times, now)
        times = list(charge.recent)
        if not charge.allowed and spent_at is None:
            spent_at = now
            events.append(_spent_event(charge.used, main_in_place_total, budget,
                                       f"within {_since(times, now)}"))
    recent = budget.recent(times, now)
    return _status(budget, len(recent), recent, spent_at, last_at=last_at), events


def _spent_event(used: int, main_in_place: int, budget: Budget, when: str) -> StatusEvent:
    of = f" (main's restarts in place among them: {main_in_place} in the run)" \
        if main_in_place else ""
    return StatusEvent(
        reason=Reason.MAX_RESTARTS_EXCEEDED, type="Warning",
        message=f"the program restarted {used} times {when}{of} (allowed: "
                f"{budget.describe()}): a crash loop; ending it (its head Job's deadline), "
                "the job fails")


def _since(times: Sequence[datetime], now: datetime) -> str:
    seconds = (now - min(times)).total_seconds() if times else 0.0
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def plan_end_head(namespace: str, jobset: str, status: ElasticTrainingJobStatus,
                  head_pods: Sequence[ObservedPod]) -> EndHeadJob | None:
    """End the JobSet (its head Job) once its restart budget is spent, level-based:
    planned while the budget says spent and a head pod runs. A count over the whole run
    that the JobSet's restarts alone reached is JobSet's own to enforce: not planned."""
    budgets = status.budgets
    spent = budgets.jobset_restarts if budgets is not None else None
    main_in_place = budgets.main_restarts.total if budgets and budgets.main_restarts else 0
    if spent is None or spent.spent_at is None or (spent.window_seconds is None
                                                    and not main_in_place):
        return None
    head = live_head(head_pods)
    if head is None or not head.job_uid:
        return None
    return EndHeadJob(namespace, child_job_name(jobset, HEAD_REPLICATED_JOB, 0),
                      head.job_uid, spent.used, main_in_place)
