"""The checkpointer: finalized steps only; a slice lost during a save is an elastic event,
any other failed write is survived; waits on a save are bounded, a hung save abandoned."""
from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.errors import CheckpointDirectoryGone, slice_down_error


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


def _lose_slice_1(step: int) -> None:
    raise slice_down_error([1], "went down during the checkpoint write")


def test_a_save_cut_by_a_slice_loss_is_an_elastic_event_not_a_write_failure(
        tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), period=2, keep=3)
    assert ckpt.save(2, _state(2))
    assert ckpt.save(4, _state(4), write_hook=_lose_slice_1)
    # The next save finds the previous one cut by the loss and raises it to the loop.
    with pytest.raises(jax.errors.JaxRuntimeError, match="DATA_LOSS: slice 1 went down"):
        ckpt.save(6, _state(6))
    ckpt.settle()  # what the loop does after the event: step 4's directory goes
    assert ckpt.write_failures == 0
    assert ckpt.latest_committed_step() == 2
    assert ckpt.incomplete_steps() == []
    # The same step can be written again, and later saves work (no stale entry).
    assert ckpt.save(4, _state(4.5))
    assert ckpt.save(6, _state(6))
    ckpt.wait()
    assert ckpt.latest_committed_step() == 6
    restored = ckpt.restore(4, _target())
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.full((8,), 4.5, np.float32))
    ckpt.close()


def test_a_synchronous_save_cut_by_a_slice_loss_raises_at_once(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), period=1, keep=3, async_save=False)
    with pytest.raises(jax.errors.JaxRuntimeError, match="DATA_LOSS"):
        ckpt.save(1, _state(1), write_hook=_lose_slice_1)
    assert ckpt.settle() == [1]
    assert ckpt.write_failures == 0 and ckpt.latest_committed_step() is None
    ckpt.close()


def test_another_failed_write_is_counted_and_training_goes_on(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), period=1, keep=5)

    def storage_error(step: int) -> None:
        raise OSError(5, "Input/output error")

    assert ckpt.save(1, _state(1), write_hook=storage_error)
    assert ckpt.save(2, _state(2))  # collects step 1's failure first; not raised
    ckpt.wait()
    assert ckpt.write_failures == 1
    assert ckpt.latest_committed_step() == 2
    assert not (tmp_path / "1").exists()
    ckpt.close()


def test_a_hung_save_is_abandoned_never_waited_for_past_the_timeout(tmp_path: Path) -> None:
    (tmp_path / "3.orbax-checkpoint-tmp").mkdir()  # left by an earlier process
    ckpt = Checkpointer(str(tmp_path), period=1, keep=3, settle_timeout=0.2)
    release, entered = threading.Event(), threading.Event()

    def hang(step: int) -> None:
        entered.set()
        release.wait(120)

    try:
        assert ckpt.save(5, _state(5), write_hook=hang)
        assert entered.wait(30)
        deleted = ckpt.settle()  # step 5's save is abandoned: only step 3 goes
        assert deleted == [3] and ckpt.abandoned_steps == [5]
        assert ckpt.incomplete_steps() == [5]
        # A fresh manager saves other steps while the abandoned save still hangs, given
        # the time a real save needs (0.2 s abandoned step 6's too at load 20: a
        # fresh-clone make test beside an hour-long benchmark)...
        ckpt.settle_timeout = 60.0
        assert ckpt.save(6, _state(6))
        ckpt.wait()
        assert ckpt.latest_committed_step() == 6 and not release.is_set()
        # ...never step 5 again (its abandoned write may still land), and close() returns.
        assert not ckpt.save(5, _state(5))
        ckpt.close()
        assert not release.is_set()
    finally:
        release.set()
    # Left alone, the abandoned save finishes by itself.
    _wait_for(lambda: (tmp_path / "5").exists())
    assert ckpt.write_failures == 0


def test_restore_refuses_an_unfinalized_step(tmp_path: Path) -> None:
    (tmp_path / "7.orbax-checkpoint-tmp").mkdir()
    ckpt = Checkpointer(str(tmp_path), period=1, keep=3)
    assert ckpt.latest_committed_step() is None
    with pytest.raises(ValueError, match="not finalized"):
        ckpt.restore(7, _target())
    assert ckpt.settle() == [7]
    ckpt.close()


def test_directories_the_rule_does_not_commit_neither_block_nor_crowd_out_a_save(
        tmp_path: Path) -> None:
    """An empty `30/` (orbax alone takes any local directory for a step) and a `20/`
    without commit_success.txt are not committed: settle deletes them and orbax lists its
    steps again, so step 30 is saved (orbax would refuse it as existing) and max_to_keep
    keeps real steps."""
    first = Checkpointer(str(tmp_path), period=10, keep=2, async_save=False)
    assert first.save(10, _state(10))
    first.close()
    (tmp_path / "30").mkdir()
    (tmp_path / "20").mkdir()
    (tmp_path / "20" / "_CHECKPOINT_METADATA").write_text("{}")
    ckpt = Checkpointer(str(tmp_path), period=10, keep=2, async_save=False)
    assert ckpt.latest_committed_step() == 10 and ckpt.incomplete_steps() == [20, 30]
    assert ckpt.settle() == [20, 30]
    assert ckpt.save(20, _state(20)) and ckpt.save(30, _state(30))
    assert ckpt.write_failures == 0
    assert ckpt.listing().committed == (20, 30)
    restored = ckpt.restore(30, _target())
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.full((8,), 30.0, np.float32))
    ckpt.close()


def test_a_checkpoint_directory_that_vanishes_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    ckpt = Checkpointer(str(root), period=1, keep=3, async_save=False)
    assert ckpt.save(1, _state(1))
    shutil.rmtree(root)
    for call in (lambda: ckpt.save(2, _state(2)), ckpt.settle, ckpt.latest_committed_step):
        with pytest.raises(CheckpointDirectoryGone, match=f"--checkpoint-dir {root} "
                           "disappeared during the run"):
            call()
    # Deleted and created again (orbax creates missing parents) is gone all the same.
    fresh = Checkpointer(str(tmp_path / "other"), period=1, keep=3, async_save=False)
    shutil.rmtree(tmp_path / "other")
    (tmp_path / "other").mkdir()
    with pytest.raises(CheckpointDirectoryGone):
        fresh.save(1, _state(1))


def test_bad_settings_name_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--checkpoint-period"):
        Checkpointer(str(tmp_path), period=0, keep=1)
    with pytest.raises(ValueError, match="--checkpoint-keep"):
        Checkpointer(str(tmp_path), period=1, keep=0)
