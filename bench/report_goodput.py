"""The rows of docs/benchmarks.md's table for the goodput benchmarks (bench/goodput.py,
bench/goodput_check.py), from their results JSON."""
from __future__ import annotations

from typing import Any

from bench.goodput_model import CAUSES

Row = tuple[str, str, str, str]  # figure, ours, baseline, ratio


def _pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value * 100:.{digits}f}%"


def _spread(figure: dict[str, float]) -> str:
    return (f"{_pct(figure['mean'], 2)} ({_pct(figure['p5'], 2)}-"
            f"{_pct(figure['p95'], 2)})")


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}"


def _row(rows: list[dict[str, Any]], hosts: int, rate: str, policy: str,
         unit: str = "host") -> dict[str, Any] | None:
    """The month row of a size, rate, unit and policy (None: not modelled there). Rows
    saved before the unit was recorded are per host."""
    return next((r for r in rows if (r["hosts"], r["rate"], r.get("unit", "host"),
                                     r["policy"]) == (hosts, rate, unit, policy)), None)


def _causes(row: dict[str, Any], top: int = 4) -> str:
    """The largest causes of the month's badput, percent of the month."""
    causes = sorted(((row["causes"][c]["mean"], c) for c in CAUSES), reverse=True)
    return "; ".join(f"{c} {_pct(v, 2)}" for v, c in causes[:top] if v > 0)


def _checkpoint(row: dict[str, Any]) -> str:
    period = (row.get("copies") or {}).get("checkpoint_period")
    return f"; a checkpoint every {period:.0f} s" if period else ""


def _per_day(row: dict[str, Any]) -> str:
    rate = row.get("per_1000_host_days")
    return "" if rate is None else f", {rate * row['hosts'] / 1000:.1f} interruptions a day"


def _one(row: dict[str, Any] | None) -> str:
    return _spread(row["goodput"]) if row else "n/a"


# The rows of one variant, ours' or the baseline's: (label, column, what the row says).
ALONE = (
    ("ours-finds-slow", "ours", "ours moving slow slices, where the backend finds them (the "
     "simulated backend: found 1.2x for 60 s and moved; Pathways cannot time a slice yet)"),
    ("ours-train-on", "ours", "ours training on the slices left while one is replaced (a "
     "batch that splits over them, or minSlices set)"),
    ("ours-snapshot-kept", "ours", "ours with the snapshot kept through a crash too (the "
     "API's defaults restart main in place and resume from the newest checkpoint)"),
    ("jobset-recreated", "baseline", "plain JobSet with the JobSet's pods back in the time "
     "measured here at the record size (1,084 s p50 for 12,736 pods recreated, the scale "
     "benchmark) instead of the published 130 s"),
    ("xpk", "baseline", "xpk's defaults (maxRestarts 0: each interruption ends the workload "
     "until it is submitted again within 30 min; shown up to 1,024 hosts: above, a "
     "resubmission 15 to 62 times a day is a straw man)"),
)


def goodput_rows(r: dict[str, Any], _benchmarks: dict[str, Any]) -> list[Row]:
    months, seeds = r["months"], r["seeds"]
    rows: list[Row] = []
    for hosts in sorted({m["hosts"] for m in months}):
        for rate in r["rates"]:
            ours, base = _row(months, hosts, rate, "ours"), _row(months, hosts, rate, "jobset")
            if ours is None or base is None:
                continue
            rows.append((
                f"{hosts:,} hosts ({ours['slices']} x v5e 16x16), {rate}'s rate per host"
                f"{_per_day(ours)}: goodput over a month, mean (5th-95th percentile of "
                f"{seeds} seeded months); ours on Pathways, no slow slice moved (baseline: "
                "plain JobSet, the whole JobSet restarted from the newest checkpoint, "
                "checkpointing at its own Young-Daly period, its pods back in the published "
                "130 s)", _one(ours), _one(base),
                _ratio(ours["goodput"]["mean"], base["goodput"]["mean"])))
            chip, chip_base = (_row(months, hosts, rate, p, "chip") for p in ("ours", "jobset"))
            if chip and chip_base:
                rows.append((
                    "The same, the rate per chip (a v5e host's 4 chips against the published "
                    f"hosts' 8 GPUs{_per_day(chip)})", _one(chip), _one(chip_base),
                    _ratio(chip["goodput"]["mean"], chip_base["goodput"]["mean"])))
            for label, column, what in ALONE:
                row = _row(months, hosts, rate, label)
                if row is None:
                    continue
                cell = _one(row)
                rows.append((f"The same: {what}", cell if column == "ours" else "-",
                             cell if column == "baseline" else "-", "-"))
            rows.append(("The same: the largest causes of badput, % of the month; restart "
                         "budgets spent (the API's defaults); the checkpoint period",
                         f"{_causes(ours)}; budgets spent {ours['budgets_spent']}"
                         f"{_checkpoint(ours)}", f"{_causes(base)}{_checkpoint(base)}", "-"))
    return rows + cost_rows(r)


def cost_rows(r: dict[str, Any]) -> list[Row]:
    """Each kind's measured cost, ours against plain JobSet."""
    costs = r["costs"]
    ours = (costs.get("ours") or {}).get("medians", {})
    base = (costs.get("baseline") or {}).get("medians", {})
    rows: list[Row] = []
    for kind in r["kinds"]:
        o, b = ours.get(kind), base.get(kind)
        rows.append((
            f"Measured here, real speed: a {kind} fault -> the first step after its "
            "restore, median (n; parts: detected; slice back or JobSet restarted; a new "
            "process's start; restore; recompile; steps redone)", _parts(o), _parts(b),
            _ratio(o["total"] if o else None, b["total"] if b else None)))
    load = r["load_average_1m"]
    when = f" (the costs measured {r['costs_measured_at']}, the months modelled again " \
        "since)" if r.get("costs_measured_at") else ""
    rows.append(("Load average (1 min) while the costs were measured, mean (max); both "
                 f"sides at once{when}", f"{load['mean']} ({load['max']})", "", ""))
    return rows


def _parts(m: dict[str, float] | None) -> str:
    if not m:
        return "n/a"
    return (f"{m['total']:.2f} s (n={m['count']:.0f}; {m['detect']:.2f}; {m['back']:.2f}; "
            f"{m['start']:.2f}; {m['restore']:.2f}; {m['compile']:.2f}; "
            f"{m['redone']:.0f} steps)")


def check_rows(r: dict[str, Any], _benchmarks: dict[str, Any]) -> list[Row]:
    sides, predicted = r["sides"], r.get("predicted") or {}
    rows: list[Row] = []
    measured = {n: s["goodput"] for n, s in sides.items()}
    again = f"; replayed {r['replayed_at']}, predicted again since" \
        if r.get("replayed_at") else ""
    rows.append((
        f"Goodput over {r['duration_seconds'] / 60:.0f} min of an 8-host job at real speed, "
        f"{len(r['plan'])} faults (measured; baseline: plain JobSet{again})",
        _pct(measured.get("ours"), 2), _pct(measured.get("baseline"), 2),
        _ratio(measured.get("ours"), measured.get("baseline"))))
    rows.append((
        "The same, as the model predicts it from the costs measured by the goodput "
        f"benchmark ({_shown(r.get('costs_from')) or 'none found: run it first'}); "
        "predicted minus "
        "measured, points",
        _against(predicted.get("ours"), measured.get("ours")),
        _against(predicted.get("baseline"), measured.get("baseline")), "-"))
    own = r.get("predicted_own") or {}
    rows.append((
        "The same, from this run's own faults' parts (medians by kind): the timeline's "
        "composition alone; predicted minus measured, points",
        _against(own.get("ours"), measured.get("ours")),
        _against(own.get("baseline"), measured.get("baseline")), "-"))
    slow = [p for p in r["plan"] if p["kind"] == "slow"]
    rows.append((
        "Slow slices moved (" + ", ".join(f"{p['seconds']:.0f} s at {p['at']:.0f} s"
                                          for p in slow) + " of the replay, 1.34x): at "
        "(s into it); false moves", _moves(sides.get("ours")), _moves(sides.get("baseline")),
        "-"))
    load = r["load_average_1m"]
    rows.append(("Load average (1 min) during the replay, mean (max)",
                 f"{load['mean']} ({load['max']})", "", ""))
    return rows


def _shown(path: str | None) -> str | None:
    """A results path as the reader's checkout names it (bench/results/...)."""
    if path is None or "bench/results/" not in path:
        return path
    return "bench/results/" + path.split("bench/results/", 1)[1]


def _moves(side: dict[str, Any] | None) -> str:
    if side is None:
        return "n/a"
    at = ", ".join(f"{m['at']:.0f}" for m in side["slow_moves"]) or "none"
    return f"{at}; {side['false_moves']} false"


def healthy_rows(r: dict[str, Any], _benchmarks: dict[str, Any]) -> list[Row]:
    sides, load = r["sides"], r.get("load") or {}
    return [
        (f"Slices moved in {r['duration_seconds'] / 60:.0f} min of an 8-host job with no "
         f"fault, the machine's load at {r['load_target']:g} (1-min mean "
         f"{load.get('load1_mean')}, max {load.get('load1_max')}): every move false",
         str(r["moves"].get("ours", "n/a")), str(r["moves"].get("baseline", "n/a")), "-"),
        ("Anything else done to a slice or the job: the status counters elasticEvents, "
         "sliceFailures, jobSetRestarts, stallRestarts (none expected)",
         _counters(sides["ours"]), _counters(sides["baseline"]), "-"),
        ("Its goodput (what the load and the copies cost it)",
         _pct(sides["ours"]["goodput"], 2), _pct(sides["baseline"]["goodput"], 2),
         _ratio(sides["ours"]["goodput"], sides["baseline"]["goodput"])),
    ]


def _against(predicted: float | None, measured: float | None) -> str:
    if predicted is None or measured is None:
        return "n/a"
    return f"{_pct(predicted, 2)} ({(predicted - measured) * 100:+.2f})"


def _counters(side: dict[str, Any]) -> str:
    counters = side.get("counters") or {}
    return ", ".join(str(counters.get(k, 0)) for k in (
        "elasticEvents", "sliceFailures", "jobSetRestarts", "stallRestarts"))
