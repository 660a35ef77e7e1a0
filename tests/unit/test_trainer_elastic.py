"""Pieces of the elastic runtime that need no training: errors, the fault schedule."""
from __future__ import annotations

import time

import jax
import pytest

from elastic_trainer.elastic import (
    Fault,
    FaultSchedule,
    SimulatedBackend,
    is_slice_down_message,
    slice_down_error,
)


def test_slice_down_error_is_the_error_pathways_raises() -> None:
    err = slice_down_error([2])
    assert isinstance(err, jax.errors.JaxRuntimeError)
    assert str(err) == "DATA_LOSS: slice 2 is down"
    assert is_slice_down_message(str(err))
    assert not is_slice_down_message("RESOURCE_EXHAUSTED: out of memory")


@pytest.mark.parametrize(("text", "fault"), [
    ("23:1", Fault(23, 1, "step")),
    ("5:0:checkpoint", Fault(5, 0, "checkpoint")),
    ("9:1:restore", Fault(9, 1, "restore")),
    ("30-80:1", Fault(30, 1, "step", back_at_step=80)),
])
def test_fault_parse(text: str, fault: Fault) -> None:
    assert Fault.parse(text, total_slices=2) == fault


@pytest.mark.parametrize(("text", "message"), [
    ("23", "expected STEP:SLICE"),
    ("a:1", "expected STEP:SLICE"),
    ("3:2", "slice 2 does not exist"),
    ("0:1", "STEP must be >= 1"),
    ("3:1:later", "phase must be"),
    ("30-20:1", "BACK must be a later step"),
    ("30-x:1", "expected STEP:SLICE"),
])
def test_fault_parse_errors_name_the_flag(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        Fault.parse(text, total_slices=2)
    assert "--fail-at" in str(info.value)


def test_fault_schedule_fires_once_and_the_slice_comes_back() -> None:
    schedule = FaultSchedule([Fault(3, 1)], duration=0.2)
    schedule.on_phase("step", 2)
    assert schedule.down_slices() == {}
    before = time.time()
    schedule.on_phase("step", 3)
    down = schedule.down_slices()
    assert list(down) == [1] and before <= down[1] <= time.time()
    deadline = time.monotonic() + 10
    while schedule.down_slices():
        assert time.monotonic() < deadline, "slice never came back"
        time.sleep(0.02)
    schedule.on_phase("step", 3)  # a rewind past the step does not fire it again
    assert schedule.down_slices() == {}


def test_a_step_range_fault_lasts_until_the_loop_reaches_step_back() -> None:
    schedule = FaultSchedule([Fault(3, 0, back_at_step=6)], duration=0.0)
    schedule.on_phase("step", 3)
    time.sleep(0.01)  # the time-based duration does not apply
    for step in (4, 5):
        schedule.on_phase("step", step)
        assert list(schedule.down_slices()) == [0]
    schedule.on_phase("step", 6)
    assert schedule.down_slices() == {}


def test_simulated_backend_raises_inside_the_step_only_for_slices_of_the_mesh() -> None:
    schedule = FaultSchedule([Fault(1, 0)], duration=30)
    backend = SimulatedBackend(1, 1, schedule)
    backend.check({0})
    backend.on_phase("step", 1)
    backend.check(set())  # slice 0 is not in this mesh
    with pytest.raises(jax.errors.JaxRuntimeError, match="DATA_LOSS: slice 0 is down"):
        backend.check({0})
    assert backend.is_slice_down_error(slice_down_error([0]))
    assert backend.healthy_slices() == set()


def test_simulated_backend_needs_the_device_count() -> None:
    with pytest.raises(RuntimeError, match="xla_force_host_platform_device_count=64"):
        SimulatedBackend(32, 2, FaultSchedule([]))
