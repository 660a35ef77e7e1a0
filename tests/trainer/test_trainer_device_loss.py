"""The trainer's Pathways backend under Google's own fault model: pathwaysutils'
`DeviceLossSimulator` (tests/support/device_loss.py) makes every array that touched a lost
device raise DATA_LOSS when read, for good, through jit and every primitive; pathwaysutils'
own health check finds the lost slice by it. A slice lost mid-step, during a save, during
a restore, and lost and back before the trainer looks: each run ends bitwise equal to an
undisturbed one. And a step that hangs while a slice is down: the stall blames that slice
(slice_health.py), the trainer asks for its replacement and the event names the hang.

One process, pause and resume (every slice needed: the mesh and so the arithmetic never
change); the runs share a persistent compilation cache, so only the first compiles.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache

from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.compose import build_trainer
from elastic_trainer.configs import get_config
from elastic_trainer.data import SyntheticSource
from elastic_trainer.events import RunResult
from elastic_trainer.loop import LoopOptions
from elastic_trainer.watchdog import WatchdogOptions
from tests.support.device_loss import Fault, FaultsOnPathways, LosableSlices

SLICES, PER_SLICE, STEPS, CHECKPOINT_PERIOD = 2, 2, 12, 4
SIMULATED_ERROR = "DATA_LOSS: Simulated device loss error"  # pathwaysutils' own text
CACHE_OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                 "jax_persistent_cache_min_entry_size_bytes")


@pytest.fixture(scope="module", autouse=True)
def compilation_cache_for_the_module(tmp_path_factory: pytest.TempPathFactory
                                     ) -> Iterator[None]:
    before = {name: getattr(jax.config, name) for name in CACHE_OPTIONS}
    jax.config.update("jax_compilation_cache_dir",
                      str(tmp_path_factory.mktemp("device-loss-cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    compilation_cache.reset_cache()
    yield
    for name, value in before.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


def run(devices: Sequence[Any], tmp: Path, faults: Sequence[Fault], *,
        snapshot_period: int = 2, watchdog: WatchdogOptions | None = None,
        settle_before_loss: bool = False, standby: int = 0) -> RunResult:
    """The bundled trainer on the real PathwaysBackend over 2 slices x 2 CPU devices
    (and `standby` more standing by), under the simulator, with `faults` played."""
    cfg = get_config("tiny")
    opts = LoopOptions(steps=STEPS, batch=8, seed=0, elastic_timeout=120, max_retries=5,
                       snapshot_period=snapshot_period, log_every=10**6,
                       watchdog=watchdog or WatchdogOptions(), standby_slices=standby)
    with LosableSlices(devices, SLICES + standby, PER_SLICE) as hw:
        backend = FaultsOnPathways(hw, faults)
        backend.health_timeout = 60.0  # an idle CPU slice answers at once; no silent one
        trainer = build_trainer(cfg, opts, backend,
                                SyntheticSource(0, 8, cfg.seq_len, cfg.vocab_size),
                                Checkpointer(str(tmp / "ckpt"), period=CHECKPOINT_PERIOD,
                                             keep=3))
        if settle_before_loss:
            backend.before_loss = trainer.snapshots.settle
        try:
            result = trainer.run()
        finally:
            backend.close()
    assert backend.faults == [], f"faults never played: {backend.faults}"
    assert result.failure is None, result.failure
    assert result.final_step == STEPS
    return result


@pytest.fixture(scope="module")
def undisturbed(cpu_devices: list[Any], tmp_path_factory: pytest.TempPathFactory) -> str:
    result = run(cpu_devices, tmp_path_factory.mktemp("undisturbed"), [])
    assert result.events == []
    return result.params_digest


def test_a_slice_lost_mid_step(cpu_devices: list[Any], tmp_path: Path,
                               undisturbed: str) -> None:
    # Slice 1 goes while step 7 runs, and is back (replaced) while the trainer waits.
    result = run(cpu_devices, tmp_path, [Fault("step", 7, "lose", 1),
                                         Fault("wait", 2, "return later", 1)])
    [event] = result.events
    # The simulator's error, raised where the trainer reads a loss; the health check
    # (pathwaysutils' own, under the simulator) names the slice.
    assert event.error.startswith(SIMULATED_ERROR)
    assert event.slices_down == [1]
    assert event.wait_seconds is not None and event.wait_seconds > 0
    # The snapshot of step 6 was in flight: lost whole, unless published just before.
    assert event.restored_from_step in (4, 6)
    assert result.params_digest == undisturbed


def test_a_slice_lost_during_a_save(cpu_devices: list[Any], tmp_path: Path,
                                    undisturbed: str) -> None:
    # No snapshots: the recovery is from a checkpoint. Slice 1 goes as the save of step 8
    # starts, before the save has read the state.
    result = run(cpu_devices, tmp_path, [Fault("save", 8, "lose", 1),
                                         Fault("wait", 2, "return later", 1)],
                 snapshot_period=0)
    [event] = result.events
    assert event.slices_down == [1]
    # Not a write failure: the save of step 8 never committed, step 4's was restored.
    assert result.checkpoint_write_failures == 0
    assert (event.restore_source, event.restored_from_step) == ("checkpoint", 4)
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name[0].isdigit())
    assert names == ["12", "4", "8"], names  # step 8 written again, nothing uncommitted
    assert result.params_digest == undisturbed


def test_a_slice_lost_during_a_restore(cpu_devices: list[Any], tmp_path: Path,
                                       undisturbed: str) -> None:
    # Slice 1 goes at step 7; as the next attempt's restore starts, slice 0 goes too.
    result = run(cpu_devices, tmp_path, [
        Fault("step", 7, "lose", 1), Fault("wait", 2, "return later", 1),
        Fault("restore", 2, "lose", 0), Fault("wait", 3, "return later", 0)])
    first, second = result.events
    assert first.resumed_at is None  # its restore failed: it never resumed
    assert (first.slices_down, second.slices_down) == ([1], [0])
    # Every replica of any snapshot is gone with one slice or the other.
    assert second.restore_source == "checkpoint"
    assert result.params_digest == undisturbed


def test_a_slice_lost_and_back_before_the_trainer_looks(cpu_devices: list[Any],
                                                        tmp_path: Path,
                                                        undisturbed: str) -> None:
    # Slice 1 goes and is back within step 7, the snapshot of step 6 published before.
    result = run(cpu_devices, tmp_path, [Fault("step", 7, "lose", 1),
                                         Fault("step", 7, "return", 1)],
                 settle_before_loss=True)
    [event] = result.events
    # Sticky: what it held is lost although it is back, so step 6's loss raises; by the
    # time the trainer asks, every slice answers the health check: no slice to name.
    assert event.error.startswith(SIMULATED_ERROR)
    assert event.slices_down == []
    # Its replica of the snapshot went with it; slice 0's restores.
    assert (event.restore_source, event.restored_from_step) == ("snapshot", 6)
    assert result.params_digest == undisturbed


def test_a_snapshot_every_step_restores_the_step_before_the_loss(
        cpu_devices: list[Any], tmp_path: Path, undisturbed: str) -> None:
    # A copy after every step: slice 1 goes while step 7 runs, once step 6's copy is
    # published (on hardware it is done long before the step), so only step 7 is redone.
    result = run(cpu_devices, tmp_path, [Fault("step", 7, "lose", 1),
                                         Fault("wait", 2, "return later", 1)],
                 snapshot_period=1, settle_before_loss=True)
    [event] = result.events
    assert (event.restore_source, event.restored_from_step, event.steps_lost) == (
        "snapshot", 6, 0)
    assert result.params_digest == undisturbed


def test_a_copy_in_flight_when_the_slice_goes_falls_back_one_step(
        cpu_devices: list[Any], tmp_path: Path, undisturbed: str) -> None:
    # Step 6's copy is in flight as slice 1 goes: lost whole unless published just before
    # (the Snapshotter publishes every replica or none), and then step 5's is restored:
    # the copy of step 6 was made only once step 5's was published (two host copies).
    result = run(cpu_devices, tmp_path, [Fault("step", 7, "lose", 1),
                                         Fault("wait", 2, "return later", 1)],
                 snapshot_period=1)
    [event] = result.events
    assert event.restore_source == "snapshot" and event.restored_from_step in (5, 6)
    assert result.params_digest == undisturbed


def test_a_step_hung_on_a_slice_pathways_has_down_blames_it(cpu_devices: list[Any],
                                                            tmp_path: Path,
                                                            undisturbed: str) -> None:
    # Slice 1 goes and the step does not come back: the watchdog's stall asks each slice
    # to run a program; slice 1 answers DATA_LOSS, slice 0 runs it.
    result = run(cpu_devices, tmp_path, [Fault("step", 7, "hang", 1),
                                         Fault("wait", 2, "return later", 1)],
                 snapshot_period=0, watchdog=WatchdogOptions(factor=3, floor_seconds=2))
    [stall] = [s for s in result.stalls if s["suspectSlices"]]
    assert stall["suspectSlices"] == [1]
    assert "slice 1 failed it with a slice-down error" in stall["evidence"]
    assert "slice 0 ran it" in stall["evidence"]
    assert [r["slices"] for r in result.slice_replacements] == [[1]]
    [event] = result.events
    assert event.error.startswith("SliceHung: slice 1 hung in step")
    assert event.slices_down == [1]
    assert result.params_digest == undisturbed


def test_a_standby_takes_the_lost_slices_place_at_once(cpu_devices: list[Any],
                                                       tmp_path: Path,
                                                       undisturbed: str) -> None:
    # Three slices, one standing by (issue 80 item 1): slice 1 goes while step 7 runs;
    # slice 2, running and healthy, takes its place with no wait; slice 1 is back at
    # step 10 and stands by (the mesh is not changed again).
    result = run(cpu_devices, tmp_path, [Fault("step", 7, "lose", 1),
                                         Fault("step", 10, "return", 1)],
                 snapshot_period=1, settle_before_loss=True, standby=1)
    [event] = result.events
    assert event.error.startswith(SIMULATED_ERROR)
    assert (event.slices_down, event.standby_swap, event.active_slices_after) == (
        [1], True, 2)
    assert event.wait_seconds is not None and event.wait_seconds < 5
    assert (event.restore_source, event.restored_from_step) == ("snapshot", 6)
    assert result.params_digest == undisturbed
