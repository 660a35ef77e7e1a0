"""The trainer's --max-retries as a restart budget per window (elastic_api.budgets): the
same rule, and the same answers, as the operator's; carried to a new process through
status.training.retryTimes."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jax
from builders import etj

from elastic_api.budgets import budgets_of
from elastic_api.models import TrainingReport
from elastic_operator.core.budget_tracking import Spending, track_budgets
from elastic_operator.render import trainer_command
from elastic_trainer.errors import ScaleUpSignal
from elastic_trainer.report import prior_state
from elastic_trainer.retry import SliceLossLimit

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _loss() -> Exception:
    return jax.errors.JaxRuntimeError("DATA_LOSS: slice 1 is down")


def _flag(cmd: list[str], name: str) -> int:
    return int(cmd[cmd.index(name) + 1])


def test_a_crash_loop_of_slice_losses_ends_at_the_fourth_within_the_hour() -> None:
    clock = Clock()
    limit = SliceLossLimit(3, window_seconds=3600, now=clock)
    answers = []
    for _ in range(4):
        clock.now += timedelta(seconds=15)
        answers.append(limit(1, _loss()))
    assert answers == [True, True, True, False]
    assert limit.exhausted_message(_loss()) == (
        "4 elastic events within any 1 h, --max-retries is 3; last: DATA_LOSS: slice 1 is "
        "down")
    assert limit(1, ScaleUpSignal({1})) and limit.remaining == 0  # a return costs nothing


def test_losses_an_hour_apart_never_spend_it_and_the_times_are_reported() -> None:
    clock = Clock()
    limit = SliceLossLimit(3, window_seconds=3600, now=clock)
    for _ in range(10):
        clock.now += timedelta(hours=1, seconds=1)
        assert limit(1, _loss())
    assert limit.remaining == 2 and limit.recent == [clock.now]


def test_the_trainer_and_the_operator_give_the_same_answers_for_the_same_losses() -> None:
    """The flags the renderer gives the trainer, and the budget the operator reports,
    from one spec; the same slice losses fed to both."""
    job = etj().tpu("v5e", "16x16", 16).build()
    cmd = trainer_command(job)
    clock = Clock()
    limit = SliceLossLimit(_flag(cmd, "--max-retries"),
                           window_seconds=_flag(cmd, "--retry-window-seconds") or None,
                           now=clock)
    budget = budgets_of(job.spec).elastic_retries
    times: tuple[datetime, ...] = ()
    gaps = [30, 30, 600, 30, 30, 30, 4000, 10, 10, 10, 10, 10]
    for gap in gaps:
        clock.now += timedelta(seconds=gap)
        charge = budget.charge(0, times, clock.now)
        times = charge.recent
        assert limit(1, _loss()) == charge.allowed
        report = TrainingReport(observed_at=clock.now, state="Training",
                                retries_remaining=limit.remaining,
                                retry_times=limit.recent)
        status = _with_training(report)
        seen, _ = track_budgets(job.spec, status, [], Spending(0, 0, False, False), clock.now)
        assert seen.elastic_retries.used == budget.used(0, times, clock.now)
        assert seen.elastic_retries.allowed == limit.max_retries


def _with_training(report: TrainingReport) -> Any:
    from elastic_api.models import ElasticTrainingJobStatus

    return ElasticTrainingJobStatus(training=report)


def test_a_new_process_goes_on_counting_from_the_times_reported() -> None:
    recent = [T0 - timedelta(minutes=m) for m in (50, 30, 10)]
    status = {"training": {"observedAt": T0.isoformat(), "state": "Training",
                           "retriesRemaining": 0,
                           "retryTimes": [t.isoformat() for t in recent]}}
    prior = prior_state(status, 3, 3600)
    assert prior.retry_times == tuple(recent)
    clock = Clock()
    limit = SliceLossLimit(3, window_seconds=3600, recent=prior.retry_times, now=clock)
    assert limit.remaining == 0 and not limit(1, _loss())
    clock.now = T0 + timedelta(minutes=15)  # the oldest left the window 5 minutes ago
    assert limit.remaining == 0  # the refused one counts too
    clock.now = T0 + timedelta(minutes=31)
    assert limit.remaining == 1
    # A count over the run ignores the times and goes on from retriesRemaining.
    assert prior_state(status, 3).retry_times == () and prior_state(status, 3).failures == 3
