"""The watchdog's parts: its deadlines (pure, by the phase rule the operator applies), its
thread (on a clock that jumps: a 3-minute phase takes no 3 minutes), the activity it
reports, the frame it names, the silent faults (hang, slow, block) and what the simulated
backend can tell about each slice's part of a step."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from elastic_api.phases import FIRST_FLOOR_SECONDS, FLOOR_SECONDS
from elastic_trainer import train_cli
from elastic_trainer.backends import SimulatedBackend, device_block
from elastic_trainer.errors import is_slice_down_error
from elastic_trainer.frames import where
from elastic_trainer.own_activity import Activity
from elastic_trainer.simulated_faults import FaultSchedule, SilentFault, StepFaults, parse_fault
from elastic_trainer.watchdog import (
    CHECKPOINT,
    COMPILE,
    DATA_WAIT,
    DEFAULT_FACTOR,
    DEFAULT_FLOOR_SECONDS,
    EVALUATION,
    RESTORE,
    STALL_PHASES,
    STEP,
    BesideCopy,
    Clock,
    Deadlines,
    Stall,
    Watchdog,
    WatchdogOptions,
)

OPTS = WatchdogOptions(factor=10, floor_seconds=2)


def _until(predicate: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.01)


class JumpClock:
    """The watchdog's clock, moved only by `advance` (a phase of minutes in no time)."""

    def __init__(self) -> None:
        self.ticks = 1000.0

    def advance(self, seconds: float) -> None:
        self.ticks += seconds

    def clock(self) -> Clock:
        return Clock(monotonic=lambda: self.ticks, time=lambda: 1.7e9 + self.ticks)


# --- deadlines -----------------------------------------------------------------------------

def test_a_step_deadline_is_factor_times_the_meshs_own_steps_with_a_floor() -> None:
    d = Deadlines(OPTS)
    for _ in range(50):
        d.observe(STEP, 0.1, mesh="a")
    assert d.deadline(STEP, "a") == 2.0  # 10 x 0.1 is below the floor
    for _ in range(5):
        d.observe(STEP, 0.5, mesh="a")  # a few slow ones: the 99th percentile moves
    assert d.deadline(STEP, "a") == pytest.approx(5.0)
    # Another mesh (a resize) is not measured yet: as long as a compile may take.
    assert d.deadline(STEP, "b") == d.deadline(COMPILE, "b") == FIRST_FLOOR_SECONDS[COMPILE]
    d.observe(COMPILE, 40.0)
    assert d.deadline(STEP, "b") == 80.0  # the compile's learned deadline


def test_every_other_phase_is_held_to_the_operators_rule() -> None:
    """elastic_api.phases.phase_deadline: a long first floor, then 2 x the longest, never
    under its floor: one contract for the trainer's watchdog and the operator."""
    d = Deadlines(OPTS)
    for _ in range(3):
        d.observe(STEP, 0.1)
    for phase in (COMPILE, CHECKPOINT, RESTORE, EVALUATION, DATA_WAIT):
        assert d.deadline(phase) == FIRST_FLOOR_SECONDS[phase]
    d.observe(COMPILE, 3.0)
    d.observe(COMPILE, 100.0)
    d.observe(RESTORE, 0.05)
    d.observe(EVALUATION, 150.0)
    assert d.deadline(COMPILE) == 200.0
    assert d.deadline(RESTORE) == FLOOR_SECONDS
    assert d.deadline(EVALUATION) == 300.0
    d.observe(CHECKPOINT, 0.4)
    for _ in range(200):
        d.observe(STEP, 9.0)
    # A synchronous save waits for the step in flight: never less than the step's.
    assert d.deadline(CHECKPOINT) == d.deadline(STEP) == 90.0
    assert [(r.phase, r.count) for r in d.history.records() or []] == [
        (STEP, 203), (COMPILE, 2), (EVALUATION, 1), (CHECKPOINT, 1), (RESTORE, 1)]


def test_a_step_beside_a_copy_is_timed_against_its_kind_never_below_a_plain_one() -> None:
    d = Deadlines(OPTS)
    d.observe(COMPILE, 10.0)
    for _ in range(10):
        d.observe(STEP, 0.5, mesh="a")
    beside = BesideCopy("a")
    assert d.deadline(STEP, beside) == 60.0  # not measured yet: as a compile may take
    for _ in range(3):
        d.observe(STEP, 0.8, mesh=beside)
    assert d.deadline(STEP, beside) == 8.0
    quick = Deadlines(OPTS)
    for _ in range(10):
        quick.observe(STEP, 0.5, mesh="a")
        quick.observe(STEP, 0.1, mesh=beside)
    assert quick.deadline(STEP, beside) == quick.deadline(STEP, "a") == 5.0


def test_options_are_checked_and_the_flags_defaults_are_the_watchdogs() -> None:
    assert WatchdogOptions().problem() is None
    assert "--watchdog-factor" in (WatchdogOptions(factor=0.5).problem() or "")
    assert "--watchdog-floor-seconds" in (WatchdogOptions(floor_seconds=0).problem() or "")
    assert (train_cli.WATCHDOG_FACTOR, train_cli.WATCHDOG_FLOOR_SECONDS) == (DEFAULT_FACTOR,
                                                                 DEFAULT_FLOOR_SECONDS)


def test_a_stall_keeps_the_wire_values_an_older_operator_knows() -> None:
    """status.training.stall.phase is an enum in the CRD: a new value would have the API
    server reject the report, so the new phases map onto the old values."""
    assert set(STALL_PHASES.values()) == {"Step", "FirstStep", "Checkpoint", "Restore"}
    assert (STALL_PHASES[STEP], STALL_PHASES[COMPILE], STALL_PHASES[EVALUATION]) == (
        "Step", "FirstStep", "Step")


# --- the thread ----------------------------------------------------------------------------

class _Stalls:
    def __init__(self) -> None:
        self.seen: list[Stall] = []
        self.lock = threading.Lock()

    def __call__(self, stall: Stall) -> None:
        with self.lock:
            self.seen.append(stall)


def _learned(dog: Watchdog, seconds: float = 0.01, mesh: str = "m") -> None:
    for _ in range(3):
        dog.deadlines.observe(STEP, seconds, mesh)


def test_a_phase_past_its_deadline_is_reported_once_from_the_watchdogs_thread() -> None:
    stalls = _Stalls()
    dog = Watchdog(WatchdogOptions(floor_seconds=0.2), stalls)
    try:
        _learned(dog)
        dog.arm(STEP, 7, mesh="m")
        _until(lambda: stalls.seen)
        time.sleep(0.3)  # armed still, but reported once
        [stall] = stalls.seen
        assert (stall.phase, stall.step, stall.deadline_seconds) == (STEP, 7, 0.2)
        assert stall.seconds >= 0.2
        assert "step 7 has run" in stall.describe()
        # Where the training thread (this one) was: in the test, not in a device call.
        assert stall.where is not None and not stall.where.device_call
    finally:
        dog.close()


def test_done_in_time_disarmed_or_closed_is_no_stall() -> None:
    stalls = _Stalls()
    jump = JumpClock()
    dog = Watchdog(WatchdogOptions(floor_seconds=0.3), stalls, clock=jump.clock())
    try:
        _learned(dog)
        dog.arm(STEP, 1, "m")
        jump.advance(0.2)
        assert dog.done() == pytest.approx(0.2)
        dog.arm(CHECKPOINT, 2)
        dog.disarm()  # a maintenance hold
        jump.advance(3600)
        dog.judge()
        dog.arm(RESTORE, 3)
        jump.advance(FIRST_FLOOR_SECONDS[RESTORE] - 1)
        dog.judge()
        dog.done()
        assert stalls.seen == []
    finally:
        dog.close()


def test_an_evaluation_with_heartbeats_is_no_stall_however_long() -> None:
    """Its deadline counts from the last heartbeat: an evaluation of an hour whose steps
    each take 10 s is no stall, one silent past its deadline is."""
    stalls = _Stalls()
    jump = JumpClock()
    dog = Watchdog(OPTS, stalls, clock=jump.clock())
    try:
        dog.arm(EVALUATION, 41)
        for _ in range(360):
            jump.advance(10)
            dog.judge()
            dog.beat()
        assert stalls.seen == []
        assert dog.activity.phase == EVALUATION
        jump.advance(FIRST_FLOOR_SECONDS[EVALUATION])
        dog.judge()
        _until(lambda: stalls.seen)
        [stall] = stalls.seen
        assert stall.seconds == pytest.approx(3600 + FIRST_FLOOR_SECONDS[EVALUATION])
        assert stall.quiet_seconds == FIRST_FLOOR_SECONDS[EVALUATION]
        assert "evaluation before step 41 has run" in stall.describe()
        assert "since its last heartbeat" in stall.describe()
    finally:
        dog.close()


def test_a_phase_during_a_step_stops_the_steps_clock_and_is_measured_on_its_own() -> None:
    stalls = _Stalls()
    jump = JumpClock()
    dog = Watchdog(OPTS, stalls, clock=jump.clock())
    try:
        _learned(dog, 0.1)
        dog.arm(STEP, 5, "m")
        jump.advance(1.0)
        with dog.during(DATA_WAIT, 6):
            assert dog.activity.phase == DATA_WAIT
            jump.advance(300)  # a data wait of 5 minutes: past the step's 2 s
            dog.judge()
        assert dog.activity.phase == STEP
        dog.judge()
        assert stalls.seen == []
        jump.advance(0.5)
        assert dog.done() == pytest.approx(1.5)  # the step's own time
        assert dog.deadlines.history.longest(DATA_WAIT) == 300
    finally:
        dog.close()


def test_a_step_beside_a_copy_takes_the_longer_deadline() -> None:
    stalls = _Stalls()
    jump = JumpClock()
    dog = Watchdog(OPTS, stalls, clock=jump.clock())
    try:
        _learned(dog, 0.1)
        dog.deadlines.observe(COMPILE, 50.0)
        dog.arm(STEP, 4, "m")
        dog.beside_copy()  # nothing timed beside a copy yet: as a compile may take
        jump.advance(90)
        dog.judge()
        assert stalls.seen == []
        jump.advance(11)
        dog.judge()
        _until(lambda: stalls.seen)
        assert stalls.seen[0].deadline_seconds == 100.0
    finally:
        dog.close()


def test_a_disabled_watchdog_runs_no_thread_and_still_reports_the_activity() -> None:
    stalls = _Stalls()
    activity = Activity()
    dog = Watchdog(WatchdogOptions(floor_seconds=0.01, enabled=False), stalls, activity)
    dog.arm(COMPILE, 1)
    time.sleep(0.1)
    assert activity.phase == COMPILE
    dog.done()
    dog.arm(STEP, 2)
    dog.close()
    assert stalls.seen == [] and dog.stalls == 0
    assert [r.phase for r in activity.records() or []] == [COMPILE]


def test_the_activity_reports_the_phase_its_heartbeats_and_each_phases_history() -> None:
    jump = JumpClock()
    activity = Activity()
    dog = Watchdog(WatchdogOptions(enabled=False), _Stalls(), activity, jump.clock())
    dog.arm(RESTORE, 1)
    changes = activity.changes
    jump.advance(4)
    dog.done()
    dog.arm(COMPILE, 1)
    assert activity.changes == changes + 1
    report = activity.report()
    assert report is not None and (report.phase, report.source) == (COMPILE, "Trainer")
    jump.advance(60)
    dog.done()
    for step in (2, 3):
        dog.arm(STEP, step)
        jump.advance(0.5)
        dog.done()
    dog.arm(STEP, 4)
    report = activity.report()
    assert report is not None and report.phase == STEP
    assert (report.last_activity_at - report.since).total_seconds() == pytest.approx(1.0)
    assert [(r.phase, r.count, r.longest_seconds) for r in activity.records() or []] == [
        (STEP, 2, 0.5), (COMPILE, 1, 60.0), (RESTORE, 1, 4.0)]
    dog.disarm()
    assert activity.report() is None  # waiting for slices, a hold: no phase


# --- the frame a blocked training thread is in -----------------------------------------------

def test_a_thread_blocked_in_a_device_call_is_named_with_its_caller(
        cpu_devices: list[Any]) -> None:
    import jax.numpy as jnp

    waiting = device_block(jnp.float32(1.5), 3.0, cpu_devices[0])
    found: list[Any] = []
    reader = threading.Thread(target=lambda: found.append(float(waiting)))
    reader.start()
    try:
        _until(lambda: (w := where(reader.ident or 0)) is not None and w.device_call)
        blocked = where(reader.ident or 0)
        # The call made into JAX (float(), not the _value it waits in), and its caller.
        assert blocked is not None and blocked.phase is None and blocked.frame is not None
        call, caller = blocked.frame.split(", called from ")
        assert call == "ArrayImpl.__float__"
        assert caller.startswith("test_a_thread_blocked_in_a_device_call_is_named_with_its_"
                                 "caller.<locals>.<lambda> at test_trainer_watchdog.py:")
    finally:
        reader.join(30)
    assert found == [1.5]  # handed over unchanged


def test_a_device_block_timed_under_load_still_lasts_its_seconds(
        cpu_devices: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The rounds are timed once, at the trainer's start. Timed by the wall clock beside
    busy processes, a round looked several times longer than it is and a 30 s block
    lasted 11.5 s once the load had gone (a loaded test run). Timed here beside 4 busy
    processes on this machine's cores, the block still lasts its second once they stop."""
    import subprocess
    import sys

    import jax.numpy as jnp

    from elastic_trainer import backends

    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        timed = backends._spinner.__wrapped__(cpu_devices[0])  # probes beside the burners
    finally:
        for b in burners:
            b.kill()
            b.wait()
    monkeypatch.setattr(backends, "_spinner", lambda _device: timed)
    started = time.monotonic()
    assert float(device_block(jnp.float32(2.5), 1.0, cpu_devices[0])) == 2.5
    # A round's CPU time is the same loaded or not, within some 10 % (the rounds above
    # 4.1e-5 s, 3.7e-5 s alone); by the wall alone this block lasted about a third.
    assert time.monotonic() - started >= 0.75


@pytest.mark.parametrize(("timed", "expected"), [
    ([(0.07, 0.008), (0.06, 0.0082)], 0.008 / 200),  # loaded: the CPU time
    ([(0.008, 0.0081), (0.0075, 0.009)], 0.0075 / 200),  # quiet: the wall time
    ([(0.0, 0.0)], 1e-7),  # a clock too coarse: never zero
])
def test_a_round_is_timed_by_the_least_of_its_wall_and_cpu_time(
        timed: list[tuple[float, float]], expected: float) -> None:
    from elastic_trainer.backends import round_seconds

    assert round_seconds(timed, 200) == pytest.approx(expected)


# --- silent faults ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "fault"), [
    ("53:2:hang", SilentFault(53, 2, "hang")),
    ("10-30:1:slow=3", SilentFault(10, 1, "slow", 3.0, 30)),
    ("10:0:slow=1.5", SilentFault(10, 0, "slow", 1.5, None)),
    ("15:1:block=30", SilentFault(15, 1, "block", seconds=30.0)),
])
def test_silent_faults_parse(text: str, fault: SilentFault) -> None:
    assert parse_fault(text, total_slices=4) == fault


@pytest.mark.parametrize(("text", "says"), [
    ("53-60:2:hang", "STEP:SLICE:hang"),
    ("10:1:slow=1", "FACTOR above 1"),
    ("10:1:slow=x", "FACTOR above 1"),
    ("10:9:hang", "does not exist"),
    ("10:1:stall", "phase must be"),
    ("10:1:block", "STEP:SLICE:block=SECONDS"),
    ("10-20:1:block=5", "STEP:SLICE:block=SECONDS"),
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


def test_a_block_fires_once_even_when_its_step_is_done_again() -> None:
    faults = StepFaults([SilentFault(4, 1, "block", seconds=9.0)])
    for step in range(1, 6):
        faults.on_step(step, {})
    assert faults.blocked(3, {}) is None
    assert faults.blocked(4, {}) == (1, 9.0)
    assert faults.blocked(4, {}) is None  # the step done again after a rewind


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
