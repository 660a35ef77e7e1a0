"""The pure parts of the goodput benchmarks (bench/goodput.py, goodput_check.py): the
published rates, the goodput arithmetic of a replay, the trainer-log reader, a fault's
parts, the jobs of both sides and the docs table's rows. The model itself:
test_bench_goodput_model.py."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.goodput_account import Recovery, SlowEpisode, Step, account, walk
from bench.goodput_check import Planned, actions
from bench.goodput_logs import Record, parse_line
from bench.goodput_model import CAUSES, RATES, SHARES, UNITS, VARIANTS, modelled
from bench.goodput_phases import medians, phases
from bench.goodput_side import SideSpec, job_manifest, trainer_command

# --- the rates ----------------------------------------------------------------------------


def test_llama3_rate_gives_back_its_own_interruptions() -> None:
    """Llama 3's rate over Llama 3's 2,048 hosts and 54 days is its 419 interruptions."""
    rate = RATES["Llama 3"][0]
    assert rate * 2048 * 54 / 1000 == pytest.approx(419)
    assert round(rate, 3) == 3.789
    assert sum(SHARES.values()) == pytest.approx(100.0)
    assert SHARES["crash"] == 12.9 and SHARES["hang"] == 1.7


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


# --- a fault's parts ---------------------------------------------------------------------


def _rec(at: float, what: str, value: int = 0, process: int = 0, seconds: float = 0.0,
         source: str = "") -> Record:
    return Record(at, what, value, process, seconds, source)


def test_an_in_process_recovery_is_cut_into_its_parts() -> None:
    records = [_rec(9.9, "step", 99), _rec(10.0, "step", 100), _rec(10.3, "noticed"),
               _rec(12.5, "attempt", 95, seconds=0.4, source="snapshot"),
               _rec(13.6, "step", 96)]
    p = phases("hard", 10.05, records, started=[0.0], killed=[], step=0.1)
    assert p is not None and p.source == "snapshot"
    assert (p.detect, p.back, p.start, p.restore) == (0.25, 1.8, 0.0, 0.4)
    assert p.compile == pytest.approx(1.0) and p.redone == 5 and p.total == 3.55


def test_a_jobset_restart_counts_the_new_processs_start_apart() -> None:
    records = [_rec(10.0, "step", 100), _rec(30.0, "attempt", 90, process=1, seconds=1.0,
                                              source="checkpoint"),
               _rec(32.0, "step", 91, process=1)]
    p = phases("crash", 10.1, records, started=[0.0, 18.0], killed=[10.2], step=0.1)
    assert p is not None
    assert (p.detect, p.back, p.start, p.restore) == (0.1, 7.8, 11.0, 1.0)
    assert p.redone == 10
    assert phases("crash", 40.0, records, [0.0, 18.0], [], 0.1) is None  # not resumed
    table = medians([p, p])
    assert table["crash"]["count"] == 2 and table["crash"]["start"] == 11.0


# --- the check's faults -------------------------------------------------------------------


def test_the_checks_faults_become_their_actions() -> None:
    timed = actions([Planned(10, "hard", 1), Planned(20, "maintenance", 2),
                     Planned(30, "slow", 0, 50)])
    assert [(at, a.what) for at, a in timed] == [
        (10, "hard"), (20, "notice"), (30, "slow"), (80, "maintenance"),
        (80, "slow_off"), (140, "maintenance_end")]


# --- the two jobs -------------------------------------------------------------------------

def _side(name: str) -> SideSpec:
    return SideSpec(name, 4, "2x4", ("tpu-v5e-2x4-0",), 18, 0.1, Path("/tmp/gp") / name)


def test_ours_runs_the_apis_defaults_and_the_baseline_plain_jobset() -> None:
    from elastic_api.budgets import budgets_of
    from elastic_api.validation import validate_job

    ours = validate_job(job_manifest(_side("ours"))).spec
    base = validate_job(job_manifest(_side("baseline"))).spec
    assert ours.recovery.replace_slices and ours.maintenance.enabled
    assert ours.snapshot.period_steps is None  # the trainer's own cadence
    assert (ours.max_restarts, ours.elastic.max_retries, ours.elastic.max_slice_restarts,
            ours.elastic.restart_window_seconds) == (None, None, None, None)
    assert budgets_of(ours).jobset_restarts.derived
    assert not base.recovery.replace_slices and not base.maintenance.enabled
    assert base.elastic.max_slice_restarts == 0 and base.snapshot.period_steps == 0
    assert base.max_restarts is not None and base.max_restarts >= 1000
    # Nor does its program spend a budget of restarts in its process: every slice lost
    # (20 in a run, one job) waits for the JobSet's restart, and never fails the job.
    assert budgets_of(base).elastic_retries.allowed >= 1000
    # Ours trains on 3 of its 4 slices while one is replaced; plain JobSet's program
    # cannot, so a lost slice waits for the JobSet's restart, a new process.
    assert (ours.min_slices, base.min_slices) == (3, 4)
    assert ours.checkpoint.period_steps == base.checkpoint.period_steps == 18
    assert ours.node_selector != base.node_selector
    for flag in ("--no-watchdog", "--no-executable-store"):  # a plain JobSet's program
        assert flag in trainer_command(job_manifest(_side("baseline")))
        assert flag not in trainer_command(job_manifest(_side("ours")))
    later = SideSpec(**{**_side("ours").__dict__, "generation": 2})
    assert job_manifest(later)["metadata"]["name"] == "goodput-ours-2"


# --- the docs table -----------------------------------------------------------------------


def _spread(v: float) -> dict[str, float]:
    return {"mean": v, "p5": v - 0.001, "p95": v + 0.001}


def goodput_result() -> dict[str, Any]:
    values = {"ours": 0.97, "ours-finds-slow": 0.976, "ours-train-on": 0.972,
              "ours-snapshot-kept": 0.975, "jobset": 0.93, "jobset-recreated": 0.5,
              "xpk": 0.85}
    rows = [{"hosts": hosts, "slices": hosts // 64, "rate": rate, "unit": unit,
             "per_1000_host_days": 3.79 / (2 if unit == "chip" else 1), "policy": label,
             "goodput": _spread(values[label] + (0.01 if unit == "chip" else 0.0)),
             "causes": {c: _spread(0.01 if c == "recomputedSteps" else 0.0) for c in CAUSES},
             "copies": {"checkpoint_period": 200.0 if label.startswith("ours") else 298.5},
             "budgets_spent": 0}
            for hosts in (1024, 16384) for rate in RATES for unit in UNITS
            for label, _, _, _ in VARIANTS if modelled(label, hosts)]
    medians_ = {"hard": {"detect": 0.2, "back": 2.0, "start": 0.0, "restore": 0.1,
                         "compile": 0.5, "redone": 3, "total": 3.0, "count": 5}}
    return {"months": rows, "seeds": 20, "rates": {r: {} for r in RATES}, "kinds": ["hard"],
            "costs": {"ours": {"medians": medians_}, "baseline": {"medians": medians_}},
            "load_average_1m": {"mean": 9.5, "max": 11.0}}


def test_the_goodput_rows() -> None:
    """The headline is ours on Pathways against plain JobSet at its own cadence and the
    published restart, per host with the per-chip row under it; the measured recreation
    only at the record size, xpk only up to 1,024 hosts (issue 79)."""
    rows = report.goodput_rows(goodput_result(), {})
    headline = rows[0]
    assert "1,024 hosts" in headline[0] and "Llama 3's rate per host" in headline[0]
    assert "3.9 interruptions a day" in headline[0] and "Pathways" in headline[0]
    assert headline[1:] == ("97.00% (96.90%-97.10%)", "93.00% (92.90%-93.10%)", "1.04")
    assert "per chip" in rows[1][0] and "1.9 interruptions a day" in rows[1][0]
    assert rows[1][1].startswith("98.00%") and rows[1][2].startswith("94.00%")
    assert "slow slices" in rows[2][0] and rows[2][1].startswith("97.60%")
    assert rows[2][2] == "-"
    assert rows[3][1].startswith("97.20%") and rows[4][1].startswith("97.50%")
    small = [row[0] for row in rows if row[0].startswith("The same") or "hosts" in row[0]]
    first_big = next(i for i, row in enumerate(rows) if row[0].startswith("16,384"))
    assert any("xpk" in f for f in small[:first_big])
    assert not any("xpk" in row[0] for row in rows[first_big:])
    assert not any("1,084 s" in row[0] for row in rows[:first_big])
    measured = next(row for row in rows[first_big:] if "1,084 s" in row[0])
    assert measured[1:] == ("-", "50.00% (49.90%-50.10%)", "-")
    causes = rows[first_big - 1]
    assert causes[1] == "recomputedSteps 1.00%; budgets spent 0; a checkpoint every 200 s"
    assert causes[2] == "recomputedSteps 1.00%; a checkpoint every 298 s"
    assert all(len(row) == 4 for row in rows)
    assert rows[-2][1] == "3.00 s (n=5; 0.20; 2.00; 0.00; 0.10; 0.50; 3 steps)"
    table = report.table({"benchmarks": {"goodput": {
        "measured_at": "2026-12-06T12:00:00Z", "result": goodput_result()}}})
    assert "**Goodput over a month of failures" in table


def test_the_goodput_rows_of_a_run_saved_before_the_units() -> None:
    """A results file from before the per-chip rows (no `unit`) still makes its rows."""
    old = goodput_result()
    old["months"] = [{k: v for k, v in m.items() if k not in ("unit", "per_1000_host_days")}
                     for m in old["months"] if m["unit"] == "host"]
    rows = report.goodput_rows(old, {})
    assert rows[0][1].startswith("97.00%") and "per chip" not in rows[1][0]


def test_the_check_rows_say_predicted_against_measured() -> None:
    plan = [{"at": 200, "kind": "hard", "slice": 1, "seconds": 0.0},
            {"at": 1900, "kind": "slow", "slice": 2, "seconds": 40.0},
            {"at": 3850, "kind": "slow", "slice": 1, "seconds": 400.0}]
    check = {"sides": {"ours": {"goodput": 0.95, "false_moves": 0,
                                "slow_moves": [{"at": 3912.4, "slice": 1}]},
                       "baseline": {"goodput": 0.80, "false_moves": 1,
                                    "slow_moves": [{"at": 600.2, "slice": 0}]}},
             "predicted": {"ours": 0.946, "baseline": 0.805}, "duration_seconds": 3900,
             "plan": plan, "costs_from": "bench/results/goodput.json",
             "load_average_1m": {"mean": 9.5, "max": 11.0}}
    rows = report.check_rows(check, {})
    assert rows[0][1:] == ("95.00%", "80.00%", "1.19")
    assert rows[1][1:] == ("94.60% (-0.40)", "80.50% (+0.50)", "-")
    assert rows[2][1:] == ("n/a", "n/a", "-")  # no prediction from its own parts
    assert "(40 s at 1900 s, 400 s at 3850 s of the replay" in rows[3][0]
    assert rows[3][1:] == ("3912; 0 false", "600; 1 false", "-")


def test_the_healthy_rows_count_every_move_as_false() -> None:
    side = {"goodput": 0.97, "slow_moves": [], "false_moves": 0,
            "counters": {"elasticEvents": 1, "sliceFailures": 2, "jobSetRestarts": 0}}
    healthy = {"duration_seconds": 3600.0, "load_target": 10.0,
               "load": {"load1_mean": 9.8, "load1_max": 12.1},
               "sides": {"ours": side, "baseline": {**side, "goodput": 0.98}},
               "moves": {"ours": 0, "baseline": 2}}
    rows = report.healthy_rows(healthy, {})
    assert "60 min" in rows[0][0] and "load at 10 (1-min mean 9.8, max 12.1)" in rows[0][0]
    assert rows[0][1:] == ("0", "2", "-")
    assert rows[1][1:] == ("1, 2, 0, 0", "1, 2, 0, 0", "-")
    assert rows[2][1:] == ("97.00%", "98.00%", "0.99")
    table = report.table({"benchmarks": {"healthy": {
        "measured_at": "2026-12-07T12:00:00Z", "result": healthy}}})
    assert "**An hour with no fault at load 10" in table


def _phase(kind: str, **parts: float) -> dict[str, object]:
    base = {"kind": kind, "detect": 0.0, "back": 0.0, "start": 0.0, "restore": 0.0,
            "compile": 0.0, "redone": 0, "total": 0.0, "source": "snapshot"}
    return {**base, **parts}


def test_the_check_predicts_from_its_own_faults_parts_too() -> None:
    from bench.goodput_check import local_from, own_costs, predicted

    side = {"account": {"median_step_seconds": 0.1}, "efficiency": 1.0,
            "snapshot_period_steps": 5, "since_checkpoint": 0.0, "reduced_speed": None}
    check = {"duration_seconds": 1000.0,
             "plan": [{"at": 100, "kind": "hard", "slice": 1, "seconds": 0.0}],
             "sides": {"ours": {**side, "phases": [
                           _phase("hard", detect=0.5, back=0.1, compile=30.0, up=30.0)]},
                       "baseline": {**side, "phases": [
                           _phase("hard", detect=0.5, back=5.0, start=5.0, compile=20.0,
                                  source="checkpoint")]}}}
    own = own_costs(check)
    local = local_from(own)
    assert local.detect[("ours", "hard")] == 0.5 and local.back[("baseline", "hard")] == 5.0
    assert local.compile[("ours", "hard")] == 30.0 and local.start == 5.0
    got = predicted(check, own)
    # Ours pauses for its 30 s compile and little else; the baseline restarts everything.
    assert 0.96 < got["ours"] < 0.975 and got["baseline"] < got["ours"]


def test_the_checks_model_of_a_crash_adds_no_hardware_time_to_what_was_measured() -> None:
    """A crash restarts ours' `main` in place. The month's model adds the hardware's 10 s
    for it (the write-up's figure); the local run's own pods come back in what it measured
    (`back`), so its model adds nothing: with the 10 s the check predicted ours 4 points
    under what a 200 s run measured."""
    from bench.goodput_check import local_from, local_hardware, own_costs
    from bench.goodput_model import Job
    from bench.goodput_timeline import Event, month

    side = {"account": {"median_step_seconds": 0.1}, "efficiency": 1.0,
            "snapshot_period_steps": 5, "since_checkpoint": 0.0, "reduced_speed": None,
            "phases": [_phase("crash", back=3.5, start=2.5, restore=0.1, compile=0.6,
                              source="checkpoint")]}
    check = {"duration_seconds": 1000.0, "sides": {"ours": side, "baseline": side},
             "plan": [{"at": 100, "kind": "crash", "slice": 0, "seconds": 0.0}]}
    costs = own_costs(check)
    got = month("ours", Job(4, 2, batch=24, devices_per_slice=2),
                [Event(100, "crash", 0, 0.0)], local_hardware(side, costs, "ours"),
                local_from(costs), days=1000 / 86400)
    assert got.lost["waitingForSlices"] == pytest.approx(3.5)
    assert got.lost["startup"] == pytest.approx(2.5)


def test_a_saved_check_is_predicted_again_and_keeps_when_it_ran(tmp_path: Path) -> None:
    from bench.goodput_check import remodel

    side = {"account": {"median_step_seconds": 0.1}, "efficiency": 1.0, "goodput": 0.9,
            "snapshot_period_steps": 5, "since_checkpoint": 0.0, "reduced_speed": None,
            "phases": [_phase("crash", back=3.5, start=2.5, compile=0.6,
                              source="checkpoint")]}
    saved = {"measured_at": "2026-12-07T12:00:00Z", "result": {
        "duration_seconds": 1000.0, "sides": {"ours": side, "baseline": side},
        "plan": [{"at": 100, "kind": "crash", "slice": 0, "seconds": 0.0}],
        "predicted_own": {"ours": 0.5, "baseline": 0.5}}}
    again = remodel(saved, tmp_path / "no-costs.json")
    assert again["replayed_at"] == "2026-12-07T12:00:00Z"
    assert again["predicted"] is None and again["costs_from"] is None
    assert 0.98 < again["predicted_own"]["ours"] < 0.995  # ~7 s of 1,000 and steps redone
    assert remodel({"measured_at": "later", "result": again},
                   tmp_path / "none.json")["replayed_at"] == "2026-12-07T12:00:00Z"


def test_a_slow_episode_ends_for_the_job_when_its_slice_is_moved() -> None:
    from bench.goodput_account import until_moved

    episodes = [SlowEpisode(100.0, 500.0, 1.34), SlowEpisode(1000.0, 1040.0, 1.34)]
    # Moved 62 s into the first; a move outside any episode (a false one) ends none.
    got = until_moved(episodes, [162.0, 700.0])
    assert got == [SlowEpisode(100.0, 162.0, 1.34), SlowEpisode(1000.0, 1040.0, 1.34)]
    steps = [Step(100.0 + t / 10, t, 0) for t in range(0, 4001)]
    lost = account(steps, [], got, 100.0, 500.0, 1.0)["badput_replay_seconds"]["slow_slices"]
    assert lost == pytest.approx(62 * (1 - 1 / 1.34), rel=0.02)


def test_the_replay_waits_for_no_recovery_past_its_next_action() -> None:
    """A notice that moved nothing waited 300 s for a recovery that never came, and the
    maintenance it announced (planned 60 s on) began 240 s late."""
    import time as clock

    from bench.goodput_check import play

    class Recorder:
        wait_until: float | None = None
        seen: list[tuple[str, float | None]] = []

        def act(self, action: Any) -> float:
            self.seen.append((action.what, self.wait_until))
            return clock.time()

    side = Recorder()
    t0 = clock.time() - 10_000.0  # every action already due: no sleeping
    play(side, actions([Planned(2400, "maintenance", 2)]), t0, 4500.0)  # type: ignore[arg-type]
    assert side.seen == [("notice", t0 + 2460), ("maintenance", t0 + 2520),
                         ("maintenance_end", t0 + 4500.0)]
