"""The job's health as the operator writes it in the status: conditions, each slice (its
state, replacement, counted failures), each node pool, and the restart budgets
(`status.budgets`).
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from elastic_api.models.base import StatusModel
from elastic_api.models.spec_tpu import MAX_BUDGET_TIMES

# The failures status.pools keeps per pool (the newest; the operator drops the rest):
# enough to tell whether they follow the job (quarantineAfterFailures counts jobs, each
# job's failures only once).
MAX_POOL_FAILURES = 20

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StatusModel):
    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: datetime
    observed_generation: int | None = None


SliceState = Literal["Pending", "Ready", "Down", "Restarting"]


ReplacementAction = Literal["Replace", "Move", "GiveUp", "RestartInPlace"]
# Whom a slice failure's evidence blames (the operator's core/blame.py decides):
# Node: what the control plane shows of the node or the pod (NotReady or gone, unhealthy
#   TPU chips, the node's lifecycle ending the pod, a maintenance in progress);
# Reported: the worker's own exit code or reason, named in spec.recovery.hardwareExitCodes
#   or hardwareReasons;
# Job: the worker container exited on a healthy node (the job's own failure);
# Other: neither (a pod deleted or evicted, a host lost between two looks).
Blame = Literal["Node", "Reported", "Job", "Other"]


class SliceReplacement(StatusModel):
    """What the operator does about a slice's current failure, written to the status
    before it acts (so a restarted operator neither repeats nor forgets it)."""

    action: ReplacementAction = Field(
        description="Replace: recreate the worker Job (counts in restarts); RestartInPlace: "
        "the evidence clears the nodes, the slice's pods restart where they stand (counts in "
        "restarts; recreated if not Ready within spec.recovery.inPlaceDeadlineSeconds); "
        "Move: a planned move off a pool under maintenance (counts in moves); GiveUp: the "
        "restart budget is spent, the Job's backoffLimit is lowered so JobSet's "
        "failurePolicy applies.")
    reason: str = Field(description="Why: the slice's failure reason, or Maintenance.")
    job_uid: str | None = Field(None, description="uid of the worker Job replaced (the "
                                "delete's precondition: a newer Job is never deleted).")
    from_pool: str | None = None
    requested_at: datetime
    blame: Blame | None = Field(None, description="Whom the failure's evidence blames: "
                                "Node, Reported, Job or Other (PoolFailure.blame).")
    evidence: str | None = Field(None, description="The evidence, in words.")


class ReplacementRecord(StatusModel):
    """The slice's last completed replacement."""

    action: ReplacementAction
    reason: str
    requested_at: datetime
    ready_at: datetime
    seconds: float = Field(description="requestedAt to the slice Ready again.")
    from_pool: str | None = None
    to_pool: str | None = None
    blame: Blame | None = None


class SliceMaintenance(StatusModel):
    """A maintenance GKE announced on the nodes of the slice's pool."""

    pool: str
    signal: str = Field(description="ScheduledMaintenance, MaintenanceOngoing or "
                        "ImpendingTermination (the GKE label or taint seen).")
    scheduled_at: datetime | None = Field(
        None, description="cloud.google.com/scheduled-maintenance-time, when given.")
    noticed_at: datetime
    request_id: int | None = Field(None, description="The checkpointRequest that covers it.")


class CountedFailures(StatusModel):
    """How far the slice's restarts account for its worker Job's own count of failed pods
    (status.failed + uncountedTerminatedPods.failed: the Job controller's, kept across
    operator restarts). A count above it is a failure no look saw, counted once
    (docs/design/exactly-once.md)."""

    job_uid: str = Field(description="uid of the worker Job the count is of.")
    failed_pods: int = Field(0, description="Its failed pods the restarts account for.")
    container_restarts: int | None = Field(
        None, description="The container restarts of its pods (their restartCount, summed) "
        "the restarts account for: a restart in place no look saw is counted once. None: "
        "written by an operator that did not count them (taken as the count then seen).")


class SliceStatus(StatusModel):
    index: int
    state: SliceState
    ready_hosts: int = 0
    hosts: int = 0
    restarts: int = Field(0, description="Times this slice failed (never decreases); the "
                          "operator replaces it while restarts <= spec.elastic."
                          "maxSliceRestarts.")
    moves: int = Field(0, description="Planned moves to another pool (maintenance); not "
                       "failures, not counted in restarts.")
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None
    pool: str | None = Field(None, description="Node pool the slice's pods run on.")
    domain: str | None = Field(
        None, description="With spec.tpu.topologyAware: the sliceLevel domain (the label's "
        "value on its nodes) the slice's pods run in.")
    replacement: SliceReplacement | None = None
    last_replacement: ReplacementRecord | None = None
    maintenance: SliceMaintenance | None = None
    counted: CountedFailures | None = None
    recent_failures: list[datetime] = Field(
        default_factory=list, max_length=MAX_BUDGET_TIMES,
        description="The slice's failures spec.elastic.maxSliceRestarts counts now, oldest "
        "first: those within the restart window (docs/api.md, \"Restart budgets\"); empty "
        "for a count over the whole run, which restarts holds.")


class PoolFailure(StatusModel):
    """One slice failure of this job on a pool."""

    at: datetime
    blame: Blame
    reason: str = Field(description="The evidence: NodeNotReady, DeviceUnhealthy, "
                        "NodeDisruption, Maintenance, HardwareFailure, or the slice's "
                        "reason (PodFailed, ...).")


class PoolStatus(StatusModel):
    """A node pool this job ran on: its recent slice failures, and whether the operator
    keeps replacements off it (the node label elastic.pathways.dev/quarantined)."""

    name: str
    failures: list[PoolFailure] = Field(
        default_factory=list, max_length=MAX_POOL_FAILURES,
        description="This job's slice failures on this pool within "
        "spec.recovery.quarantineWindowSeconds (newest last).")
    quarantined: str | None = Field(
        None, description="Why replacements avoid it: NodeNotReady, DeviceUnhealthy, "
        "NodeDisruption, Maintenance, HardwareFailure, RepeatedFailures; unset: not "
        "quarantined.")
    quarantined_at: datetime | None = None
    quarantine_cause: str | None = Field(
        None, description="Which job(s) quarantined it and on what evidence (the nodes' "
        "elastic.pathways.dev/quarantine-cause annotation).")


class BudgetStatus(StatusModel):
    """One restart budget (elastic_api.budgets): its rule, and what is spent of it now."""

    allowed: int = Field(description="Restarts allowed within the window (or the run).")
    window_seconds: int | None = Field(None, description="The window they are counted "
                                       "over; absent: over the whole run.")
    derived: bool = Field(description="True: the spec leaves the count unset and it is "
                          "derived from the hosts it covers.")
    rule: str = Field(description="The rule in words: the count, the window, why.")
    used: int = Field(0, description="Restarts that count now (for slices: the slice "
                      "with the most).")
    slice: int | None = Field(None, description="sliceRestarts: the slice with the most.")
    recent: list[datetime] = Field(
        default_factory=list, max_length=MAX_BUDGET_TIMES,
        description="When the restarts that count now came, oldest first (windows only; "
        "a slice's are in slices[].recentFailures).")
    spent_at: datetime | None = Field(None, description="When a restart was refused "
                                      "for it (the count reached): a crash loop, or more "
                                      "failures than the rates behind the count.")
    last_at: datetime | None = Field(None, description="jobSetRestarts: when the newest "
                                     "JobSet restart was seen (its slices' going is that "
                                     "restart, not their failures).")


class CountedMainRestarts(StatusModel):
    """How far jobSetRestarts accounts for main's restarts in place: a crash of the program
    restarts main in its head pod (spec.recovery.restartInPlace), which the JobSet's
    budget counts as it counted the JobSet restart such a crash used to cost. Each is
    charged once, when first seen; a new head pod's count starts again from 0."""

    pod_uid: str = Field(description="uid of the head pod the count is of.")
    restarts: int = Field(0, ge=0, description="main's restartCount in that pod, charged.")
    total: int = Field(0, ge=0, description="main's restarts in place charged over the run, "
                       "every head pod's.")


class RestartBudgets(StatusModel):
    """The restart budgets (docs/api.md, "Restart budgets"): kept here, never reset but
    by their window, so a restarted operator or trainer goes on counting."""

    slice_restarts: BudgetStatus
    elastic_retries: BudgetStatus
    stall_restarts: BudgetStatus
    jobset_restarts: BudgetStatus = Field(alias="jobSetRestarts")
    main_restarts: CountedMainRestarts | None = Field(
        None, description="main's restarts in place, charged to jobSetRestarts.")
