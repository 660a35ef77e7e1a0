"""The whole spec (`ElasticTrainingJobSpec`), assembled from its parts, and the rules that
span them.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from elastic_api.catalog import INT32_MAX, slice_shape
from elastic_api.models.base import (
    DEFAULT_OVERHEAD_BUDGET_PERCENT,
    ApiModel,
    ShortStr,
    SpecCount,
    SpecInt,
    SpecNumber,
)
from elastic_api.models.spec_pathways import PathwaysSpec, Toleration
from elastic_api.models.spec_recovery import (
    CheckpointSpec,
    MaintenanceSpec,
    RecoverySpec,
    SnapshotSpec,
)
from elastic_api.models.spec_tpu import ElasticSpec, MultiClusterSpec, TpuSpec
from elastic_api.models.spec_trainer import TrainerSpec
from elastic_api.names import MULTIKUEUE_CONTROLLER
from elastic_api.resize import (
    SIMULATED_DEVICES_PER_SLICE,
    default_min_slices,
)


class ElasticTrainingJobSpec(ApiModel):
    tpu: TpuSpec
    backend: Literal["pathways", "simulated"] = Field(
        "pathways",
        description="`simulated` renders the same JobSet without TPUs: the trainer runs on CPU "
        "with simulated slices and workers run a slice agent.",
    )
    elastic: ElasticSpec = Field(default_factory=ElasticSpec)
    max_restarts: SpecCount | None = Field(
        None,
        description="Restarts of the program allowed: main's restarts in place (a crash of "
        "the trainer's process, spec.recovery.restartInPlace) and whole-JobSet restarts (a "
        "slice whose own budget is spent, a head pod lost): per spec.elastic."
        "restartWindowSeconds when that is set (the operator counts them and fails the "
        "JobSet past the count), else over the whole run (JobSet's failurePolicy."
        f"maxRestarts, the operator adding main's); at most {INT32_MAX} (an int32 in JobSet). "
        "Unset: derived per window from the job's hosts (status.budgets.jobSetRestarts says "
        "the count).",
    )
    recovery: RecoverySpec = Field(default_factory=RecoverySpec)
    maintenance: MaintenanceSpec = Field(default_factory=MaintenanceSpec)
    placement: Literal["TPU", "Any"] = Field(
        "TPU",
        description="TPU: workers are placed like TPU workers (TPU node selector, google.com/tpu "
        "limit, one slice per node pool), the head on headNodePool, for either backend. Any: "
        "no TPU placement (backend simulated only: kind, clusters without TPU nodes).",
    )
    checkpoint: CheckpointSpec
    snapshot: SnapshotSpec = Field(default_factory=SnapshotSpec)
    overhead_budget_percent: SpecNumber = Field(
        DEFAULT_OVERHEAD_BUDGET_PERCENT,
        description="Bundled trainer: the share of step time (percent, more than 0 and at "
        "most 50) the copies whose periodSteps is unset may cost together: half each when "
        "the trainer chooses both the snapshot and the checkpoint period, all of it for the "
        "one it chooses otherwise.",
    )
    trainer: TrainerSpec
    pathways: PathwaysSpec = Field(default_factory=PathwaysSpec)
    priority_class_name: str | None = Field(
        None, max_length=253,
        description="priorityClassName of every pod (Kueue also orders the job by it when the "
        "job has no kueue.x-k8s.io/priority-class label).",
    )
    node_selector: dict[ShortStr, ShortStr] = Field(
        default_factory=dict, max_length=32, description="Added to every pod's nodeSelector "
        "(replacing the operator's TPU selectors of the same key). In a namespace under the "
        "chart's tenant policy, only the pools and pairs the administrator allows "
        "(tenantPolicy.allowed; docs/threat-model.md, \"Placement and host access\").",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=32, description="Added to every pod. Operator "
        "Exists needs a key (no key tolerates every taint); under the chart's tenant policy, "
        "only the keys the administrator allows.",
    )
    head_node_pool: str = Field(
        "cpu-np", max_length=63, description="GKE node pool of the head (CPU) pod; under the "
        "chart's tenant policy, one the administrator allows (default: cpu-np).",
    )
    service_account_name: str | None = Field(
        None, max_length=253,
        description="ServiceAccount of every pod, head and workers alike (a DNS-1123 "
        "subdomain). The trainer's Role is bound to it, and Cloud Storage FUSE volumes "
        "mounted with hostNetworkPodKSA act as it. The Pathways pods run on the host "
        "network, where Workload Identity does not apply: their own Google Cloud calls "
        "(checkpoints, Pathways scratch) use their node pool's service account "
        "(docs/gke.md, \"Identity\"). Unset: the namespace's default.",
    )
    termination_grace_period_seconds: SpecInt = Field(
        30, ge=0, description="terminationGracePeriodSeconds of every pod.",
    )
    suspend: bool = Field(False, description="Suspend the JobSet (pods are deleted, state kept).")
    managed_by: Literal["kueue.x-k8s.io/multikueue"] | None = Field(
        None,
        description=f"{MULTIKUEUE_CONTROLLER}: Kueue's MultiKueue dispatches the job to a "
        "worker cluster, where the operator runs it; in this (the manager) cluster the "
        "operator makes its Kueue Workload and no JobSet, and the status is the worker's. "
        "Unset: the job runs in this cluster. Immutable.",
    )
    multi_cluster: MultiClusterSpec | None = Field(
        None,
        description="A MultiKueue job (spec.managedBy): whether it may be dispatched again "
        "when its worker cluster is lost. Unset: as {} (redispatch Never). Mutable.",
    )

    @property
    def multikueue(self) -> bool:
        """MultiKueue dispatches this job: this is the manager cluster's copy."""
        return self.managed_by == MULTIKUEUE_CONTROLLER

    @property
    def redispatch(self) -> str:
        """spec.multiCluster.redispatch, with its default."""
        return (self.multi_cluster or MultiClusterSpec()).redispatch

    @property
    def min_slices(self) -> int:
        """spec.elastic.minSlices, or its default (elastic_api.resize)."""
        if self.elastic.min_slices:
            return self.elastic.min_slices
        batch = None if self.trainer.command is not None else self.trainer.bundled().batch
        return default_min_slices(self.tpu.num_slices, batch, self.devices_per_slice)

    @property
    def on_slow_slice(self) -> str:
        """spec.elastic.onSlowSlice, or its default (elastic.slow_slice_action)."""
        return self.elastic.slow_slice_action(self.recovery.replace_slices)

    @property
    def devices_per_slice(self) -> int:
        """The devices of one slice the bundled trainer's mesh spans: its chips, or the
        simulated backend's."""
        if self.backend == "simulated":
            return SIMULATED_DEVICES_PER_SLICE
        try:
            return slice_shape(self.tpu.type, self.tpu.topology).chips
        except ValueError:  # refused at admission
            return 1

    @property
    def elastic_slices(self) -> int:
        if self.elastic.elastic_slices is None:
            return self.tpu.num_slices
        return self.elastic.elastic_slices
