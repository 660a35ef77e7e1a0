"""The words of an ElasticTrainingJob's status, defined once: condition types, the reasons
of conditions, slices and Events, and the phases.

The operator writes them, metrics and tools match them, tests assert them; docs/
api.md ("Conditions and phase") explains when each applies. Import from here;
never spell one again.
"""
from __future__ import annotations

from typing import Final


class ConditionType:
    """status.conditions[].type."""

    READY: Final = "Ready"
    SLICE_DOWN: Final = "SliceDown"
    RECOVERING: Final = "Recovering"
    DEGRADED: Final = "Degraded"
    SUSPENDED: Final = "Suspended"
    SUCCEEDED: Final = "Succeeded"
    FAILED: Final = "Failed"
    SPEC_APPLIED: Final = "SpecApplied"
    TRAINING_REPORT_VALID: Final = "TrainingReportValid"
    SPARES_AVAILABLE: Final = "SparesAvailable"
    MAINTENANCE_PENDING: Final = "MaintenancePending"
    TOPOLOGY_PLACEMENT: Final = "TopologyPlacement"  # only with spec.tpu.topologyAware
    # A MultiKueue job, on the manager cluster: False while the worker cluster it runs in
    # cannot be reached (the rest of the status is the last the worker sent).
    WORKER_CLUSTER_REACHABLE: Final = "WorkerClusterReachable"
    # Kubernetes' Deployment convention: True while training steps advance, False once
    # none has come for the progress deadline, Unknown while held or not started.
    PROGRESSING: Final = "Progressing"
    # Whether a restore of the newest checkpoint can outgrow the Pathways proxy's memory
    # (elastic_api/restore_risk.py).
    RESTORE_AT_RISK: Final = "RestoreAtRisk"
    # A Pathways container running another build (image digest) than its peers: a slice
    # replaced after its image's tag moved in the registry (elastic_api/images.py). Only
    # on a job where it was seen.
    IMAGE_DRIFT: Final = "ImageDrift"
    # Whether the operator may list spec.checkpoint.directory (its --checkpoint-roots for
    # the job's namespace): False, the job's status shows no checkpoint of it.
    CHECKPOINT_ROOT_ALLOWED: Final = "CheckpointRootAllowed"
    # Whether the CRD the API server serves stores every status field this operator
    # writes (elastic_api/schema_revisions.py): False with CRDOutdated, the operator
    # writes nothing else of the job until the CRD is upgraded. Only on a job that was
    # served by a CRD other than the operator's own.
    SCHEMA_CURRENT: Final = "SchemaCurrent"
    # Which recovery a crash of main gets on this cluster: True, restarted in its pod
    # (container restart rules); False, the API server lacks them (before 1.35) and the
    # JobSet restarts. Only on a job that asks for restarts in place.
    MAIN_RESTARTS_IN_PLACE: Final = "MainRestartsInPlace"
    # Whether JobSet could create every Job of the job's JobSet: False (JobRefused) while
    # one is missing and a server-side dry run of it is refused (an admission policy, a
    # field the server does not accept); True again once they exist. Only on a job where
    # a refusal was seen.
    JOBS_CREATED: Final = "JobsCreated"


class Reason:
    """Reasons of conditions, of status.slices[] and of the Events posted on a job (one
    word may be all three: a slice that fails is reason SliceDown on Ready, the
    SliceDown condition's type and a SliceDown Event)."""

    # Why a host (and so its slice) is down: status.slices[].reason, SliceDown's reason.
    POD_FAILED: Final = "PodFailed"
    POD_DELETED: Final = "PodDeleted"
    POD_EVICTED: Final = "PodEvicted"
    NODE_NOT_READY: Final = "NodeNotReady"
    HOST_LOST: Final = "HostLost"  # replaced before the operator saw it fail
    HOST_NOT_READY: Final = "HostNotReady"
    # A worker container exited on a healthy node and the kubelet restarts it in its pod
    # (restartPolicy OnFailure; the pod, its uid and node stay): core/inplace.py.
    CONTAINER_RESTARTING: Final = "ContainerRestarting"
    MULTIPLE_CAUSES: Final = "MultipleCauses"
    # The other slice states.
    ALL_HOSTS_READY: Final = "AllHostsReady"
    REPLACEMENT_PODS_NOT_READY: Final = "ReplacementPodsNotReady"
    WAITING_FOR_HOSTS: Final = "WaitingForHosts"

    # JobsCreated (False, and its Warning Event; True once every Job exists)
    JOB_REFUSED: Final = "JobRefused"
    ALL_JOBS_CREATED: Final = "AllJobsCreated"
    # Ready
    ALL_SLICES_READY: Final = "AllSlicesReady"
    DEGRADED: Final = "Degraded"
    SLICE_DOWN: Final = "SliceDown"
    RECOVERING: Final = "Recovering"
    SLICES_NOT_READY: Final = "SlicesNotReady"
    SUSPENDED: Final = "Suspended"
    JOBSET_NOT_CREATED: Final = "JobSetNotCreated"
    SUCCEEDED: Final = "Succeeded"
    FAILED: Final = "Failed"
    INVALID_SPEC: Final = "InvalidSpec"
    # SliceDown
    NO_SLICE_DOWN: Final = "NoSliceDown"
    # WorkerClusterReachable False; Ready Unknown for it (and its Warning Event)
    WORKER_CLUSTER_LOST: Final = "WorkerClusterLost"
    # Ready False and Admitted False (phase Suspended) of a MultiKueue job on the manager
    # whose worker cluster was lost, kept from running elsewhere by
    # spec.multiCluster.redispatch Never (and its Warning Event)
    REDISPATCH_NOT_ALLOWED: Final = "RedispatchNotAllowed"
    # Recovering (True: SLICE_DOWN or ELASTIC_EVENT, what started it)
    ELASTIC_EVENT: Final = "ElasticEvent"
    RECOVERED: Final = "Recovered"
    # Closed by the operator for a trainer that reports no elastic events: every slice is
    # Ready again and the head's main has run since before the failure; the trainer has
    # not confirmed progress (a new step or a newer checkpoint then makes it Recovered).
    RECOVERED_UNCONFIRMED: Final = "RecoveredUnconfirmed"
    RECOVERY_FAILED: Final = "RecoveryFailed"
    NO_FAILURE: Final = "NoFailure"
    # Degraded
    FEWER_SLICES: Final = "FewerSlices"
    ALL_SLICES_ACTIVE: Final = "AllSlicesActive"
    NO_REPORT: Final = "NoReport"
    # Suspended
    SUSPENDING: Final = "Suspending"
    NOT_SUSPENDED: Final = "NotSuspended"
    # Succeeded
    JOBSET_COMPLETED: Final = "JobSetCompleted"
    NOT_FINISHED: Final = "NotFinished"
    # Failed
    HEAD_FAILED: Final = "HeadFailed"
    MAX_RESTARTS_EXCEEDED: Final = "MaxRestartsExceeded"
    JOBSET_FAILED: Final = "JobSetFailed"
    JOBSET_LOST: Final = "JobSetLost"
    ELASTIC_RETRIES_EXHAUSTED: Final = "ElasticRetriesExhausted"  # the trainer's report
    ELASTIC_TIMEOUT: Final = "ElasticTimeout"  # the trainer's report
    NOT_FAILED: Final = "NotFailed"
    # SpecApplied
    APPLIED: Final = "Applied"
    IMMUTABLE_SPEC_CHANGED: Final = "ImmutableSpecChanged"
    JOBSET_NAME_CONFLICT: Final = "JobSetNameConflict"
    # TrainingReportValid
    VALID: Final = "Valid"
    INVALID_REPORT: Final = "InvalidReport"
    # CheckpointRootAllowed (False: also status.checkpoint.reason, and its Warning Event)
    ROOT_ALLOWED: Final = "RootAllowed"
    CHECKPOINT_ROOT_NOT_ALLOWED: Final = "CheckpointRootNotAllowed"
    NOT_LISTED_YET: Final = "NotListedYet"
    # SchemaCurrent: the served CRD is the operator's own revision, a later one (a
    # downgraded operator writes what it knows), an older one that stores every status
    # field (served), or an older one that lacks some (refused; its Warning Event too).
    CRD_CURRENT: Final = "CRDCurrent"
    CRD_NEWER: Final = "CRDNewer"
    CRD_OLDER: Final = "CRDOlder"
    CRD_OUTDATED: Final = "CRDOutdated"

    # The slice states the operator's replacement adds (status.slices[].reason).
    NO_HEALTHY_POOL: Final = "NoHealthyPool"  # replacement pods Pending, no pool to go to
    # SparesAvailable
    ENOUGH_SPARES: Final = "EnoughSpares"
    FEWER_SPARES: Final = "FewerSpares"
    # MaintenancePending (True: the signal; False: NoMaintenance)
    MAINTENANCE: Final = "Maintenance"
    SCHEDULED_MAINTENANCE: Final = "ScheduledMaintenance"
    MAINTENANCE_ONGOING: Final = "MaintenanceOngoing"
    IMPENDING_TERMINATION: Final = "ImpendingTermination"
    NO_MAINTENANCE: Final = "NoMaintenance"
    # TopologyPlacement (True: PLACED_BY_KUEUE, also SparesAvailable's under it)
    PLACED_BY_KUEUE: Final = "PlacedByKueue"
    TOPOLOGY_LEVEL_NOT_FOUND: Final = "TopologyLevelNotFound"
    NOT_QUEUED: Final = "NotQueued"
    NO_NODES: Final = "NoNodes"
    # Silent failures (issue 32): a slice whose part of a step never returns or runs slow
    # while its pods stay Ready, blamed by the trainer's watchdog or the operator's own
    # progress tracking (status.slices[].reason; status.training.sliceReplacement.reason).
    SLICE_HUNG: Final = "SliceHung"
    SLICE_SLOW: Final = "SliceSlow"
    # Progressing (True: STEPS_ADVANCING, or PHASE_IN_PROGRESS while a phase of training
    # other than a step, an evaluation or a save, runs within its deadline; False:
    # PROGRESS_DEADLINE_EXCEEDED, also its Warning Event; Unknown: held, or no step yet);
    # Degraded True for slow steps.
    STEPS_ADVANCING: Final = "StepsAdvancing"
    PHASE_IN_PROGRESS: Final = "PhaseInProgress"
    PROGRESS_DEADLINE_EXCEEDED: Final = "ProgressDeadlineExceeded"
    PROGRESS_HELD: Final = "ProgressHeld"
    WAITING_FOR_FIRST_STEP: Final = "WaitingForFirstStep"
    SLOW_STEPS: Final = "SlowSteps"
    # Pool quarantines (status.pools[].quarantined; the node label's value), with
    # NODE_NOT_READY and MAINTENANCE: the evidence against the pool (core/blame.py).
    DEVICE_UNHEALTHY: Final = "DeviceUnhealthy"  # TPU chips unhealthy, or refused a pod
    NODE_DISRUPTION: Final = "NodeDisruption"  # the node's lifecycle ended the pod
    HARDWARE_FAILURE: Final = "HardwareFailure"  # spec.recovery.hardwareExitCodes/Reasons
    REPEATED_FAILURES: Final = "RepeatedFailures"  # slices of different jobs failed there

    # RestoreAtRisk (True: PROXY_MEMORY, also its Warning Event)
    PROXY_MEMORY: Final = "ProxyMemory"
    WITHIN_PROXY_MEMORY: Final = "WithinProxyMemory"
    HOSTS_RESTORE: Final = "HostsRestore"  # the TPU hosts read their own shards
    NO_PROXY: Final = "NoProxy"  # backend simulated
    SIZE_UNKNOWN: Final = "SizeUnknown"

    # ImageDrift (True: DIGESTS_DIFFER, also its Warning Event IMAGE_DRIFT)
    DIGESTS_DIFFER: Final = "DigestsDiffer"
    SAME_DIGESTS: Final = "SameDigests"

    # MainRestartsInPlace (False: RESTART_RULES_UNSUPPORTED, also its Warning Event)
    CONTAINER_RESTART_RULES: Final = "ContainerRestartRules"
    RESTART_RULES_UNSUPPORTED: Final = "RestartRulesUnsupported"

    # Events only (the Failed reasons above are Events too).
    SLICE_RESTORED: Final = "SliceRestored"
    TRAINER_RESTARTED: Final = "TrainerRestarted"
    TRAINER_RESTARTING: Final = "TrainerRestarting"  # the operator restarts a stalled one
    SLICE_REPLACEMENT_DECLINED: Final = "SliceReplacementDeclined"  # a trainer's request
    SLICE_REPLACING: Final = "SliceReplacing"
    SLICE_REPLACED: Final = "SliceReplaced"
    SLICE_MOVING: Final = "SliceMoving"
    # A slice whose evidence clears its nodes restarts its pods where they stand
    # (core/inplace.py): decided, Ready again, or not back in time (then recreated).
    SLICE_RESTARTING_IN_PLACE: Final = "SliceRestartingInPlace"
    SLICE_RESTARTED_IN_PLACE: Final = "SliceRestartedInPlace"
    IN_PLACE_RESTART_TIMED_OUT: Final = "InPlaceRestartTimedOut"
    SLICE_RESTARTS_EXHAUSTED: Final = "SliceRestartsExhausted"
    STALL_RESTARTS_EXHAUSTED: Final = "StallRestartsExhausted"  # maxStallRestarts spent
    STUCK_POD_FORCE_DELETED: Final = "StuckPodForceDeleted"
    POOL_QUARANTINED: Final = "PoolQuarantined"
    POOL_RELEASED: Final = "PoolReleased"
    NODE_ACTION_THROTTLED: Final = "NodeActionThrottled"
    MAINTENANCE_SCHEDULED: Final = "MaintenanceScheduled"
    CHECKPOINT_REQUESTED: Final = "CheckpointRequested"
    CHECKPOINT_ACKNOWLEDGED: Final = "CheckpointAcknowledged"
    CHECKPOINT_REQUEST_TIMED_OUT: Final = "CheckpointRequestTimedOut"
    RESTORE_AT_RISK: Final = "RestoreAtRisk"  # Warning: the condition turned True
    IMAGE_DRIFT: Final = "ImageDrift"  # Warning: the condition turned True


# The trainer's Failed reasons (status.training.reason) that fail the job, with the same
# reason. With MaxRestartsExceeded (the JobSet's budget) these are the "budget exhausted"
# Events.
TRAINER_FAILURE_REASONS: Final = (Reason.ELASTIC_RETRIES_EXHAUSTED, Reason.ELASTIC_TIMEOUT)


class Phase:
    """status.phase, for `kubectl get etj`."""

    PENDING: Final = "Pending"
    RUNNING: Final = "Running"
    SLICE_DOWN: Final = "SliceDown"
    RECOVERING: Final = "Recovering"
    DEGRADED: Final = "Degraded"
    SUSPENDED: Final = "Suspended"
    QUEUED: Final = "Queued"  # a queue (Kueue) has not admitted it, or took it back
    SUCCEEDED: Final = "Succeeded"
    FAILED: Final = "Failed"
