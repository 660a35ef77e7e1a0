"""`kubectl etj why` says what the operator's stall rule saw (issue 60): a stall naming the
phase and the frame (condition Progressing False), or a phase of training holding steps
within its deadline (True, PhaseInProgress); every line fits 80 columns."""
from __future__ import annotations

from typing import Any

from elastic_api.conditions import Reason
from elastic_kubectl import why_view
from elastic_kubectl.job import read_job
from tests.kubectl_builders import at, iso, recovered_job

NOW = at(310)
BLOCKED = ("blocked 312 s in block_until_ready, called from train_step at train.py:412, past "
           "the step deadline of 60 s (rule Phase: DeviceWait sampled by the progress "
           "sidecar): training stopped at step 250; a hung MaxText")


def with_progressing(status: str, reason: str, message: str) -> dict[str, Any]:
    obj = recovered_job()
    obj["status"]["conditions"].append({"type": "Progressing", "status": status,
                                        "reason": reason, "message": message,
                                        "lastTransitionTime": iso(300)})
    return obj


def test_why_a_stall_found_by_its_phase_names_the_phase_and_the_frame() -> None:
    j = read_job(with_progressing("False", Reason.PROGRESS_DEADLINE_EXCEEDED, BLOCKED))
    stall = next(f for f in why_view.findings(j, [], NOW) if f.topic == "Stall")
    assert stall.what == f"Training stalled: {BLOCKED}."
    assert stall.since == at(300) and "onStall Recover" in stall.todo[0]
    lines = why_view.render_why(j, why_view.findings(j, [], NOW), NOW)
    assert all(len(line) <= 80 for line in lines)
    assert "block_until_ready," in " ".join(lines)


def test_why_a_long_evaluation_within_its_deadline_is_said_and_no_stall() -> None:
    message = ("evaluation for 175 s in eval_step at train.py:520, last sign of life 0 s ago, "
               "within its deadline of 15 min (the first evaluation of this run)")
    j = read_job(with_progressing("True", Reason.PHASE_IN_PROGRESS, message))
    found = why_view.findings(j, [], NOW)
    assert [f.topic for f in found if f.topic in ("Stall", "Phase")] == ["Phase"]
    assert message in next(f for f in found if f.topic == "Phase").what
    steps = read_job(with_progressing("True", Reason.STEPS_ADVANCING, "step 250"))
    assert [f for f in why_view.findings(steps, [], NOW) if f.topic in ("Stall", "Phase")] \
        == []
