"""The chaos soak's slow slice (tests/support/chaos_faults.py SLOW_FACTOR) is seen by one
detector only: the operator's slow-steps rule (elastic_api.progress_rules: the steps at 2x the
job's best) and never the trainer's hang watchdog (watchdog.Deadlines: a step past 10x
the p99 of its mesh's steps), whatever the load.

A seeded model of the simulated trainer's steps feeds both rules what the real ones are
fed: each step's done-to-done time to the watchdog, the status reports' gaps to the
progress rule. The steps are steady (no saves, little noise: the watchdog's p99 is near
the median, its tightest) or as the soak's (log-normal noise, spikes of 3x, a snapshot
every 5 steps and a checkpoint every 10 that add to the step). Once the slice is slow, a step takes
`faults.slow_part` of its own time (the time left of it when the next step computed
during the slow wait), as the simulated backend times it. A run at load 13
(test_chaos, seed 1344410455) found the factor of 20 past the watchdog: a product of
this step's own time, it was a hang once a step took 0.25 s.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import pytest

from elastic_api import progress_rules
from elastic_trainer.backends import PARTS_WINDOW
from elastic_trainer.simulated_faults import slow_part
from elastic_trainer.watchdog import STEP, Deadlines
from tests.support.chaos_faults import SLOW_FACTOR

STEPS_BEFORE, STEPS_SLOW = 300, 600
STEPS_PER_REPORT = 8  # --report-interval 0.5 at ~0.06 s a step


@dataclass(frozen=True)
class Noise:
    sigma: float
    spikes: bool  # 2% of the steps 3x
    saves: bool  # a snapshot every 5 steps, a checkpoint every 10


STEADY, SOAK = Noise(0.05, False, False), Noise(0.3, True, True)


@dataclass
class Seen:
    stalls: int = 0  # slowed steps past the watchdog's deadline
    slow_factor: float = 0.0  # the lowest the progress rule saw once its window was slow


def _step_seconds(rng: random.Random, step: int, scale: float, noise: Noise) -> float:
    """An unslowed step's own time."""
    seconds = scale * rng.lognormvariate(0.0, noise.sigma)
    if noise.spikes and rng.random() < 0.02:
        seconds *= 3
    if noise.saves and step % 5 == 0:
        seconds += scale * 0.5  # the snapshot's copy
    if noise.saves and step % 10 == 0:
        seconds += scale * 1.5  # the checkpoint's
    return seconds


def _run(seed: int, factor: float, scale: float, noise: Noise) -> Seen:
    """`scale`: the load (the usual step, seconds)."""
    rng = random.Random(seed)
    deadlines, usual = Deadlines(), deque[float](maxlen=PARTS_WINDOW)
    gaps: list[float] = []
    best: float | None = None
    seen, gap, slow_gaps = Seen(slow_factor=float("inf")), 0.0, 0
    for step in range(1, STEPS_BEFORE + STEPS_SLOW + 1):
        own = _step_seconds(rng, step, scale, noise)
        if step <= STEPS_BEFORE:
            seconds = own
            usual.append(own)
        else:  # the next step computed during the wait: only part of its own time is left
            seconds = slow_part(own * rng.uniform(0.3, 1.0), list(usual), factor)
            seen.stalls += seconds > deadlines.deadline(STEP)
        deadlines.observe(STEP, seconds)
        gap += seconds
        if step % STEPS_PER_REPORT:
            continue
        gaps, gap = [*gaps, gap][-progress_rules.SAMPLES:], 0.0
        counts = [STEPS_PER_REPORT] * len(gaps)
        if step <= STEPS_BEFORE:
            best = progress_rules.baseline(best, gaps, counts)
            continue
        slow_gaps += 1
        if slow_gaps >= progress_rules.WINDOW:  # the window holds slow steps only
            factor_seen = progress_rules.slow_factor(gaps, counts, best)
            assert factor_seen is not None
            seen.slow_factor = min(seen.slow_factor, factor_seen)
    return seen


@pytest.mark.parametrize("noise", [STEADY, SOAK])
@pytest.mark.parametrize("scale", [0.05, 0.3, 1.1])  # quiet, loaded, load 13 at its worst
@pytest.mark.parametrize("seed", range(4))
def test_the_soaks_slow_slice_is_slow_steps_and_never_a_hang(seed: int, scale: float,
                                                             noise: Noise) -> None:
    seen = _run(seed, SLOW_FACTOR, scale, noise)
    assert seen.stalls == 0, f"{seen.stalls} slowed steps past the watchdog's deadline"
    assert seen.slow_factor >= progress_rules.SLOW_FACTOR * 1.25, (
        f"the steps ran only {seen.slow_factor:.2f}x the best: too near the rule's "
        f"{progress_rules.SLOW_FACTOR}x")


def test_the_model_tells_a_factor_past_either_detector() -> None:
    """The model can fail: 20x is a hang to the watchdog, 2x is not slow to the rule."""
    assert _run(0, 20, 1.1, STEADY).stalls > 0
    assert _run(0, 2, 0.3, SOAK).slow_factor < progress_rules.SLOW_FACTOR
