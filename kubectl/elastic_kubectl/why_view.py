"""Pure: `kubectl etj why JOB`: in plain sentences, what the job is waiting on and since
when (Kueue's quota, a healthy node pool and each pool's state, a quarantine and its
evidence, a stall), and what the user can do about it. A job of many slices (groups.py)
has a finding per state and reason its slices wait in, and its pools counted."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elastic_api.catalog import CATALOG
from elastic_api.conditions import ConditionType, Phase, Reason
from elastic_api.indices import ranges
from elastic_api.models import SliceStatus
from elastic_api.names import (
    NODE_POOL_LABEL,
    QUARANTINE_CAUSE_ANNOTATION,
    QUARANTINE_LABEL,
    TPU_ACCELERATOR_LABEL,
    TPU_TOPOLOGY_LABEL,
)
from elastic_api.queueing import ADMITTED, EVICTION_PENDING
from elastic_kubectl.groups import MAX_ROWS, group_by, grouped
from elastic_kubectl.job import Job
from elastic_kubectl.text import age, clock, duration, field_of, wrap


@dataclass(frozen=True)
class Finding:
    """One thing the job waits on (or went through): what, since when, what to do."""

    topic: str  # Queued, Suspended, NoHealthyPool, Quarantine, Stall, ...
    what: str
    since: datetime | None = None
    todo: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "what": self.what,
                "since": None if self.since is None else
                self.since.isoformat().replace("+00:00", "Z"), "todo": self.todo}


@dataclass(frozen=True)
class Pool:
    name: str
    nodes: int
    ready: int
    quarantined: str | None
    cause: str | None
    used_by: list[int]  # this job's slices

    def state(self) -> str:
        if self.quarantined:
            return f"quarantined ({self.quarantined}" + (f": {self.cause})" if self.cause
                                                           else ")")
        if self.ready < self.nodes:
            return f"{self.nodes - self.ready} of {self.nodes} nodes NotReady"
        if self.used_by:
            return "runs slice " + ranges(self.used_by) + " of this job"
        return f"healthy, {self.nodes} nodes Ready, no slice of this job"


def pools_of(job: Job, nodes: Sequence[dict[str, Any]]) -> list[Pool]:
    """The node pools of the job's TPU shape, from the nodes' labels."""
    tpu = field_of(job.spec, "tpu")
    family = CATALOG.get(str(tpu.get("type")))
    accelerator = family.accelerator_label if family else None
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if accelerator and labels.get(TPU_ACCELERATOR_LABEL) != accelerator:
            continue
        if tpu.get("topology") and labels.get(TPU_TOPOLOGY_LABEL) not in (None,
                                                                           tpu.get("topology")):
            continue
        if NODE_POOL_LABEL in labels:
            by_pool.setdefault(labels[NODE_POOL_LABEL], []).append(node)
    slices = job.status.slices
    return [Pool(name=name, nodes=len(members), ready=sum(_ready(n) for n in members),
                 quarantined=next((q for n in members if (q := _label(n, QUARANTINE_LABEL))),
                                  None),
                 cause=next((c for n in members
                             if (c := _annotation(n, QUARANTINE_CAUSE_ANNOTATION))), None),
                 used_by=[s.index for s in slices if s.pool == name])
            for name, members in sorted(by_pool.items())]


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _label(node: dict[str, Any], key: str) -> str | None:
    return ((node.get("metadata") or {}).get("labels") or {}).get(key)


def _annotation(node: dict[str, Any], key: str) -> str | None:
    return ((node.get("metadata") or {}).get("annotations") or {}).get(key)


def findings(job: Job, nodes: Sequence[dict[str, Any]] | None, now: datetime) -> list[Finding]:
    """What the job waits on, most blocking first; empty: nothing."""
    out = _terminal(job) + _queued(job) + _suspended(job)
    out += _no_pool(job, nodes, now) + _quarantines(job) + _stall(job) + _recovering(job)
    return out


def _terminal(job: Job) -> list[Finding]:
    st = job.status
    if st.phase == Phase.SUCCEEDED:
        done = job.condition(ConditionType.SUCCEEDED)
        return [Finding("Succeeded", "The job succeeded: it waits on nothing.",
                        done.last_transition_time if done else None)]
    failed = job.condition(ConditionType.FAILED)
    if st.phase == Phase.FAILED or (failed is not None and failed.status == "True"):
        reason = f" ({failed.reason})" if failed else ""
        message = f": {failed.message}" if failed and failed.message else ""
        return [Finding("Failed", f"The job failed{reason}{message}. It will not run again.",
                        failed.last_transition_time if failed else None,
                        [f"kubectl etj timeline {job.name} shows how it got there; fix the "
                         "cause and submit it again (the restart budget is never reset in "
                         "place)"])]
    return []


def _queued(job: Job) -> list[Finding]:
    admitted = job.condition(ADMITTED)
    adm = job.status.admission
    if job.status.phase != Phase.QUEUED and (admitted is None or admitted.status == "True"):
        return _eviction_pending(job)
    queue = adm.queue_name if adm and adm.queue_name else "its LocalQueue"
    what = f"Kueue has not admitted the job: it waits in {queue} for quota"
    if admitted is not None and admitted.message:
        what += f" ({admitted.reason}: {admitted.message})"
    todo = []
    if adm is not None and adm.workload:
        todo.append(f"kubectl get workload {adm.workload} -n {job.namespace} -o yaml shows "
                    "Kueue's own words (its QuotaReserved condition)")
    todo.append("kubectl get clusterqueue shows the quota in use; free quota (finish or "
                "suspend another job), raise the ClusterQueue's nominalQuota, or give this job "
                "a higher WorkloadPriorityClass")
    if adm is not None and adm.last_eviction_reason:
        what += f". It was evicted before ({adm.last_eviction_reason})"
        if adm.requeue_at is not None:
            what += f"; Kueue readmits it no sooner than {clock(adm.requeue_at)} UTC"
    return [Finding("Queued", what + ".", admitted.last_transition_time if admitted else None,
                    todo)]


def _eviction_pending(job: Job) -> list[Finding]:
    pending = job.condition(EVICTION_PENDING)
    if pending is None or pending.status != "True":
        return []
    return [Finding("EvictionPending", f"Kueue will evict the job unless its slices are Ready "
                    f"in time: {pending.message}", pending.last_transition_time,
                    ["free a node pool of the job's shape, or raise Kueue's "
                     "waitForPodsReady.recoveryTimeout"])]


def _suspended(job: Job) -> list[Finding]:
    if job.spec.get("suspend") is not True and job.status.phase != Phase.SUSPENDED:
        return []
    cond = job.condition(ConditionType.SUSPENDED)
    if job.spec.get("suspend") is True:
        return [Finding("Suspended", "The job is suspended: spec.suspend is true (its pods "
                        "are gone, its state is kept).", cond.last_transition_time if cond
                        else None, [f"kubectl patch etj {job.name} -n {job.namespace} --type "
                                    "merge -p '{\"spec\":{\"suspend\":false}}' resumes it"])]
    message = cond.message if cond is not None else "phase Suspended"
    return [Finding("Suspended", f"The job is suspended: {message}.",
                    cond.last_transition_time if cond else None)]


def _no_pool(job: Job, nodes: Sequence[dict[str, Any]] | None, now: datetime) -> list[Finding]:
    waiting = [s for s in job.status.slices if s.state in ("Down", "Restarting", "Pending")
               and job.status.phase not in (Phase.QUEUED, Phase.SUSPENDED)]
    if not waiting:
        return []
    many = grouped(job.num_slices)
    groups = group_by(waiting, lambda s: (s.state, s.reason)) if many else [[s] for s in waiting]
    out = [_waiting(group, nodes, now) for group in groups]
    if nodes is not None:
        pools = pools_of(job, nodes)
        spare = job.status.spare_pools
        out.append(Finding("Pools", f"Node pools of the job's shape: {_pools_text(pools, many)}."
                           + ("" if spare is None else f" Spares: {spare}."), None))
    return out


def _waiting(group: list[SliceStatus], nodes: Sequence[dict[str, Any]] | None,
             now: datetime) -> Finding:
    """A slice not Ready (or, at many slices, those of one state and reason): since when,
    why, and what to do."""
    s = min(group, key=lambda s: (s.last_transition_time or now, s.index))
    why = s.reason or s.state
    since = f"{clock(s.last_transition_time)} UTC ({age(s.last_transition_time, now)})"
    if len(group) == 1:
        what = f"Slice {s.index} is {s.state} ({why}) since {since}"
        if s.message:
            what += f": {s.message}"
    else:
        what = (f"{len(group)} slices are {s.state} ({why}): slices "
                f"{ranges(g.index for g in group)}; the first since {since}")
        if s.message:
            what += f", slice {s.index}: {s.message}"
    todo = []
    if s.reason == Reason.NO_HEALTHY_POOL or s.state == "Pending":
        what += ". It needs a whole healthy node pool of its shape" if len(group) == 1 \
            else ". Each needs a whole healthy node pool of its shape"
        if nodes is None:
            what += " (the nodes are not readable here: pools as the status has them)"
            todo.append("ask for list on nodes to see each pool's state")
        todo.append("free a pool of the shape, add one (a hot spare), or release a "
                    "quarantine whose hardware is fixed (below)")
    return Finding(s.reason or s.state, what + ".", s.last_transition_time, todo)


def _pools_text(pools: list[Pool], many: bool) -> str:
    """Each pool and its state; at many slices, those running a slice of the job as a
    count, and at most MAX_ROWS of the others."""
    if not many:
        return "; ".join(f"{p.name}: {p.state()}" for p in pools) or "none found"
    busy = [p for p in pools if p.used_by and not p.quarantined and p.ready == p.nodes]
    others = [p for p in pools if p not in busy]
    parts = [f"{len(busy)} run a slice of this job"] if busy else []
    parts += [f"{p.name}: {p.state()}" for p in others[:MAX_ROWS]]
    if len(others) > MAX_ROWS:
        parts.append(f"and {len(others) - MAX_ROWS} more")
    return "; ".join(parts) or "none found"


def _quarantines(job: Job) -> list[Finding]:
    """A finding per quarantined pool, at most MAX_ROWS of them (then a count)."""
    out = []
    quarantined = [pool for pool in job.status.pools if pool.quarantined]
    for pool in quarantined[:MAX_ROWS]:
        evidence = "; ".join(f"{f.reason} ({f.blame}) at {clock(f.at)}" for f in pool.failures)
        what = f"Node pool {pool.name} is quarantined ({pool.quarantined})"
        if pool.quarantine_cause:
            what += f": {pool.quarantine_cause}"
        if evidence:
            what += f". Evidence: {evidence}"
        out.append(Finding("Quarantine", what + ".", pool.quarantined_at,
                           ["the operator releases it once its nodes have been Ready with "
                            "healthy chips long enough (--quarantine-release-after-seconds); "
                            f"after a repair: kubectl label nodes -l "
                            f"{NODE_POOL_LABEL}={pool.name} {QUARANTINE_LABEL}-"]))
    if len(quarantined) > MAX_ROWS:
        rest = quarantined[MAX_ROWS:]
        out.append(Finding("Quarantine", f"{len(rest)} more node pools are quarantined: "
                           f"{', '.join(p.name for p in rest)}.", None))
    return out


def _stall(job: Job) -> list[Finding]:
    report = job.status.training
    stall = report.stall if report is not None else None
    if stall is None:
        return _progressing(job)
    suspects = f" The trainer suspects slices {ranges(stall.suspect_slices)}" \
        if stall.suspect_slices else " No slice is blamed yet"
    evidence = f" ({stall.evidence})" if stall.evidence else ""
    deadline = duration(stall.deadline_seconds)
    return [Finding("Stall", f"Training stalled: step {stall.step} ({stall.phase}) has run "
                    f"since {clock(stall.started_at)} UTC, past its {deadline} deadline."
                    f"{suspects}{evidence}.", stall.detected_at,
                    ["the operator replaces a blamed slice on its own; otherwise `kubectl "
                     f"logs` the head pod's main container of {job.name}"])]


def _progressing(job: Job) -> list[Finding]:
    """The operator's own verdict (condition Progressing): a stall, naming the phase and
    its frame, or a phase of training that holds steps within its deadline."""
    cond = job.condition(ConditionType.PROGRESSING)
    if cond is None:
        return []
    if cond.status == "False" and cond.reason == Reason.PROGRESS_DEADLINE_EXCEEDED:
        return [Finding("Stall", f"Training stalled: {cond.message.rstrip('.')}.",
                        cond.last_transition_time,
                        ["with spec.elastic.onStall Recover the operator restarts the trainer "
                         "(status.counters.stallRestarts); otherwise `kubectl logs` the head "
                         f"pod's main container of {job.name}, or `py-spy dump` its stacks"])]
    if cond.status == "True" and cond.reason == Reason.PHASE_IN_PROGRESS:
        return [Finding("Phase", f"No new step while the trainer is in a phase of training, "
                        f"within its deadline: {cond.message.rstrip('.')}.")]
    return []


def _recovering(job: Job) -> list[Finding]:
    cond = job.condition(ConditionType.RECOVERING)
    if cond is None or cond.status != "True":
        return []
    return [Finding("Recovering", f"The job is recovering: {cond.message.rstrip('.')}.",
                    cond.last_transition_time)]


def render_why(job: Job, found: Sequence[Finding], now: datetime) -> list[str]:
    if not found:
        return wrap(_summary(job, now) + " It waits on nothing.") + \
            [line for n in job.notes for line in wrap(n, "      ", "note: ")]
    lines = wrap(_summary(job, now))
    for f in found:
        since = f" Since {clock(f.since)} UTC ({age(f.since, now)} ago)." if f.since else ""
        lines += wrap(f.what + since, indent="  ", first="- ")
        for todo in f.todo:
            lines += wrap(todo, indent="      ", first="  -> ")
    lines += [line for n in job.notes for line in wrap(n, "      ", "note: ")]
    return lines


def _summary(job: Job, now: datetime) -> str:
    st, report = job.status, job.status.training
    ready = "?" if st.slices_ready is None else st.slices_ready
    step = "" if report is None else \
        f", step {report.step} (reported {age(report.observed_at, now)} ago)"
    return (f"{job.name} ({job.namespace}): phase {st.phase or 'unknown'}, {ready}/"
            f"{st.slices_desired or job.num_slices} slices Ready{step}.")
