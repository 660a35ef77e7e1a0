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

REASONS = (REASON_WAITING_FOR_ADMISSION, REASON_ADMITTED, REASON_PREEMPTED, REASON_EVICTED,
           REASON_SUSPENDED_BY_USER)
