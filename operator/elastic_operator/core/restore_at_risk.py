"""RestoreAtRisk: whether a restore of the newest checkpoint can outgrow the Pathways
proxy's memory (the rule: elastic_api/restore_risk.py), and its Warning Event, posted once
each time the condition turns True."""
from __future__ import annotations

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import CheckpointStatus, Condition, ElasticTrainingJobSpec
from elastic_api.restore_risk import assess
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.status_events import StatusEvent


def restore_risk_condition(setter: ConditionSetter, spec: ElasticTrainingJobSpec,
                           checkpoint: CheckpointStatus | None) -> Condition:
    """From the newest committed step's size as listed, else the spec's estimate."""
    size = checkpoint.latest_committed_bytes if checkpoint is not None else None
    step = checkpoint.latest_committed_step if checkpoint is not None else None
    risk = assess(spec, size, step)
    return setter.set(ConditionType.RESTORE_AT_RISK, risk.status, risk.reason, risk.message)


def restore_risk_events(previous: list[Condition], new: Condition) -> list[StatusEvent]:
    """A Warning Event when the condition turns True (not again while it stays True, even
    as the checkpoint grows)."""
    was = next((c for c in previous if c.type == ConditionType.RESTORE_AT_RISK), None)
    if new.status != "True" or (was is not None and was.status == "True"):
        return []
    return [StatusEvent(reason=Reason.RESTORE_AT_RISK,
                        message=new.message, type="Warning")]
