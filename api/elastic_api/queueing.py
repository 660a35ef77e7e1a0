"""The `Admitted` condition: where a job stands with a queue (Kueue) that admits it.

Kept apart from the other condition types (conditions.py) because it is only set on
jobs that carry the `kueue.x-k8s.io/queue-name` label; a job without one has no
`Admitted` condition, and the `Admission` printer column stays empty.

Kueue (v0.17) holds a queued JobSet suspended until its Workload is admitted, and
suspends it again when it evicts the Workload (preemption, a stopped queue, a
deactivated Workload). The reasons below name each of those states in words a person
acts on; the message says which queue and why.
"""
from __future__ import annotations

ADMITTED = "Admitted"

# status False: Kueue holds the JobSet suspended; its Workload has no quota yet.
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

REASONS = (REASON_WAITING_FOR_ADMISSION, REASON_ADMITTED, REASON_PREEMPTED, REASON_EVICTED,
           REASON_SUSPENDED_BY_USER, REASON_NO_WORKLOAD)

# --- Kueue's own words on a Workload (kueue.x-k8s.io/v1beta2), as the operator reads them --

WORKLOAD_QUOTA_RESERVED = "QuotaReserved"
WORKLOAD_ADMITTED = "Admitted"
WORKLOAD_EVICTED = "Evicted"
WORKLOAD_PREEMPTED = "Preempted"
WORKLOAD_FINISHED = "Finished"
# The Evicted reason (and schedulingStats.evictions[].reason) of a preemption; a
# deactivation's is "Deactivated", possibly "DeactivatedDueTo<cause>".
EVICTED_BY_PREEMPTION = "Preempted"
EVICTED_BY_DEACTIVATION = "Deactivated"
