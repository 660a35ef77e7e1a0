"""The real `PathwaysBackend` and retry loop on CPU, against a real pathwaysutils `Manager`
whose hardware is fake: CPU devices grouped into slices that the test takes down and
brings back. pathwaysutils' health probe (`elastic.get_active_slice_indices`, a pmap per
slice on TPU) is the one thing replaced; the Manager's own code (its active-set setter,
`available_inactive_slices`, its monitor thread, `default_device`, `elastic_retry`) runs
as it is. The reference for every decision is `Manager.elastic_retry` itself, run on the
same fake hardware.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import pytest
from pathwaysutils.elastic import elastic, manager

from elastic_trainer.backends import PathwaysBackend
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.compose import build_trainer
from elastic_trainer.configs import get_config
from elastic_trainer.data import SyntheticSource
from elastic_trainer.errors import ElasticRetriesExhausted, ScaleUpSignal, slice_down_error
from elastic_trainer.loop import LoopOptions
from elastic_trainer.retry import SliceLossLimit, run_elastic

SLICES, PER_SLICE = 2, 2
POLL = 0.01  # the monitor thread's and wait_for_slices' poll interval


class FakeSlices:
    """The hardware: which slices are up. Thread-safe (the monitor thread asks too)."""

    def __init__(self, devices: Sequence[Any]) -> None:
        self.slice_to_devices = {i: list(devices[i * PER_SLICE:(i + 1) * PER_SLICE])
                                 for i in range(SLICES)}
        self._down: set[int] = set()
        self._lock = threading.Lock()

    def take_down(self, index: int) -> None:
        with self._lock:
            self._down.add(index)

    def bring_back(self, index: int) -> None:
        with self._lock:
            self._down.discard(index)

    def is_down(self, index: int) -> bool:
        with self._lock:
            return index in self._down

    def probe(self, slice_to_devices: Mapping[int, Sequence[Any]] | None = None,
              checker: Any = None) -> frozenset[int]:
        """pathwaysutils' health check, answered by the fake hardware."""
        with self._lock:
            return frozenset(i for i in (slice_to_devices or {}) if i not in self._down)


@pytest.fixture
def hardware(cpu_devices: list[Any], monkeypatch: pytest.MonkeyPatch) -> FakeSlices:
    hw = FakeSlices(cpu_devices)
    monkeypatch.setattr(elastic, "get_active_slice_indices", hw.probe)
    return hw


def real_manager(hw: FakeSlices) -> manager.Manager:
    """pathwaysutils' Manager, built on no devices, then given the fake slices through its
    public attributes (CPU devices have no `slice_index` to group them by)."""
    m = manager.Manager(devices=[])
    m.slice_to_devices = hw.slice_to_devices
    m.all_slice_indices = frozenset(hw.slice_to_devices)
    m.active_slice_indices = hw.probe(hw.slice_to_devices)
    return m


def _until(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL)


@dataclass
class Script:
    """One attempt function for both retry loops: each call records (active slices,
    default device) and plays the next action: ("lose", slice), ("return", slice) (the
    slice comes back; once the loop sees it, scale up) or ("finish",)."""

    hw: FakeSlices
    m: manager.Manager
    actions: list[tuple[Any, ...]]
    returned: Callable[[], set[int]]
    scale_up: type[Exception]
    calls: list[tuple[frozenset[int], Any]] = field(default_factory=list)

    def __call__(self, *_: Any) -> str:
        self.calls.append((frozenset(self.m.active_slice_indices),
                           jax.config.jax_default_device))
        action = self.actions[len(self.calls) - 1]
        if action[0] == "lose":
            self.hw.take_down(action[1])
            raise slice_down_error([action[1]])
        if action[0] == "return":
            self.hw.bring_back(action[1])
            _until(lambda: action[1] in self.returned(), "the monitor to see the slice")
            raise self.scale_up()
        return "done"


LOSS_RETURN_LOSS = [("lose", 1), ("return", 1), ("lose", 0), ("finish",)]


def _with_elastic_retry(hw: FakeSlices, actions: list[tuple[Any, ...]],
                        policy: Any) -> tuple[Script, BaseException | None]:
    m = real_manager(hw)
    script = Script(hw, m, actions, lambda: set(m.available_inactive_slices),
                    manager.ScaleUpSignalError)
    run = m.elastic_retry(minimum_slice_count=1, poll_interval=POLL, timeout=30,
                          retry_policy=policy)(script)
    try:
        assert run() == "done"
    except manager.ElasticRuntimeError as err:
        return script, err
    return script, None


def _with_ours(hw: FakeSlices, actions: list[tuple[Any, ...]],
               policy: Any) -> tuple[Script, BaseException | None]:
    m = real_manager(hw)
    backend = PathwaysBackend(poll_interval=POLL, manager=m)
    script = Script(hw, m, actions,
                    lambda: backend.returned_slices(set(m.active_slice_indices)),
                    ScaleUpSignal)

    class Quiet:
        def __getattr__(self, name: str) -> Callable[..., None]:
            return lambda *args, **kwargs: None

    backend.start()
    try:
        assert run_elastic(backend, script, policy=policy, min_slices=1, timeout=30,
                           hooks=Quiet()) == "done"
    except ElasticRetriesExhausted as err:
        return script, err
    finally:
        backend.close()
    return script, None


def test_loss_return_loss_again_as_elastic_retry_does_it(hardware: FakeSlices) -> None:
    reference, ref_error = _with_elastic_retry(hardware, LOSS_RETURN_LOSS,
                                               manager.ElasticRetryLimit(10))
    for index in range(SLICES):
        hardware.bring_back(index)
    ours, error = _with_ours(hardware, LOSS_RETURN_LOSS, manager.ElasticRetryLimit(10))
    assert ref_error is None and error is None
    # The same active set before each attempt, and the same default device in it.
    assert ours.calls == reference.calls
    d = hardware.slice_to_devices
    assert ours.calls == [(frozenset({0, 1}), d[0][0]), (frozenset({0}), d[0][0]),
                          (frozenset({0, 1}), d[0][0]), (frozenset({1}), d[1][0])]


@pytest.mark.parametrize("attempts", [1, 2, 3, 4])
def test_retry_counting_is_identical_with_elastic_retry_limit(hardware: FakeSlices,
                                                              attempts: int) -> None:
    reference, ref_error = _with_elastic_retry(hardware, LOSS_RETURN_LOSS,
                                               manager.ElasticRetryLimit(attempts))
    for index in range(SLICES):
        hardware.bring_back(index)
    ours, error = _with_ours(hardware, LOSS_RETURN_LOSS, manager.ElasticRetryLimit(attempts))
    # ElasticRetryLimit(n) allows n attempts in all, the scale-up's included.
    assert len(ours.calls) == len(reference.calls) == min(attempts, 4)
    assert (error is None) == (ref_error is None) == (attempts == 4)


def test_the_default_policy_counts_slice_losses_only(hardware: FakeSlices) -> None:
    # The documented difference (docs/trainer.md, "Retries"): --max-retries 2 allows two
    # slice losses; the scale-up between them is free. ElasticRetryLimit(3) stops here.
    ours, error = _with_ours(hardware, LOSS_RETURN_LOSS, SliceLossLimit(2))
    assert error is None and len(ours.calls) == 4
    for index in range(SLICES):
        hardware.bring_back(index)
    policy = SliceLossLimit(1)
    ours, error = _with_ours(hardware, LOSS_RETURN_LOSS, policy)
    assert isinstance(error, ElasticRetriesExhausted) and len(ours.calls) == 3
    assert str(error).startswith("2 elastic events, --max-retries is 1")


def test_stale_available_inactive_slices_never_cause_a_scale_up(hardware: FakeSlices) -> None:
    m = real_manager(hardware)
    backend = PathwaysBackend(poll_interval=3600, manager=m)  # the monitor never polls
    hardware.take_down(1)
    assert backend.wait_for_slices(1, timeout=10) == {0}
    assert backend.returned_slices({0}) == set()
    # The monitor's last poll saw slice 1 healthy; it has gone down again since.
    m.available_inactive_slices = frozenset({1})
    assert backend.returned_slices({0}) == set()
    assert m.available_inactive_slices == frozenset()
    # Really back: then it counts.
    hardware.bring_back(1)
    m.available_inactive_slices = frozenset({1})
    assert backend.returned_slices({0}) == {1}
    # Each attempt starts with none left over (as elastic_retry resets them).
    assert backend.wait_for_slices(1, timeout=10) == {0, 1}
    assert m.available_inactive_slices == frozenset()


class PathwaysOnCpu(PathwaysBackend):
    """What the Pathways runtime does by itself, played by the fake hardware: a step on a
    mesh with a lost slice raises DATA_LOSS, and the slice's memory is gone (its share of
    the state and its snapshot replica). Faults fire when a given step runs: ("lose", i),
    ("return", i) (the monitor reports it at once), ("lose when full", i) (at the first
    step from then on that runs on every slice)."""

    def __init__(self, hw: FakeSlices, faults: list[tuple[int, str, int]]) -> None:
        super().__init__(poll_interval=POLL, manager=real_manager(hw))
        self.hw, self.faults = hw, faults
        self.default_devices: dict[frozenset[int], set[Any]] = {}
        self.lost: set[int] = set()

    def on_phase(self, phase: str, step: int) -> None:
        if phase != "step" or not self.faults or step < self.faults[0][0]:
            return
        _, action, index = self.faults[0]
        if action == "lose when full" and len(self.manager.active_slice_indices) < SLICES:
            return
        self.faults.pop(0)
        if action == "return":
            self.hw.bring_back(index)
            self.manager.available_inactive_slices = frozenset({index})
        else:
            self.hw.take_down(index)

    def check(self, active: set[int]) -> None:
        self.default_devices.setdefault(frozenset(active), set()).add(
            jax.config.jax_default_device)
        lost = sorted(i for i in active if self.hw.is_down(i))
        if lost:
            self.lost.update(lost)
            raise slice_down_error(lost)

    def wait_for_slices(self, count: int, timeout: float | None) -> set[int]:
        # By the next attempt the lost slices' memory is gone (as SimulatedBackend has it).
        devices = {d for i in self.lost for d in self.hw.slice_to_devices[i]}
        for array in jax.live_arrays():
            if not array.is_deleted() and array.sharding.device_set & devices:
                array.delete()
        self.lost.clear()
        return super().wait_for_slices(count, timeout)


def test_the_training_loop_on_the_pathways_backend(hardware: FakeSlices, tmp_path: Any
                                                   ) -> None:
    backend = PathwaysOnCpu(hardware, [(7, "lose", 1), (11, "return", 1),
                                       (15, "lose when full", 0)])
    cfg = get_config("tiny")
    opts = LoopOptions(steps=24, batch=8, seed=0, min_slices=1, elastic_timeout=30,
                       max_retries=5, snapshot_period=2, log_every=10**6)
    trainer = build_trainer(cfg, opts, backend,
                            SyntheticSource(0, 8, cfg.seq_len, cfg.vocab_size),
                            Checkpointer(str(tmp_path / "ckpt"), period=10, keep=2))
    try:
        result = trainer.run()
    finally:
        backend.close()
    assert result.failure is None and result.final_step == 24
    down1, up, down0 = result.events
    assert (down1.kind, down1.slices_down, down1.failed_step) == ("slice_down", [1], 6)
    assert (down1.restore_source, down1.restored_from_step, down1.active_slices_after) == (
        "snapshot", 6, 1)
    assert (up.kind, up.failed_step, up.steps_lost, up.active_slices_after) == (
        "scale_up", 11, 0, 2)
    # Slice 0 held a replica of the snapshot; slice 1's survived it.
    assert (down0.slices_down, down0.restore_source, down0.active_slices_after) == (
        [0], "snapshot", 1)
    assert down0.steps_lost is not None and 0 <= down0.steps_lost <= 2  # a period at most
    # Every step ran with the default device on a slice of its mesh, as elastic_retry sets.
    d = hardware.slice_to_devices
    assert backend.default_devices[frozenset({0})] == {d[0][0]}
    assert backend.default_devices[frozenset({1})] == {d[1][0]}


def test_the_persistent_compilation_cache_stays_off_on_pathways(tmp_path: Any) -> None:
    import argparse

    from elastic_trainer.train_cli import setup_compilation_cache

    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache)
    args = argparse.Namespace(compilation_cache=str(tmp_path / "cache"),
                              checkpoint_dir=str(tmp_path / "ckpt"))
    said = setup_compilation_cache(args, "pathways")
    assert "JAX persistent cache off" in said
    assert (jax.config.jax_compilation_cache_dir,
            jax.config.jax_enable_compilation_cache) == before
