"""The trainer's report as the core reads it: each figure that went back without a
restore or reset the report names is held at what this job's status recorded of it
(elastic_api.forward, the rule the progress sidecar applies too before it writes), so a
restarted or misleading source never moves the operator's step, goodput, recovery
confirmation or metrics backwards. status.training itself is the trainer's: the operator
never writes it. Pure."""
from __future__ import annotations

from elastic_api.forward import Forwarded, Seen, forward
from elastic_api.models import (
    ElasticTrainingJobStatus,
    GoodputCounters,
    TrainerGoodput,
)

# The figures whose going back the TrainingReportValid condition names (a lastRestore
# or a phase history a new process has not reported yet is held as a matter of course).
SAID = ("step", "elasticEventsTotal", "goodput")


def seen_in(status: ElasticTrainingJobStatus) -> Seen | None:
    """What the status recorded of the trainer's figures: the step and process its
    progress saw (and whether that process moved its step), the restore carried into
    status.checkpoint, the goodput account, the elastic events counted. None before the
    operator has read any report (nothing to hold)."""
    progress = status.progress
    if progress is None:
        return None
    return Seen(step=progress.step, process_started_at=progress.process_started_at,
                last_restore=status.checkpoint.last_restore if status.checkpoint else None,
                goodput=_trainer_goodput(status),
                elastic_events_total=status.counters.elastic_events,
                stepped=progress.advanced)


def _trainer_goodput(status: ElasticTrainingJobStatus) -> TrainerGoodput | None:
    goodput = status.goodput
    if goodput is None or goodput.productive_seconds is None or goodput.badput_seconds is None:
        return None
    causes = goodput.badput_seconds.model_dump(include=set(GoodputCounters.model_fields))
    return TrainerGoodput(productive_seconds=goodput.productive_seconds,
                          badput_seconds=GoodputCounters(**causes))


def forwarded(status: ElasticTrainingJobStatus) -> Forwarded | None:
    """status.training with its figures held (None: no report)."""
    report = status.training
    return forward(seen_in(status), report) if report is not None else None


def held_message(status: ElasticTrainingJobStatus, result: Forwarded | None) -> str | None:
    """What went back without a named restore or reset, for TrainingReportValid."""
    if result is None or status.training is None:
        return None
    raw, kept = status.training, result.report
    event = raw.elastic_event
    if event is not None and event.restored_from_step is not None \
            and raw.step >= event.restored_from_step:
        # An elastic event restarted from a state lastRestore does not name (the initial
        # one): the step is held until training passes it again, but nothing misleads.
        said = [name for name in result.held if name in SAID and name != "step"]
    else:
        said = [name for name in result.held if name in SAID]
    if not said:
        return None
    parts = [f"step went back from {kept.step} to {raw.step}" if name == "step" else
             f"elasticEventsTotal went back from {kept.elastic_events_total} to "
             f"{raw.elastic_events_total}" if name == "elasticEventsTotal" else
             "goodput's seconds went back" for name in said]
    return (f"status.training: {'; '.join(parts)}, with no restore (lastRestore) or new "
            "trainer process named: the operator holds the figures it saw (a restarted or "
            "misleading source)")
