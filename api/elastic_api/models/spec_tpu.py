"""The spec's TPU part: the slices (`spec.tpu`, Topology-Aware Scheduling), how elastic the
job is (`spec.elastic`: its slices, restart budgets, progress deadline) and where it may
run (`spec.multiCluster`).
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from elastic_api.catalog import INT32_MAX, MAX_SLICE_RESTARTS, MAX_VMS_PER_SLICE, TpuType
from elastic_api.models.base import ApiModel, SpecCount, SpecInt, SpecPositive, _api_integer
from elastic_api.resize import (
    TRAIN_ON_FROM_SLICES,
    TRAIN_ON_SHARE,
)


class TopologyAwareSpec(ApiModel):
    """Kueue's Topology-Aware Scheduling places the slices (a TAS ResourceFlavor of the
    job's queue): each slice's pods in one domain of `sliceLevel`, instead of JobSet's
    one-slice-per-node-pool placement."""

    slice_level: str = Field(
        max_length=317,
        description="Node label of the Kueue Topology level one slice fills, e.g. "
        "cloud.google.com/gke-nodepool (a v5e/v6e slice per node pool) or "
        "cloud.google.com/gke-tpu-partition-4x4x4-id (TPU7x cubes). Rendered as "
        "kueue.x-k8s.io/podset-slice-required-topology, with podset-slice-size = hosts "
        "per slice.",
    )
    job_level: str | None = Field(
        None, max_length=317,
        description="Node label of a level that holds every slice of the job (e.g. "
        "cloud.google.com/gce-topology-block): kueue.x-k8s.io/podset-required-topology. "
        "Unset: slices may land in different domains of every level above sliceLevel.",
    )


# spec.tpu.numSlices' cap: the job's status keeps an entry per slice and per node pool in
# one object, which etcd keeps under 1.5 MiB (docs/api.md, "How many slices", says what
# else bounds it, and how much of that 256 slices take).
MAX_SLICES = 256
MAX_SPARES = 64


class TpuSpec(ApiModel):
    """The TPU slices: type and topology pick a catalog shape; one worker Job per slice."""

    type: TpuType = Field(description="TPU generation: v5e, v5p, v6e, v4 or tpu7x.")
    topology: str = Field(
        max_length=16, description="Slice topology, e.g. 4x4 (v5e) or 2x2x2 (v5p); one of "
        "the catalog's for the type (docs/api.md, \"TPU catalog\").",
    )
    # The cap is a CEL rule (validation.py), not a maximum: its message says why.
    num_slices: SpecInt = Field(
        1, ge=1,
        description=f"Number of TPU slices (worker Jobs); at most {MAX_SLICES}, so that the "
        "job's status (an entry per slice) stays within etcd's 1.5 MiB object size even "
        "with every slice failing at once.",
    )
    spares: SpecInt = Field(
        0, ge=0, le=MAX_SPARES,
        description="Node pools of this shape expected beyond numSlices (hot spares a failed "
        "slice moves to); at most numSlices. The operator reports how many are healthy "
        "(status.sparePools, condition SparesAvailable); it cannot create them.",
    )
    topology_aware: TopologyAwareSpec | None = Field(
        None,
        description="Place slices with Kueue's Topology-Aware Scheduling (the job's queue "
        "has a TAS flavor). Kueue then keeps each slice in its domain: the operator's "
        "spare pools and quarantine do not apply (condition TopologyPlacement).",
    )


# spec.elastic.progressDeadlineSeconds: its bounds, and the floor of the learned deadline
# (elastic_api.progress_rules has the rule).
MIN_PROGRESS_DEADLINE_SECONDS = 5
# spec.elastic.restartWindowSeconds (elastic_api.budgets has the rule): its default where
# a count is derived, and its bounds: shorter than a slice's replacement, a window forgets
# each restart before the next comes and stops no crash loop; past 30 days it is a count
# over the run (leave it unset for that).
DEFAULT_RESTART_WINDOW_SECONDS = 3600
MIN_RESTART_WINDOW_SECONDS = 600
MAX_RESTART_WINDOW_SECONDS = 30 * 86400
# Restart times kept per budget in the status: the count plus one says it is spent; no
# derived count comes near it, and admission keeps a windowed count below it.
MAX_BUDGET_TIMES = 64
MAX_PROGRESS_DEADLINE_SECONDS = 86400
PROGRESS_DEADLINE_FLOOR_SECONDS = 60.0


class ElasticSpec(ApiModel):
    """How the trainer survives losing slices inside its process."""

    min_slices: SpecPositive | None = Field(
        None,
        description="Slices needed to train: fewer than numSlices = replica resize (the "
        "bundled trainer keeps the global batch on the slices left, and grows back when "
        "one returns); numSlices = pause and resume. Unset, for the bundled trainer: from "
        f"{TRAIN_ON_FROM_SLICES} slices, numSlices less one slice in {TRAIN_ON_SHARE} (at "
        "least one) where its batch splits over the slices left, so a replacement's "
        "minutes are trained through; else numSlices.",
    )
    timeout_seconds: SpecInt = Field(300, ge=1, description="How long one retry waits for slices.")
    max_retries: SpecCount | None = Field(
        None,
        description="Elastic events (slices lost) the trainer recovers from: per "
        "restartWindowSeconds when that is set, else over the whole run. Unset: derived per "
        "window from the job's hosts (docs/api.md, \"Restart budgets\"; "
        "status.budgets.elasticRetries says the count).",
    )
    max_slice_restarts: SpecCount | None = Field(
        None,
        description="Restarts allowed per slice: per restartWindowSeconds when that is set, "
        "else over the whole run; worker backoffLimit = VMs per slice x this. Unset: derived "
        "per window from a slice's hosts (status.budgets.sliceRestarts says the count). "
        f"At most {MAX_SLICE_RESTARTS}, and at most (2^31-1) / VMs per slice, so that "
        f"backoffLimit fits an int32 (e.g. {INT32_MAX // MAX_VMS_PER_SLICE} for the "
        f"largest slice, {MAX_VMS_PER_SLICE} VMs).",
    )
    restart_window_seconds: Annotated[int, Field(ge=MIN_RESTART_WINDOW_SECONDS,
                                                 le=MAX_RESTART_WINDOW_SECONDS),
                                      BeforeValidator(_api_integer)] | None = Field(
        None,
        description="The window every restart budget counts over (maxSliceRestarts, "
        "maxRetries, maxStallRestarts, spec.maxRestarts): at most that many restarts within "
        "any this many seconds, so a long run keeps restarting and a crash loop is stopped. "
        "Unset: a count the spec sets holds over the whole run, and an unset count is "
        f"derived per {DEFAULT_RESTART_WINDOW_SECONDS} s. "
        f"{MIN_RESTART_WINDOW_SECONDS} to {MAX_RESTART_WINDOW_SECONDS}.",
    )
    elastic_slices: SpecCount | None = Field(
        None,
        description="Slices that may be missing before the JobSet restarts (--num_elastic_slices). "
        "Unset = numSlices.",
    )
    progress_deadline_seconds: Annotated[int, Field(ge=MIN_PROGRESS_DEADLINE_SECONDS,
                                                    le=MAX_PROGRESS_DEADLINE_SECONDS),
                                         BeforeValidator(_api_integer)] | None = Field(
        None,
        description="The step deadline: seconds without a new training step "
        "(status.training.step) after which the job is stalled: condition Progressing "
        "False (ProgressDeadlineExceeded), a Warning Event, and onStall. It holds a train "
        "step and a thread blocked in one device call; the other phases of training (an "
        "evaluation, a checkpoint save, a compile, a restore, a data wait) keep deadlines "
        "of their own, never shorter than this, and a stopped process a 30 s grace "
        "(docs/trainer.md, \"Phases\"). Unset: learned from the trainer's step times "
        "(10 x the median seconds per step, 2 x the longest, at least "
        f"{int(PROGRESS_DEADLINE_FLOOR_SECONDS)} s; where the trainer's phase is not known, "
        "also 2 x the longest gap between new steps seen; 5 x that for the first step after "
        "a pause or resize, and while a checkpoint save is in flight).",
    )
    on_stall: Literal["Recover", "Report"] = Field(
        "Recover",
        description="What the operator does when the progress deadline passes and nothing "
        "is blamed (no slice down, none the trainer suspects). Recover: restart the "
        "trainer (the head's main: its pod is deleted and its Job makes a new one; counted "
        "as a trainer restart, resumed from the newest committed checkpoint; the JobSet is "
        "kept), once per stall, at most maxStallRestarts times. Report: the condition "
        "and Event only.",
    )
    max_stall_restarts: SpecCount | None = Field(
        None,
        description="Trainer restarts for stalls (onStall Recover) allowed: per "
        "restartWindowSeconds when that is set, else over the job's life (counted in "
        "status.counters.stallRestarts). Unset: derived per window from the job's hosts "
        "(status.budgets.stallRestarts says the count). Once spent, a stall is reported "
        "only: Progressing False says so and a StallRestartsExhausted Warning Event is "
        "posted; a trainer that stalls again after every restart is not restarted forever.",
    )
    on_slow_slice: Literal["Replace", "Report"] | None = Field(
        None,
        description="When the trainer blames one slice for slow steps (its sliceReplacement "
        "request with reason SliceSlow: 1.2x the fastest slice's part or more, for 60 s "
        "on end) and a healthy spare node pool exists. Replace: recreate that slice's "
        "worker Job on the spare (counted as a slice failure). Report: condition Degraded "
        "(SlowSteps) only. Unset: Replace where recovery.replaceSlices is true, else "
        "Report.",
    )

    def slow_slice_action(self, replace_slices: bool) -> str:
        """onSlowSlice, or its default (Replace where the operator replaces slices)."""
        if self.on_slow_slice is not None:
            return self.on_slow_slice
        return "Replace" if replace_slices else "Report"


Redispatch = Literal["Never", "OnWorkerLost"]


class MultiClusterSpec(ApiModel):
    """A MultiKueue job (spec.managedBy): what the manager cluster's operator may do when
    the worker cluster it runs in is lost (docs/operations.md, "Many clusters")."""

    redispatch: Redispatch = Field(
        "Never",
        description="When MultiKueue declares the worker cluster the job runs in lost "
        "(unreachable for its workerLostTimeout), Kueue takes the job back. Never: the "
        "operator suspends it so that it is not dispatched again (its Workload "
        "deactivated, phase Suspended, reason RedispatchNotAllowed): a lost cluster may "
        "still be running it, and two copies would write the same checkpoint directory. "
        "OnWorkerLost: it is dispatched again to a cluster with quota and resumes from its "
        "newest committed checkpoint. Mutable: setting OnWorkerLost on a job so suspended "
        "runs it again.",
    )
