"""Restart in place or recreate (core/inplace.py): one test per row of the table
docs/api.md prints, each fed the evidence core/blame.py derives from the pods and nodes
that row is about, and the rows' order and wording against the docs."""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from elastic_api.conditions import Reason
from elastic_api.models import RecoverySpec, SliceReplacement
from elastic_operator.core import inplace
from elastic_operator.core.blame import slice_evidence
from elastic_operator.core.hung import reported_evidence
from elastic_operator.core.sliceview import SliceView
from elastic_operator.model.objects import ObservedNode, ObservedPod
from tests.builders import WorkerPod, at, tpu_node

ROOT = Path(__file__).resolve().parents[2]
RECOVERY = RecoverySpec()
HARDWARE = RecoverySpec(hardware_exit_codes=[42], hardware_reasons=["TPUHealthCheckFailed"])


def nodes(*, pool_of_0: str = "tpu-1", **node: ObservedNode) -> dict[str, ObservedNode]:
    """The slice's two hosts' nodes, healthy unless given."""
    out = {f"tpu-1-{h}": tpu_node(f"tpu-1-{h}") for h in range(2)}
    out.update(node)
    return out


def case(pods: Sequence[ObservedPod], node_map: dict[str, ObservedNode] | None = None, *,
         recovery: RecoverySpec = RECOVERY, reason: str = Reason.POD_FAILED,
         restarted_unseen: bool = False, quarantined: bool = False) -> inplace.Row:
    """The row the table gives for a slice (slice 1, hosts 0 and 1) with `pods`."""
    view = SliceView.of(pods, node_map or nodes())
    evidence = slice_evidence(view.broken, view.nodes, recovery)
    failure = inplace.Failure(evidence=evidence, reason=reason, broken=view.broken,
                              pool_quarantined=quarantined, restarted_unseen=restarted_unseen)
    return inplace.decide(failure, recovery)


def healthy(host: int) -> WorkerPod:
    return WorkerPod(1, host)


def test_node_not_ready_recreates() -> None:
    row = case([healthy(0).container_exited(at(10)).build(), healthy(1).build()],
               nodes(**{"tpu-1-0": tpu_node("tpu-1-0", ready=False, status="False")}))
    assert (row.case, row.placement) == ("NodeNotReady", "Recreate")


def test_a_node_gone_recreates() -> None:
    pods = [healthy(0).build(), healthy(1).build()]
    row = case(pods, {"tpu-1-1": tpu_node("tpu-1-1")})  # tpu-1-0 deleted
    assert (row.case, row.placement) == ("NodeNotReady", "Recreate")


def test_unhealthy_chips_recreate() -> None:
    sick = tpu_node("tpu-1-0", tpu_capacity=4, tpu_allocatable=2)
    row = case([healthy(0).container_exited(at(10)).build(), healthy(1).build()],
               nodes(**{"tpu-1-0": sick}))
    assert (row.case, row.placement) == ("DeviceUnhealthy", "Recreate")


def test_the_nodes_lifecycle_ending_a_pod_recreates() -> None:
    pod = healthy(0).failed(at(10)).disrupted("DeletionByTaintManager").build()
    row = case([pod, healthy(1).build()])
    assert (row.case, row.placement) == ("NodeDisruption", "Recreate")


def test_maintenance_recreates() -> None:
    stopping = tpu_node("tpu-1-0", maintenance_ongoing=True)
    row = case([healthy(0).container_exited(at(10)).build(), healthy(1).build()],
               nodes(**{"tpu-1-0": stopping}))
    assert (row.case, row.placement) == ("Maintenance", "Recreate")


def test_a_slow_slice_the_trainer_blames_recreates() -> None:
    row = case([healthy(0).build(), healthy(1).build()], reason=Reason.SLICE_SLOW)
    assert (row.case, row.placement) == ("SliceSlow", "Recreate")


def test_a_hung_slice_the_trainer_blames_recreates() -> None:
    view = SliceView.of([healthy(0).build(), healthy(1).build()], nodes())
    failure = inplace.Failure(evidence=reported_evidence(Reason.SLICE_HUNG, "step 9"),
                              reason=Reason.SLICE_HUNG, broken=view.broken)
    row = inplace.decide(failure, RECOVERY)
    assert (row.case, row.placement) == ("SliceHung", "Recreate")


@pytest.mark.parametrize("pod", [
    healthy(0).container_exited(at(10), exit_code=42).build(),
    healthy(0).container_exited(at(10), reason="TPUHealthCheckFailed").build(),
], ids=["hardware-exit-code", "hardware-reason"])
def test_a_hardware_code_the_job_declares_recreates(pod: ObservedPod) -> None:
    row = case([pod, healthy(1).build()], recovery=HARDWARE)
    assert (row.case, row.placement) == ("HardwareReported", "Recreate")


def test_a_quarantined_pool_recreates() -> None:
    row = case([healthy(0).container_exited(at(10)).build(), healthy(1).build()],
               quarantined=True)
    assert (row.case, row.placement) == ("PoolQuarantined", "Recreate")


@pytest.mark.parametrize("pod", [
    healthy(0).failed(at(10)).build(),
    healthy(0).evicted("the node was low on memory").build(),
    healthy(0).deleting(at(10)).build(),
], ids=["failed", "evicted", "deleted"])
def test_a_pod_that_ended_recreates(pod: ObservedPod) -> None:
    row = case([pod, healthy(1).build()])
    assert (row.case, row.placement) == ("PodEnded", "Recreate")


def test_one_host_restarting_and_another_ended_recreates() -> None:
    row = case([healthy(0).container_exited(at(10)).build(), healthy(1).failed(at(10)).build()])
    assert (row.case, row.placement) == ("PodEnded", "Recreate")


def test_a_host_lost_between_two_looks_recreates() -> None:
    row = case([healthy(0).build(), healthy(1).build()], reason=Reason.HOST_LOST)
    assert (row.case, row.placement) == ("PodEnded", "Recreate")


def test_a_pod_running_but_not_ready_recreates() -> None:
    row = case([healthy(0).not_ready(at(10)).build(), healthy(1).build()],
               reason=Reason.HOST_NOT_READY)
    assert (row.case, row.placement) == ("HostNotReady", "Recreate")


def test_in_place_off_recreates() -> None:
    row = case([healthy(0).container_exited(at(10)).build(), healthy(1).build()],
               recovery=RecoverySpec(restart_in_place=False),
               reason=Reason.CONTAINER_RESTARTING)
    assert (row.case, row.placement) == ("InPlaceOff", "Recreate")


def test_a_worker_process_that_exited_on_a_healthy_node_restarts_in_place() -> None:
    row = case([healthy(0).container_exited(at(10), exit_code=1).build(),
                healthy(1).container_exited(at(10), exit_code=137).build()],
               recovery=HARDWARE, reason=Reason.CONTAINER_RESTARTING)
    assert (row.case, row.placement) == ("ProcessExited", "InPlace")
    assert row.in_place


def test_a_restart_no_look_saw_counts_in_place() -> None:
    row = case([healthy(0).restarted_in_place(at(10)).build(), healthy(1).build()],
               reason=Reason.CONTAINER_RESTARTING, restarted_unseen=True)
    assert (row.case, row.placement) == ("RestartedUnseen", "InPlace")


def test_a_restart_in_place_not_back_within_the_deadline_recreates() -> None:
    record = SliceReplacement(action="RestartInPlace", reason=Reason.CONTAINER_RESTARTING,
                              requested_at=at(10))
    deadline = RecoverySpec(in_place_deadline_seconds=30)
    assert not inplace.timed_out(record, deadline, at(39))
    assert inplace.due_in(record, deadline, at(39)) == pytest.approx(1.0)
    assert inplace.timed_out(record, deadline, at(40))
    assert inplace.BY_CASE["InPlaceTimedOut"].placement == "Recreate"
    replace = record.model_copy(update={"action": "Replace"})
    assert not inplace.timed_out(replace, deadline, at(400))
    assert inplace.due_in(replace, deadline, at(10)) is None


def test_every_row_has_a_test_and_the_docs_print_the_table_in_order() -> None:
    """Each case is asserted above, and docs/api.md lists the same cases, in the same
    order, with the same placement."""
    source = Path(__file__).read_text()
    for row in inplace.ROWS:
        assert f'"{row.case}"' in source, f"no test for the row {row.case}"
    api = (ROOT / "docs" / "api.md").read_text()
    section = api.split("### Restart in place or move", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \| ([\w ]+?) \|", section, flags=re.M)
    words = {"InPlace": "in place", "Recreate": "recreated"}
    assert documented == [(row.case, words[row.placement]) for row in inplace.ROWS]
