"""scan_checkpoints on directories written by a real Orbax CheckpointManager (local path),
so the layout the installed Orbax really writes is the one we understand."""
from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import jax.numpy as jnp
import orbax.checkpoint as ocp

from elastic_operator.checkpoints.listing import COMMIT_MARKER, scan_checkpoints_detailed

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def save_steps(directory: Path, steps: list[int], max_to_keep: int) -> list[int]:
    """Save a small pytree at each step; return the steps Orbax itself reports."""
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep)
    with ocp.CheckpointManager(directory, options=options) as manager:
        for step in steps:
            state = {"w": jnp.full((4, 4), float(step)), "b": jnp.arange(3) + step}
            manager.save(step, args=ocp.args.StandardSave(state))
        manager.wait_until_finished()
        return sorted(manager.all_steps())


def test_real_orbax_steps_are_committed(tmp_path: Path) -> None:
    orbax_steps = save_steps(tmp_path, [0, 10, 20, 30], max_to_keep=3)
    assert orbax_steps == [10, 20, 30]
    # The installed Orbax writes the marker on local paths too (before the rename).
    assert all((tmp_path / str(s) / COMMIT_MARKER).exists() for s in orbax_steps)

    summary = scan_checkpoints_detailed(str(tmp_path), now=NOW)
    assert summary.status.error is None
    assert summary.committed_steps == orbax_steps
    assert summary.status.latest_committed_step == 30
    assert summary.status.incomplete_steps == []
    assert summary.ignored_entries == []


def test_real_orbax_tmp_dir_of_an_unfinished_save_is_incomplete(tmp_path: Path) -> None:
    from etils import epath
    from orbax.checkpoint._src.path import atomicity

    save_steps(tmp_path, [1, 2], max_to_keep=5)
    # What Orbax does at the start of a save of step 3 (the rename comes at the end):
    # the same call, so the tmp directory's name is Orbax's own, not our guess.
    tmp = atomicity.AtomicRenameTemporaryPath.from_final(epath.Path(tmp_path / "3"))
    asyncio.run(tmp.create())
    assert tmp.get().name.startswith("3.") and tmp.get().exists()

    summary = scan_checkpoints_detailed(str(tmp_path), now=NOW)
    assert summary.status.latest_committed_step == 2
    assert summary.status.incomplete_steps == [3]
    # Orbax agrees: the unfinished step is not one of its steps.
    with ocp.CheckpointManager(tmp_path) as manager:
        assert sorted(manager.all_steps()) == summary.committed_steps == [1, 2]


def test_foreign_entries_next_to_real_orbax_steps(tmp_path: Path) -> None:
    save_steps(tmp_path, [5], max_to_keep=3)
    (tmp_path / "tensorboard").mkdir()
    (tmp_path / "run.log").write_text("foreign")
    summary = scan_checkpoints_detailed(str(tmp_path), now=NOW)
    assert summary.status.latest_committed_step == 5
    assert summary.ignored_entries == ["run.log", "tensorboard"]
