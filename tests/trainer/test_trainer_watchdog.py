"""The watchdog's parts: its deadlines (pure), its thread, the silent faults (hang, slow)
and what the simulated backend can tell about each slice's part of a step."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from elastic_trainer import cli
from elastic_trainer.backends import SimulatedBackend
from elastic_trainer.errors import is_slice_down_error
from elastic_trainer.faults import FaultSchedule, SilentFault, StepFaults, parse_fault
from elastic_trainer.watchdog import (
    CHECKPOINT,
    DEFAULT_FACTOR,
    DEFAULT_FLOOR_SECONDS,
    DEFAULT_LONG_FLOOR_SECONDS,
    FIRST_STEP,
    RESTORE,
    STEP,
    Deadlines,
    Stall,
    Watchdog,
    WatchdogOptions,
)

OPTS = WatchdogOptions(factor=10, floor_seconds=2, long_floor_seconds=300)


def _until(predicate: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.01)


# --- deadlines -----------------------------------------------------------------------------

def test_a_step_deadline_is_factor_times_the_meshs_own_steps_with_a_floor() -> None:
    d = Deadlines(OPTS)
    for _ in range(50):
        d.observe(STEP, 0.1, mesh="a")
    assert d.deadline(STEP, "a") == 2.0  # 10 x 0.1 is below the floor
    for _ in range(5):
        d.observe(STEP, 0.5, mesh="a")  # a few slow ones: the 99th percentile moves
    assert d.deadline(STEP, "a") == pytest.approx(5.0)
    # Another mesh (a resize) is not measured yet: a first step's deadline, long.
    assert d.deadline(STEP, "b") == d.deadline(FIRST_STEP, "b") == 300


def test_first_step_save_and_restore_learn_from_the_longest_of_their_kind() -> None:
    d = Deadlines(OPTS)
    for phase in (FIRST_STEP, CHECKPOINT, RESTORE):
        assert d.deadline(phase) == 300  # nothing measured: the long floor
    d.observe(FIRST_STEP, 3.0)
    d.observe(FIRST_STEP, 1.0)
    d.observe(RESTORE, 0.05)
    assert d.deadline(FIRST_STEP) == 30.0
    assert d.deadline(RESTORE) == 2.0  # the floor
    d.observe(CHECKPOINT, 0.4)
    for _ in range(10):
        d.observe(STEP, 0.5)
    # A save goes on beside a step: never less than the step's own deadline.
    assert d.deadline(CHECKPOINT) == d.deadline(STEP) == 5.0


def test_options_are_checked_and_the_flags_defaults_are_the_watchdogs() -> None:
    assert WatchdogOptions().problem() is None
    assert "--watchdog-factor" in (WatchdogOptions(factor=0.5).problem() or "")
    assert "--watchdog-floor-seconds" in (WatchdogOptions(floor_seconds=0).problem() or "")
    assert (cli.WATCHDOG_FACTOR, cli.WATCHDOG_FLOOR_SECONDS,
            cli.WATCHDOG_LONG_FLOOR_SECONDS) == (DEFAULT_FACTOR, DEFAULT_FLOOR_SECONDS,
                                                  DEFAULT_LONG_FLOOR_SECONDS)


# --- the thread ----------------------------------------------------------------------------

class _Stalls:
    def __init__(self) -> None:
        self.seen: list[Stall] = []
        self.lock = threading.Lock()

    def __call__(self, stall: Stall) -> None:
        with self.lock:
            self.seen.append(stall)


def test_a_phase_past_its_deadline_is_reported_once_from_the_watchdogs_thread() -> None:
    stalls = _Stalls()
    dog = Watchdog(WatchdogOptions(floor_seconds=0.2, long_floor_seconds=0.2), stalls)
    try:
        dog.arm(STEP, 7, mesh="m")
        _until(lambda: stalls.seen)
        time.sleep(0.3)  # armed still, but reported once
        [stall] = stalls.seen
        assert (stall.phase, stall.step, stall.deadline_seconds) == (STEP, 7, 0.2)
        assert stall.seconds >= 0.2
        assert "step 7 has run" in stall.describe()
    finally:
        dog.close()


def test_done_in_time_disarmed_or_closed_is_no_stall() -> None:
    stalls = _Stalls()
    dog = Watchdog(WatchdogOptions(floor_seconds=0.3, long_floor_seconds=0.3), stalls)
    try:
        dog.arm(STEP, 1)
        assert (dog.done() or 0) < 0.3
        dog.arm(CHECKPOINT, 2)
        dog.disarm()  # a maintenance hold
        dog.arm(RESTORE, 3)
        time.sleep(0.1)
        dog.done()
        time.sleep(0.5)
        assert stalls.seen == []
    finally:
        dog.close()


def test_a_relabel_keeps_the_start_and_only_lengthens() -> None:
    stalls = _Stalls()
    dog = Watchdog(WatchdogOptions(floor_seconds=0.2, long_floor_seconds=0.6), stalls)
    try:
        dog.deadlines.observe(CHECKPOINT, 0.05)  # learned: max(floor, 10 x 0.05) = 0.5
        dog.arm(STEP, 4)  # first step deadline: nothing measured of the mesh: 0.6
        dog.relabel(CHECKPOINT)  # 0.5 < 0.6: stays a (first) step
        started = time.monotonic()
        _until(lambda: stalls.seen)
        assert stalls.seen[0].phase == STEP and time.monotonic() - started >= 0.5
    finally:
        dog.close()


def test_a_disabled_watchdog_runs_no_thread() -> None:
    stalls = _Stalls()
    dog = Watchdog(WatchdogOptions(floor_seconds=0.01, long_floor_seconds=0.01,
                                   enabled=False), stalls)
    dog.arm(STEP, 1)
    time.sleep(0.1)
    dog.close()
    assert stalls.seen == [] and dog.stalls == 0


# --- silent faults ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "fault"), [
    ("53:2:hang", SilentFault(53, 2, "hang")),
    ("10-30:1:slow=3", SilentFault(10, 1, "slow", 3.0, 30)),
    ("10:0:slow=1.5", SilentFault(10, 0, "slow", 1.5, None)),
])
def test_silent_faults_parse(text: str, fault: SilentFault) -> None:
    assert parse_fault(text, total_slices=4) == fault


@pytest.mark.parametrize(("text", "says"), [
    ("53-60:2:hang", "STEP:SLICE:hang"),
    ("10:1:slow=1", "FACTOR above 1"),
    ("10:1:slow=x", "FACTOR above 1"),
    ("10:9:hang", "does not exist"),
    ("10:1:stall", "phase must be"),
])
def test_bad_silent_faults_name_the_flag_and_the_fix(text: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_fault(text, total_slices=4)
    assert "--fail-at" in str(info.value) and says in str(info.value)


def test_a_hang_lasts_until_the_slice_is_replaced_and_a_slow_slice_until_back() -> None:
    faults = StepFaults([SilentFault(5, 1, "hang"), SilentFault(3, 0, "slow", 2.0, 6)])
    for step in range(1, 8):
        faults.on_step(step, {})
    assert faults.hung(5, {}) == {1} and faults.hung(6, {}) == set()
    assert faults.hung(5, {1: 1}) == set()  # replaced: its loss count grew
    assert faults.slowdown(4, {}) == {0: 2.0} and faults.slowdown(6, {}) == {}


def test_faults_injected_through_the_inbox_fire_at_the_next_step_once(tmp_path: Any) -> None:
    """The chaos soak's way in (--fault-inbox): a file fires at the next step dispatched
    and is deleted, so a new trainer process reading the same inbox does not fire it."""
    faults = StepFaults([], tmp_path, total_slices=4)
    faults.on_step(1, {})
    (tmp_path / "1.fault").write_text("2:hang\n")
    (tmp_path / "2.fault").write_text("0:slow=3")
    (tmp_path / "ignored.tmp").write_text("1:hang")  # still being written: not read
    faults.on_step(7, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ignored.tmp"]
    assert faults.hung(7, {}) == {2} and faults.hung(8, {}) == set()
    assert faults.slowdown(9, {}) == {0: 3.0}
    assert StepFaults([], tmp_path, total_slices=4).hung(7, {}) == set()  # consumed
    (tmp_path / "3.fault").write_text("0:slow=off")
    faults.on_step(12, {})
    assert faults.slowdown(11, {}) == {0: 3.0} and faults.slowdown(12, {}) == {}


@pytest.mark.parametrize("text", ["9:hang", "1:stall", "1:slow=1", "1:slow=off:2"])
def test_a_bad_injected_fault_is_logged_and_dropped(tmp_path: Any, text: str,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    faults = StepFaults([], tmp_path, total_slices=4)
    (tmp_path / "1.fault").write_text(text)
    faults.on_step(3, {})
    assert faults.faults == [] and not list(tmp_path.iterdir())
    assert "1.fault" in caplog.text


# --- what the simulated backend tells of each slice's part -----------------------------------

def _backend(cpu_devices: list[Any], faults: list[SilentFault]) -> tuple[SimulatedBackend,
                                                                        FaultSchedule]:
    schedule = FaultSchedule([], duration=0.0, replace_seconds=0.2)
    backend = SimulatedBackend(4, 2, schedule, step_faults=StepFaults(faults))
    backend.start()
    backend.wait_for_slices(4, timeout=5)
    return backend, schedule


def test_a_hung_part_is_blamed_on_its_slice_and_fails_once_replaced(
        cpu_devices: list[Any]) -> None:
    backend, _ = _backend(cpu_devices, [SilentFault(3, 2, "hang")])
    active = {0, 1, 2, 3}
    for step in (1, 2):
        backend.on_phase("step", step)
        backend.wait_step(step, active)
    backend.on_phase("step", 3)
    failure: list[BaseException] = []

    def wait() -> None:
        try:
            backend.wait_step(3, active)
        except BaseException as err:
            failure.append(err)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and not failure  # the part never returns by itself
    suspects, evidence = backend.blame()
    assert suspects == [2]
    assert "slice 2's part of step 3 has not finished" in evidence
    assert "slices 0, 1 and 3 finished theirs" in evidence
    assert backend.replace_slices([2])  # the simulation plays the operator
    waiter.join(10)
    assert not waiter.is_alive()
    [err] = failure
    assert is_slice_down_error(err) and "slice 2" in str(err)
    assert backend.failed_slices(err)[0] == [2]
    assert backend.blame()[0] == []  # nothing outstanding any more


def test_a_slow_slices_part_is_timed_against_the_others(cpu_devices: list[Any]) -> None:
    backend, _ = _backend(cpu_devices, [SilentFault(1, 3, "slow", 3.0)])
    active = {0, 1, 2, 3}
    for step in range(1, 8):
        backend.on_phase("step", step)
        time.sleep(0.02)  # the device's part of the step
        started = time.monotonic()
        backend.wait_step(step, active)
        assert time.monotonic() - started >= 0.03  # the slow part: 2 x 0.02 more
    parts = backend.slice_parts()
    assert parts is not None and len(parts) == 6  # the attempt's first step: not timed
    for part in parts:
        assert set(part) == active
        assert part[3] == pytest.approx(3 * part[0]) and part[0] == part[1] == part[2]
