"""The checkpointer: finalized steps only, failed writes survived, in-flight saves kept."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.elastic import slice_down_error


def _state(value: float) -> dict[str, Any]:
    return {"step": jnp.array(int(value), jnp.int32), "w": jnp.full((8,), value, jnp.float32)}


def _target() -> Any:
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                        _state(0))


def _wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.01)


def test_failed_write_is_survived_and_never_restored(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), period=2, keep=3)

    def lose_step_4(step: int) -> None:
        if step == 4:
            raise slice_down_error([1], "went down during the checkpoint write")

    ckpt.write_hook = lose_step_4
    assert ckpt.save(2, _state(2))
    assert ckpt.save(4, _state(4))
    ckpt.settle()  # waits for step 4's save, records its failure, deletes its directory
    assert ckpt.write_failures == 1
    assert ckpt.latest_committed_step() == 2
    assert ckpt.incomplete_steps() == []
    # The same step can be written again, and later saves work (no stale entry).
    ckpt.write_hook = None
    assert ckpt.save(4, _state(4.5))
    assert ckpt.save(6, _state(6))
    ckpt.wait()
    assert ckpt.latest_committed_step() == 6
    restored = ckpt.restore(4, _target())
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.full((8,), 4.5, np.float32))
    ckpt.close()


def test_a_failure_of_the_previous_async_save_does_not_fail_the_next(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), period=1, keep=5)

    def fail(step: int) -> None:
        if step == 1:
            raise slice_down_error([0])

    ckpt.write_hook = fail
    ckpt.save(1, _state(1))
    _wait_for(lambda: not ckpt._manager.is_saving_in_progress())
    assert ckpt.save(2, _state(2))
    ckpt.wait()
    assert ckpt.write_failures == 1
    assert ckpt.latest_committed_step() == 2
    assert not (tmp_path / "1").exists()
    ckpt.close()


def test_settle_never_deletes_a_save_in_flight(tmp_path: Path) -> None:
    (tmp_path / "3.orbax-checkpoint-tmp").mkdir()  # left by an earlier process
    ckpt = Checkpointer(str(tmp_path), period=1, keep=3, settle_timeout=0.2)
    release = threading.Event()
    entered = threading.Event()

    def slow_write(step: int) -> None:
        entered.set()
        release.wait(30)

    ckpt.write_hook = slow_write
    assert ckpt.save(5, _state(5))
    entered.wait(30)
    deleted = ckpt.settle()  # the save of step 5 is still running: only step 3 goes
    assert deleted == [3]
    assert ckpt.incomplete_steps() == [5]
    release.set()
    ckpt.wait()
    assert ckpt.latest_committed_step() == 5
    assert ckpt.write_failures == 0
    ckpt.close()


def test_restore_refuses_an_unfinalized_step(tmp_path: Path) -> None:
    (tmp_path / "7.orbax-checkpoint-tmp").mkdir()
    ckpt = Checkpointer(str(tmp_path), period=1, keep=3)
    assert ckpt.latest_committed_step() is None
    with pytest.raises(ValueError, match="not finalized"):
        ckpt.restore(7, _target())
    assert ckpt.settle() == [7]
    ckpt.close()


def test_bad_settings_name_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--checkpoint-period"):
        Checkpointer(str(tmp_path), period=0, keep=1)
    with pytest.raises(ValueError, match="--checkpoint-keep"):
        Checkpointer(str(tmp_path), period=1, keep=0)
