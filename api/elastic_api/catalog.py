"""The TPU catalog: one table of the slice shapes GKE offers, keyed by TPU type.

VMs per slice = chips in the topology / chips per VM. v5p and v4 product names count
TensorCores, v5e and v6e count chips; the table only deals in chips.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

TpuType = Literal["v5e", "v5p", "v6e", "v4", "tpu7x"]


@dataclass(frozen=True)
class TpuFamily:
    type: str
    accelerator_label: str  # value of cloud.google.com/gke-tpu-accelerator
    machine_type: str
    chips_per_vm: int
    pathways_instance_type: str  # --instance_type=<this>:<topology>
    topologies: tuple[str, ...]


@dataclass(frozen=True)
class SliceShape:
    family: TpuFamily
    topology: str

    @property
    def chips(self) -> int:
        return prod(int(d) for d in self.topology.split("x"))

    @property
    def chips_per_vm(self) -> int:
        # A 1x1 v6e slice is a single-chip VM (ct6e-standard-1t).
        return min(self.family.chips_per_vm, self.chips)

    @property
    def vms(self) -> int:
        return self.chips // self.chips_per_vm

    @property
    def machine_type(self) -> str:
        if self.family.type == "v6e" and self.topology == "1x1":
            return "ct6e-standard-1t"
        return self.family.machine_type

    @property
    def pathways_instance_type(self) -> str:
        return f"{self.family.pathways_instance_type}:{self.topology}"


CATALOG: dict[str, TpuFamily] = {
    f.type: f
    for f in (
        TpuFamily("v5e", "tpu-v5-lite-podslice", "ct5lp-hightpu-4t", 4, "tpuv5e",
                  ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")),
        TpuFamily("v5p", "tpu-v5p-slice", "ct5p-hightpu-4t", 4, "tpuv5",
                  ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4")),
        TpuFamily("v6e", "tpu-v6e-slice", "ct6e-standard-4t", 4, "tpuv6e",
                  ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "16x16")),
        TpuFamily("v4", "tpu-v4-podslice", "ct4p-hightpu-4t", 4, "tpuv4",
                  ("2x2x1", "2x2x2", "2x2x4", "2x4x4")),
        TpuFamily("tpu7x", "tpu7x", "tpu7x-standard-4t", 4, "tpu7x",
                  ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4")),
    )
}


def slice_shape(tpu_type: str, topology: str) -> SliceShape:
    """The shape of one slice; ValueError naming the valid topologies if unknown."""
    family = CATALOG.get(tpu_type)
    if family is None:
        raise ValueError(
            f"spec.tpu.type: unknown TPU type {tpu_type!r}; use one of {sorted(CATALOG)}"
        )
    if topology not in family.topologies:
        raise ValueError(
            f"spec.tpu.topology: {topology!r} is not a {tpu_type} topology; "
            f"use one of {', '.join(family.topologies)}"
        )
    return SliceShape(family, topology)


# The most VMs (hosts) in one catalog slice (v5e and v6e 16x16: 64). Admission bounds
# spec.elastic.maxSliceRestarts with it, so that the worker Jobs' backoffLimit (VMs per
# slice x maxSliceRestarts) fits the int32 of a Job's backoffLimit for every shape.
MAX_VMS_PER_SLICE = max(
    SliceShape(family, topology).vms
    for family in CATALOG.values() for topology in family.topologies
)
