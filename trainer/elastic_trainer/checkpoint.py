"""Orbax checkpoints that survive elastic events.

- Saves are async (optional) every `period` steps; orbax keeps the newest `keep`.
- Only finalized steps are restored: a step directory counts only when its name is a
  plain step number and it holds `commit_success.txt` (orbax writes it last, on GCS and,
  in this version, locally too) or, on a local filesystem, when orbax has renamed it from
  `<step>.orbax-checkpoint-tmp*`.
- `settle()` runs at start and after every elastic event: it waits for the in-flight save
  (bounded by a timeout), then deletes incomplete step directories. A directory whose save
  may still be running (the wait timed out) is never deleted. Then a fresh
  CheckpointManager is built, so no stale entry of a failed save survives (the MaxText
  "Found incomplete checkpoint" failure).
- A failed write (e.g. a slice went down during it) is logged and counted; training goes
  on and the next period writes again (MaxText exits here).
"""
from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import orbax.checkpoint as ocp
from etils import epath

log = logging.getLogger(__name__)

COMMIT_MARKER = "commit_success.txt"
TMP_MARKER = ".orbax-checkpoint-tmp"
_STEP_DIR = re.compile(r"^(\d+)$")
_TMP_DIR = re.compile(r"^(\d+)\.orbax-checkpoint-tmp.*$")

# Called in the background commit of step `step` once its data is written; raising
# fails the save. The simulated backend uses it to lose the data of a slice that went
# down during the write, as a real slice loss would.
WriteHook = Callable[[int], None]


class _AfterWriteFuture:
    """An orbax commit future that runs the write hook once the other futures are done
    (orbax waits on commit futures in order and this one is appended last)."""

    def __init__(self, hook: WriteHook, step: int) -> None:
        self._hook, self._step = hook, step

    def result(self, timeout: float | None = None) -> Any:
        self._hook(self._step)
        return None


class _HookedHandler(ocp.StandardCheckpointHandler):
    def __init__(self, owner: Checkpointer) -> None:
        super().__init__()
        self.owner = owner
        self.current_step = -1

    async def async_save(self, directory: Any, *args: Any, **kwargs: Any) -> Any:
        futures = await super().async_save(directory, *args, **kwargs)
        hook = self.owner.write_hook  # read at save time: the trainer may set it late
        if hook is None:
            return futures
        return [*(futures or []), _AfterWriteFuture(hook, self.current_step)]


class CheckpointWriteFailed(RuntimeError):
    pass


class Checkpointer:
    def __init__(self, directory: str, period: int, keep: int, async_save: bool = True,
                 write_hook: WriteHook | None = None, settle_timeout: float = 120.0) -> None:
        if period < 1:
            raise ValueError(f"--checkpoint-period must be >= 1, got {period}")
        if keep < 1:
            raise ValueError(f"--checkpoint-keep must be >= 1, got {keep}")
        self.directory = epath.Path(directory)
        self.period, self.keep, self.async_save = period, keep, async_save
        self.write_hook = write_hook
        self.settle_timeout = settle_timeout
        self.write_failures = 0
        self.in_flight_step: int | None = None
        self._latest_cache: tuple[float, int | None] = (-1e9, None)
        self._handler = _HookedHandler(self)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._manager = self._new_manager()

    def _new_manager(self) -> ocp.CheckpointManager:
        self._handler = _HookedHandler(self)
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

    def _scan(self) -> tuple[list[int], dict[int, list[epath.Path]]]:
        """(finalized steps ascending, {step: incomplete directories})."""
        finalized: list[int] = []
        incomplete: dict[int, list[epath.Path]] = {}
        if not self.directory.exists():
            return finalized, incomplete
        is_local = not str(self.directory).startswith("gs://")
        for child in self.directory.iterdir():
            name = child.name
            if m := _STEP_DIR.match(name):
                step = int(m.group(1))
                if (child / COMMIT_MARKER).exists() or (
                    is_local and (child / "_CHECKPOINT_METADATA").exists()
                ):
                    finalized.append(step)
                else:
                    incomplete.setdefault(step, []).append(child)
            elif m := _TMP_DIR.match(name):
                incomplete.setdefault(int(m.group(1)), []).append(child)
        return sorted(finalized), incomplete

    def latest_committed_step(self) -> int | None:
        finalized, _ = self._scan()
        latest = finalized[-1] if finalized else None
        self._latest_cache = (time.monotonic(), latest)
        return latest

    def latest_committed_step_cached(self, max_age: float = 5.0) -> int | None:
        """For reports: a listing (a network call on gs://) at most every `max_age` s."""
        taken, latest = self._latest_cache
        if time.monotonic() - taken > max_age:
            return self.latest_committed_step()
        return latest

    def incomplete_steps(self) -> list[int]:
        return sorted(self._scan()[1])

    # --- saving -------------------------------------------------------------------------

    def should_save(self, step: int) -> bool:
        return step > 0 and step % self.period == 0

    def save(self, step: int, state: Any) -> bool:
        """Start (or, without async, do) the save of `step`. A failure, of this save or
        of the previous async one surfacing here, is logged and counted, not raised."""
        # When the previous async save has ended, collect a failure now so that it does
        # not make this save fail too (orbax re-raises it on the next save).
        if (
            self.in_flight_step is not None
            and not self._manager.is_saving_in_progress()
            and self._wait_in_flight(self.settle_timeout) == "failed"
        ):
            self._delete_incomplete(keep_step=None)
        self._handler.current_step = step
        try:
            saved = self._manager.save(step, args=ocp.args.StandardSave(state), force=True)
        except Exception as err:  # a failed write must never stop training
            self._record_failure(step, err)
            self._reset()
            return False
        if saved:
            self.in_flight_step = step
        return bool(saved)

    def _record_failure(self, step: int | None, err: BaseException) -> None:
        self.write_failures += 1
        log.warning("checkpoint write failed (step %s): %s: %s; training goes on",
                    step, type(err).__name__, err)

    def _wait_in_flight(self, timeout: float) -> str:
        """Wait for the in-flight save: "ok", "failed" or "running" (timed out)."""
        outcome: dict[str, BaseException | None] = {"error": None}

        def wait() -> None:
            try:
                self._manager.wait_until_finished()
            except BaseException as err:  # reported below
                outcome["error"] = err

        waiter = threading.Thread(target=wait, name="checkpoint-wait", daemon=True)
        waiter.start()
        waiter.join(timeout)
        if waiter.is_alive():
            log.warning("checkpoint save of step %s still running after %.0fs; its directory "
                        "is kept", self.in_flight_step, timeout)
            return "running"
        failed = outcome["error"] is not None
        if failed:
            self._record_failure(self.in_flight_step, outcome["error"])  # type: ignore[arg-type]
            self._reset()  # orbax would re-raise this failure on every later save
        self.in_flight_step = None
        return "failed" if failed else "ok"

    def settle(self) -> list[int]:
        """After start or an elastic event: finish or fail the in-flight save, delete
        incomplete step directories that nothing can write any more, and start a fresh
        manager. Returns the steps whose directories were deleted."""
        done = self._wait_in_flight(self.settle_timeout) != "running"
        keep_step = None if done else self.in_flight_step
        deleted = self._delete_incomplete(keep_step)
        return deleted

    def _delete_incomplete(self, keep_step: int | None) -> list[int]:
        _, incomplete = self._scan()
        deleted = []
        for step, paths in sorted(incomplete.items()):
            if step == keep_step:
                continue
            try:
                for path in paths:
                    log.info("deleting incomplete checkpoint directory %s", path)
                    with contextlib.suppress(FileNotFoundError):
                        path.rmtree()
            except Exception as err:  # storage trouble must not stop training; retried later
                log.warning("deleting incomplete checkpoint step %d: %s", step, err)
                continue
            deleted.append(step)
        return deleted

    def _reset(self) -> None:
        try:
            self._manager.close()
        except Exception as err:  # the old manager may hold a failed save
            log.info("closing the previous checkpoint manager: %s", err)
        self._manager = self._new_manager()

    # --- restoring ----------------------------------------------------------------------

    def restore(self, step: int, target: Any) -> Any:
        """Restore finalized `step` onto `target` (a tree of ShapeDtypeStruct with
        shardings)."""
        finalized, _ = self._scan()
        if step not in finalized:
            raise ValueError(f"checkpoint step {step} is not finalized in {self.directory}")
        return self._manager.restore(step, args=ocp.args.StandardRestore(target))

    def wait(self) -> None:
        self._wait_in_flight(self.settle_timeout)

    def close(self) -> None:
        self.wait()
        try:
            self._manager.close()
        except Exception as err:
            log.warning("closing checkpoint manager: %s", err)


