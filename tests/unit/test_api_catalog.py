"""The TPU catalog (api/elastic_api/catalog.py): the shapes GKE and Cloud TPU document,
what each needs of a node, and the size of the largest jobs' status against etcd's
1.5 MiB object limit (the cap on spec.tpu.numSlices; docs/api.md, "How many slices")."""
from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from elastic_api.catalog import CATALOG, MAX_VMS_PER_SLICE, all_shapes, cubes, slice_shape
from elastic_api.models import (
    MAX_SLICES,
    MAX_SPARES,
    CheckpointRequest,
    Condition,
    CountedFailures,
    ElasticEventReport,
    ElasticTrainingJobStatus,
    PendingEvent,
    PoolFailure,
    PoolStatus,
    RecoveryRecord,
    ReplacementRecord,
    SliceMaintenance,
    SliceReplacement,
    SliceStatus,
    SliceStepTime,
    StallReport,
    TrainingReport,
)

ETCD_OBJECT_LIMIT = 1536 * 1024  # etcd's default --max-request-bytes, 1.5 MiB
T = datetime(2026, 12, 6, tzinfo=UTC)


@pytest.mark.parametrize(("tpu_type", "topology", "chips", "vms", "machine_type"), [
    ("v5p", "16x16x24", 6144, 1536, "ct5p-hightpu-4t"),  # the largest single slice
    ("v5p", "8x8x16", 1024, 256, "ct5p-hightpu-4t"),
    ("v4", "12x16x16", 3072, 768, "ct4p-hightpu-4t"),  # v4's largest slice
    ("v5e", "16x16", 256, 64, "ct5lp-hightpu-4t"),
    ("v5e", "2x2", 4, 1, "ct5lp-hightpu-4t"),  # single-host
    ("v5e", "1x1", 1, 1, "ct5lp-hightpu-1t"),
    ("v6e", "8x16", 128, 32, "ct6e-standard-4t"),
    ("v6e", "1x1", 1, 1, "ct6e-standard-1t"),
    ("tpu7x", "16x24x24", 9216, 2304, "tpu7x-standard-4t"),  # the whole Ironwood pod
])
def test_documented_shapes(tpu_type: str, topology: str, chips: int, vms: int,
                           machine_type: str) -> None:
    shape = slice_shape(tpu_type, topology)
    assert (shape.chips, shape.vms, shape.machine_type) == (chips, vms, machine_type)


def test_every_shape_is_whole_vms_of_its_family() -> None:
    for shape in all_shapes():
        assert shape.chips == shape.vms * shape.chips_per_vm
        assert shape.chips_per_vm in (1, shape.family.chips_per_vm)
        assert shape.pathways_instance_type == \
            f"{shape.family.pathways_instance_type}:{shape.topology}"
    assert [t for t, f in CATALOG.items() if f.workload_policy] == ["tpu7x"]


def test_an_unknown_topology_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"'8x8x9' is not a v5p topology; use one of 2x2x1, "
                       r".*, 8x8x16, .*, 16x16x24, or AxBxC with each a multiple of 4 up to "
                       r"256, A <= B <= C, of at most 140 cubes of 4x4x4 \(A/4 x B/4 x C/4\)$"):
        slice_shape("v5p", "8x8x9")
    with pytest.raises(ValueError, match=r"'4x4x4' is not a v6e topology; use one of 1x1, "
                       r"2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16$"):
        slice_shape("v6e", "4x4x4")


# --- the catalog against xpk's list ------------------------------------------------------

# xpk's topologies by type, as data (where they come from: the file's header).
XPK = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "fixtures" / "xpk-topologies.yaml").read_text())
# What xpk offers that the catalog refuses, and why: nothing today. A refusal added here
# must say why in the message slice_shape gives (the test checks it is refused).
REFUSED: dict[tuple[str, str], str] = {}
# What the catalog admits beyond xpk's list, and why.
BEYOND_XPK = {
    # GKE's v5e table: 1x1 (ct5lp-hightpu-1t) and the single-host 2x2 (ct5lp-hightpu-4t),
    # which xpk's v5litepod list leaves out.
    "v5e": {"1x1", "2x2"},
}


def test_every_topology_xpk_offers_is_admitted_or_refused_with_a_reason() -> None:
    assert set(XPK) == set(CATALOG)
    for tpu_type, topologies in XPK.items():
        for topology in topologies:
            if (tpu_type, topology) in REFUSED:
                with pytest.raises(ValueError, match=REFUSED[(tpu_type, topology)]):
                    slice_shape(tpu_type, topology)
            else:
                shape = slice_shape(tpu_type, topology)
                assert shape.vms * shape.chips_per_vm == shape.chips


def test_the_catalog_is_xpks_list_and_gkes_table() -> None:
    assert {t: len(f.topologies) for t, f in CATALOG.items()} == {
        "v5e": 8, "v5p": 414, "v6e": 8, "v4": 800, "tpu7x": 433}
    for tpu_type, family in CATALOG.items():
        assert len(set(family.topologies)) == len(family.topologies)
        assert set(family.topologies) - set(XPK[tpu_type]) == BEYOND_XPK.get(tpu_type, set())
        # Google's table keeps its order first (bench and messages name its shapes).
        assert family.topologies[:len(family.listed)] == family.listed


@pytest.mark.parametrize(("tpu_type", "topology", "admitted"), [
    ("v5p", "4x4x12", True), ("v5p", "4x8x12", True), ("v5p", "4x4x20", True),  # the issue's
    ("v5p", "4x20x112", True),  # 140 cubes: the whole v5p pod, 8,960 chips
    ("v5p", "4x4x256", True), ("v5p", "4x4x260", False),  # each side at most 256
    ("v5p", "16x24x24", False),  # 144 cubes
    ("v5p", "8x4x4", False), ("v4", "8x4x4", True),  # only v4 takes any order
    ("v4", "16x16x16", True), ("v4", "16x16x20", False),  # v4: 64 cubes
    ("tpu7x", "16x24x24", True), ("tpu7x", "24x24x24", False),  # tpu7x: 144 cubes
    ("tpu7x", "1x1x1", True), ("tpu7x", "4x4x6", False), ("v5p", "2x2x3", False),
    ("v5p", "04x4x4", False), ("v5p", "4x4x4x4", False), ("v6e", "4x4x4", False),
])
def test_the_3d_rule(tpu_type: str, topology: str, admitted: bool) -> None:
    assert CATALOG[tpu_type].admits(topology) is admitted
    if not admitted:
        with pytest.raises(ValueError, match=f"'{topology}' is not a {tpu_type} topology"):
            slice_shape(tpu_type, topology)


def test_the_largest_slices_stay_within_the_bounds_of_before() -> None:
    # v5p's pod (140 cubes, 2,240 VMs) is below tpu7x's (144, 2,304): MAX_VMS_PER_SLICE
    # and every bound derived from it are those of before.
    assert MAX_VMS_PER_SLICE == 2304
    assert max(s.vms for s in all_shapes() if s.family.type == "v5p") == 2240
    # Every shape of more than 64 VMs is whole cubes (the CEL bound is computed from them).
    for shape in all_shapes():
        assert shape.vms <= 64 or shape.vms == 16 * cubes(shape.topology)
    assert slice_shape("tpu7x", "1x1x1").machine_type == "tpu7x-standard-1t"


# --- the job's status at the largest sizes -------------------------------------------------


def _pool(i: int) -> str:
    return f"gke-tpu-v5e-16x16-pool-{i:04d}-abcdef"


def _slice(i: int, *, failing: bool) -> SliceStatus:
    s = SliceStatus(index=i, state="Ready", ready_hosts=64, hosts=64, restarts=3, moves=1,
                    reason="PodFailed", message="m" * 120, last_transition_time=T,
                    pool=_pool(i), counted=CountedFailures(job_uid="u" * 36, failed_pods=5),
                    last_replacement=ReplacementRecord(
                        action="Replace", reason="NodeNotReady", requested_at=T, ready_at=T,
                        seconds=12.5, from_pool=_pool(i), to_pool=_pool(i + 1), blame="Node"))
    if failing:  # mid-replacement, on a pool under maintenance, in a TAS domain
        s.domain = "d" * 40
        s.replacement = SliceReplacement(action="Replace", reason="NodeNotReady",
                                         job_uid="u" * 36, from_pool=_pool(i), requested_at=T,
                                         blame="Node", evidence="e" * 200)
        s.maintenance = SliceMaintenance(pool=_pool(i), signal="ScheduledMaintenance",
                                         scheduled_at=T, noticed_at=T, request_id=3)
    return s


def status_bytes(slices: int, spares: int, *, failing: bool) -> int:
    """The status the operator and trainer write for a job of this many slices, as JSON
    (built unvalidated: twice the cap is past the schema's maxItems, measured as a size):
    as a run goes, or with every slice failing at once (each mid-replacement, every pool
    quarantined with the 20 failures kept, an Event per slice in the outbox)."""
    everyone = list(range(slices))
    pools = [PoolStatus(name=_pool(i),
                        failures=[PoolFailure(at=T, blame="Node", reason="NodeNotReady")]
                        * (20 if failing else 1),
                        quarantined="NodeNotReady" if failing else None,
                        quarantined_at=T if failing else None,
                        quarantine_cause="c" * 200 if failing else None)
             for i in range(slices + spares)]
    training = TrainingReport.model_construct(
        observed_at=T, state="Training", step=123456, total_steps=10**6, loss=1.2345,
        step_seconds=3.2,
        slice_step_times=[SliceStepTime(slice=i, seconds=3.14159, relative=1.00123)
                          for i in everyone],
        stall=StallReport.model_construct(step=1, phase="Step", started_at=T, detected_at=T,
                          deadline_seconds=30, suspect_slices=everyone, evidence="e" * 512)
        if failing else None,
        elastic_event=ElasticEventReport.model_construct(id=1, phase="Resumed", detected_at=T,
                                         slices_down=everyone if failing else [3]))
    status = ElasticTrainingJobStatus.model_construct(
        observed_generation=1, phase="Running", jobset_name="record", slices_desired=slices,
        slices_ready=slices, slices=[_slice(i, failing=failing) for i in everyone],
        conditions=[Condition(type=f"C{i}", status="True", reason="Reason", message="m" * 300,
                              last_transition_time=T, observed_generation=1)
                    for i in range(16)],
        pools=pools, training=training,
        pending_events=[PendingEvent(name="n" * 60, reason="SliceFailed", type="Warning",
                                     message="m" * 200)
                        for _ in range(slices if failing else 3)],
        last_recovery=RecoveryRecord.model_construct(detected_at=T,
                                                     slices=everyone if failing else [3]),
        checkpoint_request=CheckpointRequest.model_construct(
            id=1, reason="Maintenance", slices=everyone if failing else [1], requested_at=T,
            deadline=T, pause=True, phase="Requested"))
    wire = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return len(json.dumps(wire, separators=(",", ":")))


def test_the_record_jobs_status_is_far_below_etcds_limit() -> None:
    # 199 slices of v5e 16x16 (the largest reported run): about 170 KiB as it goes.
    assert status_bytes(199, 0, failing=False) < ETCD_OBJECT_LIMIT // 8
    assert status_bytes(199, 0, failing=True) < ETCD_OBJECT_LIMIT // 2


def test_the_slice_cap_is_where_the_status_still_fits_with_every_slice_failing() -> None:
    at_cap = status_bytes(MAX_SLICES, MAX_SPARES, failing=True)
    assert at_cap < ETCD_OBJECT_LIMIT * 2 // 3  # about 971 KiB
    assert status_bytes(2 * MAX_SLICES, MAX_SPARES, failing=True) > ETCD_OBJECT_LIMIT
