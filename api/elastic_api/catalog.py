"""The TPU catalog: the slice shapes GKE offers for a TPU node pool, keyed by TPU type.

VMs per slice = chips in the topology / chips per VM. v5p and v4 product names count
TensorCores, v5e and v6e count chips; the catalog only deals in chips.

Each type admits the topologies its table lists and, for the 3D types, every shape the
rule GKE and xpk follow generates: AxBxC with A, B and C multiples of 4 (whole 4x4x4
cubes) up to 256 and at most `max_cubes` cubes, A <= B <= C but for v4, which takes any
order. The reference for the rule is xpk (src/xpk/core/system_characteristics.py,
`generate_tpu_topologies`: v5p 140 cubes, v4 64 in any order, tpu7x 144);
tests/fixtures/xpk-topologies.yaml lists xpk's topologies as data, and
tests/unit/test_api_catalog.py checks that each is admitted here or refused with a reason.

Where the listed shapes come from (read 2026-12-06):
- v5e: cloud.google.com/tpu/docs/v5e (1x1 .. 16x16; 1x1 is the one-chip
  ct5lp-hightpu-1t, 2x2 one 4-chip VM) and cloud.google.com/kubernetes-engine/docs/
  concepts/plan-tpus (machine types per topology).
- v5p: cloud.google.com/tpu/docs/v5p, "Configurations": 2x2x1 .. 16x16x24, the largest
  single slice in Google's table (6,144 chips, 96 cubes, 1,536 hosts); 2x2x4 (v5p-32) as
  GKE and xpk list it. The page lists "most but not all" multi-cube shapes: the others
  are the rule's (up to the whole 140-cube pod, 8,960 chips).
- v6e: cloud.google.com/tpu/docs/v6e (1x1 .. 16x16; 1x1 is ct6e-standard-1t).
- v4: cloud.google.com/tpu/docs/v4 and /types-topologies (AxBxC, each dimension <= 4 or
  a multiple of 4): GKE's table (2x2x1 .. 8x16x16, as xpk lists it) and the largest
  v4 slice, 3,072 chips of a 4,096-chip pod (12x16x16); the rule adds the rest of xpk's
  (up to 64 cubes, any order).
- tpu7x (Ironwood): cloud.google.com/tpu/docs/tpu7x and cloud.google.com/kubernetes-engine/
  docs/concepts/tpu-ironwood (GKE >= 1.34): the v5p ladder of shapes, to the whole
  9,216-chip pod (16x24x24, 144 cubes), and 1x1x1 (one chip, tpu7x-standard-1t), each
  in xpk's tpu7x table. Multi-host tpu7x node pools are made with a workload policy
  (`--placement-policy`) instead of `--tpu-topology`; their nodes still carry the slice's
  gke-tpu-topology label, which the workers select (docs/api.md, "TPU7x (Ironwood)",
  says what a user must do). Super-slicing (one slice joined from several cubes' node
  pools by GKE's slice controller) is not supported: validation.py refuses it, naming
  what to use instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from math import prod
from typing import Literal

TpuType = Literal["v5e", "v5p", "v6e", "v4", "tpu7x"]

# A Job's backoffLimit, parallelism and completions and JobSet's maxRestarts are int32.
INT32_MAX = 2**31 - 1
# A cube: 4x4x4 chips, 16 hosts of 4 chips (v4, v5p, tpu7x); GKE labels a tpu7x cube's
# nodes with CUBE_LABEL, the level xpk's super-slicing places 4x4x4 slices at.
CUBE_HOSTS = 16
CUBE_LABEL = "cloud.google.com/gke-tpu-partition-4x4x4-id"
# spec.elastic.maxSliceRestarts: at most this for every slice (INT32_MAX // 64, 64 VMs
# being the largest slice before the multi-cube shapes, so no job admitted then is
# refused now), and at most INT32_MAX // VMs for a larger one (SliceShape).
MAX_SLICE_RESTARTS = INT32_MAX // 64


# The 3D rule: dimensions are multiples of CUBE_SIDE (whole cubes), each at most MAX_DIM
# (xpk's generate_tpu_topologies).
CUBE_SIDE = 4
MAX_DIM = 256


def dims(topology: str) -> tuple[int, ...] | None:
    """The dimensions of a topology ('4x4x8' -> (4, 4, 8)); None if it is not one."""
    parts = topology.split("x")
    if not all(p.isascii() and p.isdigit() and not p.startswith("0") for p in parts):
        return None
    return tuple(int(p) for p in parts)


def cubes(topology: str) -> int:
    """Whole 4x4x4 cubes in a 3D topology of multiples of 4 (0 for any other)."""
    d = dims(topology)
    if d is None or len(d) != 3 or any(x % CUBE_SIDE for x in d):
        return 0
    return prod(x // CUBE_SIDE for x in d)


@dataclass(frozen=True)
class TpuFamily:
    type: str
    accelerator_label: str  # value of cloud.google.com/gke-tpu-accelerator
    machine_type: str
    chips_per_vm: int
    pathways_instance_type: str  # --instance_type=<this>:<topology>
    # The shapes named one by one (Google's table), in its order.
    listed: tuple[str, ...]
    single_chip_machine_type: str | None = None  # the VM of a 1x1 slice
    # Multi-host node pools are placed with a GCE workload policy, not --tpu-topology.
    workload_policy: bool = False
    # The 3D rule: AxBxC of multiples of 4 up to MAX_DIM, at most this many cubes (0: no
    # rule, only the listed shapes), with A <= B <= C when `ordered`.
    max_cubes: int = 0
    ordered: bool = True

    def by_rule(self, topology: str) -> bool:
        """The 3D rule admits it (listed shapes aside)."""
        d = dims(topology)
        if not self.max_cubes or d is None or len(d) != 3:
            return False
        if any(x % CUBE_SIDE or x > MAX_DIM for x in d):
            return False
        if self.ordered and list(d) != sorted(d):
            return False
        return 0 < cubes(topology) <= self.max_cubes

    def admits(self, topology: str) -> bool:
        return topology in self.listed or self.by_rule(topology)

    @property
    def topologies(self) -> tuple[str, ...]:
        """Every topology admitted: the listed ones in their order, then the rule's
        (smallest first dimension first, then the second, the third)."""
        return _topologies(self)

    def describe(self) -> str:
        """What it admits, for a refusal's message."""
        listed = ", ".join(self.listed)
        if not self.max_cubes:
            return listed
        order = "A <= B <= C, " if self.ordered else "in any order, "
        return (f"{listed}, or AxBxC with each a multiple of {CUBE_SIDE} up to {MAX_DIM}, "
                f"{order}of at most {self.max_cubes} cubes of 4x4x4 (A/4 x B/4 x C/4)")


@cache  # the rule's topologies are made once per family (64^3 candidates each)
def _topologies(family: TpuFamily) -> tuple[str, ...]:
    generated: list[str] = []
    if family.max_cubes:
        sides = range(CUBE_SIDE, MAX_DIM + 1, CUBE_SIDE)
        generated = [f"{a}x{b}x{c}" for a in sides for b in sides for c in sides
                     if family.by_rule(f"{a}x{b}x{c}")]
    return family.listed + tuple(t for t in generated if t not in family.listed)


@dataclass(frozen=True)
class SliceShape:
    family: TpuFamily
    topology: str

    @property
    def chips(self) -> int:
        return prod(int(d) for d in self.topology.split("x"))

    @property
    def chips_per_vm(self) -> int:
        # A 1x1 slice is a single-chip VM (ct5lp-hightpu-1t, ct6e-standard-1t).
        return min(self.family.chips_per_vm, self.chips)

    @property
    def vms(self) -> int:
        return self.chips // self.chips_per_vm

    @property
    def machine_type(self) -> str:
        if self.chips == 1 and self.family.single_chip_machine_type:
            return self.family.single_chip_machine_type
        return self.family.machine_type

    @property
    def pathways_instance_type(self) -> str:
        return f"{self.family.pathways_instance_type}:{self.topology}"

    @property
    def max_slice_restarts(self) -> int:
        """spec.elastic.maxSliceRestarts' bound: the worker Job's backoffLimit (VMs x
        restarts) must fit an int32."""
        return min(MAX_SLICE_RESTARTS, INT32_MAX // self.vms)


# Cube shapes, one per row of the v5p table (the tpu7x ladder is the same, then the pod).
_CUBE_LADDER = ("4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16", "16x16x16",
                "16x16x24")
_SUB_CUBE = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")
_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")

CATALOG: dict[str, TpuFamily] = {
    f.type: f
    for f in (
        # 2x4 is two 4-chip VMs here: the multi-host training shape (GKE's single-host
        # ct5lp-hightpu-8t 2x4 is for serving).
        TpuFamily("v5e", "tpu-v5-lite-podslice", "ct5lp-hightpu-4t", 4, "tpuv5e", _2D,
                  single_chip_machine_type="ct5lp-hightpu-1t"),
        TpuFamily("v5p", "tpu-v5p-slice", "ct5p-hightpu-4t", 4, "tpuv5",
                  (*_SUB_CUBE, *_CUBE_LADDER), max_cubes=140),
        TpuFamily("v6e", "tpu-v6e-slice", "ct6e-standard-4t", 4, "tpuv6e", _2D,
                  single_chip_machine_type="ct6e-standard-1t"),
        TpuFamily("v4", "tpu-v4-podslice", "ct4p-hightpu-4t", 4, "tpuv4",
                  (*_SUB_CUBE, "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x12", "8x8x16",
                   "8x16x16", "12x16x16"), max_cubes=64, ordered=False),
        TpuFamily("tpu7x", "tpu7x", "tpu7x-standard-4t", 4, "tpu7x",
                  (*_SUB_CUBE, *_CUBE_LADDER, "16x24x24", "1x1x1"),
                  single_chip_machine_type="tpu7x-standard-1t", workload_policy=True,
                  max_cubes=144),
    )
}


def slice_shape(tpu_type: str, topology: str) -> SliceShape:
    """The shape of one slice; ValueError naming the valid topologies if unknown."""
    family = CATALOG.get(tpu_type)
    if family is None:
        raise ValueError(
            f"spec.tpu.type: unknown TPU type {tpu_type!r}; use one of {sorted(CATALOG)}"
        )
    if not family.admits(topology):
        raise ValueError(
            f"spec.tpu.topology: {topology!r} is not a {tpu_type} topology; "
            f"use one of {family.describe()}"
        )
    return SliceShape(family, topology)


def all_shapes() -> list[SliceShape]:
    """Every shape of the catalog, type by type in catalog order."""
    return [SliceShape(family, topology)
            for family in CATALOG.values() for topology in family.topologies]


# The most VMs (hosts) in one catalog slice (tpu7x 16x24x24: 2,304).
MAX_VMS_PER_SLICE = max(shape.vms for shape in all_shapes())
