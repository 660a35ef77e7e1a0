"""Pure: `kubectl etj status JOB`: one row per slice (state, node pool, hosts ready,
restarts, last failure and its cause, downtime), then the job's counters and cadences.
A job of more than 16 slices (groups.py) has a line per group of alike slices (the Ready
ones above all) and a row for each slice worth one."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError

from elastic_api.indices import ranges
from elastic_api.models import CadenceReport, SliceStatus
from elastic_kubectl.groups import MAX_ROWS, group_by, grouped
from elastic_kubectl.job import Job
from elastic_kubectl.text import age, duration, plural, stamp, table, wrap

DOWN_STATES = ("Down", "Restarting")
# A job of many slices: the Ready slices that failed most recently, each with a row;
# at most this many lines of slices of one state and reason.
RECENT = 3
MAX_LINES = 8


def cadence_text(report: CadenceReport | dict[str, Any] | None) -> str | None:
    """`every 3 steps (WithinBudget, 1.6 % of step time)` from a status.training cadence."""
    if isinstance(report, dict):
        try:
            report = CadenceReport.model_validate(report)
        except ValidationError:
            return None
    if not isinstance(report, CadenceReport):
        return None
    if report.period_steps == 0:
        return f"off ({report.reason})"
    cost = "" if report.overhead_percent is None else \
        f", {report.overhead_percent:.1f} % of step time"
    return f"every {plural(report.period_steps, 'step')} ({report.reason}{cost})"


def _last_failure(s: SliceStatus, now: datetime) -> tuple[str, str | None, datetime | None]:
    """(reason, its cause in words, when) of the slice's current or last failure."""
    if s.state in DOWN_STATES:
        cause = s.replacement.evidence if s.replacement and s.replacement.evidence else s.message
        blame = s.replacement.blame if s.replacement else None
        return s.reason or s.state, _cause(blame, cause), s.last_transition_time
    if s.replacement is not None:
        return s.replacement.reason, _cause(s.replacement.blame, s.replacement.evidence), \
            s.replacement.requested_at
    if s.last_replacement is not None:
        last = s.last_replacement
        return last.reason, _cause(last.blame, None), last.requested_at
    return "-", None, None


def _cause(blame: str | None, evidence: str | None) -> str | None:
    parts = [f"blame {blame}" if blame else None, evidence]
    text = "; ".join(p for p in parts if p)
    return text or None


def _downtime(s: SliceStatus, now: datetime) -> tuple[str, float | None, bool]:
    """(text, seconds, still down) of the current outage, else of the last replacement."""
    if s.state in DOWN_STATES and s.last_transition_time is not None:
        seconds = (now - s.last_transition_time).total_seconds()
        return f"{duration(seconds)} so far", seconds, True
    if s.last_replacement is not None:
        return duration(s.last_replacement.seconds), s.last_replacement.seconds, False
    return "-", None, False


def slice_json(s: SliceStatus, now: datetime) -> dict[str, Any]:
    reason, cause, at = _last_failure(s, now)
    _, seconds, ongoing = _downtime(s, now)
    last = s.last_replacement
    return {
        "index": s.index, "state": s.state, "reason": s.reason, "pool": s.pool,
        "readyHosts": s.ready_hosts, "hosts": s.hosts, "restarts": s.restarts,
        "lastFailure": None if reason == "-" else {"reason": reason, "cause": cause,
                                                   "at": stamp(at)},
        "downtimeSeconds": None if seconds is None else round(seconds, 3),
        "downNow": ongoing,
        "lastReplacement": None if last is None else {
            "action": last.action, "fromPool": last.from_pool, "toPool": last.to_pool,
            "seconds": last.seconds, "readyAt": stamp(last.ready_at)},
    }


def status_json(job: Job, now: datetime) -> dict[str, Any]:
    st, report = job.status, job.status.training
    rec = st.last_recovery
    return {
        "name": job.name, "namespace": job.namespace, "phase": st.phase,
        "slicesReady": st.slices_ready, "slicesDesired": st.slices_desired or job.num_slices,
        "step": report.step if report else None,
        "totalSteps": report.total_steps if report else None,
        "trainerState": report.state if report else None,
        "slices": [slice_json(s, now) for s in sorted(st.slices, key=lambda s: s.index)],
        "counters": st.counters.model_dump(by_alias=True, mode="json")
        if job.has("counters") else None,
        "lastRecovery": None if rec is None else rec.model_dump(by_alias=True, mode="json",
                                                                exclude_none=True),
        "cadences": {"snapshot": cadence_text(report.snapshot_cadence) if report else None,
                     "checkpoint": cadence_text(report.checkpoint_cadence) if report else None},
        "latestCommittedStep": _committed(job),
        "notes": job.notes,
    }


def _committed(job: Job) -> int | None:
    values = [v for v in ((job.status.checkpoint.latest_committed_step
                           if job.status.checkpoint else None),
                          (job.status.training.last_committed_checkpoint_step
                           if job.status.training else None)) if v is not None]
    return max(values) if values else None


def render_status(job: Job, now: datetime) -> list[str]:
    st, report = job.status, job.status.training
    desired = st.slices_desired or job.num_slices
    step = "-" if report is None else str(report.step) + (
        f"/{report.total_steps}" if report.total_steps else "")
    lines = wrap(f"{job.name} ({job.namespace})  phase {st.phase or 'unknown'}  "
                 f"slices {st.slices_ready if st.slices_ready is not None else '?'}/{desired} "
                 f"Ready  step {step}")
    ordered = sorted(st.slices, key=lambda s: s.index)
    shown, groups = (ordered, []) if not grouped(max(desired, len(ordered))) \
        else _split(ordered, now)
    for group in groups:
        lines += wrap(_group_text(group), indent="    ", first="")
    rows, details = [], []
    for s in shown:
        reason, cause, at = _last_failure(s, now)
        text, _, _ = _downtime(s, now)
        rows.append([str(s.index), s.state, s.pool or "-", f"{s.ready_hosts}/{s.hosts}",
                     str(s.restarts), reason, text])
        when = f"{reason} {age(at, now)} ago" if at is not None and reason != "-" else None
        details += _detail_lines(s, when, cause)
    if rows:
        lines += table(["SLICE", "STATE", "POOL", "HOSTS", "RESTARTS", "LAST FAILURE",
                        "DOWNTIME"], rows, flexible=(5, 2), keep_end=(2,))
    elif not groups:
        lines.append("no slices reported yet")
    lines += details
    lines += _job_lines(job, now)
    return lines


def _split(ordered: list[SliceStatus], now: datetime
           ) -> tuple[list[SliceStatus], list[list[SliceStatus]]]:
    """A job of many slices: (the slices worth a row, the groups of the others). A row
    each for the slices Down, Restarting or Pending, and for the Ready ones that failed
    most recently (`RECENT`). Past `MAX_ROWS` rows, the largest groups of one state and
    reason (a whole job Pending, a block Down) are a line each (at most `MAX_LINES`),
    then the rows left over a line per state; the other Ready slices are a line."""
    def failed_at(s: SliceStatus) -> float:
        at = _last_failure(s, now)[2]
        return at.timestamp() if at is not None else float("-inf")

    recent = {s.index for s in sorted(
        (s for s in ordered if s.state == "Ready" and failed_at(s) > float("-inf")),
        key=failed_at, reverse=True)[:RECENT]}
    groups = group_by([s for s in ordered if s.state != "Ready"], lambda s: (s.state, s.reason))
    lines: list[list[SliceStatus]] = []
    while sum(map(len, groups)) + len(recent) > MAX_ROWS and len(lines) < MAX_LINES \
            and max(map(len, groups)) > 1:
        largest = max(groups, key=len)
        groups.remove(largest)
        lines.append(largest)
    rank = {"Down": 0, "Restarting": 1, "Ready": 2, "Pending": 3}
    rows = sorted([s for g in groups for s in g] + [s for s in ordered if s.index in recent],
                  key=lambda s: (rank.get(s.state, 4), s.index))
    lines += group_by((s for s in rows[MAX_ROWS:] if s.state != "Ready"), lambda s: s.state)
    shown = sorted(rows[:MAX_ROWS], key=lambda s: s.index)
    kept = {s.index for s in shown}
    ready = [s for s in ordered if s.state == "Ready" and s.index not in kept]
    return shown, ([ready] if ready else []) + sorted(
        lines, key=lambda g: (rank.get(g[0].state, 4), g[0].index))


def _group_text(group: list[SliceStatus]) -> str:
    """`195 Ready: slices 0-6, 8-41, 122-197; 64/64 hosts each; 3 restarted before (4
    restarts)`."""
    first = group[0]
    reasons = {s.reason for s in group if s.reason}
    reason = ""
    if first.state != "Ready" and reasons:
        reason = f" ({first.reason})" if len(reasons) == 1 else f" ({len(reasons)} reasons)"
    ready = sorted({s.ready_hosts for s in group})
    hosts = max(s.hosts for s in group)
    if len(ready) > 1:
        each = f"{ready[0]} to {ready[-1]} of {hosts} hosts ready"
    else:
        each = f"{ready[0]}/{hosts} hosts {'each' if first.state == 'Ready' else 'ready each'}"
    parts = [f"{len(group)} {first.state}{reason}: slices {ranges(s.index for s in group)}",
             each]
    restarted = [s for s in group if s.restarts]
    if restarted:
        parts.append(f"{len(restarted)} restarted before "
                     f"({plural(sum(s.restarts for s in restarted), 'restart')})")
    return "; ".join(parts)


def _detail_lines(s: SliceStatus, when: str | None, cause: str | None) -> list[str]:
    parts = [p for p in (when, cause) if p]
    last = s.last_replacement
    if last is not None and last.action == "RestartInPlace":
        parts.append(f"restarted in place{f' on {last.to_pool}' if last.to_pool else ''}")
    elif last is not None and (last.from_pool or last.to_pool):
        parts.append(f"{last.from_pool or '?'} -> {last.to_pool or '?'}")
    if not parts:
        return []
    return wrap("; ".join(parts), indent="    ", first=f"  slice {s.index}: ")


def _job_lines(job: Job, now: datetime) -> list[str]:
    st, report = job.status, job.status.training
    lines = []
    if job.has("counters"):
        c = st.counters
        lines += wrap(f"slice failures {c.slice_failures}, elastic events {c.elastic_events}, "
                      f"JobSet restarts {c.jobset_restarts}, trainer restarts "
                      f"{c.trainer_restarts}, preemptions {c.preemptions}, evictions "
                      f"{c.evictions}", indent=" " * 13, first="counters:    ")
    rec = st.last_recovery
    if rec is not None:
        lines += wrap(_recovery_text(rec, now), indent=" " * 13, first="recovery:    ")
    for kind, text in (
            ("snapshots:", cadence_text(report.snapshot_cadence) if report else None),
            ("checkpoints:", cadence_text(report.checkpoint_cadence) if report else None)):
        if text:
            lines += wrap(text, indent=" " * 13, first=f"{kind:<12} ")
    committed = _committed(job)
    if committed is not None:
        lines.append(f"committed:   checkpoint of step {committed} (the newest)")
    if report is not None and report.process_id is not None:
        lines += wrap(f"pid {report.process_id} on {report.host_name or '?'}, attempt "
                      f"{report.attempt}, {report.state}, reported {age(report.observed_at, now)}"
                      " ago", indent=" " * 13, first="trainer:     ")
    lines += [line for note in job.notes for line in wrap(note, "      ", "note: ")]
    return lines


def _recovery_text(rec: Any, now: datetime) -> str:
    if rec.resumed_at is None and rec.closed_at is None:
        return (f"in progress for {duration((now - rec.detected_at).total_seconds())} "
                f"(slices {ranges(rec.slices) or '?'})")
    parts = [f"{duration(rec.downtime_seconds)} of downtime {age(rec.detected_at, now)} ago"]
    if rec.steps_lost is not None:
        parts.append(plural(rec.steps_lost, "step") + " lost")
    if rec.restored_from_step is not None:
        parts.append(f"restored from step {rec.restored_from_step} ({rec.restore_source})")
    if rec.closed_by:
        parts.append(f"closed by the {rec.closed_by.lower()}")
    return ", ".join(parts)
