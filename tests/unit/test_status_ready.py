"""The Ready condition and the phase, row by row: each row is what the other conditions
and the slices say, and what Ready and the phase must then be (core/ready.py). The words
themselves are pinned to docs/api.md ("Conditions and phase")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastic_api.conditions import ConditionType, Phase, Reason
from elastic_api.queueing import (
    ADMITTED,
    EVICTION_PENDING,
    EVICTION_PENDING_REASONS,
    REASON_PREEMPTED,
    REASONS,
)
from elastic_operator.core.ready import JobSummary, readiness
from elastic_operator.core.status import compute_status
from tests.builders import T0, WorkerPod, article_job, at, healthy_pods, observe

ROOT = Path(__file__).resolve().parents[2]
FAILED = "JobSet article failed"

# (name, what the job shows, Ready status, Ready reason, phase)
ROWS: list[tuple[str, JobSummary, str, str, str]] = [
    ("failed beats everything",
     JobSummary(3, 3, failure_message=FAILED, succeeded=True, suspended=True,
                down_slices=(1,), recovering=True, degraded=True),
     "False", Reason.FAILED, Phase.FAILED),
    ("succeeded", JobSummary(3, 0, succeeded=True, suspended=True), "False", Reason.SUCCEEDED,
     Phase.SUCCEEDED),
    ("suspended", JobSummary(3, 0, suspended=True, jobset_exists=False, down_slices=(0,)),
     "False", Reason.SUSPENDED, Phase.SUSPENDED),
    ("a queue holds it", JobSummary(3, 0, queued_because=(REASON_PREEMPTED, "preempted"),
                                    down_slices=(1,)),
     "False", REASON_PREEMPTED, Phase.QUEUED),
    ("no JobSet yet", JobSummary(3, 0, jobset_exists=False), "False",
     Reason.JOBSET_NOT_CREATED, Phase.PENDING),
    ("a slice down", JobSummary(3, 2, down_slices=(2,), recovering=True, degraded=True),
     "False", Reason.SLICE_DOWN, Phase.SLICE_DOWN),
    ("recovering, slices back", JobSummary(3, 3, recovering=True, degraded=True), "False",
     Reason.RECOVERING, Phase.RECOVERING),
    ("slices not ready, training on fewer", JobSummary(3, 2, degraded=True, restarting=True,
                                                       active_slices=2),
     "False", Reason.SLICES_NOT_READY, Phase.DEGRADED),
    ("slices not ready, replacements starting", JobSummary(3, 2, restarting=True), "False",
     Reason.SLICES_NOT_READY, Phase.RECOVERING),
    ("slices not ready, never were", JobSummary(3, 1), "False", Reason.SLICES_NOT_READY,
     Phase.PENDING),
    ("all ready, training on fewer", JobSummary(3, 3, degraded=True, active_slices=2), "True",
     Reason.DEGRADED, Phase.DEGRADED),
    ("all ready", JobSummary(3, 3), "True", Reason.ALL_SLICES_READY, Phase.RUNNING),
]


@pytest.mark.parametrize(("summary", "status", "reason", "phase"),
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_ready_and_phase(summary: JobSummary, status: str, reason: str, phase: str) -> None:
    got = readiness(summary)
    assert (got.status, got.reason, got.phase) == (status, reason, phase)
    assert got.message


@pytest.mark.parametrize(("summary", "message"), [
    (ROWS[0][1], FAILED),
    (JobSummary(3, 1, down_slices=(0, 2)), "slices 0, 2 down"),
    (JobSummary(3, 1), "1/3 slices ready"),
    (JobSummary(3, 3, degraded=True, active_slices=2), "training on 2 of 3 slices"),
    (JobSummary(3, 3), "3/3 slices ready"),
])
def test_ready_messages(summary: JobSummary, message: str) -> None:
    assert readiness(summary).message == message


def test_compute_status_feeds_the_cascade() -> None:
    """One row end to end: a failed host makes Ready False/SliceDown, phase SliceDown."""
    job = article_job()
    running, _ = compute_status(job, observe(), None, T0)
    pods = healthy_pods()
    pods[0] = WorkerPod(0, 0).failed(at(10)).build()
    status, _ = compute_status(job, observe(pods), running, at(11))
    ready = next(c for c in status.conditions if c.type == ConditionType.READY)
    assert (ready.status, ready.reason, status.phase) == ("False", Reason.SLICE_DOWN,
                                                          Phase.SLICE_DOWN)


def documented_conditions(header: str = "| condition | True when | reasons |",
                          ) -> dict[str, set[str]]:
    """A condition table of docs/api.md: type -> the reasons it names."""
    text = (ROOT / "docs" / "api.md").read_text()
    table = text[text.index(header):]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = line.split("|")
        rows[cells[1].strip(" `")] = set(re.findall(r"`(\w+)`", cells[3]))
    return rows


def test_every_documented_word_is_a_constant() -> None:
    reasons = {v for k, v in vars(Reason).items() if k.isupper()}
    types = {v for k, v in vars(ConditionType).items() if k.isupper()}
    documented = documented_conditions()
    assert set(documented) == types
    for type_, named in documented.items():
        assert named <= reasons, f"{type_}: {sorted(named - reasons)} are not Reason constants"
    phases = {v for k, v in vars(Phase).items() if k.isupper()}
    text = (ROOT / "docs" / "api.md").read_text()
    sentence = text[text.index("`status.phase`"):].split("\n\n")[0]
    assert set(re.findall(r"`([A-Z]\w+)`", sentence)) == phases


def test_the_admitted_condition_is_documented_with_its_reasons() -> None:
    queued = documented_conditions("| condition (queued jobs) | True when | reasons |")
    assert queued == {ADMITTED: set(REASONS), EVICTION_PENDING: set(EVICTION_PENDING_REASONS)}
