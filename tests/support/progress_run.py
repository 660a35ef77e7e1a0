"""A job reconciled over time as the operator would, for the tests of its progress
tracking (core/progressing.py): each look sets status.training and computes the status,
keeping every Event."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus, TrainingReport
from elastic_operator.core.setter import get_condition
from elastic_operator.core.status import compute_status
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.model.objects import Observed, ObservedPod
from tests.builders import at as s
from tests.builders import etj, head_pod, healthy_pods, main_running, observe

STARTED = s(0)
HEAD = replace(head_pod(main=main_running(s(0))), uid="head-uid-1", job_uid="head-job-uid")


def job_with(**elastic: Any) -> ElasticTrainingJob:
    return etj().uid("uid-1").generation(1).spec(elastic=elastic).build() if elastic \
        else etj().uid("uid-1").generation(1).build()


def pods(head: ObservedPod | None = HEAD) -> list[ObservedPod]:
    return healthy_pods() + ([head] if head is not None else [])


def training(at_: datetime, step: int, **more: Any) -> TrainingReport:
    fields = {"observedAt": at_.isoformat(), "state": "Training", "step": step,
              "processId": 7, "hostName": "head", "processStartedAt": STARTED.isoformat(),
              "activeSlices": 3, **more}
    return TrainingReport.model_validate(fields)


@dataclass
class Run:
    """A job reconciled over time: each look sets status.training (or keeps it) and
    computes the status as the operator would, keeping every Event."""

    job: ElasticTrainingJob
    status: ElasticTrainingJobStatus | None = None
    events: list[StatusEvent] | None = None

    def look(self, t: float, report: TrainingReport | None = None,
             observed: Observed | None = None, **status: Any) -> ElasticTrainingJobStatus:
        previous = self.status or ElasticTrainingJobStatus()
        update: dict[str, Any] = dict(status)
        if report is not None:
            update["training"] = report
        previous = previous.model_copy(update=update)
        self.status, events = compute_status(self.job, observed or observe(pods()), previous,
                                             s(t))
        self.events = (self.events or []) + events
        return self.status

    def steps(self, start: float, end: float, every: float, first_step: int = 1,
              step_every: int = 1) -> int:
        """Reports every `every` s from `start` to `end`; the last step reported."""
        step, t = first_step, start
        while t <= end:
            self.look(t, training(s(t), step))
            step += step_every
            t += every
        return step - step_every

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events or []]

    def restart_operator(self) -> None:
        """The status as stored (its wire form), read back by a new operator."""
        assert self.status is not None
        self.status = ElasticTrainingJobStatus.model_validate(
            self.status.model_dump(by_alias=True, mode="json", exclude_none=True))


def progressing(status: ElasticTrainingJobStatus) -> tuple[str, str, str]:
    c = get_condition(status, C.PROGRESSING)
    assert c is not None
    return c.status, c.reason, c.message


def started_run(job: ElasticTrainingJob | None = None) -> tuple[Run, int]:
    """Initializing at 0 s, then a step every 5 s from 10 s to 100 s."""
    run = Run(job or job_with())
    run.look(0, training(s(0), 0, state="Initializing"))
    assert progressing(run.status)[:2] == ("Unknown", Reason.WAITING_FOR_FIRST_STEP)
    return run, run.steps(10, 100, 5)
