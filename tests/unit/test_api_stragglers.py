"""elastic_api.stragglers: the straggler rule both the trainer and the operator apply."""
from __future__ import annotations

from elastic_api.models import TrainingReport
from elastic_api.stragglers import (
    SLOW_SLICE_FACTOR,
    SLOW_SLICE_KEEP,
    SLOW_SLICE_SECONDS,
    SLOW_SLICE_STEPS,
    slow_slices,
    step_times,
    sustained,
)


def _steps(*parts: dict[int, float], times: int = SLOW_SLICE_STEPS) -> list[dict[int, float]]:
    return [dict(p) for p in parts] * times


def test_relative_to_the_fastest_slice_of_each_step() -> None:
    times = step_times(_steps({0: 0.10, 1: 0.11, 2: 0.25, 3: 0.10}))
    assert times is not None and [t.slice for t in times] == [0, 1, 2, 3]
    assert [t.relative for t in times] == [1.0, 1.1, 2.5, 1.0]
    assert [t.seconds for t in times] == [0.10, 0.11, 0.25, 0.10]
    assert slow_slices(times) == [2]


def test_one_slow_step_or_a_slow_job_is_no_straggler() -> None:
    quick, slowed = {0: 0.1, 1: 0.1}, {0: 0.1, 1: 0.9}
    assert slow_slices(step_times([slowed] + [quick] * SLOW_SLICE_STEPS)) == []
    # The whole job at a tenth of its speed, both slices alike.
    assert slow_slices(step_times(_steps({0: 1.0, 1: 1.0}) + _steps({0: 0.1, 1: 0.1}))) == []
    # Half the steps slow and more: sustained.
    assert slow_slices(step_times([slowed] * 6 + [quick] * 4)) == [1]


def test_just_below_the_factor_is_not_slow() -> None:
    assert slow_slices(step_times(_steps({0: 1.0, 1: SLOW_SLICE_FACTOR - 0.01}))) == []
    assert slow_slices(step_times(_steps({0: 1.0, 1: SLOW_SLICE_FACTOR}))) == [1]


def test_nothing_to_compare_against_blames_nobody() -> None:
    assert step_times(_steps({0: 0.1, 1: 0.5}, times=SLOW_SLICE_STEPS - 1)) is None
    assert slow_slices(None) == []
    assert slow_slices(step_times(_steps({0: 5.0}))) == []
    assert slow_slices(step_times(_steps({0: 0.0, 1: 0.0}))) == []


def test_the_report_carries_them_on_the_wire() -> None:
    report = TrainingReport.model_validate({
        "observedAt": "2026-12-02T00:00:00Z", "state": "Training",
        "sliceStepTimes": [{"slice": 0, "seconds": 0.1, "relative": 1.0},
                           {"slice": 1, "seconds": 0.3, "relative": 3.0}]})
    assert slow_slices(report.slice_step_times) == [1]
    wire = report.model_dump(by_alias=True, mode="json")
    assert wire["sliceStepTimes"][1] == {"slice": 1, "seconds": 0.3, "relative": 3.0}


def _times(relative: float) -> list:
    return step_times(_steps({0: 1.0, 1: 1.0, 2: relative})) or []


def test_slow_for_the_seconds_on_end_is_found() -> None:
    since, found = sustained({}, _times(1.34), now=100.0)
    assert since == {2: 100.0} and found == []
    since, found = sustained(since, _times(1.34), now=100.0 + SLOW_SLICE_SECONDS - 1)
    assert found == []
    since, found = sustained(since, _times(1.34), now=100.0 + SLOW_SLICE_SECONDS)
    assert since == {2: 100.0} and found == [2]


def test_a_dip_under_the_factor_keeps_the_clock_and_a_recovery_forgets_it() -> None:
    since, _ = sustained({}, _times(1.34), now=0.0)
    # Noise on a loaded host: the median dips under 1.2x but stays over SLOW_SLICE_KEEP.
    since, found = sustained(since, _times(SLOW_SLICE_KEEP + 0.05), now=30.0)
    assert since == {2: 0.0} and found == []
    since, found = sustained(since, _times(1.3), now=SLOW_SLICE_SECONDS)
    assert found == [2]
    # Back to its speed: forgotten; slow again later starts a new clock.
    since, found = sustained(since, _times(1.02), now=SLOW_SLICE_SECONDS + 1)
    assert since == {} and found == []
    # Never slow: a slice merely over SLOW_SLICE_KEEP is not tracked.
    assert sustained({}, _times(SLOW_SLICE_KEEP + 0.05), now=0.0) == ({}, [])
    assert sustained({2: 0.0}, None, now=SLOW_SLICE_SECONDS) == ({}, [])
