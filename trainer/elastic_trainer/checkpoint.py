"""Orbax checkpoints that survive elastic events.

- Saves are async (optional), when the loop's cadence says: every `period` steps, or
  at a period chosen from what a save costs (`period` None; cadence.py, which the save
  thread's timing feeds: `save_costs`); orbax keeps the newest `keep`. An
  async save starts on a thread of its own: even orbax's blocking part (the copy to host,
  the metadata, starting its threads) stays off the training thread, so the state given
  to `save` must not be donated or deleted afterwards (the loop gives its pinned host
  copy).
- Only committed steps are restored, by the commit rule the operator applies too
  (elastic_api.checkpoints: a `<step>/` directory holding `commit_success.txt`), and the
  step is always named to orbax: `latestCommittedStep` in the job's status is the step
  restored, never one orbax's own listing would pick (it takes any directory on a local
  filesystem for a step, an empty one included).
- Waiting for a save is bounded for real (`settle_timeout`). orbax's own waits are not
  (`CheckpointManager.save` and `close` join the previous save's thread), so a save still
  running after the timeout is abandoned: its thread and directory are left alone, a fresh
  CheckpointManager takes over, and that step is never written again by this process.
- `settle()` runs at start and after every elastic event: it waits for the in-flight save
  (bounded), deletes the uncommitted step directories (incomplete or abandoned) nothing
  writes any more, then has orbax list the steps again, and rebuilds the
  CheckpointManager after a failure, so no stale entry of a failed save survives (the
  MaxText "Found incomplete checkpoint" failure).
- A save cut by a slice loss (a slice-down JaxRuntimeError) is an elastic event: `save()`
  raises it to the loop (as MaxText re-raises it); it is not a write failure. Any other
  failed write is logged and counted (`write_failures`) and training goes on.
- A checkpoint directory that disappears during the run is an error
  (CheckpointDirectoryGone), never a silent fresh start.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

from elastic_api.checkpoints import (
    COMMIT_MARKER,
    RootDecision,
    RootEntry,
    StepFile,
    StepSize,
    decide,
    list_local_step,
    matters,
    needs_marker_lookup,
    nested_root_hint,
    step_size,
)
from elastic_trainer.backends import WriteHook
from elastic_trainer.errors import CheckpointDirectoryGone, is_slice_down_error

log = logging.getLogger(__name__)

__all__ = ["COMMIT_MARKER", "Checkpointer"]


class _AfterWriteFuture:
    """An orbax commit future that runs the write hook once the other futures are done
    (orbax waits on commit futures in order and this one is appended last)."""

    def __init__(self, hook: WriteHook, step: int) -> None:
        self._hook, self._step = hook, step

    def result(self, timeout: float | None = None) -> Any:
        self._hook(self._step)
        return None


class _HookedHandler(ocp.StandardCheckpointHandler):
    """Runs the write hook of the save in progress (Checkpointer.save sets it)."""

    def __init__(self) -> None:
        super().__init__()
        self.next_save: tuple[int, WriteHook | None] = (-1, None)

    async def async_save(self, directory: Any, *args: Any, **kwargs: Any) -> Any:
        futures = await super().async_save(directory, *args, **kwargs)
        step, hook = self.next_save
        if hook is None:
            return futures
        return [*(futures or []), _AfterWriteFuture(hook, step)]


class _BackgroundSave:
    """orbax's `CheckpointManager.save` of one step, run on a thread of its own (a daemon:
    so are the threads orbax starts from it), through to the commit, so that the thread
    knows what the save took (the cost the loop's checkpoint cadence weighs)."""

    def __init__(self, manager: ocp.CheckpointManager, step: int, state: Any,
                 costs: deque[tuple[int, float | None, float | None]]) -> None:
        self.manager = manager
        self.error: BaseException | None = None
        self._costs = costs
        self._thread = threading.Thread(target=self._run, args=(step, state),
                                        name=f"checkpoint-save-{step}", daemon=True)
        self._thread.start()

    def _run(self, step: int, state: Any) -> None:
        seconds: float | None = None
        try:
            started = self._start(step, state)
            del state  # nothing here may keep the copy alive (see below)
            self.manager.wait_until_finished()
            seconds = time.monotonic() - started
        except BaseException as err:  # raised by finish()
            # Without its traceback: its frames hold the state, a copy whose buffers the
            # snapshot's replicas share; a slice loss must be able to free them all.
            self.error = err.with_traceback(None)
        finally:
            self._costs.append((step, seconds, seconds))

    def _start(self, step: int, state: Any) -> float:
        """Wait for the state (the step that makes it may still run: the loop does not
        wait for it; the cost starts once it is there), then start the save."""
        jax.block_until_ready(state)
        started = time.monotonic()
        self.manager.save(step, args=ocp.args.StandardSave(state), force=True)
        return started

    def running(self) -> bool:
        return self._thread.is_alive()

    def finish(self) -> None:
        """Block until the save is committed; raise what failed it."""
        self._thread.join()
        if self.error is not None:
            raise self.error
        self.manager.wait_until_finished()


class _OpenDirectory:
    """A local checkpoint directory kept open: if it is deleted, the path no longer leads
    to the open one, even when something creates the path again (orbax creates missing
    parents), and the open inode cannot be reused meanwhile. Nothing to keep on gs://."""

    def __init__(self, directory: epath.Path, is_local: bool) -> None:
        self.directory = directory
        self._fd = os.open(str(directory), os.O_RDONLY | os.O_DIRECTORY) if is_local else None

    def replaced(self) -> bool:
        """The path leads elsewhere now (or nowhere)."""
        if self._fd is None:
            return False
        try:
            now = os.stat(str(self.directory))
        except FileNotFoundError:
            return True
        opened = os.fstat(self._fd)
        return (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _walk(path: epath.Path) -> Any:
    """The files under `path` (gs://: an object listing per "directory")."""
    for child in path.iterdir():
        if child.is_dir():
            yield from _walk(child)
        else:
            yield child


class Checkpointer:
    def __init__(self, directory: str, period: int | None, keep: int, async_save: bool = True,
                 settle_timeout: float = 120.0) -> None:
        """`period`: save every N steps; None: the loop chooses (loop.py, cadence.py)."""
        if period is not None and period < 1:
            raise ValueError(f"--checkpoint-period must be >= 1 (or auto), got {period}")
        if keep < 1:
            raise ValueError(f"--checkpoint-keep must be >= 1, got {keep}")
        self.directory = epath.Path(directory)
        self.period, self.keep, self.async_save = period, keep, async_save
        self.settle_timeout = settle_timeout
        self.write_failures = 0  # failed writes that were not a slice loss
        self.abandoned_steps: list[int] = []  # saves left running past settle_timeout
        self.in_flight_step: int | None = None
        self._in_flight: _BackgroundSave | None = None
        # (step, seconds from the state ready to committed, twice: the cost and the wall
        # time, cadence.py; None: failed) of each save finished, for the cadence;
        # appended by the save's thread, taken by the loop.
        self.save_costs: deque[tuple[int, float | None, float | None]] = deque(maxlen=64)
        self._latest_cache: tuple[float, int | None] = (-1e9, None)
        self._is_local = not str(self.directory).startswith("gs://")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._opened = _OpenDirectory(self.directory, self._is_local)
        # The newest step this process knows is committed: it must stay there (orbax only
        # ever deletes older ones), so its absence means the directory went away, even
        # if a later write recreated the path.
        self._newest_committed: int | None = None
        self._warned_nested_root = False
        self._handler = _HookedHandler()
        self._manager = self._new_manager()

    def _new_manager(self) -> ocp.CheckpointManager:
        self._handler = _HookedHandler()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=self.keep,
            enable_async_checkpointing=self.async_save,
            create=True,
            cleanup_tmp_directories=False,  # settle() does it, never for an in-flight step
        )
        registry = ocp.DefaultCheckpointHandlerRegistry()
        registry.add("default", ocp.args.StandardSave, self._handler)
        registry.add("default", ocp.args.StandardRestore, self._handler)
        return ocp.CheckpointManager(self.directory, options=options,
                                     handler_registry=registry)

    # --- what is on storage -------------------------------------------------------------

    def _check_directory(self) -> None:
        newest = self._newest_committed
        gone = self._opened.replaced() or (
            newest is not None and not (self.directory / str(newest)).exists())
        if gone:
            raise CheckpointDirectoryGone(
                f"--checkpoint-dir {self.directory} disappeared during the run (deleted or "
                "unmounted?): the committed checkpoints in it are gone. Restore it, or "
                "start again with a new --checkpoint-dir.")

    def _list(self) -> list[RootEntry]:
        """The root's entries for the commit rule: a directory and marker lookup only for
        the names the rule looks at (each is a request on gs://); links are not followed."""
        entries = []
        for child in self.directory.iterdir():
            name = child.name
            if not matters(name):
                entries.append(RootEntry(name=name, is_dir=False))  # ignored, whatever it is
                continue
            is_link = self._is_local and os.path.islink(str(child))
            is_dir = not is_link and child.is_dir()
            marker = is_dir and needs_marker_lookup(name) and (child / COMMIT_MARKER).exists()
            entries.append(RootEntry(name=name, is_dir=is_dir, has_commit_marker=marker,
                                     is_link=is_link))
        return entries

    def _scan(self) -> RootDecision:
        """The commit rule's decision over the root as it is now."""
        self._check_directory()
        if not self.directory.exists():
            return RootDecision()
        decision = decide(self._list())
        if decision.nested_root and not self._warned_nested_root:
            self._warned_nested_root = True
            log.warning("--checkpoint-dir: %s", nested_root_hint(str(self.directory)))
        if decision.committed:
            self._newest_committed = max(decision.committed[-1], self._newest_committed or 0)
        return decision

    def latest_committed_step(self) -> int | None:
        """The step `restore` takes: what the operator reports as latestCommittedStep."""
        latest = self._scan().latest_committed
        self._latest_cache = (time.monotonic(), latest)
        return latest

    def latest_committed_step_cached(self, max_age: float = 5.0) -> int | None:
        """For reports: a listing (a network call on gs://) at most every `max_age` s;
        never raises (the loop finds a vanished directory at its next save)."""
        taken, latest = self._latest_cache
        if time.monotonic() - taken > max_age:
            try:
                return self.latest_committed_step()
            except Exception as err:
                log.debug("listing checkpoints for a report: %s", err)
        return latest

    def incomplete_steps(self) -> list[int]:
        """Uncommitted steps newer than the newest committed one (in flight, or cut)."""
        return list(self._scan().incomplete)

    def listing(self) -> RootDecision:
        """The commit rule's whole decision (committed, incomplete, abandoned, ignored)."""
        return self._scan()

    # --- saving -------------------------------------------------------------------------

    def saving(self) -> bool:
        """A background save is still writing (not committed yet)."""
        return self._in_flight is not None and self._in_flight.running()

    def save(self, step: int, state: Any, write_hook: WriteHook | None = None) -> bool:
        """Start (or, without async, do) the save of `step`; `write_hook` runs when its
        data is written. The previous save is finished first (bounded). A slice loss that
        cut the previous save or this one is raised; other failures are counted."""
        outcome, error = self._wait_in_flight(self.settle_timeout)
        self._check_directory()
        if outcome == "failed" and error is not None and is_slice_down_error(error):
            raise error  # an elastic event; settle() cleans up after it
        if outcome == "failed":
            self._delete_incomplete()
        if step in self.abandoned_steps:
            log.warning("not saving step %d: an abandoned save of it may still be writing",
                        step)
            return False
        self._handler.next_save = (step, write_hook)
        if self.async_save:
            self._in_flight = _BackgroundSave(self._manager, step, state, self.save_costs)
            self.in_flight_step = step
            return True
        started = time.monotonic()
        try:
            self._manager.save(step, args=ocp.args.StandardSave(state), force=True)
        except Exception as err:
            self.save_costs.append((step, None, None))
            self._reset()
            if is_slice_down_error(err):
                raise
            self._record_failure(step, err)  # a failed write must never stop training
            return False
        seconds = time.monotonic() - started
        self.save_costs.append((step, seconds, seconds))
        self._newest_committed = step
        return True

    def _record_failure(self, step: int | None, err: BaseException) -> None:
        self.write_failures += 1
        log.warning("checkpoint write failed (step %s): %s: %s; training goes on",
                    step, type(err).__name__, err)

    def _wait_in_flight(self, timeout: float, abandon: bool = True
                        ) -> tuple[str, BaseException | None]:
        """Wait (at most `timeout` s) for the save in flight: ("ok"|"failed"|"abandoned",
        the error of a failed save); "pending" when it is still running and not to be
        abandoned."""
        step, save = self.in_flight_step, self._in_flight
        if step is None or save is None:
            return "ok", None
        outcome: dict[str, BaseException | None] = {"error": None}

        def wait() -> None:
            try:
                save.finish()
            except BaseException as err:  # handed to the caller below
                outcome["error"] = err

        waiter = threading.Thread(target=wait, name="checkpoint-wait", daemon=True)
        waiter.start()
        waiter.join(timeout)
        if waiter.is_alive() and not abandon:
            return "pending", None
        self.in_flight_step, self._in_flight = None, None
        if waiter.is_alive():
            self._abandon(step, timeout)
            return "abandoned", None
        error = outcome["error"]
        if error is None:
            self._newest_committed = step
            return "ok", None
        self._reset()  # orbax would re-raise this failure on every later save
        if is_slice_down_error(error):
            log.warning("checkpoint save of step %d was cut by a slice loss (%s): an "
                        "elastic event, not a write failure", step,
                        str(error).splitlines()[0])
        else:
            self._record_failure(step, error)
        return "failed", error

    def _abandon(self, step: int, timeout: float) -> None:
        """A save that hangs: leave its thread and directory alone (orbax would join the
        thread in every later save and in close) and go on with a fresh manager."""
        log.warning("checkpoint save of step %d still running after %.0fs: abandoned (its "
                    "directory is kept and the step is not saved again by this process); "
                    "a fresh CheckpointManager takes over", step, timeout)
        self.abandoned_steps.append(step)
        self._manager = self._new_manager()

    def settle(self) -> list[int]:
        """After start or an elastic event: finish, fail or abandon the in-flight save,
        then delete the incomplete step directories nothing writes any more. Returns the
        steps whose directories were deleted."""
        self._wait_in_flight(self.settle_timeout)
        self._check_directory()
        return self._delete_incomplete()

    def _delete_incomplete(self) -> list[int]:
        """Delete every uncommitted step's directories (incomplete and abandoned), except
        saves this process abandoned (they may still be writing); then orbax lists the
        steps again, so its own view (which counts such directories) forgets them."""
        deleted = []
        for step, names in self._scan().uncommitted.items():
            if step in self.abandoned_steps:
                continue
            try:
                for name in names:
                    log.info("deleting uncommitted checkpoint directory %s",
                             self.directory / name)
                    with contextlib.suppress(FileNotFoundError):
                        (self.directory / name).rmtree()
            except Exception as err:  # storage trouble must not stop training; retried later
                log.warning("deleting incomplete checkpoint step %d: %s", step, err)
                continue
            deleted.append(step)
        if deleted:
            self._manager.reload()
        return deleted

    def _reset(self) -> None:
        try:
            self._manager.close()
        except Exception as err:  # the old manager may hold a failed save
            log.info("closing the previous checkpoint manager: %s", err)
        self._manager = self._new_manager()

    # --- restoring ----------------------------------------------------------------------

    def restore(self, step: int, target: Any) -> Any:
        """Restore committed `step` onto `target` (a tree of ShapeDtypeStruct with
        shardings). The step is given to orbax by number: orbax's latest_step could name
        another (a directory the commit rule does not call committed)."""
        if step not in self._scan().committed:
            raise ValueError(f"checkpoint step {step} is not finalized (no {step}/ with "
                             f"{COMMIT_MARKER}) in {self.directory}")
        self._manager.reload()  # a save abandoned earlier may have finished since
        return self._manager.restore(step, args=ocp.args.StandardRestore(target))

    def step_size(self, step: int) -> StepSize | None:
        """What a restore of `step` reads, counted as the operator's scan counts it
        (elastic_api.checkpoints.step_size); None when it cannot be listed."""
        try:
            if self._is_local:
                files = list_local_step(str(self.directory), step)
            else:  # epath refuses rglob on gs://: one listing per directory level
                files = [StepFile(size=p.stat().length)
                         for p in _walk(self.directory / str(step))]
        except Exception as err:  # the size is for the report only
            log.info("sizing checkpoint step %d: %s", step, err)
            return None
        return step_size(files)

    def has_save_of(self, step: int) -> bool:
        """A save of `step` is in flight, or it is the newest committed step."""
        return step in (self.in_flight_step, self._newest_committed)

    def wait_committed(self, step: int, timeout: float) -> bool:
        """Wait at most `timeout` s for the save in flight (left running, not abandoned,
        when it takes longer); whether `step` is then committed. A save cut by a slice
        loss raises it (an elastic event)."""
        outcome, error = self._wait_in_flight(max(0.0, timeout), abandon=False)
        if outcome == "failed" and error is not None and is_slice_down_error(error):
            raise error
        return outcome == "ok" and self._newest_committed == step

    def wait(self) -> None:
        """Wait (bounded) for the save in flight."""
        self._wait_in_flight(self.settle_timeout)

    def close(self) -> None:
        self.wait()
        try:
            self._manager.close()
        except Exception as err:
            log.warning("closing checkpoint manager: %s", err)
        self._opened.close()
