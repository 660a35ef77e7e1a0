"""The defaults benchmark's worker (run by bench.trainer_worker in a fresh process): a job
with every default (no period given: snapshots and checkpoints chosen by the trainer)
loses one slice at a random step, `trials` times, against the same job with snapshots
off and with a snapshot every step (`--snapshot-period 1`: what the per-step copy costs
and saves, issue 80), trial by trial in one process (the same fault for all three).

Per run: the steps lost, where the restore came from, the snapshot period in use when
the slice went down, each step's duration up to the fault and the step by which the
cadences were chosen (bench.trainer compares the steady state of the two runs: what
the copies cost), and the wall time of the whole run (what the loss cost too).
"""
from __future__ import annotations

import itertools
import random
import time
from pathlib import Path
from statistics import mean
from typing import Any

from bench.worker_setup import make_trainer, setup_jax

# Each side's snapshot period (None: chosen by the trainer, the default).
SIDES: tuple[tuple[str, int | None], ...] = (
    ("defaults", None), ("snapshots_off", 0), ("every_step", 1))


def _run(spec: dict[str, Any], workdir: Path, fault: str, snapshot_period: int | None
         ) -> dict[str, Any]:
    run_spec = {**spec, "fault_duration": spec.get("fault_duration", 0.5)}
    if snapshot_period is not None:
        run_spec["snapshot_period"] = snapshot_period
    trainer = make_trainer(run_spec, workdir, [fault])
    at_failure: dict[str, Any] = {}
    on_slice_down = trainer.recovery.on_slice_down

    def seen(error: Any, retrying: bool) -> None:
        at_failure["snapshot_period"] = trainer.copies.cadences.snapshot.period
        at_failure["checkpoint_period"] = trainer.copies.cadences.checkpoint.period
        at_failure["snapshot_reason"] = trainer.copies.cadences.snapshot.choice.reason
        on_slice_down(error, retrying)

    trainer.recovery.on_slice_down = seen
    decided: list[int] = []
    decide = trainer.copies.decide

    def decided_at(cadence: Any) -> Any:
        if cadence.choice.reason == "Measuring":
            decided.append(trainer.status.progress.step)  # the first choice of this kind
        return decide(cadence)

    trainer.copies.decide = decided_at
    t0 = time.time()
    result = trainer.run()
    wall = time.time() - t0
    if result.failure is not None:
        raise RuntimeError(f"training failed: {result.failure}")
    [event] = [e for e in result.events if e.kind == "slice_down"]
    times = [(s, t) for s, t in result.step_times if s <= event.failed_step]
    durations = [[s, round(t - t_before, 6)]
                 for (_, t_before), (s, t) in itertools.pairwise(times)]
    warm = spec.get("warmup", 10)
    before = [d for s, d in durations if s > warm]
    return {
        "failed_step": event.failed_step, "restored_from_step": event.restored_from_step,
        "restore_source": event.restore_source, "steps_lost": event.steps_lost,
        **at_failure, "wall_seconds": wall,
        "mean_step_before_failure": mean(before) if before else None,
        "step_durations_before_failure": durations,
        "cadences_chosen_at_step": max(decided) if decided else None,
        "final_snapshot_cadence": trainer.copies.cadences.snapshot.report().to_wire(),
        "final_checkpoint_cadence": trainer.copies.cadences.checkpoint.report().to_wire(),
    }


def defaults(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    slices = spec.get("slices", 4)
    setup_jax(slices * spec.get("devices_per_slice", 2), str(workdir / "compilation-cache"))
    rng = random.Random(spec.get("seed", 0))
    steps = spec["steps"]
    trials = []
    for i in range(spec.get("trials", 20)):
        fault = f"{rng.randint(1, steps - 1)}:{rng.randrange(slices)}"
        sides = list(SIDES)
        if i % 2:  # alternate which runs first: drift in the machine's load cancels
            sides.reverse()
        trial: dict[str, Any] = {"fault": fault}
        for name, period in sides:
            trial[name] = _run(spec, workdir, fault, period)
        trials.append(trial)
    return {"config": spec["config"], "steps": steps, "slices": slices,
            "fault_duration_seconds": spec.get("fault_duration", 0.5),
            "seed": spec.get("seed", 0), "trials": trials}
