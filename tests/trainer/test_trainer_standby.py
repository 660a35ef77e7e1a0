"""Standby slices (issue 80 item 1, the trainer's side): the policy that picks the mesh
from the healthy slices and holds the rest out, pure; then runs on the simulated backend
with a standby that is swapped in when a slice of the mesh is lost."""
from __future__ import annotations

import pytest

from elastic_trainer.standby import MeshChoice, StandbyPolicy


def _choice(mesh: set[int], standby: set[int], swapped: set[int] = frozenset()
            ) -> MeshChoice:
    return MeshChoice(frozenset(mesh), frozenset(standby), frozenset(swapped))


def test_the_first_mesh_is_the_lowest_slices_and_the_rest_stand_by() -> None:
    policy = StandbyPolicy(2, 1)
    assert policy.choose({0, 1, 2}) == _choice({0, 1}, {2})
    assert policy.mesh == {0, 1}
    assert policy.standbys({0, 1, 2}) == {2}


def test_a_lost_slice_is_swapped_for_a_standby_and_the_survivors_keep_their_place() -> None:
    policy = StandbyPolicy(2, 2)
    policy.choose({0, 1, 2, 3})
    assert policy.choose({0, 2, 3}) == _choice({0, 2}, {3}, {2})
    # Slice 1 is back: a standby now, the mesh as it was (no second re-mesh).
    assert policy.choose({0, 1, 2, 3}) == _choice({0, 2}, {1, 3})
    # The next loss takes the lowest standby, the returned slice among them.
    assert policy.choose({1, 2, 3}) == _choice({1, 2}, {3}, {1})


def test_slices_back_join_only_a_mesh_short_of_its_size() -> None:
    policy = StandbyPolicy(2, 1)
    policy.choose({0, 1, 2})
    assert not policy.may_grow({0, 1})
    # Two slices lost, one standby: the mesh shrinks (replica resize) with the standby in.
    assert policy.choose({0, 2}) == _choice({0, 2}, set(), {2})
    assert policy.choose({0}) == _choice({0}, set())
    assert policy.may_grow({0})
    # A slice back while the mesh is short: it joins, and it is no swap (nothing lost).
    assert policy.choose({0, 1}) == _choice({0, 1}, set())
    assert policy.choose({0, 1, 2}) == _choice({0, 1}, {2})


def test_a_slice_that_blinked_keeps_its_place_no_swap() -> None:
    policy = StandbyPolicy(2, 1)
    policy.choose({0, 1, 2})
    # Slice 1 went down and is back before the wait: the mesh is unchanged.
    assert policy.choose({0, 1, 2}) == _choice({0, 1}, {2})


def test_without_standbys_the_mesh_is_every_healthy_slice() -> None:
    policy = StandbyPolicy(3, 0)
    assert policy.choose({0, 1, 2}) == _choice({0, 1, 2}, set())
    assert policy.choose({0, 2}) == _choice({0, 2}, set())


@pytest.mark.parametrize(("mesh", "standby"), [(0, 1), (2, -1)])
def test_counts_out_of_range_are_refused(mesh: int, standby: int) -> None:
    with pytest.raises(ValueError):
        StandbyPolicy(mesh, standby)
