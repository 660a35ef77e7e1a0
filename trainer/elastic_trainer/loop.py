"""The single-controller training loop with in-process elastic recovery.

    run():
      settle checkpoints (finish or fail the in-flight save, delete incomplete steps)
      run_elastic(one attempt)          retry.py: wait for slices, retry policy;
                                        retry_hooks.py: what happens between attempts
    one attempt (on the active slices):
      the step for a mesh over them (mesh_steps.py: built once, its executable loaded
        where a mesh of its shape was compiled before; the next recovery's compiled ahead)
      restore (restore.py): the newest of the snapshot and the last committed checkpoint
      train step by step, batches made ahead on a background thread (Pathways); each step's
      loss is read after the next step is dispatched (one step behind: the device always
      has a step queued, and no step waits for the host's work between two steps):
        an evaluation due (evaluation.py) -> after the step is done, M held-out batches
        a checkpoint request of the operator open -> save this step, wait until it is
          committed, acknowledge it, pause until released (checkpoint_requests.py)
        a slice of the mesh lost -> JaxRuntimeError(DATA_LOSS) -> elastic event
        a snapshot or a checkpoint due (copies.py, by cadence.py's periods): copied while
          the next steps train; the last step is always checkpointed
        replica resize: a slice is back -> snapshot the live state, ScaleUpSignal
    all along: training_status.py keeps what status.training says (progress, events, goodput), the
      watchdog (watchdog.py) what the training thread waits for, which is the phase it
      reports (own_activity.py: restore, compile, steps, a data wait, a save, an evaluation),
      and stalls.py what a stall or a slow slice makes the trainer ask for

The `Trainer` keeps the step loop; the policies come in through its constructor, so that
a test can swap one; `compose.build_trainer` composes the ones `etj train` runs.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jax

from elastic_api.models import DEFAULT_OVERHEAD_BUDGET_PERCENT, CheckpointAck, TrainerGoodput
from elastic_api.stragglers import SLOW_SLICE_SECONDS, slow_slices
from elastic_trainer import train
from elastic_trainer.backends import Backend
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.checkpoint_requests import CheckpointRequests
from elastic_trainer.configs import ModelConfig
from elastic_trainer.copies import Copies
from elastic_trainer.data import BatchSource
from elastic_trainer.errors import ElasticRetriesExhausted, ElasticTimeout, ScaleUpSignal
from elastic_trainer.evaluation import EvalOptions, Evaluator
from elastic_trainer.events import ElasticEvent, RunResult
from elastic_trainer.mesh_steps import MeshKey, MeshSteps
from elastic_trainer.prefetch import BatchPrefetcher
from elastic_trainer.restore import Restorer
from elastic_trainer.retry import SliceLossLimit, run_elastic
from elastic_trainer.retry_hooks import Recovery
from elastic_trainer.snapshots import ReplicaSnapshots, to_pinned_host
from elastic_trainer.stalls import Stalls
from elastic_trainer.step_commit import commit_step
from elastic_trainer.training_status import TrainingStatus
from elastic_trainer.watchdog import (
    CHECKPOINT,
    COMPILE,
    DATA_WAIT,
    RESTORE,
    STEP,
    BesideCopy,
    Watchdog,
    WatchdogOptions,
)

log = logging.getLogger("elastic_trainer")

# Batches made ahead, by backend. On Pathways the controller's host makes them while the
# TPUs run the step. On the simulated backend the host is the device: the step already
# keeps its cores busy, and a batch thread only adds thread switches and GIL handoffs
# (the overhead benchmark's profile: CPU time the plain loop does not spend), so the
# batch is made inline, as in a plain jit loop.
PREFETCH_DEPTH = {"pathways": 2, "simulated": 0}


@dataclass
class LoopOptions:
    steps: int
    batch: int
    seed: int
    min_slices: int | None = None
    standby_slices: int = 0  # of the backend's slices, held out of the mesh (standby.py)
    elastic_timeout: float | None = 300.0
    max_retries: int = 10
    retry_window_seconds: int | None = None  # --max-retries within it (None: over the run)
    snapshot_period: int | None = None  # None: chosen (cadence.py); 0: off
    overhead_budget_percent: float = DEFAULT_OVERHEAD_BUDGET_PERCENT
    log_every: int = 10
    learning_rate: float | None = None
    min_step_seconds: float = 0.0
    # Batches made ahead on a background thread; None: PREFETCH_DEPTH[backend.name].
    prefetch: int | None = None
    # Carried over from an earlier process of the same job (report.prior_run): event ids
    # and the retry budget go on, never start again at 0.
    prior_events: int = 0
    prior_failures: int = 0
    prior_retry_times: tuple[datetime, ...] = ()  # those within the retry window
    prior_goodput: TrainerGoodput | None = None  # the goodput account goes on from it
    prior_step: int = 0  # its last reported step
    prior_ack: CheckpointAck | None = None  # its last checkpointAck: kept, not repeated
    # The hosts of the job's slices (its spec, report.read_prior_run; None: no job): the
    # checkpoint cadence's prior MTBF (cadence.py).
    job_hosts: int | None = None
    process_started_at: float | None = None  # unix time the process started (else now)
    watchdog: WatchdogOptions = field(default_factory=WatchdogOptions)
    on_slow_slice: str = "Report"  # or "Replace": ask for a straggler to be replaced
    slow_slice_seconds: float = SLOW_SLICE_SECONDS  # slow this long before it is moved
    evaluation: EvalOptions = field(default_factory=EvalOptions)  # --eval-every, --eval-steps


@dataclass
class _Dispatched:
    """The step dispatched last, its loss not read yet."""

    step: int  # its number (the count of steps done once it is)
    loss: Any  # a device array


class Trainer:
    """The step loop of one run, on `backend`'s slices, from `data`. What it does around
    the steps is each given policy's: the restore, the copies, the stalls, the operator's
    requests, what happens between attempts; `status` is what they all report into."""

    def __init__(self, cfg: ModelConfig, opts: LoopOptions, backend: Backend,
                 data: BatchSource, *, spec: train.StateSpec, status: TrainingStatus,
                 checkpointer: Checkpointer, snapshots: ReplicaSnapshots, copies: Copies,
                 restorer: Restorer, recovery: Recovery, stalls: Stalls, watchdog: Watchdog,
                 loss_limit: SliceLossLimit, steps: MeshSteps,
                 requests: CheckpointRequests | None = None,
                 evaluator: Evaluator | None = None) -> None:
        """`loss_limit`: the retry policy (what --max-retries counts); `steps`: each
        mesh's compiled step (mesh_steps.py); `requests`: the operator's checkpoint
        requests answered (None: none are read); `evaluator`: the evaluations (None)."""
        self.cfg, self.opts, self.backend, self.data = cfg, opts, backend, data
        self.spec, self.status = spec, status
        self.checkpointer, self.snapshots, self.copies = checkpointer, snapshots, copies
        self.restorer, self.recovery, self.stalls = restorer, recovery, stalls
        self.watchdog, self.loss_limit, self.requests = watchdog, loss_limit, requests
        self.evaluator, self.steps = evaluator, steps
        self._tokens_per_step = opts.batch * cfg.seq_len
        self._mesh: MeshKey | None = None  # the steps of a mesh are timed against each other
        self._active: set[int] = set()
        self._pending: _Dispatched | None = None  # the step whose loss is read next
        self._last_done_at = 0.0  # when the loop saw the last step done

    # --- the run --------------------------------------------------------------------------

    def run(self) -> RunResult:
        self.backend.start()
        self.watchdog.arm(CHECKPOINT, 1)
        deleted = self.checkpointer.settle()
        self.watchdog.disarm()  # the slices may take long to come up: the elastic timeout
        if deleted:
            log.info("deleted incomplete checkpoint steps %s", deleted)
        self.status.report(urgent=True)
        failure: BaseException | None = None
        digest = ""
        try:
            state = run_elastic(self.backend, self._attempt, policy=self.loss_limit,
                                min_slices=self.opts.min_slices,
                                timeout=self.opts.elastic_timeout, hooks=self.recovery)
        except (ElasticRetriesExhausted, ElasticTimeout) as err:
            failure = err
        except BaseException:
            self.watchdog.close()
            self.copies.settle()
            raise
        # The end: the last save's commit (a phase of its own), then no deadline at all.
        self.watchdog.arm(CHECKPOINT, self.status.progress.step)
        self.status.report()
        try:
            if failure is not None:
                self._fail(failure)
            else:
                digest = self._succeed(state)
        finally:
            self.watchdog.close()
        return self.status.result(digest, failure)

    def _succeed(self, state: Any) -> str:
        digest = train.params_digest(state["params"])
        self.status.goodput.begin("checkpointing", time.time())
        self.copies.settle()
        self.checkpointer.close()
        self.watchdog.disarm()  # the run is over: no phase any more
        self.status.finish()
        self.checkpointer.latest_committed_step()  # refresh for the final report
        self.status.progress.state = "Succeeded"
        self.status.report(urgent=True)
        log.info("training done: step %d, loss %.4f, params %s", self.status.progress.step,
                 self.status.progress.loss or float("nan"), digest[:16])
        return digest

    def _fail(self, err: BaseException) -> None:
        reason = getattr(err, "reason", "TrainingError")
        log.error("%s: %s", reason, err)
        event = self.status.open_event()
        if event is not None:
            event.phase = "Failed"
        self.status.progress.state = "Failed"
        self.copies.settle()
        try:
            self.checkpointer.close()
        except Exception as close_err:
            log.warning("closing checkpoints: %s", close_err)
        self.watchdog.disarm()
        self.status.finish()
        self.status.report(urgent=True, reason=reason, message=str(err))

    # --- one attempt: mesh, restore, steps -----------------------------------------------

    def _attempt(self, active: set[int]) -> Any:
        self._active = set(active)
        self.stalls.attempt_started()
        self.watchdog.arm(RESTORE, self.status.progress.step + 1)
        compiled, self._mesh = self.steps.for_slices(tuple(sorted(active)))
        event = self.status.open_event()
        if event is not None:
            event.phase = "Restoring"
        self.status.report(urgent=event is not None)
        state, from_step, source, seconds = self.restorer.restore(compiled, active)
        self.status.resumed_from(from_step, source, seconds, len(active), event)
        self.copies.attempt_started(from_step)
        log.info("attempt %d: %d slice(s) %s, %d micro-batch(es); start at step %d (%s, "
                 "%.2fs)", len(self.status.events), len(active), sorted(active),
                 compiled.micro_batches, from_step, source, seconds)
        self.watchdog.done(measured=source != "none")  # a fresh start's init: no restore
        self.watchdog.arm(COMPILE, from_step + 1, self._mesh)
        self.status.report(urgent=True)
        return self._train(compiled, active, state, from_step)

    def _train(self, compiled: train.CompiledStep, active: set[int], state: Any,
               step: int) -> Any:
        resize = self.opts.min_slices is not None and \
            self.opts.min_slices < self.backend.total_slices
        depth = self.opts.prefetch if self.opts.prefetch is not None else \
            PREFETCH_DEPTH.get(self.backend.name, 2)
        prefetch = BatchPrefetcher(lambda s: self._device_batch(compiled, s), step,
                                   self.opts.steps - 1, depth)
        self._pending, self._last_done_at = None, time.time()
        try:
            while step < self.opts.steps:
                if self.requests is not None:
                    self._answer_request(self.requests, step, state, active)
                if resize and len(active) < self.backend.total_slices:
                    self._scale_up_if_back(step, state, active)
                state, loss = self._dispatch(compiled, state, step, prefetch)
                step += 1
                # The step before is read now, with this one queued behind it.
                self._finish_pending()
                self._pending = _Dispatched(step, loss)
                # The slice-down error surfaces here, inside the step, as on Pathways.
                self.backend.check(active)
                self._keep(step, state, active, loss)
                if self.evaluator is not None and self.evaluator.due(step):
                    self._evaluate(self.evaluator, compiled, state, step, active)
            self._finish_pending()
            self._commit_last(step, state, active)
        finally:
            prefetch.close()
        return state

    def _commit_last(self, step: int, state: Any, active: set[int]) -> None:
        """The last step's checkpoint commits inside the attempt: a slice lost while it is
        written is an elastic event (recovered, then the step saved again), never a run
        that ends Succeeded without its last checkpoint."""
        # No save of it: restored at the end from a snapshot, or the save was cut; saved
        # again (the state is whole on this mesh).
        commit_step(self.checkpointer, self.watchdog, self.status, step,
                    lambda: self.copies.make(step, state, state, active, snapshot=False,
                                             checkpoint=True),
                    timeout=self.checkpointer.settle_timeout, phase_step=step)

    def _device_batch(self, compiled: train.CompiledStep, step: int) -> Any:
        """The batch of the step after `step`, split into micro-batches, on the mesh."""
        tokens = train.shape_batch(self.data.batch(step), compiled.micro_batches)
        return jax.device_put(tokens, compiled.batch_sharding)

    def _dispatch(self, compiled: train.CompiledStep, state: Any, step: int,
                  prefetch: BatchPrefetcher) -> tuple[Any, Any]:
        """Start the step after `step`: (the new state, its loss), both on the device."""
        self.backend.on_phase("step", step + 1)
        t_start = time.time()
        state, metrics = compiled.step_fn(state, self._batch(prefetch, step))
        pause = self.opts.min_step_seconds - (time.time() - t_start)
        if pause > 0:
            time.sleep(pause)  # a paced step: a fault during it still fails it
        return state, self.backend.step_result(step + 1, metrics["loss"])

    def _batch(self, prefetch: BatchPrefetcher, step: int) -> Any:
        """The batch of the step after `step`; waiting for the prefetcher is a DataWait
        (a batch made on this thread is the step's own work)."""
        if prefetch.ready():
            return prefetch.get(step)
        with self.watchdog.during(DATA_WAIT, step + 1):
            self.status.report()
            return prefetch.get(step)

    def _evaluate(self, evaluator: Evaluator, compiled: train.CompiledStep, state: Any,
                  step: int, active: set[int]) -> None:
        """Evaluate after `step`, once it is done (reported as done first); the next
        step's time leaves the evaluation out."""
        self._finish_pending()
        evaluator.run(compiled, state["params"], step, active)
        self._last_done_at = time.time()

    def _finish_pending(self) -> None:
        """Wait for the step dispatched before (reading its loss: the one sync per step,
        on a step the device has finished or is finishing) and account for it."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        loss = float(pending.loss)
        self.backend.wait_step(pending.step, self._active)  # every slice's part of it
        now = time.time()
        seconds, self._last_done_at = now - self._last_done_at, now
        self._watch_next(pending.step)
        self.status.goodput.step_done(pending.step, now, *self._lost_shares())
        self._after_step(pending.step, loss, seconds, now)
        self.copies.step_done(pending.step, seconds)
        self.stalls.watch_slices(pending.step)

    def _lost_shares(self) -> tuple[float, float]:
        """(fewer, slow): the shares of a step's time the job loses on fewer slices than
        its own and to a slow slice (its part beyond the fastest's, where timed)."""
        total = self.backend.total_slices
        fewer = 1.0 - len(self._active) / total if self._active and total else 0.0
        times = self.status.slice_step_times
        slow = [t.relative for t in times or [] if t.slice in slow_slices(times)]
        return fewer, (1.0 - 1.0 / max(slow)) if slow else 0.0

    def _keep(self, step: int, state: Any, active: set[int], ready: Any) -> None:
        """Snapshot and checkpoint after `step` when they are due (copies.py).
        `ready`: an output of the step (its loss), ready once the state is."""
        snapshot, checkpoint = self.copies.due(step)
        # The last step is always saved: a restarted head then finds the run done.
        checkpoint = checkpoint or step == self.opts.steps
        if not (snapshot or checkpoint):
            return
        self.status.goodput.begin("checkpointing", time.time())
        if checkpoint and self.checkpointer.blocks():
            # A synchronous save, or one that waits for the last to commit: the training
            # thread saves (CheckpointSave), then the step in flight goes on.
            with self.watchdog.during(CHECKPOINT, step):
                self.status.report()
                self.copies.make(step, state, ready, active, snapshot, checkpoint)
        else:
            self.watchdog.beside_copy()  # the step in flight goes on beside the copy
            self.copies.make(step, state, ready, active, snapshot, checkpoint)
        self.status.goodput.begin("step", time.time())

    def _after_step(self, step: int, loss: float, seconds: float, now: float) -> None:
        urgent = self.status.step_done(step, loss, seconds, now, self._tokens_per_step)
        if step % self.opts.log_every == 0 or step == self.opts.steps or urgent:
            log.info("step %d/%d loss %.4f (%.3fs/step, %d slice(s))", step, self.opts.steps,
                     loss, seconds, self.status.progress.active_slices or 0)
        self.status.report(urgent=urgent)

    def _watch_next(self, step: int) -> None:
        """`step` is done: what was armed is measured, and the next step is armed (as a
        save's when a copy of this one is in flight)."""
        self.stalls.step_completed(step, self.watchdog.done())
        beside = self.copies.in_flight(step + 1)
        self.watchdog.arm(STEP, step + 1, BesideCopy(self._mesh) if beside else self._mesh)

    def _answer_request(self, requests: CheckpointRequests, step: int, state: Any,
                        active: set[int]) -> None:
        request = requests.take()
        if request is None:
            return
        self._finish_pending()  # the step saved is done, and reported as the step
        requests.answer(request, step, state, active, self._mesh)

    def _scale_up_if_back(self, step: int, state: Any, active: set[int]) -> None:
        """Replica resize: slices are back. Keep the live state as a snapshot (nothing is
        lost) and start a new attempt on the larger mesh."""
        back = self.backend.returned_slices(active)
        if not back:
            return
        self._finish_pending()  # the snapshot is of a step done
        self.status.goodput.begin("checkpointing", time.time())
        self.watchdog.arm(CHECKPOINT, step + 1)  # not measured: the attempt ends
        self.snapshots.take(step, to_pinned_host(state))
        self.snapshots.settle()
        event = ElasticEvent(
            id=self.status.next_event_id(), kind="scale_up",
            error=f"slices {sorted(back)} are back", failed_step=step, slices_down=[],
            detected_at=time.time(), fault_at=None,
        )
        self.status.add_event(event)
        log.info("elastic event %d: slices %s are back at step %d; scaling up", event.id,
                 sorted(back), step)
        self.status.report(urgent=True)
        raise ScaleUpSignal(event.error)
