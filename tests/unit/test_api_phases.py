"""elastic_api.phases: each phase's deadline, learned from the run's own history."""
from __future__ import annotations

import pytest

from elastic_api.phases import (
    FIRST_FLOOR_SECONDS,
    FLOOR_SECONDS,
    PHASES,
    STOPPED_GRACE_SECONDS,
    TRAINING_PHASES,
    phase_deadline,
)


@pytest.mark.parametrize("phase", sorted(FIRST_FLOOR_SECONDS))
def test_a_phase_not_seen_yet_gets_its_long_first_floor(phase: str) -> None:
    assert phase_deadline(phase, None, step_deadline=60.0) == FIRST_FLOOR_SECONDS[phase]  # type: ignore[arg-type]
    assert FIRST_FLOOR_SECONDS[phase] > FLOOR_SECONDS  # type: ignore[index]


def test_a_phase_seen_before_may_take_twice_its_longest_never_under_the_floor() -> None:
    assert phase_deadline("Evaluation", 150.0, step_deadline=60.0) == 300.0
    assert phase_deadline("CheckpointSave", 5.0, step_deadline=60.0) == FLOOR_SECONDS


def test_a_step_and_a_device_call_are_held_to_the_step_deadline() -> None:
    assert phase_deadline("TrainStep", None, step_deadline=75.0) == 75.0
    assert phase_deadline("DeviceWait", 900.0, step_deadline=75.0) == 75.0


def test_a_stopped_process_gets_only_a_short_grace() -> None:
    assert phase_deadline("Stopped", 3600.0, step_deadline=600.0) == STOPPED_GRACE_SECONDS


def test_every_phase_has_a_deadline_and_blocked_or_stopped_is_not_training() -> None:
    for phase in PHASES:
        assert phase_deadline(phase, None, step_deadline=60.0) > 0
    assert set(PHASES) - TRAINING_PHASES == {"DeviceWait", "Stopped"}
