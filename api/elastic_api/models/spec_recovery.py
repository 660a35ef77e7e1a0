"""The spec's recovery part: what a slice failure's evidence calls for (`spec.recovery`),
maintenance ahead of time (`spec.maintenance`), checkpoints and snapshots
(`spec.checkpoint`, `spec.snapshot`).
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from elastic_api.models.base import (
    DEFAULT_IN_PLACE_DEADLINE_SECONDS,
    ApiModel,
    SpecCount,
    SpecInt,
    SpecPositive,
    _api_integer,
)

# A container exit code that can fail a pod (0 never does).
ExitCode = Annotated[int, Field(ge=1, le=255), BeforeValidator(_api_integer)]
# A Kubernetes reason (CamelCase; `OutOfgoogle.com/tpu` has a resource name in it).
TerminationReason = Annotated[str, Field(min_length=1, max_length=128,
                                         pattern=r"^[A-Za-z][A-Za-z0-9./_-]*$")]


class RecoverySpec(ApiModel):
    """How the operator replaces a failed slice (docs/operations.md, "Slice replacement, hot
    spares and maintenance")."""

    replace_slices: bool = Field(
        True,
        description="The operator recreates a failed slice's worker Job at once (no growing "
        "pod backoff; stuck pods force-deleted; failing node pools avoided). false: JobSet's "
        "and the Job controller's defaults alone.",
    )
    node_not_ready_seconds: SpecInt = Field(
        5, ge=0, le=600,
        description="A slice whose node reports Ready=False this long is replaced "
        "(Ready=Unknown or a deleted node: at once).",
    )
    force_delete_after_seconds: SpecInt = Field(
        5, ge=0, le=600,
        description="A worker pod being deleted on a node that has not been Ready this long "
        "(or is gone) is deleted with grace period 0.",
    )
    worker_node_toleration_seconds: SpecInt = Field(
        30, ge=0, le=3600,
        description="tolerationSeconds of the workers' node.kubernetes.io/not-ready and "
        "unreachable NoExecute tolerations (instead of the API server's 300 s): the "
        "eviction that still happens while the operator is down. At least "
        "nodeNotReadySeconds.",
    )
    quarantine_after_failures: SpecInt = Field(
        2, ge=1, le=100,
        description="Jobs (this one counted) whose slices failed on one node pool within "
        "quarantineWindowSeconds with no evidence against the nodes, after which the pool "
        "is avoided (while a spare pool exists). A job whose failures follow it from pool "
        "to pool is not counted. The operator's --quarantine-min-jobs (default 2) is the "
        "least it takes whatever this asks: 1 (this job's own failure is enough) holds "
        "only where the administrator set 1.",
    )
    quarantine_window_seconds: SpecInt = Field(
        3600, ge=60, le=604800,
        description="The window of quarantineAfterFailures and hardwareExitCodes.",
    )
    hardware_exit_codes: list[ExitCode] = Field(
        default_factory=list, max_length=32,
        description="Exit codes of a worker container that say its TPU host is broken (the "
        "convention of your program or its runtime): the slice is replaced; its node pool is "
        "quarantined as for a dead node where the administrator trusts jobs' reports "
        "(etj operator --quarantine-on-job-report), unless this job reported the same on "
        "another pool within quarantineWindowSeconds (the fault follows the job); else it "
        "counts as this job's own failure toward quarantineAfterFailures. Any other exit "
        "on a healthy node is the job's own failure: it spends the slice's restart budget "
        "and counts only toward quarantineAfterFailures.",
    )
    hardware_reasons: list[TerminationReason] = Field(
        default_factory=list, max_length=16,
        description="The same for reasons: a worker container's termination reason, the "
        "pod's status reason or its DisruptionTarget condition's reason (e.g. a device "
        "plugin's). Kubernetes' own node signals need no entry (docs/operations.md, "
        "\"Who is to blame\").",
    )
    # Neither has a schema default: the API server would write it into every job, and a
    # release before these fields (which refuses fields it does not know) could not read
    # the job after a downgrade (make test-upgrade). The operator applies the default.
    restart_in_place: bool | None = Field(
        None,
        description="A slice whose failure the evidence does not lay on its nodes (a worker "
        "process that exited on a healthy node, its code not in hardwareExitCodes) keeps "
        "its pods: the kubelet restarts the container where it stands and the operator "
        "waits for it instead of recreating the worker Job (docs/api.md, \"Restart in place "
        "or move\"). false: every failure recreates the Job. Unset: true.",
    )
    in_place_deadline_seconds: Annotated[int, Field(ge=5, le=3600),
                                         BeforeValidator(_api_integer)] | None = Field(
        None,
        description="A slice restarting in place that is not Ready again this long after "
        "the operator decided so is recreated (the kubelet could not restart it). Unset: "
        f"{DEFAULT_IN_PLACE_DEADLINE_SECONDS}.",
    )

    @property
    def in_place_allowed(self) -> bool:
        """restartInPlace as it applies: unset is true."""
        return self.restart_in_place is not False

    @property
    def in_place_deadline(self) -> int:
        """inPlaceDeadlineSeconds as it applies."""
        return self.in_place_deadline_seconds or DEFAULT_IN_PLACE_DEADLINE_SECONDS


class MaintenanceSpec(ApiModel):
    """What the operator does when GKE announces maintenance on a slice's nodes."""

    enabled: bool = Field(
        True,
        description="Act on GKE's maintenance signals: ask the trainer for a checkpoint, then "
        "move the slice to a spare pool (or let the maintenance take it).",
    )
    lead_seconds: SpecInt = Field(
        900, ge=60, le=604800,
        description="Act this long before cloud.google.com/scheduled-maintenance-time.",
    )
    checkpoint_timeout_seconds: SpecInt = Field(
        300, ge=1, le=3600,
        description="How long to wait for the trainer to acknowledge the checkpoint request "
        "before moving the slice anyway; less than leadSeconds.",
    )
    pause_timeout_seconds: SpecInt = Field(
        600, ge=1, le=3600,
        description="The longest the trainer pauses (no steps) after acknowledging, waiting "
        "for the slice to move.",
    )


# What the bundled trainer uses for checkpoint.keep and checkpoint.async left unset.
DEFAULT_CHECKPOINT_KEEP, DEFAULT_CHECKPOINT_ASYNC = 3, True


class CheckpointSpec(ApiModel):
    """Orbax checkpoints (the fallback every recovery can use)."""

    directory: str = Field(
        min_length=1, max_length=1024,
        description="Orbax checkpoint root: gs://bucket/path or a filesystem path.",
    )
    # Optional, so that "not given" (the trainer chooses) differs from any number; a job
    # stored while the default was 100 keeps its explicit 100.
    period_steps: SpecPositive | None = Field(
        None,
        description="Save a checkpoint every N steps. Unset: the bundled trainer chooses the "
        "period from what a save costs against the step time, within "
        "spec.overheadBudgetPercent (status.training.checkpointCadence says which and why).",
    )
    # No defaults in the CRD for keep and async: admission can then tell a value the user
    # set (refused for a program that would never read it) from one nobody set.
    keep: SpecPositive | None = Field(
        None,
        description="Committed checkpoints to keep. Unset: 3 for the bundled trainer; MaxText "
        "keeps every one (passed as max_num_checkpoints_to_keep). Only for the bundled "
        "trainer and MaxText.",
    )
    async_: bool | None = Field(
        None, alias="async",
        description="Write checkpoints in the background. Unset: true for the bundled "
        "trainer; MaxText's own default, true (passed as async_checkpointing). Only for the "
        "bundled trainer and MaxText.",
    )
    persistence: bool = Field(
        True,
        description="ENABLE_PATHWAYS_PERSISTENCE=1 in main (backend pathways): Orbax's "
        "Pathways persistence handler, where the trainer registers it, has the TPU hosts "
        "write their own shards (the bundled trainer does; MaxText 0.2.5's pre-training "
        "trainer does not: docs/api.md).",
    )

    @property
    def keep_or_default(self) -> int:
        """What the bundled trainer keeps."""
        return self.keep if self.keep is not None else DEFAULT_CHECKPOINT_KEEP

    @property
    def async_or_default(self) -> bool:
        """Whether the bundled trainer saves in the background."""
        return self.async_ if self.async_ is not None else DEFAULT_CHECKPOINT_ASYNC


class SnapshotSpec(ApiModel):
    """In-memory snapshots of the training state (faster recovery than a checkpoint)."""

    period_steps: SpecCount | None = Field(
        None,
        description="Keep an in-memory snapshot every N steps (0 = off); at most "
        "spec.trainer.steps. Unset: the bundled trainer chooses the period from what a "
        "snapshot costs against the step time, within spec.overheadBudgetPercent "
        "(status.training.snapshotCadence says which and why).",
    )
