"""The words of condition Progressing and its Warning Event for what the rule that judged
saw (core/stall_rule.py): the phase, the frame that shows it, how long, its deadline and
what it was learned from, and which rule judged."""
from __future__ import annotations

from datetime import datetime

from elastic_api.models import TrainerActivity
from elastic_api.phases import Phase
from elastic_api.progress_rules import PhaseVerdict
from elastic_operator.core.stall_rule import Verdict
from elastic_operator.core.wording import duration, iso

SOURCE_WORDS = {"Trainer": "reported by the trainer",
                "Sampled": "sampled by the progress sidecar",
                "MetricsFile": "read from the trainer's metrics file"}
PHASE_WORDS: dict[Phase, str] = {
    "TrainStep": "train step", "Compile": "compile", "Evaluation": "evaluation",
    "CheckpointSave": "checkpoint save", "Restore": "restore", "DataWait": "data wait",
    "DeviceWait": "device call", "Stopped": "stop"}
STEPS_RULE = "rule Steps: the trainer's phase is not reported"


def _long(seconds: float) -> str:
    """Seconds to the second below 10 min (a stall's figures are compared), else `duration`."""
    return f"{max(0, round(seconds))} s" if seconds < 600 else duration(seconds)


def _where(activity: TrainerActivity) -> str:
    return f" in {activity.frame}" if activity.frame else ""


def _tag(activity: TrainerActivity) -> str:
    """Which rule judged, on what evidence."""
    return f"rule Phase: {activity.phase} {SOURCE_WORDS[activity.source]}"


def _learned(judged: PhaseVerdict) -> str:
    """What a phase's own deadline rests on."""
    words = PHASE_WORDS[judged.phase]
    if judged.longest is None:
        return f"the first {words} of this run"
    return f"the longest {words} so far took {_long(judged.longest)}"


def stalled(verdict: Verdict) -> str:
    """What the rule saw when the deadline passed: the head of the False message."""
    activity, judged = verdict.activity, verdict.phase
    if activity is None or judged is None:
        return (f"no new step for {_long(verdict.seconds)} (progress deadline "
                f"{_long(verdict.deadline)}; {STEPS_RULE})")
    deadline, tag = _long(verdict.deadline), _tag(activity)
    if judged.phase == "Stopped":
        return (f"the trainer process is stopped (SIGSTOP, a debugger?) for "
                f"{_long(judged.seconds)}{_where(activity)}, past its grace of "
                f"{deadline} ({tag})")
    if judged.phase == "DeviceWait":
        return (f"blocked {_long(judged.seconds)} in {activity.frame or 'one device call'}"
                f", past the step deadline of {deadline} ({tag})")
    if judged.phase == "TrainStep":
        return (f"no new step for {_long(verdict.seconds)}{_where(activity)}, past the "
                f"step deadline of {deadline} ({tag})")
    return (f"{PHASE_WORDS[judged.phase]} running for {_long(judged.seconds)}"
            f"{_where(activity)}, no sign of life for {_long(verdict.seconds)}, past its "
            f"deadline of {deadline} ({_learned(judged)}; {tag})")


def advancing(verdict: Verdict, step: int | None, since: datetime) -> str:
    """The True message: the newest step, and the phase within its deadline."""
    at = f"step {step} at {iso(since)}"
    activity, judged = verdict.activity, verdict.phase
    if activity is None or judged is None:
        return f"{at}; progress deadline {_long(verdict.deadline)} ({STEPS_RULE})"
    deadline, tag = _long(verdict.deadline), _tag(activity)
    if judged.phase == "TrainStep":
        return f"{at}; step deadline {deadline} ({tag})"
    if judged.phase == "DeviceWait":
        return (f"{at}; blocked {_long(judged.seconds)} in "
                f"{activity.frame or 'one device call'}, within the step deadline of "
                f"{deadline} ({tag})")
    if judged.phase == "Stopped":
        return (f"{at}; the trainer process is stopped for {_long(judged.seconds)}"
                f"{_where(activity)}, within its grace of {deadline} ({tag})")
    return (f"{PHASE_WORDS[judged.phase]} for {_long(judged.seconds)}{_where(activity)}, "
            f"last sign of life {_long(verdict.seconds)} ago, within its deadline of "
            f"{deadline} ({_learned(judged)}); {at} ({tag})")
