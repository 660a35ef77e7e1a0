"""The chaos soak's invariants for one job, each a small function of what the run left
(`JobRun`) that returns its violations in words (none: held). The single-job soak
(tests/integration/test_chaos.py) asserts there are none; a soak of several jobs applies
the same functions to each (`job_violations`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from elastic_api.conditions import Reason
from tests.support.chaos_faults import Chaos, Fault
from tests.support.chaos_watch import CheckpointWatcher, Sampler


@dataclass
class JobRun:
    """What one job's run left: its faults, the trainer's and the undisturbed reference's
    summaries, the job's final status, and what was watched all through."""

    core: client.CoreV1Api
    chaos: Chaos
    injected: list[Fault]
    summary: dict[str, Any]
    expected: dict[str, Any]
    final: dict[str, Any]
    sampler: Sampler
    checkpoints: CheckpointWatcher
    steps: int
    # Kueue preemptions of this job (the multi-tenant soak's): each stops the trainer
    # process, which loses every slice, and a new one starts on readmission; neither is
    # a fault of ours nor a restart the operator counts (elastic_api.queueing).
    preemptions: int = 0

    @property
    def counters(self) -> dict[str, int]:
        return dict(self.final.get("counters") or {})

    def events(self, reason: str) -> list[tuple[str, int]]:
        """(message, count) of the job's Events with that reason."""
        return [(e.message or "", e.count or 1) for e in self.core.list_namespaced_event(
            self.chaos.ns,
            field_selector=f"involvedObject.name={self.chaos.job},reason={reason}").items]

    def event_count(self, reason: str) -> int:
        return sum(count for _, count in self.events(reason))


def parameters_equal_the_undisturbed_run(run: JobRun) -> list[str]:
    got, want = run.summary, run.expected
    if not got["final_step"] == want["final_step"] == run.steps:
        return [f"final step {got['final_step']}, the reference's {want['final_step']}, "
                f"asked {run.steps}"]
    if got["params_digest"] != want["params_digest"]:
        return ["parameters differ from the undisturbed run"]
    return []


def lost_only_slices_hit(run: JobRun) -> list[str]:
    """The trainer lost only slices a fault hit (a slow slice is not hit: never down),
    and resumed after each loss."""
    hit = {i for f in run.injected if f.kind != "slice_slow" for i in f.slices}
    events = run.summary["elastic_events"]
    problems = [f"elastic event {e} did not resume" for e in events
                if e["resumed_step"] is None]
    # A preemption's loss is no fault's: as many events may lose other slices.
    unexplained = [e for e in events if not set(e["slices_down"]) <= hit]
    return problems + [f"elastic event {e} lost slices not hit ({sorted(hit)})"
                       for e in unexplained[:max(0, len(unexplained) - run.preemptions)]]


def elastic_events_counted(run: JobRun) -> list[str]:
    """The operator counted each elastic event, those of killed trainer processes too (a
    new process counts on from them)."""
    events, total = run.summary["elastic_events"], run.summary["elastic_events_total"]
    problems = []
    if total < len(events) or any(e["id"] <= total - len(events) for e in events):
        problems.append(f"{total} elastic events in all, the last process's ids "
                        f"{[e['id'] for e in events]}")
    if any(f.slices and f.kind != "slice_slow" for f in run.injected) and total == 0:
        problems.append("the trainer noticed none of the slice faults")
    if run.counters.get("elasticEvents") != total:
        problems.append(f"the operator counted {run.counters.get('elasticEvents')} elastic "
                        f"events, the trainer {total}")
    return problems


def nothing_went_backwards(run: JobRun) -> list[str]:
    """No counter ever went backwards (across operator and trainer restarts), no recovery
    resumed before it went down, and the JobSet never restarted."""
    sampler = run.sampler
    if not sampler.samples:
        return ["the sampler saw no status"]
    problems = sampler.regressions()
    problems += [f"recovery resumed before it went down: {r}" for r in sampler.bad_recoveries]
    if max(s["jobset.restarts"] for s in sampler.samples) or run.counters.get("jobSetRestarts"):
        problems.append(f"the JobSet restarted: {run.counters}")
    return problems


def failures_counted_once(run: JobRun) -> list[str]:
    """Every slice failure injected (each try of a write fault too) counted once in
    sliceFailures, whichever replica saw it, with one SliceReplacing, and named in a
    SliceDown Event."""
    problems = []
    slice_down = [m for m, _ in run.events(Reason.SLICE_DOWN)]
    for fault in run.injected:
        for index in fault.slices if fault.kind != "slice_slow" else []:
            if not any(f"slice {index} " in m for m in slice_down):
                problems.append(f"no SliceDown Event names slice {index} of {fault}")
    hits = sum(f.hits for f in run.injected)
    if run.counters.get("sliceFailures") != hits:
        problems.append(f"sliceFailures {run.counters.get('sliceFailures')}, {hits} injected")
    if (replacing := run.event_count(Reason.SLICE_REPLACING)) != hits:
        problems.append(f"{replacing} SliceReplacing Events for {hits} slice failures")
    return problems


def trainer_restarts_counted(run: JobRun) -> list[str]:
    """Each new trainer process after the first counted once, with a TrainerRestarted;
    those Kueue's preemptions started are no restart (caused_by_eviction)."""
    want = run.chaos.trainer.started - 1 - run.preemptions
    problems = []
    if run.counters.get("trainerRestarts", 0) != want:
        problems.append(f"trainerRestarts {run.counters.get('trainerRestarts', 0)}, "
                        f"{want} new trainer processes")
    if (got := run.event_count(Reason.TRAINER_RESTARTED)) != want:
        problems.append(f"{got} TrainerRestarted Events for {want} new trainer processes")
    return problems


def silent_faults_seen(run: JobRun) -> list[str]:
    """Each freeze is one ProgressDeadlineExceeded and one TrainerRestarting; Progressing
    is False in no sample outside a freeze (no false alarm for the other faults); each
    slow slice posted its SlowSteps Warning (one per episode)."""
    problems = []
    freezes = sum(f.kind == "trainer_frozen" for f in run.injected)
    for reason in (Reason.PROGRESS_DEADLINE_EXCEEDED, Reason.TRAINER_RESTARTING):
        if (got := run.event_count(reason)) != freezes:
            problems.append(f"{got} {reason} Events for {freezes} trainer freezes")
    windows = run.chaos.freezes
    outside = [t for t in run.sampler.stalled
               if not any(start <= t <= (end or t) for start, end in windows)]
    if outside:
        problems.append(f"Progressing False in {len(outside)} samples outside a freeze")
    slow = sum(f.kind == "slice_slow" for f in run.injected)
    if (got := run.event_count(Reason.SLOW_STEPS)) < slow:
        problems.append(f"{got} {Reason.SLOW_STEPS} Events for {slow} slow slices")
    return problems


def checkpoints_kept(run: JobRun) -> list[str]:
    """None lost (a committed step gone only by retention, the newest never backwards),
    every restore from a committed step, the last step committed."""
    problems = list(run.checkpoints.problems)
    problems += [f"restored from step {e['restored_from_step']}, never committed"
                 for e in run.summary["elastic_events"]
                 if e["restore_source"] == "checkpoint"
                 and e["restored_from_step"] not in run.checkpoints.committed]
    if run.steps not in run.checkpoints.committed:
        problems.append(f"the last step {run.steps} was never committed")
    return problems


INVARIANTS: tuple[Callable[[JobRun], list[str]], ...] = (
    parameters_equal_the_undisturbed_run, lost_only_slices_hit, elastic_events_counted,
    nothing_went_backwards, failures_counted_once, trainer_restarts_counted,
    silent_faults_seen, checkpoints_kept)


def job_violations(run: JobRun) -> list[str]:
    """Every invariant's violations for this job, each prefixed with the job and the
    invariant's name."""
    return [f"{run.chaos.ns}/{run.chaos.job}: {check.__name__}: {problem}"
            for check in INVARIANTS for problem in check(run)]


def job_figures(run: JobRun) -> dict[str, Any]:
    """One job's run in numbers. Recoveries are the operator's (status.lastRecovery,
    sampled all through the run)."""
    recoveries = list(run.sampler.recoveries.values())
    downtimes = sorted(r["downtimeSeconds"] for r in recoveries
                       if r.get("downtimeSeconds") is not None)
    lost = sorted(r["stepsLost"] for r in recoveries if r.get("stepsLost") is not None)
    kinds: dict[str, int] = {}
    for fault in run.injected:
        kinds[fault.kind] = kinds.get(fault.kind, 0) + 1
    slow = run.chaos.slow_windows
    return {
        "steps": run.steps, "faults": len(run.injected), "by_kind": kinds,
        "elastic_events": run.summary["elastic_events_total"],
        "trainer_processes": run.chaos.trainer.started,
        "checkpoints_committed": len(run.checkpoints.committed),
        "counters": run.counters,
        "recoveries_seen": len(recoveries),
        "downtime_seconds": {"p50": pct(downtimes, 50), "p90": pct(downtimes, 90),
                             "max": downtimes[-1] if downtimes else None},
        "steps_lost": {"p50": pct(lost, 50), "max": lost[-1] if lost else None,
                       "total": sum(lost)},
        # Samples showing Degraded SlowSteps while no slice was slow (under load): a
        # figure, not a violation (the rule compares with the job's own best).
        "slow_steps_samples_outside_slow_faults": len(
            [t for t in run.sampler.slow_steps
             if not any(start <= t <= end for start, end in slow)]),
    }


def soak_summary(seed: int, runs: list[JobRun], violations: list[str],
                 **more: Any) -> dict[str, Any]:
    """soak-summary.json: the seed, faults by kind and by job, failures counted by job,
    steps lost, downtime percentiles over every job's recoveries, and the violations
    (`more`: what the soak adds, its HA figures)."""
    by_kind: dict[str, int] = {}
    for run in runs:
        for fault in run.injected:
            by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
    recoveries = [r for run in runs for r in run.sampler.recoveries.values()]
    downtimes = sorted(r["downtimeSeconds"] for r in recoveries
                       if r.get("downtimeSeconds") is not None)
    name = {id(run): f"{run.chaos.ns}/{run.chaos.job}" for run in runs}
    return {
        "seed": seed, "faults_by_kind": by_kind,
        "faults_by_job": {name[id(r)]: len(r.injected) for r in runs},
        "failures_counted_by_job": {name[id(r)]: r.counters.get("sliceFailures", 0)
                                    for r in runs},
        "steps_lost": sum(r.get("stepsLost") or 0 for r in recoveries),
        "downtime_seconds": {"p50": pct(downtimes, 50), "p90": pct(downtimes, 90),
                             "p99": pct(downtimes, 99),
                             "max": downtimes[-1] if downtimes else None},
        # Kueue's, as the operator counts them (counters.evictions, .preemptions).
        "kueue": {k: sum(r.counters.get(k, 0) for r in runs)
                  for k in ("evictions", "preemptions")},
        "jobs": {name[id(r)]: job_figures(r) for r in runs},
        **more,
        "violations": violations,
    }


def pct(values: list[float], percent: int) -> float | None:
    return values[min(len(values) - 1, len(values) * percent // 100)] if values else None
