"""Snapshots per replica (orbax's Pathways Snapshotter) on a simulation where memory lives
on slices: a lost slice takes its share of the state and its snapshot replica with it."""
from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from elastic_trainer.backends import SimulatedBackend
from elastic_trainer.simulated_faults import Fault, FaultSchedule
from elastic_trainer.snapshots import NoSurvivingReplica, ReplicaSnapshots
from elastic_trainer.train import FSDP_AXIS, make_mesh

SLICES, PER_SLICE = 2, 2


def _backend(faults: list[Fault]) -> SimulatedBackend:
    backend = SimulatedBackend(SLICES, PER_SLICE, FaultSchedule(faults, duration=0.01))
    assert backend.wait_for_slices(SLICES, timeout=10) == {0, 1}
    return backend


def _state(mesh: Any) -> dict[str, Any]:
    """Sharded within a slice (fsdp), replicated across slices, as the trainer's state."""
    rng = np.random.default_rng(0)
    return {"w": jax.device_put(rng.normal(size=(8, 6)).astype(np.float32),
                                NamedSharding(mesh, P(FSDP_AXIS, None))),
            "step": jax.device_put(np.int32(12), NamedSharding(mesh, P()))}


def _target(state: dict[str, Any], mesh: Any) -> Any:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
        x.shape, x.dtype, sharding=NamedSharding(mesh, x.sharding.spec)), state)


def _host(tree: Any) -> Any:
    return jax.tree.map(lambda x: np.array(x, copy=True), jax.device_get(tree))


def _lose(backend: SimulatedBackend, step: int, still_up: int) -> None:
    """Run `step` (its faults fire), then start the next attempt: the lost slices' memory
    is gone."""
    backend.on_phase("step", step)
    assert backend.wait_for_slices(still_up, timeout=10)


def test_each_slice_holds_a_full_replica_in_pinned_host_memory(cpu_devices: list[Any]
                                                               ) -> None:
    backend = _backend([])
    mesh = make_mesh(backend.slice_devices([0, 1]))
    snapshots = ReplicaSnapshots()
    state = _state(mesh)
    before = {id(a) for a in jax.live_arrays()}
    snapshots.take(12, state)
    assert snapshots.settle() == 12
    new = [a for a in jax.live_arrays() if id(a) not in before]
    for slice_devices in backend.slice_devices([0, 1]):
        replica = [a for a in new if a.sharding.memory_kind == "pinned_host"
                   and a.sharding.device_set == set(slice_devices)]
        assert sorted(a.shape for a in replica) == [(), (8, 6)]


def test_one_slice_lost_restores_from_the_surviving_replica(cpu_devices: list[Any]) -> None:
    backend = _backend([Fault(13, 1)])
    mesh = make_mesh(backend.slice_devices([0, 1]))
    state = _state(mesh)
    expected = _host(state)
    snapshots = ReplicaSnapshots()
    snapshots.take(12, state)
    snapshots.settle()
    _lose(backend, 13, still_up=1)
    # The live state had shards on slice 1: it is gone, as on hardware.
    assert all(x.is_deleted() for x in jax.tree.leaves(state))
    # Replica resize: onto the surviving slice; pause and resume: onto both again.
    for slices in ([0], [0, 1]):
        restored = snapshots.restore(_target(state, make_mesh(backend.slice_devices(slices))))
        assert restored["w"].sharding.mesh.devices.shape == (len(slices), PER_SLICE)
        jax.tree.map(np.testing.assert_array_equal, _host(restored), expected)


def test_the_simulation_refuses_a_restore_that_needs_a_lost_replica(
        cpu_devices: list[Any]) -> None:
    # Every slice lost at once: no replica survives, so the snapshot cannot be restored
    # (on Pathways the copies died with the hosts); the loop falls back to a checkpoint.
    backend = _backend([Fault(13, 0), Fault(13, 1)])
    mesh = make_mesh(backend.slice_devices([0, 1]))
    state = _state(mesh)
    snapshots = ReplicaSnapshots()
    snapshots.take(12, state)
    snapshots.settle()
    _lose(backend, 13, still_up=2)
    with pytest.raises(NoSurvivingReplica, match="no replica of the snapshot survived"):
        snapshots.restore(_target(state, mesh))
    # ...and it is never tried again.
    assert snapshots.latest_step() is None and snapshots.discarded == 1


def test_a_discarded_snapshot_is_gone_and_the_next_one_works(cpu_devices: list[Any]) -> None:
    backend = _backend([])
    mesh = make_mesh(backend.slice_devices([0, 1]))
    snapshots = ReplicaSnapshots()
    snapshots.take(4, _state(mesh))
    snapshots.settle()
    snapshots.discard("its restore failed")
    assert snapshots.latest_step() is None
    state = _state(mesh)
    snapshots.take(6, state)
    assert snapshots.settle() == 6
    jax.tree.map(np.testing.assert_array_equal,
                 _host(snapshots.restore(_target(state, mesh))), _host(state))
