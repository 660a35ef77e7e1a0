"""Standby slices (issue 80 item 1, the trainer's side): the policy that picks the mesh
from the healthy slices and holds the rest out, pure; then runs on the simulated backend
with a standby that is swapped in when a slice of the mesh is lost."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from elastic_trainer import backends, train_cli
from elastic_trainer.backends import SimulatedBackend
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.compose import build_trainer
from elastic_trainer.configs import get_config
from elastic_trainer.data import SyntheticSource
from elastic_trainer.events import RunResult
from elastic_trainer.loop import LoopOptions, Trainer
from elastic_trainer.simulated_faults import Fault, FaultSchedule
from elastic_trainer.standby import MeshChoice, StandbyPolicy, StandbySlices, with_standbys
from tests.support.trainer_run import RunTrainer, TrainerRun

STEPS = 16


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


class _Slices:
    """A backend's slice bookkeeping, no devices: what StandbySlices asks of it."""

    name, total_slices, devices_per_slice = "fake", 3, 2

    def __init__(self) -> None:
        self.healthy, self.used = {0, 1, 2}, set[int]()

    def wait_for_slices(self, count: int, timeout: float | None) -> set[int]:
        return set(self.healthy)

    def use_slices(self, slices: set[int]) -> None:
        self.used = set(slices)

    def healthy_slices(self) -> set[int]:
        return set(self.healthy)

    def returned_slices(self, active: set[int]) -> set[int]:
        return self.healthy - active

    def failed_slices(self, err: BaseException) -> tuple[list[int], float | None]:
        return sorted({0, 1, 2} - self.healthy), None


def test_the_loop_sees_a_job_of_the_mesh_and_the_backend_is_told_the_mesh() -> None:
    inner: Any = _Slices()
    assert with_standbys(inner, 0) is inner  # no standbys: the backend as it is
    backend = StandbySlices(inner, 1)
    assert (backend.total_slices, backend.name, backend.devices_per_slice) == (2, "fake", 2)
    assert backend.wait_for_slices(2, None) == {0, 1} and inner.used == {0, 1}
    assert backend.standby_count() == 1 and backend.swapped_in() == []
    # The whole mesh: slice 2 is healthy and out of it, yet no slice is "back".
    assert backend.returned_slices({0, 1}) == set()
    # Slice 1 and the standby both down: the mesh lost slice 1 only.
    inner.healthy = {0}
    assert backend.failed_slices(RuntimeError()) == ([1], None)
    assert backend.wait_for_slices(1, None) == {0} and inner.used == {0}
    inner.healthy = {0, 2}
    assert backend.returned_slices({0}) == {2}  # a short mesh grows again
    assert backend.wait_for_slices(1, None) == {0, 2} and backend.swapped_in() == []
    with pytest.raises(ValueError, match="leaves no slice for the mesh"):
        StandbySlices(inner, 3)


# --- runs on the simulated backend: 2 slices in the mesh, 1 standing by ------------------


def _run(tmp: Path, slices: int, faults: list[Fault], *, standby: int,
         min_slices: int | None = None) -> tuple[RunResult, Trainer]:
    cfg = get_config("tiny")
    # A copy every step: a swap restores the step before the loss from the survivor's
    # replica. The overhead budget is small so that nothing is compiled ahead in a run
    # this short: each compile counted is the loop's own.
    opts = LoopOptions(steps=STEPS, batch=8, seed=0, min_slices=min_slices,
                       standby_slices=standby, elastic_timeout=60, max_retries=5,
                       snapshot_period=1, log_every=10**6, overhead_budget_percent=0.1)
    trainer = build_trainer(cfg, opts, SimulatedBackend(slices, 2, FaultSchedule(faults)),
                            SyntheticSource(0, 8, cfg.seq_len, cfg.vocab_size),
                            Checkpointer(str(tmp / "ckpt"), period=100, keep=2))
    try:
        result = trainer.run()
    finally:
        trainer.backend.close()
    assert result.failure is None and result.final_step == STEPS, result.failure
    return result, trainer


@pytest.fixture(scope="module")
def undisturbed_digest(cpu_devices: list[Any], tmp_path_factory: pytest.TempPathFactory) -> str:
    result, _ = _run(tmp_path_factory.mktemp("undisturbed"), 2, [], standby=0)
    assert result.events == []
    return result.params_digest


@pytest.mark.parametrize("min_slices", [None, 1], ids=["pause-and-resume", "replica-resize"])
def test_a_lost_slice_is_swapped_for_the_standby_without_a_compile(
        tmp_path: Path, undisturbed_digest: str, min_slices: int | None) -> None:
    # Slice 1 (of the mesh) goes at step 5 and is back at step 8: a standby from then on.
    # Slice 2 (swapped in for it) goes at step 11 and is back at step 14.
    result, trainer = _run(tmp_path, 3, [Fault(5, 1, back_at_step=8),
                                         Fault(11, 2, back_at_step=14)],
                           standby=1, min_slices=min_slices)
    # Two slice losses, each swapped for the standby at once: the mesh keeps its two
    # slices, and the slice back in between is the next standby, not pulled back into
    # the mesh (no scale up, in replica resize either).
    assert [e.kind for e in result.events] == ["slice_down", "slice_down"]
    assert [e.slices_down for e in result.events] == [[1], [2]]
    assert [e.standby_swap for e in result.events] == [True, True]
    assert [e.active_slices_after for e in result.events] == [2, 2]
    assert all(e.wait_seconds is not None and e.wait_seconds < 1 for e in result.events)
    assert [e.restore_source for e in result.events] == ["snapshot", "snapshot"]
    assert isinstance(trainer.backend, StandbySlices)
    assert trainer.backend.last is not None
    assert trainer.backend.last.mesh == {0, 1} and trainer.backend.last.swapped_in == {1}
    assert trainer.backend.policy.standbys({0, 1, 2}) == {2}
    # One compile, the first mesh's: the first swap's mesh (slices 0 and 2) is loaded
    # from the executable store, the second's (0 and 1 again) is the first mesh's step.
    assert (trainer.steps.compiled, trainer.steps.loaded) == (1, 1)
    assert result.events[0].summary()["standby_swap"] is True
    assert "a standby slice swapped in" in result.events[0].log_line()
    # The same parameters as the run on two slices that lost none.
    assert result.params_digest == undisturbed_digest


def test_a_standby_lost_costs_nothing_and_none_left_is_as_without(
        tmp_path: Path) -> None:
    # The standby goes at step 3 (no event: it is not in the mesh), then slice 1 at step
    # 6 with no standby healthy: replica resize goes on on slice 0 alone, as without a
    # standby, and scales up when slice 2 is back at step 9.
    result, _ = _run(tmp_path, 3, [Fault(3, 2, back_at_step=9), Fault(6, 1)],
                     standby=1, min_slices=1)
    assert [(e.kind, e.standby_swap) for e in result.events] == [
        ("slice_down", False), ("scale_up", False)]
    assert [e.active_slices_after for e in result.events] == [1, 2]
    assert result.events[0].slices_down == [1]


# --- `etj train --standby-slices` ---------------------------------------------------------


def _args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    train_cli.add_arguments(parser)
    return parser.parse_args(["--steps", "10", "--checkpoint-dir", "/tmp/x", *flags])


@pytest.mark.parametrize(("flags", "says"), [
    (["--standby-slices", "-1"], "--standby-slices must be >= 0"),
    (["--standby-slices", "2"], "--standby-slices 2 leaves no slice of --simulate-slices 2"),
    (["--simulate-slices", "3", "--standby-slices", "1", "--min-slices", "3"],
     "--min-slices 3 exceeds the mesh's 2 slice(s)"),
])
def test_bad_standby_flags_name_the_flag(flags: list[str], says: str) -> None:
    assert (train_cli._validate(_args(*flags)) or "").startswith(says)


def test_the_flag_else_the_env_else_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(train_cli.STANDBY_ENV, raising=False)
    assert train_cli.standby_slices(_args()) == 0
    monkeypatch.setenv(train_cli.STANDBY_ENV, "1")
    assert train_cli.standby_slices(_args("--simulate-slices", "3")) == 1
    assert train_cli.standby_slices(_args("--standby-slices", "0")) == 0
    monkeypatch.setenv(train_cli.STANDBY_ENV, "one")
    assert "is not a number of slices" in (train_cli._validate(_args()) or "")


def test_on_pathways_the_standbys_are_counted_against_the_slices_it_has(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class TwoSlices:
        total_slices = 2

    monkeypatch.setattr(backends, "PathwaysBackend", TwoSlices)
    made = train_cli._make_backend(_args("--backend", "pathways", "--standby-slices", "1"),
                                   None)
    assert isinstance(made, TwoSlices)
    code, says = train_cli._make_backend(
        _args("--backend", "pathways", "--standby-slices", "2"), None)
    assert (code, says) == (2, "--standby-slices 2 leaves no slice for the mesh: Pathways "
                               "has 2")


def test_etj_train_swaps_in_its_standby_bit_exactly(run_trainer: RunTrainer,
                                                    undisturbed: TrainerRun,
                                                    tmp_path: Path) -> None:
    # Three simulated slices, one standing by (told by the env, as a pod's would be):
    # slice 1 goes at step 13 and slice 2 takes its place at once, its step loaded from
    # the executable store (a store of its own: the session's has the first mesh's).
    run = run_trainer("--simulate-slices", "3", "--fail-at", "13:1",
                      "--snapshot-period", "2", "--compilation-cache", str(tmp_path),
                      env={train_cli.STANDBY_ENV: "1"})
    assert run.returncode == 0, run.log[-4000:]
    [event] = run.events()
    assert (event["slices_down"], event["standby_swap"]) == ([1], True)
    assert event["active_slices_after"] == 2 and run.summary["standby_slices"] == 1
    assert "standby slice(s) [2] swapped into the mesh [0, 2]" in run.log
    assert run.log.count("compiled in") == 1
    assert run.log.count("loaded from the executable store") == 1
    assert run.summary["params_digest"] == undisturbed.summary["params_digest"]
