"""The `Admitted` condition: where a job stands with a queue (Kueue) that admits it.

Kept apart from the other condition types (conditions.py) because it is only set on
jobs that carry the `kueue.x-k8s.io/queue-name` label; a job without one has no
`Admitted` condition, and the `Admission` printer column stays empty.

Kueue (v0.17, v0.19) holds a queued JobSet suspended until its Workload is admitted, and
suspends it again when it evicts the Workload (preemption, a stopped queue, a
deactivated Workload, waitForPodsReady's timeout, a failed node it cannot replace under
Topology-Aware Scheduling). The reasons below name each of those states in words a person
acts on; the message says which queue and why.

`caused_by_eviction` is the one answer, for operator and trainer alike, to "did Kueue
taking the job back cause this loss".
"""
from __future__ import annotations

from datetime import datetime, timedelta

from elastic_api.conditions import Reason

ADMITTED = "Admitted"

# status False: Kueue keeps the JobSet suspended; its Workload has no quota yet.
REASON_WAITING_FOR_ADMISSION = "WaitingForAdmission"
# status True: the Workload is admitted and the JobSet may run.
REASON_ADMITTED = "Admitted"
# status False: Kueue evicted the running Workload to admit a higher-priority one (or
# to reclaim quota lent in a cohort); the JobSet is suspended until it is admitted again.
# Not a slice failure: it counts in no failure counter and burns no retry budget.
REASON_PREEMPTED = "Preempted"
# status False: evicted for another reason Kueue gives (ClusterQueueStopped,
# LocalQueueStopped, Deactivated, PodsReadyTimeout, AdmissionCheck, ...), named in the
# message.
REASON_EVICTED = "Evicted"
# status False: spec.suspend is true; the job does not ask Kueue for quota meanwhile.
REASON_SUSPENDED_BY_USER = "Suspended"
# status Unknown: the job names a queue, yet its JobSet runs without a Workload (Kueue is
# not installed, runs without its JobSet integration, or does not watch the namespace).
REASON_NO_WORKLOAD = "NoWorkload"

# status False: a MultiKueue job (manager cluster) whose worker cluster was lost; its
# Workload is deactivated because spec.multiCluster.redispatch is Never.
REASON_REDISPATCH_NOT_ALLOWED = Reason.REDISPATCH_NOT_ALLOWED

REASONS = (REASON_WAITING_FOR_ADMISSION, REASON_ADMITTED, REASON_PREEMPTED, REASON_EVICTED,
           REASON_SUSPENDED_BY_USER, REASON_NO_WORKLOAD, REASON_REDISPATCH_NOT_ALLOWED)

# --- EvictionPending: Kueue's waitForPodsReady clock (on by default from Kueue v0.19) -------
#
# Kueue evicts an admitted Workload whose pods are not all Ready `timeout` after its
# admission (WaitForStart), or again `recoveryTimeout` after one stopped being Ready
# (WaitForRecovery; a JobSet counts as Ready only when every replicated Job is). Set on
# queued jobs whose Workload carries Kueue's PodsReady condition.
EVICTION_PENDING = "EvictionPending"
# status True: the clock runs; the message names the deadline.
REASON_WAITING_FOR_START = "WaitingForStart"
REASON_WAITING_FOR_RECOVERY = "WaitingForRecovery"
# status False: every pod is Ready (or Kueue does not run the job now).
REASON_PODS_READY = "PodsReady"
REASON_NOT_ADMITTED = "NotAdmitted"
EVICTION_PENDING_REASONS = (REASON_WAITING_FOR_START, REASON_WAITING_FOR_RECOVERY,
                            REASON_PODS_READY, REASON_NOT_ADMITTED)

# --- Kueue's own words on a Workload (kueue.x-k8s.io/v1beta2), as the operator reads them --

WORKLOAD_QUOTA_RESERVED = "QuotaReserved"
WORKLOAD_ADMITTED = "Admitted"
WORKLOAD_EVICTED = "Evicted"
WORKLOAD_PREEMPTED = "Preempted"
WORKLOAD_FINISHED = "Finished"
WORKLOAD_REQUEUED = "Requeued"  # after an eviction: its reason names it (or the backoff's end)
WORKLOAD_PODS_READY = "PodsReady"  # waitForPodsReady on: are all the Workload's pods Ready
# PodsReady False's reasons: not all Ready since admission; not all Ready again since one
# stopped being Ready (Kueue's eviction clocks: its timeout, its recoveryTimeout).
PODS_READY_WAIT_FOR_START = "WaitForStart"
PODS_READY_WAIT_FOR_RECOVERY = "WaitForRecovery"
# The Evicted reason (and schedulingStats.evictions[].reason) of a preemption; a
# deactivation's is "Deactivated", possibly "DeactivatedDueTo<cause>".
EVICTED_BY_PREEMPTION = "Preempted"
EVICTED_BY_DEACTIVATION = "Deactivated"
# waitForPodsReady: the pods were not all Ready in time (timeout or recoveryTimeout).
EVICTED_BY_PODS_READY_TIMEOUT = "PodsReadyTimeout"
# Topology-Aware Scheduling: a node of the Workload's assignment failed and Kueue found
# no replacement node in its topology domain (TASFailedNodeReplacementFailFast).
EVICTED_BY_NODE_FAILURES = "NodeFailures"
# Topology-Aware Scheduling, before the eviction: a pod Kueue placed on a node that is
# now unhealthy (tainted: NotReady, unreachable) cannot schedule there, so Kueue's TAS
# node controller sets it Failed with this pod condition (reason
# UnschedulableOnAssignedNode) for its Job to make another, which Kueue places on a
# replacement node or, finding none, evicts the Workload (NodeFailures). Kueue v0.17
# does it to a recreated slice's pods it ungates onto the dead node; v0.19 keeps those
# gated. The node's failure, already seen; the pod's own failure it is not.
POD_TERMINATED_BY_KUEUE = "TerminatedByKueue"


def counts_as_eviction(reason: str) -> bool:
    """An eviction counted in counters.evictions: Kueue took the job back for a reason of
    its own (PodsReadyTimeout, NodeFailures, a stopped queue, an admission check, ...),
    not a preemption (counters.preemptions) nor a deactivation (the user's spec.suspend,
    `kueuectl stop`, or Kueue's requeuing limit, all reported as deactivated)."""
    return bool(reason) and reason != EVICTED_BY_PREEMPTION \
        and not reason.startswith(EVICTED_BY_DEACTIVATION)

# --- was it Kueue? --------------------------------------------------------------------

# Kubernetes condition times (the Workload's Evicted lastTransitionTime, hence
# status.admission.evictedAt) are whole seconds, truncated: Kueue's eviction happened
# somewhere in [evictedAt, evictedAt + 1 s). The trainer's times are sub-second.
EVICTION_TIME_RESOLUTION = timedelta(seconds=1)


def caused_by_eviction(evicted_at: datetime | None, *, running_since: datetime | None = None,
                       lost_at: datetime | None = None) -> bool:
    """What a trainer process lost (its slices, detected at `lost_at`; or itself, when
    `lost_at` is None) went because Kueue took the job back at `evicted_at`: the eviction
    came while the process ran (after `running_since`, None: no bound) and no later than
    the loss. Kueue evicts the Workload first and suspends the JobSet after, so pods that
    go after that moment go because of the eviction.

    One tie-break, used by the trainer (a slice loss gives its retry back) and by the
    operator (a replaced trainer is no restart to warn of): the whole second of
    `evicted_at` counts as the eviction's. A time in that second cannot be ordered against
    the eviction, and the eviction is then the likely cause: a real failure within the
    same second is a coincidence, and a trainer started in it after the eviction is not
    possible (the JobSet is suspended first). Clocks are taken to agree (NTP: milliseconds,
    well inside that second).
    """
    if evicted_at is None:
        return False
    if running_since is not None and running_since >= evicted_at + EVICTION_TIME_RESOLUTION:
        return False  # started after the eviction's second: not stopped by it
    return lost_at is None or lost_at >= evicted_at
