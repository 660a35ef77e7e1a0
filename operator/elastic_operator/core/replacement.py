"""Slice replacement at hardware speed, decided purely
(docs/design/slice-replacement.md).

Kubernetes alone brings a failed slice back slowly: the Job controller delays a worker
Job's replacement pods 10 s x 2^(n-1) up to 10 minutes (never reset: workers never
succeed), a dead node's pods are evicted after 300 s and then stay Terminating, and a
replacement leader is pinned to the broken node pool by the old pods. So the operator
replaces the slice itself: it deletes the slice's worker Job (uid precondition) and
JobSet recreates it at once, with a fresh backoff.

Two steps, with the status written in between (intent first):

1. `track_replacements` (inside compute_status): when a slice fails, record in
   `slices[i].replacement` what will be done (Replace; GiveUp once the failure is past the
   slice's restart budget, elastic_api.budgets: spec.elastic.maxSliceRestarts within its
   window, the times in slices[i].recentFailures) and against which Job (its uid, from
   the failed pods);
   when the slice is Ready again on a new Job, move the record to `lastReplacement`.
2. `plan_replacements` (after the write): the actions the records call for, level-based:
   the Job named in a record that still exists, not being deleted, is deleted (after the
   NodeNotReady grace), its pool quarantined first when a spare exists and the failure's
   evidence blames the pool (core/blame.py, core/pools.py); a GiveUp lowers the Job's
   backoffLimit, and ends the Job of a slice the trainer blamed (activeDeadlineSeconds 0:
   its pods never fail by themselves); pods Terminating on a dead node are force-deleted
   after spec.recovery.forceDeleteAfterSeconds; a slice that waits for a pool takes its
   old one back once its nodes are healthy; a quarantine this job's failures caused is
   released once they follow the job elsewhere. A restarted operator finds the record and
   the Job and does what is left; a delete that already happened is never repeated (the
   Job has another uid).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from elastic_api.budgets import Budget, Charge, budgets_of
from elastic_api.conditions import Reason
from elastic_api.models import (
    ElasticTrainingJobSpec,
    ElasticTrainingJobStatus,
    PoolStatus,
    ReplacementRecord,
    SliceReplacement,
    SliceStatus,
)
from elastic_api.models import ReplacementAction as RecordAction
from elastic_api.models.health import MAX_POOL_FAILURES
from elastic_api.names import worker_job_name
from elastic_operator.core import inplace
from elastic_operator.core.blame import Evidence, on_ready_node
from elastic_operator.core.hung import REQUESTED_REASONS, reported_evidence
from elastic_operator.core.plan import (
    DeleteWorkerJob,
    FailWorkerJob,
    ForceDeletePod,
    LowerBackoffLimit,
    QuarantinePool,
    ReleasePool,
    ReplacementAction,
)
from elastic_operator.core.pools import (
    DEFAULT_QUARANTINE,
    QuarantinePolicy,
    declined,
    pools_in_use,
    quarantine_verdict,
    record_pools,
    refusals,
    spare_pools,
    taken_back,
    withdrawn,
)
from elastic_operator.core.slices import SliceChange
from elastic_operator.core.sliceview import SliceView, SliceViews, slice_views
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import plural
from elastic_operator.model.objects import (
    Observed,
    ObservedJob,
    ObservedJobSet,
    ObservedPool,
    QuarantineCause,
)

# The words of each blame in the SliceReplacing Event.
_BLAME_WORDS = {"Node": "evidence against the node pool", "Reported": "the job reports a "
                "hardware failure", "Job": "the job's own failure", "Other": "not the node's "
                "nor the container's doing"}


# --- step 1: the records, inside compute_status --------------------------------------------


@dataclass
class Tracked:
    slices: list[SliceStatus]
    pools: list[PoolStatus]
    events: list[StatusEvent] = field(default_factory=list)


def track_replacements(
    spec: ElasticTrainingJobSpec, slices: list[SliceStatus], changes: list[SliceChange],
    observed: Observed, views: SliceViews, previous_pools: list[PoolStatus], now: datetime,
    reported: Mapping[int, Evidence] | None = None,
    jobset_restarted_at: datetime | None = None,
    policy: QuarantinePolicy = DEFAULT_QUARANTINE,
) -> Tracked:
    """slices[].pool, .replacement and .lastReplacement, and status.pools, after this
    reconcile's slice changes (`views`: each slice's pods). `reported`: the evidence of
    the slices the trainer blames (core/hung.py), which their pods do not show;
    `jobset_restarted_at`: when the JobSet last restarted (core/budget_tracking.py);
    `policy`: the administrator's on quarantines (a SliceReplacing Event says when it
    alone keeps the failed slice's pool from one)."""
    by_change = {c.index: c for c in changes}
    budget = budgets_of(spec).slice_restarts
    failed_on: list[tuple[str, Evidence]] = []
    replacing: dict[int, tuple[str, Evidence]] = {}  # SliceReplacing Event: pool, evidence
    out: list[SliceStatus] = []
    events: list[StatusEvent] = []
    for s in slices:
        view = views[s.index]
        pool = view.pool or s.pool
        record = s.replacement
        last = s.last_replacement
        change = by_change.get(s.index)
        recent = s.recent_failures
        if change is not None and change.failed:
            evidence = (reported or {}).get(s.index) or view.evidence(spec.recovery)
            from_pool = view.failed_pool(evidence, s.pool)
            if from_pool:
                failed_on.append((from_pool, evidence))
            charge = budget.charge(s.restarts - 1, s.recent_failures, now)
            if _restarted_with_jobset(view, observed.jobset, jobset_restarted_at, now):
                charge = Charge(True, 0, tuple(recent))  # not the slice's failure
            recent = list(charge.recent)
            row = inplace.decide(_failure(s, view, evidence, change), spec.recovery)
            record = _new_record(spec, s, view, from_pool, evidence, now, row, charge)
            if record is not None:
                events.append(_record_event(spec, s, record, row, budget, charge))
                if record.action == "Replace" and from_pool:
                    replacing[len(events) - 1] = (from_pool, evidence)
        elif record is not None and record.action == "RestartInPlace":
            record, last = _in_place(spec, s, view, record, last, pool, now, events, budget)
        elif record is not None and s.state == "Ready" and (
                _on_new_job(record, view) or _healed_in_time(spec, record, now)):
            # Ready again: on a new Job (replaced, moved), or on the same one before the
            # operator acted (a NotReady node back within its grace; a GiveUp's Job).
            # A Replace's Job is deleted in the reconcile that records it: Ready on that
            # Job is the Job controller's last pods before it goes, not a recovery (the
            # record stays, so their teardown is not a second failure).
            if record.action != "GiveUp" and _on_new_job(record, view):
                last = ReplacementRecord(
                    action=record.action, reason=record.reason, requested_at=record.requested_at,
                    ready_at=now, seconds=round((now - record.requested_at).total_seconds(), 3),
                    from_pool=record.from_pool, to_pool=pool, blame=record.blame)
                events.append(_replaced_event(s.index, last))
            record = None
        out.append(s.model_copy(update={"pool": pool, "replacement": record,
                                        "last_replacement": last,
                                        "recent_failures": recent}))
    pools = record_pools(previous_pools, out, failed_on, observed.pools, now,
                         spec.recovery.quarantine_window_seconds, MAX_POOL_FAILURES)
    if spec.tpu.topology_aware is None:  # else Kueue places them, no pool to be free
        out = _no_healthy_pool(out, observed, views, pools)
        events = _say_declined(events, replacing, spec, observed, pools, now, policy)
    return Tracked(slices=out, pools=pools, events=events)


def _say_declined(events: list[StatusEvent], replacing: Mapping[int, tuple[str, Evidence]],
                  spec: ElasticTrainingJobSpec, observed: Observed, pools: list[PoolStatus],
                  now: datetime, policy: QuarantinePolicy) -> list[StatusEvent]:
    """The SliceReplacing Events of the slices whose pool the job's spec and report alone
    would have quarantined, but the administrator's policy does not: they say why, and
    the flag (the slice is replaced all the same)."""
    out = list(events)
    for at, (pool, evidence) in replacing.items():
        seen = next((p for p in observed.pools if p.name == pool), None)
        if seen is None or seen.quarantined is not None:
            continue
        why = declined(evidence, pool, pools, seen, spec.recovery, now, policy)
        if why is not None:
            out[at] = replace(out[at], message=f"{out[at].message}; {why}")
    return out


def _failure(s: SliceStatus, view: SliceView, evidence: Evidence,
             change: SliceChange) -> inplace.Failure:
    """What the restart-in-place decision reads of the slice's failure."""
    quarantined = any(n.quarantined for n in view.nodes.values()
                      if n.name in {p.node_name for p in view.broken or view.newest})
    return inplace.Failure(evidence=evidence, reason=s.reason or "", broken=view.broken,
                           pool_quarantined=quarantined,
                           restarted_unseen=change.restarted_unseen)


def _new_record(spec: ElasticTrainingJobSpec, s: SliceStatus, view: SliceView,
                from_pool: str | None, evidence: Evidence, now: datetime,
                row: inplace.Row, charge: Charge) -> SliceReplacement | None:
    """Restart the slice in place or replace it, or give up on it once its failure is
    past its budget (a restart in place counts as a replacement does)."""
    if not spec.recovery.replace_slices:
        return None
    action: RecordAction = "RestartInPlace" if row.in_place else "Replace"
    if not charge.allowed:
        action = "GiveUp"
    return SliceReplacement(action=action, reason=s.reason or Reason.SLICE_DOWN,
                            job_uid=view.failed_job_uid, from_pool=from_pool,
                            requested_at=now, blame=evidence.blame,
                            evidence=evidence.detail)


# A slice that has lost every pod this soon after a JobSet restart lost them to it.
JOBSET_TEARDOWN = timedelta(seconds=120)


def _restarted_with_jobset(view: SliceView, jobset: ObservedJobSet | None,
                           restarted_at: datetime | None, now: datetime) -> bool:
    """The slice went down because the whole JobSet restarted (a crash of the trainer, a
    slice given up on): its pods are of an attempt older than the JobSet's restarts
    (their restart-attempt label), which JobSet deletes; or all gone, within
    JOBSET_TEARDOWN of a restart. That charges no slice budget: every slice goes at once,
    and the JobSet's own budget counts the restart."""
    if jobset is None or not jobset.restarts:
        return False
    attempts = [p.restart_attempt for p in view.newest if p.restart_attempt is not None]
    if attempts:
        return max(attempts) < jobset.restarts
    live = [p for p in view.newest if not p.terminating and p.phase != "Failed"]
    return not live and restarted_at is not None and now - restarted_at <= JOBSET_TEARDOWN


def _in_place(spec: ElasticTrainingJobSpec, s: SliceStatus, view: SliceView,
              record: SliceReplacement, last: ReplacementRecord | None, pool: str | None,
              now: datetime, events: list[StatusEvent], budget: Budget,
              ) -> tuple[SliceReplacement | None, ReplacementRecord | None]:
    """A slice restarting in place: Ready again (done, once); or recreated from now on,
    once, when it is not back within the deadline or when what its pods show now calls
    for it (its node went NotReady, a pod ended: nothing is left to wait for). A host
    whose container runs again, not Ready yet, shows nothing: it is waited for."""
    if s.state == "Ready":
        done = _restarted_record(record, pool, now)
        events.append(_restarted_event(s.index, done))
        return None, done
    if inplace.timed_out(record, spec.recovery, now):
        record = _recreate_from_now(record, now)
        events.append(_timed_out_event(s, record, spec))
        return record, last
    evidence = view.evidence(spec.recovery)
    row = inplace.decide(inplace.Failure(evidence=evidence, reason=s.reason or "",
                                         broken=view.broken), spec.recovery)
    if view.broken and not row.in_place:
        record = _recreate_from_now(record, now, evidence)
        counted = Charge(True, budget.used(s.restarts, s.recent_failures, now),
                         tuple(s.recent_failures))  # charged when it first failed
        events.append(_record_event(spec, s, record, row, budget, counted))
    return record, last


def _recreate_from_now(record: SliceReplacement, now: datetime,
                       evidence: Evidence | None = None) -> SliceReplacement:
    """A restart in place that did not bring the slice back: the Job it names is
    recreated (Replace) from now on, the recreation's time counted from now, on the
    evidence that now calls for it, if any."""
    update: dict[str, object] = {"action": "Replace", "requested_at": now}
    if evidence is not None:
        update.update(reason=evidence.reason, blame=evidence.blame, evidence=evidence.detail)
    return record.model_copy(update=update)


def _restarted_record(record: SliceReplacement, pool: str | None,
                      now: datetime) -> ReplacementRecord:
    return ReplacementRecord(
        action="RestartInPlace", reason=record.reason, requested_at=record.requested_at,
        ready_at=now, seconds=round((now - record.requested_at).total_seconds(), 3),
        from_pool=record.from_pool, to_pool=pool, blame=record.blame)


def _healed_in_time(spec: ElasticTrainingJobSpec, record: SliceReplacement,
                    now: datetime) -> bool:
    """Ready again on the Job the record names, which the operator has not touched: a
    GiveUp (its Job is left to fail), or a Replace still waiting out the NotReady node's
    grace (plan_replacements deletes the Job only after it)."""
    if record.action == "GiveUp":
        return True
    grace = timedelta(seconds=spec.recovery.node_not_ready_seconds)
    return record.action == "Replace" and record.reason == Reason.NODE_NOT_READY \
        and now < record.requested_at + grace


def _on_new_job(record: SliceReplacement, view: SliceView) -> bool:
    """The slice's newest pods belong to another Job than the one the record names. A
    record that names none was made when every pod of the slice was gone (a JobSet's
    restart deleted them): the operator deleted nothing, so any pods since are new ones.
    Without this such a record stayed for the rest of the run, and a slice with a record
    is never moved (a maintenance notice then released the trainer with no move)."""
    uid = view.job_uid
    return uid is not None and (record.job_uid is None or uid != record.job_uid)


def _record_event(spec: ElasticTrainingJobSpec, s: SliceStatus, record: SliceReplacement,
                  row: inplace.Row, budget: Budget, charge: Charge) -> StatusEvent:
    where = f" on node pool {record.from_pool}" if record.from_pool else ""
    if record.blame is not None:
        where += f" ({_BLAME_WORDS[record.blame]}: {record.evidence})"
    if record.action == "RestartInPlace":
        return StatusEvent(
            reason=Reason.SLICE_RESTARTING_IN_PLACE, type="Normal", slice_index=s.index,
            message=f"slice {s.index} failed{where} ({record.reason}); its pods restart "
                    f"where they stand ({row.case}: {row.why}) ({_count(budget, charge)})")
    tas = spec.tpu.topology_aware
    domain = f" in its {tas.slice_level} domain{f' {s.domain}' if s.domain else ''} (Kueue " \
        "keeps a slice where it placed it)" if tas is not None else ""
    if record.action == "GiveUp":
        how = "its Job's backoffLimit is lowered"
        if record.reason in REQUESTED_REASONS:  # its pods never fail by themselves
            how = "its Job is ended (backoffLimit and activeDeadlineSeconds 0)"
        return StatusEvent(
            reason=Reason.SLICE_RESTARTS_EXHAUSTED, type="Warning", slice_index=s.index,
            message=f"slice {s.index} failed{where} ({record.reason}) with its restart budget "
                    f"spent ({plural(charge.used, 'failure')} {budget.span()}; allowed: "
                    f"{budget.describe()}); not replaced again: {how} so that JobSet's "
                    "failurePolicy applies")
    return StatusEvent(
        reason=Reason.SLICE_REPLACING, type="Normal", slice_index=s.index,
        message=f"slice {s.index} failed{where} ({record.reason}); recreating its worker "
                f"Job{domain} ({row.case}: {row.why}) ({_count(budget, charge)})")


def _count(budget: Budget, charge: Charge) -> str:
    """Where the failure leaves the slice's restart budget, in words."""
    if not charge.used:
        return "with the JobSet's restart: no slice budget spent"
    return f"restart {charge.used} of {budget.allowed} {budget.span()}"


def _timed_out_event(s: SliceStatus, record: SliceReplacement,
                     spec: ElasticTrainingJobSpec) -> StatusEvent:
    row = inplace.BY_CASE["InPlaceTimedOut"]
    return StatusEvent(
        reason=Reason.IN_PLACE_RESTART_TIMED_OUT, type="Warning", slice_index=s.index,
        message=f"slice {s.index} is not Ready {spec.recovery.in_place_deadline} s "
                f"after its pods began restarting in place ({s.reason}): recreating its "
                f"worker Job ({row.why})")


def _restarted_event(index: int, last: ReplacementRecord) -> StatusEvent:
    where = f" on node pool {last.to_pool}" if last.to_pool else ""
    return StatusEvent(reason=Reason.SLICE_RESTARTED_IN_PLACE, type="Normal",
                       slice_index=index, downtime_seconds=last.seconds,
                       message=f"slice {index} restarted in place and Ready {last.seconds:.1f} "
                               f"s after the operator decided so, its pods kept{where}")


def _replaced_event(index: int, last: ReplacementRecord) -> StatusEvent:
    moved = ""
    if last.from_pool and last.to_pool and last.from_pool != last.to_pool:
        moved = f", moved from node pool {last.from_pool} to {last.to_pool}"
    elif last.to_pool:
        moved = f", on node pool {last.to_pool}"
    what = "moved" if last.action == "Move" else "replaced"
    return StatusEvent(reason=Reason.SLICE_REPLACED, type="Normal", slice_index=index,
                       downtime_seconds=last.seconds,
                       message=f"slice {index} {what} and Ready {last.seconds:.1f} s after "
                               f"the operator acted{moved}")


def _no_healthy_pool(slices: list[SliceStatus], observed: Observed, views: SliceViews,
                     pools: list[PoolStatus]) -> list[SliceStatus]:
    """A slice whose replacement pods cannot be scheduled while no spare exists says so,
    naming each pool of the shape and why it was refused."""
    if not observed.pools or spare_pools(observed.pools, pools_in_use(slices)):
        return slices
    unscheduled = {s.index: [p for p in views[s.index].newest
                             if p.node_name is None and not p.terminating]
                   for s in slices if s.state == "Restarting"}
    waiting = {i for i, pods in unscheduled.items() if pods}
    why = refusals(observed.pools, slices, waiting)
    out = []
    for s in slices:
        if s.index in waiting:
            s = s.model_copy(update={
                "reason": Reason.NO_HEALTHY_POOL,
                "message": f"{plural(len(unscheduled[s.index]), 'replacement pod')} Pending: "
                           f"no healthy node pool of this shape is free ({why})"})
        out.append(s)
    return out


# --- step 2: the actions, after the status write -------------------------------------------


@dataclass(frozen=True)
class ReplacementPlan:
    actions: tuple[ReplacementAction, ...] = ()
    # Seconds until a time-based step is due (a grace period ends); None: nothing pending.
    wake_after_s: float | None = None


def needs_jobs(status: ElasticTrainingJobStatus) -> bool:
    """Whether planning must read the worker Jobs (a record to act on)."""
    return any(s.replacement is not None for s in status.slices)


@dataclass(frozen=True)
class _Planning:
    """What planning one job's replacements reads, the same for every slice."""

    namespace: str
    jobset: str
    spec: ElasticTrainingJobSpec
    observed: Observed
    status: ElasticTrainingJobStatus
    now: datetime
    policy: QuarantinePolicy = DEFAULT_QUARANTINE

    @property
    def me(self) -> str:
        """The job, as quarantine causes name it (its JobSet has its name)."""
        return f"{self.namespace}/{self.jobset}"

    @property
    def uid(self) -> str:
        jobset = self.observed.jobset
        return (jobset.owner_uid if jobset is not None else None) or ""

    def pool(self, name: str | None) -> ObservedPool | None:
        return next((p for p in self.observed.pools if p.name == name), None)


@dataclass(frozen=True)
class _SliceSteps:
    """What one slice calls for now: actions, the seconds until a time-based step is due,
    and the spare pool its quarantine sends it to (no other slice may take it)."""

    actions: tuple[ReplacementAction, ...] = ()
    waits: tuple[float, ...] = ()
    spare: str | None = None


def plan_replacements(
    namespace: str, jobset: str, spec: ElasticTrainingJobSpec, status: ElasticTrainingJobStatus,
    observed: Observed, now: datetime, policy: QuarantinePolicy = DEFAULT_QUARANTINE,
) -> ReplacementPlan:
    """The actions the status's replacement records, the stuck pods and the quarantines
    whose evidence has ended call for (`policy`: the administrator's on quarantines)."""
    if not spec.recovery.replace_slices:
        return ReplacementPlan()
    ctx = _Planning(namespace, jobset, spec, observed, status, now, policy)
    views = slice_views(observed)
    # Each quarantine sends one slice to one spare: never more quarantines than spares.
    spares = spare_pools(observed.pools, pools_in_use(status.slices))
    actions: list[ReplacementAction] = list(_withdrawn(ctx))
    waits: list[float] = []
    for s in status.slices:
        view = views[s.index]
        for steps in (_record_steps(ctx, s, view, tuple(spares)),
                      _stuck_pods(ctx, s.index, view), _take_back(ctx, s)):
            actions += steps.actions
            waits += steps.waits
            if steps.spare is not None:
                spares.remove(steps.spare)
    wake = max(0.0, min(waits)) if waits else None
    return ReplacementPlan(actions=tuple(actions), wake_after_s=wake)


def _live(job: ObservedJob | None, record: SliceReplacement) -> bool:
    """The Job the record names still exists and is not being deleted."""
    return job is not None and job.uid == record.job_uid and not job.deleting


def _record_steps(ctx: _Planning, s: SliceStatus, view: SliceView,
                  spares: tuple[str, ...]) -> _SliceSteps:
    """What the slice's replacement record calls for."""
    record = s.replacement
    job = ctx.observed.jobs.get(s.index)
    if record is None or job is None or not _live(job, record):
        return _SliceSteps()  # nothing to do, or done already (or JobSet's own restart)
    if record.action == "RestartInPlace":  # the kubelet's to do; wake at its deadline
        due = inplace.due_in(record, ctx.spec.recovery, ctx.now)
        return _SliceSteps(waits=(due,) if due is not None else ())
    if record.action in ("Replace", "Move"):
        return _replace(ctx, s, record, job, view, spares)
    if record.action == "GiveUp" and job.finished is None:
        return _give_up(ctx, s.index, record, job)
    return _SliceSteps()


def _give_up(ctx: _Planning, index: int, record: SliceReplacement,
             job: ObservedJob) -> _SliceSteps:
    """The restart budget is spent: the slice's Job is to fail by its own accounting, so
    that JobSet's failurePolicy applies. A dead slice's failed pods exceed a backoffLimit
    of 0; the pods of a slice the trainer blamed never fail by themselves, so its Job's
    deadline ends it. Level-based, from the Job's spec: never planned once it is set."""
    if record.reason in REQUESTED_REASONS:
        if job.active_deadline_seconds == 0:
            return _SliceSteps()
        return _SliceSteps((FailWorkerJob(ctx.namespace, job.name, job.uid, index,
                                          record.reason),))
    if job.backoff_limit != 0:
        return _SliceSteps((LowerBackoffLimit(ctx.namespace, job.name, job.uid, index),))
    return _SliceSteps()


def _replace(ctx: _Planning, s: SliceStatus, record: SliceReplacement, job: ObservedJob,
             view: SliceView, spares: tuple[str, ...]) -> _SliceSteps:
    grace_ends = _grace_ends(record, view, ctx.spec.recovery.node_not_ready_seconds)
    if grace_ends is not None and ctx.now < grace_ends:
        return _SliceSteps(waits=((grace_ends - ctx.now).total_seconds(),))
    actions: list[ReplacementAction] = []
    target = ctx.pool(record.from_pool)
    free = [p for p in spares if p != record.from_pool]
    taken = None
    # Under Topology-Aware Scheduling Kueue, not a spare, decides where the slice goes.
    quarantine = _quarantine(ctx, record, view, target, s.index) \
        if target is not None and free and ctx.spec.tpu.topology_aware is None else None
    if quarantine is not None:
        taken = free[0]
        actions.append(quarantine)
    actions.append(DeleteWorkerJob(ctx.namespace,
                                   job.name or worker_job_name(ctx.jobset, s.index),
                                   job.uid, s.index, record.reason))
    return _SliceSteps(tuple(actions), spare=taken)


def _quarantine(ctx: _Planning, record: SliceReplacement, view: SliceView,
                pool: ObservedPool, slice_index: int) -> QuarantinePool | None:
    """The quarantine of the failed slice's pool, if the evidence calls for one. A pool
    partly labelled (a leader died while labelling it) is labelled in full
    first, for the label's reason and cause: counted as quarantined, it would not be
    planned again, and the recreated slice would land on its unlabelled nodes short of
    room for its last pods."""
    nodes = tuple(n.name for n in pool.nodes)
    if pool.partly_quarantined and pool.quarantined is not None:
        return QuarantinePool(pool.name, pool.quarantined, nodes, slice_index,
                              pool.cause or QuarantineCause())
    if pool.quarantined is not None:
        return None
    verdict = quarantine_verdict(_evidence(ctx, record, view), pool.name, ctx.status.pools,
                                 pool, ctx.spec.recovery, ctx.now, ctx.policy)
    if verdict is None:
        return None
    others = {m.job: m.uid for m in pool.failures_of_others}
    cause = QuarantineCause(
        jobs=((ctx.me, ctx.uid), *((o, others.get(o, "")) for o in verdict.other_jobs)),
        evidence=verdict.evidence)
    return QuarantinePool(pool.name, verdict.reason, nodes, slice_index, cause)


def _evidence(ctx: _Planning, record: SliceReplacement, view: SliceView) -> Evidence:
    """What the failure shows now (a planned move: the maintenance it moves away from)."""
    if record.action == "Move" or record.reason == Reason.MAINTENANCE:
        return Evidence("Node", Reason.MAINTENANCE,
                        f"maintenance announced on node pool {record.from_pool}")
    if record.reason in REQUESTED_REASONS:  # the trainer's evidence; the pods show none
        return reported_evidence(record.reason, record.evidence or record.reason)
    return view.evidence(ctx.spec.recovery)


def _take_back(ctx: _Planning, s: SliceStatus) -> _SliceSteps:
    """A slice that waits for a pool (NoHealthyPool) takes its old one back once the
    evidence that quarantined it has ended, rather than wait for a spare."""
    record = s.replacement
    pool = ctx.pool(record.from_pool if record is not None else None)
    if s.reason != Reason.NO_HEALTHY_POOL or pool is None or not taken_back(pool):
        return _SliceSteps()
    why = (f"slice {s.index} waits for a node pool and the nodes of {pool.name}, its own, "
           "are healthy again")
    return _SliceSteps((ReleasePool(pool.name, pool.quarantined or "",
                                    tuple(n.name for n in pool.nodes), s.index, why),))


def _withdrawn(ctx: _Planning) -> list[ReplacementAction]:
    """Quarantines this job's failures caused, whose evidence the job's later failures
    withdrew (they follow the job to other pools)."""
    out: list[ReplacementAction] = []
    for pool in ctx.observed.pools:
        why = withdrawn(pool, ctx.me, ctx.status.pools, ctx.spec.recovery, ctx.now,
                        ctx.policy)
        if why is not None:
            out.append(ReleasePool(pool.name, pool.quarantined or "",
                                   tuple(n.name for n in pool.nodes), None, why))
    return out


def _grace_ends(record: SliceReplacement, view: SliceView, grace_s: int) -> datetime | None:
    """A slice down only because a node reports Ready=False waits `grace_s` from the
    failure (a kubelet that reports is alive: it may recover); a silent node
    (Ready=Unknown: the control plane already waited its grace) or a gone one does not."""
    if record.reason != Reason.NODE_NOT_READY or record.action != "Replace":
        return None
    newest, nodes = view.newest, view.nodes
    if any(p.failed or p.terminating for p in newest):
        return None
    statuses = {nodes[p.node_name].ready_status for p in newest
                if p.node_name and p.node_name in nodes and not nodes[p.node_name].ready}
    if statuses != {"False"}:
        return None
    return record.requested_at + timedelta(seconds=grace_s)


def _stuck_pods(ctx: _Planning, index: int, view: SliceView) -> _SliceSteps:
    """Pods being deleted on a node that has not been Ready for forceDeleteAfterSeconds
    (or is gone): no kubelet will ever confirm their deletion, and while they exist
    JobSet cannot recreate the Job (Foreground deletion) nor place its leader elsewhere."""
    nodes, now = view.nodes, ctx.now
    out: list[ReplacementAction] = []
    waits: list[float] = []
    bound = timedelta(seconds=ctx.spec.recovery.force_delete_after_seconds)
    for pod in view.pods:
        if not pod.terminating or not pod.node_name or not pod.uid \
                or on_ready_node(pod, nodes):
            continue
        node = nodes.get(pod.node_name)
        down_since = node.ready_transition_time if node is not None else None
        due = max(pod.failure_started_at or now, (down_since or now) + bound) \
            if node is not None else (pod.failure_started_at or now) + bound
        if now >= due:
            out.append(ForceDeletePod(ctx.namespace, pod.name, pod.uid, pod.node_name, index))
        else:
            waits.append((due - now).total_seconds())
    return _SliceSteps(tuple(out), tuple(waits))
