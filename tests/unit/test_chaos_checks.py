"""The chaos soak's per-job invariants (tests/support/chaos_checks.py) on a made-up run:
a clean one has no violation, and each way a run can go wrong is named by its invariant
(so that none of them passes by construction)."""
from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.chaos_checks import JobRun, job_violations, soak_summary
from tests.support.chaos_faults import Chaos, Fault
from tests.support.chaos_watch import CheckpointWatcher, Sampler

STEPS = 100


class FakeEvents:
    """CoreV1Api.list_namespaced_event answering from {reason: [(message, count)]}."""

    def __init__(self, by_reason: dict[str, list[tuple[str, int]]]) -> None:
        self.by_reason = by_reason

    def list_namespaced_event(self, ns: str, field_selector: str) -> Any:
        reason = field_selector.rpartition("reason=")[2]
        return SimpleNamespace(items=[SimpleNamespace(message=m, count=c)
                                      for m, c in self.by_reason.get(reason, [])])


def clean_run(tmp_path: Path) -> JobRun:
    """Two faults: slice 1 failed (one failure) and the trainer frozen (one restart)."""
    chaos = Chaos(api=None, ns="ns", job="j", ha=None,  # type: ignore[arg-type]
                  trainer=SimpleNamespace(started=2),  # type: ignore[arg-type]
                  proxy=None, checkpoints=None, status=dict,  # type: ignore[arg-type]
                  inbox=tmp_path)
    chaos.freezes.append([10.0, 20.0])
    sampler = Sampler(api=None, ns="ns", job="j")  # type: ignore[arg-type]
    sampler.samples = [{"counters.sliceFailures": 0, "jobset.restarts": 0},
                       {"counters.sliceFailures": 1, "jobset.restarts": 0}]
    sampler.stalled = [15.0]
    checkpoints = CheckpointWatcher(tmp_path, keep=3)
    checkpoints.committed = {90: 1.0, 100: 2.0}
    events = {"SliceDown": [("slice 1 is down: pod failed", 1)], "SliceReplacing": [("", 1)],
              "TrainerRestarted": [("", 1)], "ProgressDeadlineExceeded": [("", 1)],
              "TrainerRestarting": [("", 1)]}
    summary = {"final_step": STEPS, "params_digest": "abc", "elastic_events_total": 1,
               "elastic_events": [{"id": 1, "slices_down": [1], "resumed_step": 91,
                                   "restore_source": "checkpoint", "restored_from_step": 90}]}
    final = {"counters": {"sliceFailures": 1, "elasticEvents": 1, "trainerRestarts": 1,
                          "jobSetRestarts": 0}}
    return JobRun(FakeEvents(events), chaos,  # type: ignore[arg-type]
                  [Fault("fail_pod", [1], 30, hits=1), Fault("trainer_frozen", [], 60)],
                  summary, {"final_step": STEPS, "params_digest": "abc"}, final, sampler,
                  checkpoints, STEPS)


def test_a_clean_run_has_no_violation(tmp_path: Path) -> None:
    assert job_violations(clean_run(tmp_path)) == []


def _set(path: str, value: Any) -> Callable[[JobRun], None]:
    def change(run: JobRun) -> None:
        *parents, last = path.split(".")
        target: Any = run
        for part in parents:
            target = getattr(target, part) if hasattr(target, part) else target[part]
        if isinstance(target, dict):
            target[last] = value
        else:
            setattr(target, last, value)
    return change


@pytest.mark.parametrize(("change", "invariant"), [
    (_set("summary.params_digest", "other"), "parameters_equal_the_undisturbed_run"),
    (_set("summary.elastic_events", [{"id": 1, "slices_down": [2], "resumed_step": 91,
                                      "restore_source": "snapshot"}]), "lost_only_slices_hit"),
    (_set("final.counters.elasticEvents", 0), "elastic_events_counted"),
    (_set("final.counters.sliceFailures", 2), "failures_counted_once"),  # counted twice
    (_set("core.by_reason.SliceReplacing", []), "failures_counted_once"),
    (_set("core.by_reason.SliceDown", [("slice 0 is down", 1)]), "failures_counted_once"),
    (_set("final.counters.trainerRestarts", 0), "trainer_restarts_counted"),
    (_set("sampler.stalled", [15.0, 30.0]), "silent_faults_seen"),  # outside the freeze
    (_set("core.by_reason.ProgressDeadlineExceeded", [("", 2)]), "silent_faults_seen"),
    (_set("sampler.samples", [{"counters.sliceFailures": 1, "jobset.restarts": 0},
                              {"counters.sliceFailures": 0, "jobset.restarts": 0}]),
     "nothing_went_backwards"),
    (_set("final.counters.jobSetRestarts", 1), "nothing_went_backwards"),
    (_set("checkpoints.committed", {100: 2.0}), "checkpoints_kept"),  # restored from 90
    (_set("checkpoints.problems", ["committed step 80 disappeared"]), "checkpoints_kept"),
])
def test_each_way_to_go_wrong_is_named_by_its_invariant(
        tmp_path: Path, change: Callable[[JobRun], None], invariant: str) -> None:
    run = clean_run(tmp_path)
    run.final, run.summary = copy.deepcopy(run.final), copy.deepcopy(run.summary)
    change(run)
    violations = job_violations(run)
    assert violations and all(v.startswith(f"ns/j: {invariant}: ") for v in violations), \
        violations


def test_the_summary_has_what_the_soak_reports(tmp_path: Path) -> None:
    run = clean_run(tmp_path)
    run.sampler.recoveries = {"t1": {"downtimeSeconds": 2.0, "stepsLost": 3},
                              "t2": {"downtimeSeconds": 4.0, "stepsLost": 1}}
    got = soak_summary(7, [run], ["x"])
    assert got["seed"] == 7 and got["violations"] == ["x"]
    assert got["faults_by_kind"] == {"fail_pod": 1, "trainer_frozen": 1}
    assert got["faults_by_job"] == {"ns/j": 2}
    assert got["failures_counted_by_job"] == {"ns/j": 1}
    assert got["steps_lost"] == 4 and got["downtime_seconds"]["max"] == 4.0
    assert got["kueue"] == {"evictions": 0, "preemptions": 0}


def preempted_once(run: JobRun) -> JobRun:
    """Kueue preempted the job once: its trainer process lost every slice (an elastic
    event no fault explains) and a new process started on readmission, no restart."""
    run.chaos.trainer.started += 1  # type: ignore[misc]
    lost = {"id": 2, "slices_down": [0, 1, 2], "resumed_step": 95,
            "restore_source": "checkpoint", "restored_from_step": 90}
    run.summary["elastic_events"].append(lost)
    run.summary["elastic_events_total"] = run.final["counters"]["elasticEvents"] = 2
    return run


def test_a_preemption_is_no_fault_and_no_restart(tmp_path: Path) -> None:
    run = preempted_once(clean_run(tmp_path))
    run.preemptions = 1
    assert job_violations(run) == []


def test_the_same_loss_without_a_preemption_is_named(tmp_path: Path) -> None:
    violations = job_violations(preempted_once(clean_run(tmp_path)))
    assert {v.split(": ")[1] for v in violations} == {"lost_only_slices_hit",
                                                      "trainer_restarts_counted"}, violations
