"""The pure parts of `python -m bench --only goodput`: the failure trace at the published
rates, the goodput arithmetic, the trainer-log reader, the jobs of both sides and the
docs table's rows."""
from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bench import goodput_trace as trace
from bench import report
from bench.goodput_account import Recovery, SlowEpisode, Step, account, walk
from bench.goodput_logs import parse_line
from bench.goodput_side import SideSpec, job_manifest, trainer_command

LLAMA3_JOB = trace.JobShape(slices=1, hosts_per_slice=2048, days=54)
WEEK_2048 = trace.JobShape(slices=32, hosts_per_slice=64)

# --- the trace ---------------------------------------------------------------------------


def test_llama3_rate_gives_back_its_own_interruptions() -> None:
    """Llama 3's rate over Llama 3's hosts and days is its 419 unplanned interruptions."""
    expected = trace.expected_counts(LLAMA3_JOB)
    assert sum(n for kind, n in expected.items() if kind != "slow") == pytest.approx(419)
    assert round(trace.UNPLANNED_PER_1000_HOST_DAYS, 3) == 3.789


def test_the_mix_is_the_published_one() -> None:
    shares = trace.kind_shares()
    assert sum(shares.values()) == pytest.approx(100.0)
    assert shares == pytest.approx({"hard": 77.8, "crash": 12.9, "maintenance": 7.6,
                                    "hang": 1.7})
    # Meta's research clusters bracket Llama 3's rate.
    low, high = sorted(trace.META_RSC_PER_1000_NODE_DAYS.values())
    assert low < trace.UNPLANNED_PER_1000_HOST_DAYS < high


def test_a_week_on_2048_hosts_holds_the_expected_counts_of_every_kind() -> None:
    assert trace.counts_of(WEEK_2048) == {"hard": 42, "crash": 7, "hang": 1,
                                          "maintenance": 4, "slow": 14}
    events = trace.generate(WEEK_2048, seed=59)
    by_kind = {k: sum(1 for e in events if e.kind == k) for k in trace.KINDS}
    assert by_kind == trace.counts_of(WEEK_2048)
    assert all(0 <= e.at < WEEK_2048.seconds and 0 <= e.slice < 32 for e in events)
    assert [e.at for e in events] == sorted(e.at for e in events)
    low, high = trace.SLOW_SECONDS_RANGE
    for e in events:
        if e.kind == "slow":
            assert low <= e.seconds <= high and e.factor == trace.SLOW_FACTOR


def test_every_kind_is_present_even_where_it_is_rare() -> None:
    """A small job expects less than one hang a week: the trace still holds one of each."""
    tiny = trace.JobShape(slices=4, hosts_per_slice=2, days=0.25)
    assert all(n < 1 for n in trace.expected_counts(tiny).values())
    assert trace.counts_of(tiny) == {k: 1 for k in trace.KINDS}


def test_the_trace_is_deterministic_for_a_seed() -> None:
    assert trace.generate(WEEK_2048, 1) == trace.generate(WEEK_2048, 1)
    assert trace.generate(WEEK_2048, 1) != trace.generate(WEEK_2048, 2)


def test_actions_and_their_compressed_gaps() -> None:
    events = trace.generate(WEEK_2048, seed=59)
    actions = trace.actions(events, WEEK_2048.seconds)
    assert [a.at for a in actions] == sorted(a.at for a in actions)
    for i, e in enumerate(events):
        mine = {a.what: a for a in actions if a.event == i}
        if e.kind == "maintenance":
            assert mine["notice"].at < mine["maintenance"].at <= mine["maintenance_end"].at
            assert mine["maintenance"].at - mine["notice"].at <= trace.NOTICE_LEAD_SECONDS
        elif e.kind == "slow":
            assert mine["slow"].at <= mine["slow_off"].at <= WEEK_2048.seconds
        else:
            assert set(mine) == {e.kind}
    gaps = trace.gaps([a.at for a in actions], WEEK_2048.seconds, 1000.0)
    assert len(gaps) == len(actions) + 1 and min(gaps) >= 0
    assert sum(gaps) == pytest.approx(WEEK_2048.seconds / 1000.0)


def test_the_inputs_each_recovery_waits_for() -> None:
    assert trace.inputs_of("hard", ours=True) == ("detect", *trace.BACK)
    assert trace.inputs_of("hard", ours=False) == trace.BACK
    assert trace.inputs_of("hang", ours=False) == ("collective_timeout", *trace.BACK)
    assert trace.inputs_of("crash", ours=True) == trace.inputs_of("crash", ours=False)
    assert all(i.source and i.seconds > 0 for i in trace.INPUTS.values())


# --- the account --------------------------------------------------------------------------

def _steps(process: int, first: int, start: float, count: int,
           every: float = 0.1) -> list[Step]:
    return [Step(start + i * every, first + i, process) for i in range(count)]


def _restart_timeline() -> tuple[list[Step], Recovery]:
    """Steps 1-100 every 0.1 s (t = 0.1 .. 10.0); a fault at 10.05; a new process
    restores step 90 and does 91-190 from t = 12.0 (to 21.9)."""
    steps = _steps(0, 1, 0.1, 100) + _steps(1, 91, 12.0, 100)
    recovery = Recovery("hard", injected_at=10.05, noticed_at=10.2, restored_at=11.9,
                        resumed_at=12.0, held={"slice_back": 0.05, "compile": 0.0127})
    return steps, recovery


def _parts_add_up(result: dict[str, Any], compression: float) -> None:
    useful = result["useful_steps"] * result["median_step_seconds"]
    assert useful + sum(result["badput_replay_seconds"].values()) == pytest.approx(
        result["wall_seconds"])
    assert result["useful_trace_seconds"] == pytest.approx(useful * compression)
    assert result["useful_trace_seconds"] + sum(result["badput_trace_seconds"].values()) \
        == pytest.approx(result["trace_seconds"])


def test_a_restart_costs_steps_redone_inputs_and_control_plane_time() -> None:
    steps, recovery = _restart_timeline()
    result = account(steps, [recovery], [], t0=0.05, t1=21.95, compression=1000.0)
    assert result["median_step_seconds"] == pytest.approx(0.1)
    assert result["useful_steps"] == 190 and result["redone_steps"] == 10
    wall = result["badput_replay_seconds"]
    assert wall["steps_redone"] == pytest.approx(1.0)
    assert wall["input:slice_back"] == pytest.approx(0.05)
    # The gap (10.0 -> 12.0) less the first step's own 0.1 s and what was held.
    assert wall["control_plane"] == pytest.approx(1.9 - 0.0627)
    trace_ = result["badput_trace_seconds"]
    assert trace_["control_plane"] == pytest.approx(wall["control_plane"])  # real time
    assert trace_["input:slice_back"] == pytest.approx(50.0)
    assert trace_["steps_redone"] == pytest.approx(1000.0)
    _parts_add_up(result, 1000.0)
    assert result["goodput_replay"] == pytest.approx(19.0 / 21.9)
    assert result["goodput_trace"] > result["goodput_replay"]
    assert result["recoveries"] == [{"kind": "hard", "at": 10.0, "held_seconds": 0.0627,
                                     "noticed_seconds": 0.15, "restored_seconds": 1.85,
                                     "resumed_seconds": 1.95}]


def test_a_hang_until_noticed_counts_at_trace_scale() -> None:
    steps = _steps(0, 1, 0.1, 50) + _steps(0, 48, 8.0, 50)
    hang = Recovery("hang", injected_at=5.0, noticed_at=6.0, restored_at=7.9,
                    resumed_at=8.0, unnoticed_until=6.0)
    result = account(steps, [hang], [], t0=0.05, t1=12.95, compression=100.0)
    wall = result["badput_replay_seconds"]
    assert wall["hang_unnoticed"] == pytest.approx(1.0)
    assert wall["control_plane"] == pytest.approx(2.9 - 1.0)
    assert result["badput_trace_seconds"]["hang_unnoticed"] == pytest.approx(100.0)
    _parts_add_up(result, 100.0)


def test_slow_steps_and_a_stall_without_a_fault() -> None:
    """Steps 1.34x as long for 20 steps are slow-slice time; a 2 s gap no fault explains
    is a stall (the machine's, counted as measured)."""
    steps = _steps(0, 1, 0.1, 30) + _steps(0, 31, 3.0 + 0.134, 20, every=0.134)
    last = steps[-1]
    steps += _steps(0, last.step + 1, last.at + 2.0, 30)
    slow = SlowEpisode(3.0, last.at, 1.34)
    result = account(steps, [], [slow], t0=0.1, t1=steps[-1].at, compression=10.0)
    assert result["median_step_seconds"] == pytest.approx(0.1)
    wall = result["badput_replay_seconds"]
    assert wall["slow_slices"] == pytest.approx(20 * 0.134 * (1 - 1 / 1.34))
    assert result["stall_seconds"] == pytest.approx(1.9)  # the gap less its step
    assert wall["stalls"] == pytest.approx(1.9) and wall["overhead"] == pytest.approx(0.0)
    assert result["badput_trace_seconds"]["stalls"] == pytest.approx(1.9)  # real time
    assert result["redone_steps"] == 0 and result["useful_steps"] == 79
    _parts_add_up(result, 10.0)


def test_walk_counts_net_progress_across_processes() -> None:
    steps, _ = _restart_timeline()
    w = walk(steps, 0.05, 21.95, 0.1)
    assert (w.useful, w.redone) == (190, 10)
    assert w.gaps == [(pytest.approx(10.0), pytest.approx(11.9))]


# --- the trainer's log --------------------------------------------------------------------

def _at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@pytest.mark.parametrize(("line", "what", "value"), [
    ("2026-12-06 04:28:25,813 INFO elastic_trainer: step 42/45 loss 3.5767 (0.102s/step, "
     "4 slice(s))", "step", 42),
    ("2026-12-06 04:28:14,912 INFO elastic_trainer: attempt 1: 4 slice(s) [0, 1, 2, 3], 1 "
     "micro-batch(es); start at step 18 (snapshot, 0.04s)", "attempt", 18),
    ("2026-12-06 04:28:14,470 WARNING elastic_trainer: elastic event 1: DATA_LOSS: slice 1 "
     "is down at step 19 (mesh of 4 slices)", "noticed", 0),
    ("2026-12-06 04:28:17,605 ERROR elastic_trainer: watchdog: save around step 30 has run "
     "1.5s, past the watchdog's deadline of 1.5s", "noticed", 0),
])
def test_log_lines_the_replay_reads(line: str, what: str, value: int) -> None:
    record = parse_line(line, 3)
    assert record is not None
    assert (record.what, record.value, record.process) == (what, value, 3)
    assert record.at == pytest.approx(_at(line[:23]))


def test_other_log_lines_are_skipped() -> None:
    for line in ("  File \"/x.py\", line 3, in run",
                 "2026-12-06 04:28:15,113 INFO elastic_trainer: elastic event 1: slice 1 "
                 "down at step 19 (DATA_LOSS, detected after 0.1s); restored step 18",
                 "2026-12-06 04:28:14,912 INFO elastic_trainer: restored step 18 from "
                 "snapshot: 1085964 bytes in 0.037s"):
        assert parse_line(line, 0) is None


# --- the two jobs -------------------------------------------------------------------------

def _side(name: str) -> SideSpec:
    return SideSpec(name, 4, "2x4", ("tpu-v5e-2x4-0",), 18, 0.1, Path("/tmp/gp") / name)


def test_both_jobs_are_admitted_and_differ_as_the_baseline_says() -> None:
    from elastic_api.validation import validate_job

    ours = validate_job(job_manifest(_side("ours"))).spec
    base = validate_job(job_manifest(_side("baseline"))).spec
    assert ours.recovery.replace_slices and ours.maintenance.enabled
    assert ours.snapshot.period_steps is None  # the trainer's own cadence
    assert not base.recovery.replace_slices and not base.maintenance.enabled
    assert base.elastic.max_slice_restarts == 0 and base.snapshot.period_steps == 0
    assert base.max_restarts >= 1000 and ours.max_restarts >= 1000
    assert ours.checkpoint.period_steps == base.checkpoint.period_steps == 18
    assert ours.node_selector != base.node_selector
    base_command = trainer_command(job_manifest(_side("baseline")))
    assert "--no-watchdog" in base_command
    assert "--no-watchdog" not in trainer_command(job_manifest(_side("ours")))


# --- the docs table -----------------------------------------------------------------------

def _side_result(goodput: float) -> dict[str, Any]:
    steps, recovery = _restart_timeline()
    result = account(steps, [recovery], [], t0=0.05, t1=21.95, compression=1000.0)
    result["goodput_trace"] = goodput
    result["status_counters"] = {"jobset_restarts": 1}
    return result


def goodput_result() -> dict[str, Any]:
    job = WEEK_2048
    return {
        "compression": 1000.0, "counts": trace.counts_of(job),
        "job": {"slices": 32, "hosts_per_slice": 64, "hosts": 2048, "days": 7.0,
                "tpu": "v5e 16x16"},
        "inputs": {n: {"seconds": i.seconds, "source": i.source}
                   for n, i in trace.INPUTS.items()},
        "sides": {"ours": _side_result(0.95), "baseline": _side_result(0.76)},
        "ratio_goodput_trace_ours_vs_baseline": 0.95 / 0.76,
        "ratio_goodput_replay_ours_vs_baseline": 1.0,
        "load_average_1m": {"mean": 9.5, "max": 11.0, "samples": 30},
    }


def test_the_goodput_rows() -> None:
    rows = report.goodput_rows(goodput_result(), {})
    headline = rows[0]
    assert "2,048 hosts" in headline[0] and "54 interruptions" in headline[0]
    assert headline[1:] == ("95.0%", "76.0%", "1.25")
    # The synthetic run's overhead (its first interval, before a step) left out.
    assert rows[1][1:] == ("94.7%", "94.7%", "1.00")
    assert rows[2][1:] == ("86.8%", "86.8%", "1.00")
    assert all(len(row) == 4 for row in rows)
    assert rows[6][1:] == ("150 ms; 1.85 s; 1.95 s", "150 ms; 1.85 s; 1.95 s", "1.00")
    assert rows[-1][1] == "9.5 (11.0)"
    table = report.table({"benchmarks": {"goodput": {
        "measured_at": "2026-12-06T12:00:00Z", "result": goodput_result()}}})
    assert "**Goodput over a week of failures" in table
    assert not any(math.isnan(float(c.rstrip("%"))) for c in headline[1:])
