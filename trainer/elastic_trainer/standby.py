"""Standby slices (issue 80 item 1): slices already running, their workers registered with
the resource manager, held out of the mesh, and swapped in at once when a slice of the mesh
is lost (no scheduling, no boot, no waiting).

The backend sees N + k slices; the job trains on N of them (its mesh) and keeps k healthy
ones aside. The choice is a policy of its own:

    StandbyPolicy    which N of the healthy slices make the mesh (those of the last mesh
                     still healthy first, then the others, lowest index first), which are
                     standbys, which standbys joined in place of lost slices (a swap), and
                     whether slices that come back may join the mesh: only while it is
                     short of N (replica resize after the standbys ran out); else they are
                     the next standbys, and the mesh is not changed again
    StandbySlices    the Backend the loop sees: the backend's N + k slices as a job of N
                     (`total_slices` N, so the micro-batches, the retry's wait, the
                     compile ahead and the goodput's "fewer slices" count the mesh's N),
                     each attempt's mesh chosen by the policy and told to the backend
                     (`use_slices`), the slices that come back held out while the mesh is
                     whole

A swap keeps the mesh's shape: its step is loaded from the executable store
(executables.py, keyed by the mesh's shape), not compiled; the state comes from the
surviving replicas' snapshot (snapshots.py), as for any slice loss. k = 0: no wrapper at
all (`with_standbys`), the loop as it always was.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_trainer.backends import Backend, WriteHook

log = logging.getLogger("elastic_trainer")


@dataclass(frozen=True)
class MeshChoice:
    """One attempt's slices: the mesh, the standbys, and the standbys that joined the mesh
    in place of slices it lost (empty: no swap)."""

    mesh: frozenset[int]
    standby: frozenset[int]
    swapped_in: frozenset[int]


class StandbyPolicy:
    """Which of the healthy slices train (`mesh_slices` of them) and which stand by. Pure:
    it sees slice indices, never devices."""

    def __init__(self, mesh_slices: int, standby_slices: int) -> None:
        if mesh_slices < 1:
            raise ValueError(f"a mesh needs at least 1 slice, got {mesh_slices}")
        if standby_slices < 0:
            raise ValueError(f"--standby-slices must be >= 0, got {standby_slices}")
        self.mesh_slices, self.standby_slices = mesh_slices, standby_slices
        self.mesh: frozenset[int] = frozenset()  # the last mesh chosen

    def choose(self, healthy: Iterable[int]) -> MeshChoice:
        """The next mesh from `healthy`: the last mesh's slices still healthy (they keep
        their place), topped up to `mesh_slices` from the others, lowest index first."""
        up = set(healthy)
        kept = sorted(self.mesh & up)
        others = sorted(up - self.mesh)
        mesh = frozenset((kept + others)[:self.mesh_slices])
        lost = self.mesh - mesh
        swapped = frozenset(mesh - self.mesh) if lost else frozenset()
        self.mesh = mesh
        return MeshChoice(mesh, frozenset(up - mesh), swapped)

    def may_grow(self, active: Iterable[int]) -> bool:
        """Whether slices that come back may join the mesh: only while it is short."""
        return len(set(active)) < self.mesh_slices

    def standbys(self, healthy: Iterable[int]) -> set[int]:
        """The healthy slices held out of the mesh."""
        return set(healthy) - self.mesh


def with_standbys(backend: Backend, standby_slices: int) -> Backend:
    """`backend` with `standby_slices` of its slices held out of the mesh; itself at 0."""
    if standby_slices == 0:
        return backend
    return StandbySlices(backend, standby_slices)


class StandbySlices:
    """Backend: `backend`'s slices as a job of `total_slices - standby_slices`, the rest
    standing by (module docstring); everything else is `backend`'s."""

    def __init__(self, backend: Backend, standby_slices: int) -> None:
        mesh_slices = backend.total_slices - standby_slices
        if mesh_slices < 1:
            raise ValueError(
                f"--standby-slices {standby_slices} leaves no slice for the mesh: the "
                f"backend has {backend.total_slices}")
        self.inner = backend
        self.policy = StandbyPolicy(mesh_slices, standby_slices)
        self.name, self.devices_per_slice = backend.name, backend.devices_per_slice
        self.total_slices = mesh_slices  # the job's slices: the mesh when whole
        self.last: MeshChoice | None = None

    def wait_for_slices(self, count: int, timeout: float | None) -> set[int]:
        healthy = self.inner.wait_for_slices(count, timeout)
        choice = self.last = self.policy.choose(healthy)
        self.inner.use_slices(set(choice.mesh))
        if choice.swapped_in:
            log.info("standby slice(s) %s swapped into the mesh %s; standing by: %s",
                     sorted(choice.swapped_in), sorted(choice.mesh), sorted(choice.standby))
        else:
            log.info("mesh %s; standing by: %s", sorted(choice.mesh), sorted(choice.standby))
        return set(choice.mesh)

    def swapped_in(self) -> list[int]:
        """The standbys the last attempt's mesh took in place of lost slices."""
        return [] if self.last is None else sorted(self.last.swapped_in)

    def standby_count(self) -> int:
        """How many slices stand by now (healthy, out of the mesh)."""
        return len(self.policy.standbys(self.inner.healthy_slices()))

    def returned_slices(self, active: set[int]) -> set[int]:
        if not self.policy.may_grow(active):
            return set()  # the mesh is whole: slices back are the next standbys
        return self.inner.returned_slices(active)

    def failed_slices(self, err: BaseException) -> tuple[list[int], float | None]:
        down, at = self.inner.failed_slices(err)
        # A standby down meanwhile is not a slice the mesh lost.
        return [s for s in down if s in self.policy.mesh], at

    # --- the backend's own -------------------------------------------------------------

    def start(self) -> None:
        self.inner.start()

    def slice_devices(self, slices: Sequence[int]) -> list[list[Any]]:
        return self.inner.slice_devices(slices)

    def healthy_slices(self) -> set[int]:
        return self.inner.healthy_slices()

    def use_slices(self, slices: set[int]) -> None:
        self.inner.use_slices(slices)

    def default_device(self) -> Any:
        return self.inner.default_device()

    def check(self, active: set[int]) -> None:
        self.inner.check(active)

    def on_phase(self, phase: str, step: int) -> None:
        self.inner.on_phase(phase, step)

    def step_result(self, step: int, loss: Any) -> Any:
        return self.inner.step_result(step, loss)

    def checkpoint_write_hook(self, active: set[int]) -> WriteHook | None:
        return self.inner.checkpoint_write_hook(active)

    def wait_step(self, step: int, active: set[int]) -> None:
        self.inner.wait_step(step, active)

    def blame(self) -> tuple[list[int], str]:
        return self.inner.blame()

    def replace_slices(self, slices: list[int]) -> bool:
        return self.inner.replace_slices(slices)

    def slice_parts(self) -> list[dict[int, float]] | None:
        return self.inner.slice_parts()

    def on_elastic_event(self) -> None:
        self.inner.on_elastic_event()

    def close(self) -> None:
        self.inner.close()


def swapped_in(backend: Backend) -> list[int]:
    """The standbys `backend`'s last mesh took in place of lost slices ([] without any)."""
    return backend.swapped_in() if isinstance(backend, StandbySlices) else []
