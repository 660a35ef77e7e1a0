"""The single-controller training loop with in-process elastic recovery.

    run():
      settle checkpoints (finish or fail the in-flight save, delete incomplete steps)
      run_elastic(one attempt)          retry.py: wait for slices, retry policy, hooks
    one attempt (on the active slices):
      build (or reuse) the step for a mesh over them
      restore: the newest of the snapshot (from the replicas that survived) and the last
        committed checkpoint, else a fresh start; a failed restore drops the snapshot
      train step by step, batches made ahead on a background thread (Pathways); each step's loss
      is read after the next step is dispatched (one step behind: the device always has
      a step queued, and no step waits for the host's work between two steps):
        a checkpoint request of the operator open -> save this step, wait until it is
          committed, acknowledge it, pause until released
        a slice of the mesh lost -> JaxRuntimeError(DATA_LOSS) -> elastic event
        a snapshot due (cadence.py: --snapshot-period, or chosen within the overhead
          budget): copied while the next steps train
        a checkpoint due (likewise) and at the end: checkpoint (async)
        replica resize: a slice is back -> snapshot the live state, ScaleUpSignal
    all along: the goodput account (goodput.py) is told what the training thread does,
      and the watchdog (watchdog.py) what it waits for: past that phase's deadline
      (learned from the run's own), every thread's stack to the log, status.training.stall,
      and the slices the backend's evidence blames asked to be replaced
      (status.training.sliceReplacement): their loss is the DATA_LOSS of any lost slice
    slow slices (elastic_api.stragglers) reported in status.training.sliceStepTimes;
      with --on-slow-slice Replace, asked to be replaced too
"""
from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jax

from elastic_api.conditions import Reason
from elastic_api.models import (
    DEFAULT_OVERHEAD_BUDGET_PERCENT,
    CheckpointAck,
    CheckpointRequest,
    RestoreReport,
    SliceReplacementRequest,
    SliceStepTime,
    StallReport,
    TrainerGoodput,
    TrainingReport,
)
from elastic_api.restores import TRAINER, restore_report
from elastic_api.stragglers import slow_slices, step_times
from elastic_trainer import train
from elastic_trainer.backends import Backend
from elastic_trainer.cadence import Cadence, Cadences, budget_shares, host_memory_available
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.checkpoint_requests import RequestSource, pause_ends, to_answer
from elastic_trainer.configs import ModelConfig
from elastic_trainer.data import BatchSource
from elastic_trainer.errors import ElasticRetriesExhausted, ElasticTimeout, ScaleUpSignal
from elastic_trainer.events import ElasticEvent, RunResult, utc
from elastic_trainer.goodput import GoodputAccount
from elastic_trainer.prefetch import BatchPrefetcher
from elastic_trainer.report import Metrics, StatusReporter
from elastic_trainer.retry import SliceLossLimit, run_elastic
from elastic_trainer.snapshots import NoSurvivingReplica, ReplicaSnapshots, to_pinned_host
from elastic_trainer.watchdog import (
    CHECKPOINT,
    FIRST_STEP,
    RESTORE,
    STEP,
    Stall,
    Watchdog,
    WatchdogOptions,
    log_stacks,
)

log = logging.getLogger("elastic_trainer")

PAUSE_POLL_SECONDS = 0.1  # how often a paused loop looks at the request (and check())
PAUSE_HEALTH_SECONDS = 1.0  # how often it runs the backend's health check
# A progress report (not urgent) is built at most this often: the reporter sends at most
# one per --report-interval anyway, and building one per step is host work in every step.
REPORT_EVERY_SECONDS = 0.5
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
    elastic_timeout: float | None = 300.0
    max_retries: int = 10
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
    prior_goodput: TrainerGoodput | None = None  # the goodput account goes on from it
    prior_step: int = 0  # its last reported step
    prior_ack: CheckpointAck | None = None  # its last checkpointAck: kept, not repeated
    process_started_at: float | None = None  # unix time the process started (else now)
    watchdog: WatchdogOptions = field(default_factory=WatchdogOptions)
    on_slow_slice: str = "Report"  # or "Replace": ask for a straggler to be replaced


@dataclass
class _Progress:
    step: int = 0  # last completed step (high-water mark of this process)
    loss: float | None = None
    step_seconds: float | None = None
    tokens_per_second: float | None = None
    active_slices: int | None = None
    state: str = "Initializing"
    step_times: list[tuple[int, float]] = field(default_factory=list)
    losses: list[tuple[int, float]] = field(default_factory=list)


@dataclass(frozen=True)
class _Blamed:
    """Slices the trainer asked to be replaced, and why: the elastic event their loss
    becomes names it."""

    slices: frozenset[int]
    cause: str
    fault_at: float | None  # when the fault began, if known (the hung step's start)
    detected_at: float


@dataclass
class _Dispatched:
    """The step dispatched last, its loss not read yet."""

    step: int  # its number (the count of steps done once it is)
    loss: Any  # a device array


class Trainer:
    def __init__(self, cfg: ModelConfig, opts: LoopOptions, backend: Backend,
                 data: BatchSource, checkpointer: Checkpointer,
                 reporter: StatusReporter | None = None, metrics: Metrics | None = None,
                 requests: RequestSource | None = None) -> None:
        self.cfg, self.opts, self.backend, self.data = cfg, opts, backend, data
        self.checkpointer, self.requests = checkpointer, requests
        self.reporter, self.metrics = reporter, metrics or Metrics(None)
        self.optimizer = train.make_optimizer(cfg, opts.steps, opts.learning_rate)
        self.abstract = train.abstract_state(cfg, self.optimizer)
        # Slice losses (what --max-retries counts), those of an earlier process included.
        self.policy = SliceLossLimit(opts.max_retries, used=opts.prior_failures)
        self.snapshots = ReplicaSnapshots()
        snapshot_budget, checkpoint_budget = budget_shares(
            opts.overhead_budget_percent / 100, opts.snapshot_period, checkpointer.period)
        self.cadences = Cadences(Cadence(opts.snapshot_period, snapshot_budget, opts.steps),
                                 Cadence(checkpointer.period, checkpoint_budget, opts.steps),
                                 self.snapshots.costs, checkpointer.save_costs)
        self._state_bytes = sum(int(x.size) * x.dtype.itemsize
                                for x in jax.tree.leaves(self.abstract))
        self._pending: _Dispatched | None = None  # the step whose loss is read next
        self._last_done_at = 0.0  # when the loop saw the last step done
        self._attempt_step = 0  # the step the current attempt started from
        self._copy_until = 0  # the steps up to this one ran with a copy in flight
        self._reported_at = -1e9
        self.events: list[ElasticEvent] = []
        self.progress = _Progress()
        self.current_event: ElasticEvent | None = None
        self._compiled: dict[tuple[tuple[int, ...], int], train.CompiledStep] = {}
        self.started_from: tuple[int, str] | None = None  # (step, source) of this process
        self.last_restore: RestoreReport | None = None
        self.process_started_at = opts.process_started_at or time.time()
        self._tokens_per_step = opts.batch * cfg.seq_len
        self.goodput = GoodputAccount(self.process_started_at, opts.prior_goodput,
                                      opts.prior_step)
        self.checkpoint_ack = opts.prior_ack
        # The newest request acted on (answered, or given up on at its deadline).
        self._request_done = opts.prior_ack.id if opts.prior_ack is not None else 0
        self.finished_at: float | None = None
        # The watchdog, stalls and replacement requests (watchdog.py).
        self.watchdog = Watchdog(opts.watchdog, self._on_stall)
        self.stall: StallReport | None = None
        self.slice_replacement: SliceReplacementRequest | None = None
        self.slice_times: list[SliceStepTime] | None = None
        self._blamed: _Blamed | None = None
        self.stalls_seen: list[StallReport] = []
        self.replacements: list[SliceReplacementRequest] = []
        self._slow_reported: frozenset[int] = frozenset()
        self._active: set[int] = set()
        self._mesh: tuple[tuple[int, ...], int] | None = None

    def next_event_id(self) -> int:
        return self.opts.prior_events + len(self.events) + 1

    def _open_event(self) -> ElasticEvent | None:
        """The event this attempt recovers from (None once training resumed)."""
        event = self.current_event
        return event if event is not None and event.resumed_at is None else None

    # --- reporting ----------------------------------------------------------------------

    def training_report(self, reason: str | None = None, message: str | None = None
                        ) -> TrainingReport:
        p = self.progress
        return TrainingReport(
            observed_at=datetime.now(UTC), state=p.state,
            reason=reason, message=message, step=p.step, total_steps=self.opts.steps,
            loss=p.loss, step_seconds=p.step_seconds, tokens_per_second=p.tokens_per_second,
            attempt=len(self.events),
            active_slices=p.active_slices,
            last_committed_checkpoint_step=self.checkpointer.latest_committed_step_cached(),
            last_snapshot_step=self.snapshots.latest_step(),
            elastic_events_total=self.opts.prior_events + len(self.events),
            retries_remaining=self.policy.remaining,
            process_id=os.getpid(), host_name=socket.gethostname(),
            process_started_at=utc(self.process_started_at),
            elastic_event=self.current_event.report() if self.current_event else None,
            checkpoint_ack=self.checkpoint_ack, goodput=self.goodput.report(),
            snapshot_cadence=self.cadences.snapshot.report(),
            checkpoint_cadence=self.cadences.checkpoint.report(),
            stall=self.stall, slice_replacement=self.slice_replacement,
            slice_step_times=self.slice_times,
            last_restore=self.last_restore,
        )

    def _report(self, urgent: bool = False, reason: str | None = None,
                message: str | None = None) -> None:
        if self.reporter is None:
            return
        now = time.monotonic()
        if not urgent and now - self._reported_at < REPORT_EVERY_SECONDS:
            return
        self._reported_at = now
        self.reporter.update(self.training_report(reason, message), urgent=urgent)

    # --- the run --------------------------------------------------------------------------

    def run(self) -> RunResult:
        self.backend.start()
        self.watchdog.arm(CHECKPOINT, 1)
        deleted = self.checkpointer.settle()
        self.watchdog.disarm()  # the slices may take long to come up: the elastic timeout
        if deleted:
            log.info("deleted incomplete checkpoint steps %s", deleted)
        self._report(urgent=True)
        failure: BaseException | None = None
        digest = ""
        try:
            state = run_elastic(self.backend, self._attempt, policy=self.policy,
                                min_slices=self.opts.min_slices,
                                timeout=self.opts.elastic_timeout, hooks=self)
        except (ElasticRetriesExhausted, ElasticTimeout) as err:
            failure = err
        except BaseException:
            self.watchdog.close()
            self._quiesce()
            raise
        # The end: the last save's commit (a phase of its own), then no deadline at all.
        self.watchdog.arm(CHECKPOINT, self.progress.step)
        try:
            if failure is not None:
                self._fail(failure)
            else:
                digest = self._succeed(state)
        finally:
            self.watchdog.close()
        return RunResult(
            final_step=self.progress.step, final_loss=self.progress.loss, params_digest=digest,
            step_times=self.progress.step_times, losses=self.progress.losses,
            events=self.events, checkpoint_write_failures=self.checkpointer.write_failures,
            failure=failure, elastic_events_total=self.opts.prior_events + len(self.events),
            started_from=self.started_from, goodput=self.goodput.report(),
            process_started_at=self.process_started_at, finished_at=self.finished_at,
            **self.watch_record(),
        )

    def watch_record(self) -> dict[str, Any]:
        """The watchdog's part of the run's result: stalls, requests, slice times."""
        return {
            "stalls": [s.model_dump(by_alias=True, mode="json") for s in self.stalls_seen],
            "slice_replacements": [r.model_dump(by_alias=True, mode="json")
                                   for r in self.replacements],
            "slice_step_times": None if self.slice_times is None else
            [t.model_dump(by_alias=True, mode="json") for t in self.slice_times],
        }

    def _quiesce(self) -> None:
        """Let the snapshot hand-off and the checkpoint save in flight finish (bounded)
        before the run returns: a daemon thread still inside the runtime (a copy being
        waited for) when the process exits makes the C++ runtime abort the process."""
        for name, wait in (("snapshot", self.snapshots.settle), ("checkpoint",
                                                                  self.checkpointer.wait)):
            try:
                wait()
            except Exception as err:  # the run's own outcome is what to report
                log.info("waiting for the %s in flight at the end: %s", name, err)

    def _succeed(self, state: Any) -> str:
        digest = train.params_digest(state["params"])
        self.goodput.begin("checkpointing", time.time())
        self._quiesce()
        self.checkpointer.close()
        self._finish_goodput()
        self.checkpointer.latest_committed_step()  # refresh for the final report
        self.progress.state = "Succeeded"
        self._report(urgent=True)
        log.info("training done: step %d, loss %.4f, params %s", self.progress.step,
                 self.progress.loss or float("nan"), digest[:16])
        return digest

    def _fail(self, err: BaseException) -> None:
        reason = getattr(err, "reason", "TrainingError")
        log.error("%s: %s", reason, err)
        event = self._open_event()
        if event is not None:
            event.phase = "Failed"
        self.progress.state = "Failed"
        self._quiesce()
        try:
            self.checkpointer.close()
        except Exception as close_err:
            log.warning("closing checkpoints: %s", close_err)
        self._finish_goodput()
        self._report(urgent=True, reason=reason, message=str(err))

    def _finish_goodput(self) -> None:
        self.finished_at = time.time()
        self.goodput.finish(self.finished_at)

    # --- hooks of the retry loop (retry.ElasticHooks) -------------------------------------

    def on_waiting(self, need: int) -> None:
        self.watchdog.disarm()  # the elastic timeout bounds the wait
        event = self._open_event()
        if event is not None:
            event.phase = "WaitingForSlices"
            self._report(urgent=True)
        log.info("waiting for %d healthy slice(s) (timeout %ss)", need,
                 self.opts.elastic_timeout)

    def on_slices_ready(self, active: set[int], waited_seconds: float) -> None:
        event = self._open_event()
        if event is not None:
            event.wait_seconds = (event.wait_seconds or 0.0) + waited_seconds
            event.slices_back_at = time.time()

    def on_slice_down(self, error: jax.errors.JaxRuntimeError, retrying: bool) -> None:
        detected = time.time()
        self.watchdog.arm(CHECKPOINT, self.progress.step + 1)  # the settles below
        self.goodput.failed(detected, then="waiting_for_slices")
        if self.checkpoint_ack is not None and self.checkpoint_ack.paused:
            self.checkpoint_ack = self.checkpoint_ack.model_copy(update={"paused": False})
        down, fault_at = self.backend.failed_slices(error)
        text = str(error).splitlines()[0]
        blamed, self._blamed, self.stall = self._blamed, None, None
        if blamed is not None and blamed.slices & set(down):
            # The slices asked for are the ones lost: the event is the hang (or the
            # straggler), found when it was, not when the replacement took the slice.
            text, detected = f"{blamed.cause}; {text}", blamed.detected_at
            fault_at = blamed.fault_at if blamed.fault_at is not None else fault_at
        event = ElasticEvent(
            id=self.next_event_id(), kind="slice_down", error=text,
            failed_step=self.progress.step, slices_down=down, detected_at=detected,
            fault_at=fault_at,
        )
        self.events.append(event)
        self.current_event = event
        self.progress.state = "Recovering"
        self.metrics.on_event()
        log.warning("elastic event %d: %s at step %d (mesh of %s slices)", event.id,
                    event.error, event.failed_step, self.progress.active_slices)
        self._report(urgent=True)
        # Before any restore: finish or fail the save that may be in flight and delete
        # what nothing will write any more; publish a snapshot copy that completed
        # before the loss (the replicas on lost slices go with them).
        self.checkpointer.settle()
        self.snapshots.settle()
        self.watchdog.disarm()

    def on_scale_up(self, signal: ScaleUpSignal, retrying: bool) -> None:
        self.watchdog.arm(CHECKPOINT, self.progress.step + 1)
        self.snapshots.settle()
        self.watchdog.disarm()
        self.goodput.begin("waiting_for_slices", time.time())

    # --- one attempt: mesh, restore, steps -----------------------------------------------

    def _attempt(self, active: set[int]) -> Any:
        self._active, self._slow_reported = set(active), frozenset()
        self.watchdog.arm(RESTORE, self.progress.step + 1)
        compiled = self._compiled_for(tuple(sorted(active)))
        event = self._open_event()
        if event is not None:
            event.phase = "Restoring"
            self._report(urgent=True)
        state, from_step, source, seconds = self._restore_phase(compiled, active)
        self._resumed_from(from_step, source, seconds, len(active), event)
        self.cadences.attempt_started(from_step)
        self._attempt_step = from_step
        log.info("attempt %d: %d slice(s) %s, %d micro-batch(es); start at step %d (%s, "
                 "%.2fs)", len(self.events), len(active), sorted(active),
                 compiled.micro_batches, from_step, source, seconds)
        self.watchdog.done()
        self._report(urgent=True)
        self.watchdog.arm(FIRST_STEP, from_step + 1, self._mesh)
        return self._train(compiled, active, state, from_step)

    def _compiled_for(self, active: tuple[int, ...]) -> train.CompiledStep:
        micro = train.micro_batches_for(self.opts.batch, self.backend.total_slices,
                                        len(active), self.backend.devices_per_slice)
        key = (active, micro)
        self._mesh = key  # the steps of a mesh are timed against each other
        if key not in self._compiled:
            mesh = train.make_mesh(self.backend.slice_devices(active))
            self._compiled[key] = train.build_step(self.cfg, self.optimizer, mesh, micro,
                                                   self.opts.seed)
        return self._compiled[key]

    def _restore_phase(self, compiled: train.CompiledStep, active: set[int]
                       ) -> tuple[Any, int, str, float]:
        t0 = time.time()
        self.goodput.begin("restore", t0)
        try:
            state, from_step, source = self._restore(compiled)
            jax.block_until_ready(state)
            # A slice lost during the restore fails this attempt like a lost step would.
            # The phase carries the step that was running when the event hit.
            self.backend.on_phase("restore", self.progress.step + 1)
            self.backend.check(active)
        except BaseException:
            self.snapshots.discard("the restore from it failed")
            raise
        restored = time.time()
        self.goodput.restored(from_step, restored)
        self._record_restore(state, from_step, source, restored - t0, restored)
        return state, from_step, source, restored - t0

    def _record_restore(self, state: Any, step: int, source: str, seconds: float,
                        at: float) -> None:
        """status.training.lastRestore: bytes as the operator's scan counts a checkpoint
        step, or the state's bytes for a snapshot."""
        if source == "none":
            return
        if source == "checkpoint":
            size = self.checkpointer.step_size(step)
            nbytes = size.bytes if size is not None else None
        else:
            nbytes = sum(int(leaf.nbytes) for leaf in jax.tree.leaves(state))
        self.last_restore = restore_report(source=source, step=step, nbytes=nbytes,
                                           seconds=seconds,
                                           restored_at=datetime.fromtimestamp(at, UTC),
                                           measured_by=TRAINER)
        log.info("restored step %d from %s: %s bytes in %.3fs", step, source, nbytes, seconds)

    def _restore(self, compiled: train.CompiledStep) -> tuple[Any, int, str]:
        target = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                              self.abstract, compiled.shardings)
        snap_step = self.snapshots.latest_step()
        ckpt_step = self.checkpointer.latest_committed_step()
        if snap_step is not None and (ckpt_step is None or snap_step >= ckpt_step):
            try:
                return self.snapshots.restore(target), snap_step, "snapshot"
            except NoSurvivingReplica as err:
                log.warning("snapshot of step %d: %s; restoring from the newest committed "
                            "checkpoint", snap_step, err)
        elif snap_step is not None:
            self.snapshots.discard(f"the checkpoint of step {ckpt_step} is newer")
        if ckpt_step is not None:
            return self.checkpointer.restore(ckpt_step, target), ckpt_step, "checkpoint"
        return compiled.init_fn(), 0, "none"

    def _resumed_from(self, from_step: int, source: str, seconds: float, slices: int,
                      event: ElasticEvent | None) -> None:
        if event is not None:
            event.restored_from_step, event.restore_source = from_step, source
            event.restore_seconds, event.restored_at = seconds, time.time()
            event.active_slices_after = slices
        elif self.started_from is None:
            self.started_from = (from_step, source)
        self.progress.active_slices = slices
        # A new process that resumes from a checkpoint starts its count there.
        self.progress.step = max(self.progress.step, from_step)
        self.progress.state = "Recovering" if event is not None else "Training"

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
                    self._answer_request(step, state, active)
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
            self._finish_pending()
        finally:
            prefetch.close()
        return state

    def _device_batch(self, compiled: train.CompiledStep, step: int) -> Any:
        """The batch of the step after `step`, split into micro-batches, on the mesh."""
        tokens = train.shape_batch(self.data.batch(step), compiled.micro_batches)
        return jax.device_put(tokens, compiled.batch_sharding)

    def _dispatch(self, compiled: train.CompiledStep, state: Any, step: int,
                  prefetch: BatchPrefetcher) -> tuple[Any, Any]:
        """Start the step after `step`: (the new state, its loss), both on the device."""
        self.backend.on_phase("step", step + 1)
        t_start = time.time()
        state, metrics = compiled.step_fn(state, prefetch.get(step))
        pause = self.opts.min_step_seconds - (time.time() - t_start)
        if pause > 0:
            time.sleep(pause)  # a paced step: a fault during it still fails it
        return state, metrics["loss"]

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
        self.goodput.step_done(pending.step, now)
        self._after_step(pending.step, loss, seconds, now)
        self._measure_cadence(pending.step, seconds)
        self._watch_slices(pending.step)

    def _keep(self, step: int, state: Any, active: set[int], ready: Any) -> None:
        """Snapshot and checkpoint after `step` when they are due. Both work from one
        copy in pinned host memory, made by one program the training thread only
        dispatches; the rest happens in the background while the next steps run.
        `ready`: an output of the step (its loss), ready once the state is."""
        snapshot, checkpoint = self.cadences.due(step, self.snapshots.busy(),
                                                 self.checkpointer.saving())
        # The last step is always saved: a restarted head then finds the run done.
        checkpoint = checkpoint or step == self.opts.steps
        if not (snapshot or checkpoint):
            return
        self.goodput.begin("checkpointing", time.time())
        self.watchdog.relabel(CHECKPOINT)  # the step in flight goes on beside the copy
        # This thread's CPU time, not its wall time: on CPU the dispatch also waits for
        # the step that makes `state`, which is no cost of the copy.
        cpu = time.thread_time()
        pinned = to_pinned_host(state)
        if snapshot:
            self.snapshots.take(step, pinned, ready, dispatch=time.thread_time() - cpu)
            self.cadences.snapshot.made(step)
        if checkpoint and self.checkpointer.save(
                step, pinned, write_hook=self.backend.checkpoint_write_hook(active)):
            self.cadences.checkpoint.made(step)
        self._copy_until = step + 1  # the next step waits for the copy to read the state
        self.goodput.begin("step", time.time())

    # --- the cadence (cadence.py): what copies cost against the steps ---------------------

    def _measure_cadence(self, step: int, seconds: float) -> None:
        # Not clean: the attempt's first step (it compiles), a step with a copy in flight.
        if step > self._attempt_step + 1 and step > self._copy_until and \
                not self.snapshots.busy() and not self.checkpointer.saving():
            self.cadences.step_done(seconds)
        for cadence in self.cadences.measured():
            self._decide(cadence)

    def _decide(self, cadence: Cadence) -> None:
        before = (cadence.period, cadence.choice.reason)
        snapshot = cadence is self.cadences.snapshot
        # Failures this kind of copy would have saved steps from: any slice loss for a
        # snapshot; for a checkpoint, those a snapshot did not cover.
        failures = sum(1 for e in self.events if e.kind == "slice_down" and (
            snapshot or e.restore_source in ("checkpoint", "none")))
        choice = cadence.decide(failures, time.time() - self.process_started_at,
                                self._memory_headroom() if snapshot else None)
        if choice.period != before[0] or before[1] == "Measuring":
            log.info("%s cadence: every %d step(s) (%s: %s)",
                     "snapshot" if snapshot else "checkpoint", choice.period, choice.reason,
                     choice.message)
            self._report()

    def _memory_headroom(self) -> float | None:
        """Free host memory in copies of the snapshot (one replica per active slice). On
        the simulated backend the slices' pinned host memory is this host's; on Pathways
        it is the TPU hosts', which the controller cannot see (None: not weighed)."""
        if self.backend.name != "simulated":
            return None
        available = host_memory_available()
        copy = self._state_bytes * max(1, self.progress.active_slices or 1)
        return None if available is None or copy <= 0 else available / copy

    def _after_step(self, step: int, loss: float, seconds: float, now: float) -> None:
        event = self._open_event()
        p = self.progress
        p.step, p.loss, p.step_seconds = step, loss, seconds
        p.tokens_per_second = self._tokens_per_step / seconds if seconds > 0 else None
        p.step_times.append((step, now))
        p.losses.append((step, loss))
        self.metrics.on_step(step, loss, seconds, p.active_slices or 0)
        urgent = False
        if event is not None:
            event.resumed_at, event.resumed_step, event.phase = now, step, "Resumed"
            p.state = "Training"
            urgent = True
            log.info("%s", event.log_line())
            self.metrics.on_resumed(now - event.detected_at, event.steps_lost or 0)
        if step % self.opts.log_every == 0 or step == self.opts.steps or urgent:
            log.info("step %d/%d loss %.4f (%.3fs/step, %d slice(s))", step, self.opts.steps,
                     loss, seconds, p.active_slices or 0)
        self._report(urgent=urgent)

    def _scale_up_if_back(self, step: int, state: Any, active: set[int]) -> None:
        """Replica resize: slices are back. Keep the live state as a snapshot (nothing is
        lost) and start a new attempt on the larger mesh."""
        back = self.backend.returned_slices(active)
        if not back:
            return
        self._finish_pending()  # the snapshot is of a step done
        self.goodput.begin("checkpointing", time.time())
        self.watchdog.relabel(CHECKPOINT)
        self.snapshots.take(step, to_pinned_host(state))
        self.snapshots.settle()
        event = ElasticEvent(
            id=self.next_event_id(), kind="scale_up",
            error=f"slices {sorted(back)} are back", failed_step=step, slices_down=[],
            detected_at=time.time(), fault_at=None,
        )
        self.events.append(event)
        self.current_event = event
        log.info("elastic event %d: slices %s are back at step %d; scaling up", event.id,
                 sorted(back), step)
        self._report(urgent=True)
        raise ScaleUpSignal(event.error)


    # --- the operator's checkpoint requests (maintenance) ---------------------------------

    def _answer_request(self, step: int, state: Any, active: set[int]) -> None:
        """A request open and not answered yet: save `step` now, wait until it is
        committed (within the request's deadline), acknowledge it, and pause if asked."""
        assert self.requests is not None
        request = to_answer(self.requests.view(), self._request_done)
        if request is None:
            return
        self._request_done = request.id  # answered now or never: once
        self._finish_pending()  # the step saved is done, and reported as the step
        committed_at = self._save_for_request(step, state, active, request)
        if committed_at is None:
            return
        self.checkpoint_ack = CheckpointAck(id=request.id, step=step,
                                            committed_at=utc(committed_at),
                                            paused=request.pause)
        log.info("checkpoint request %d (%s, slices %s): step %d committed%s", request.id,
                 request.reason, request.slices, step,
                 "; paused until released" if request.pause else "")
        self._report(urgent=True)
        if request.pause:
            self._pause(request, active)

    def _save_for_request(self, step: int, state: Any, active: set[int],
                          request: CheckpointRequest) -> float | None:
        """Save `step` (unless a save of it is in flight or committed) and wait for the
        commit until the request's deadline: when it was committed, or None."""
        started = time.time()
        self.goodput.begin("checkpointing", started)
        self.watchdog.relabel(CHECKPOINT)
        try:
            timeout = request.deadline.timestamp() - started
            if timeout <= 0:
                log.warning("checkpoint request %d: its deadline passed before step %d; "
                            "not answered", request.id, step)
                return None
            if not self.checkpointer.has_save_of(step):
                self.checkpointer.save(step, to_pinned_host(state),
                                       write_hook=self.backend.checkpoint_write_hook(active))
            if not self.checkpointer.wait_committed(step, timeout):
                log.warning("checkpoint request %d: the save of step %d was not committed "
                            "by the deadline; not answered", request.id, step)
                return None
            return time.time()
        finally:
            self.goodput.begin("step", time.time())

    def _pause(self, request: CheckpointRequest, active: set[int]) -> None:
        """No step until the request is released (or expired, replaced, pauseSeconds
        passed); a slice lost meanwhile raises here or in the next step, the ordinary
        elastic event, and the restore finds the step just saved."""
        assert self.requests is not None
        self.goodput.begin("waiting_for_slices", time.time())
        self.watchdog.disarm()  # a hold is no stall: the request says when it ends
        started = last_health = time.monotonic()
        while True:
            why = pause_ends(self.requests.view(), request, time.monotonic() - started)
            self.backend.check(active)  # simulated: the loss raised here, as in a step
            if why is None and time.monotonic() - last_health >= PAUSE_HEALTH_SECONDS:
                # On Pathways the loss surfaces in the next step; a health check (a small
                # program per slice) says when to take it.
                last_health = time.monotonic()
                if active - self.backend.healthy_slices():
                    why = "a slice of the mesh is down"
            if why is not None:
                break
            time.sleep(PAUSE_POLL_SECONDS)
        log.info("checkpoint request %d: going on after %.1fs (%s)", request.id,
                 time.monotonic() - started, why)
        self.goodput.begin("step", time.time())
        self.watchdog.arm(STEP, self.progress.step + 1, self._mesh)
        if self.checkpoint_ack is not None and self.checkpoint_ack.id == request.id:
            self.checkpoint_ack = self.checkpoint_ack.model_copy(update={"paused": False})
        self._report(urgent=True)

    # --- the watchdog (watchdog.py) and stragglers ------------------------------------

    def _watch_next(self, step: int) -> None:
        """`step` is done: what was armed is measured, and the next step is armed (as a
        save's when a copy of this one is in flight)."""
        seconds = self.watchdog.done()
        if self.stall is not None and self._blamed is None:
            log.warning("watchdog: step %d completed after all, after %.1fs (a false "
                        "alarm: the deadline now allows for it)", step, seconds or 0.0)
            self.stall = None
            self._report(urgent=True)
        phase = CHECKPOINT if step + 1 <= self._copy_until else STEP
        self.watchdog.arm(phase, step + 1, self._mesh)

    def _on_stall(self, stall: Stall) -> None:
        """The watchdog's thread: a phase ran past its deadline. Stacks to the log, the
        stall in the status, and the slices the evidence blames asked to be replaced."""
        log.error("watchdog: %s; every thread's stack follows", stall.describe())
        self.metrics.on_stall()
        log_stacks(log)
        suspects, evidence = self.backend.blame()
        self.stall = StallReport(
            step=stall.step, phase=stall.phase, started_at=utc(stall.started_at),
            detected_at=utc(stall.detected_at),
            deadline_seconds=round(stall.deadline_seconds, 3), suspect_slices=suspects,
            evidence=evidence[:512])
        self.stalls_seen.append(self.stall)
        if not suspects:
            log.error("watchdog: no slice to blame (%s): reported; the operator's progress "
                      "deadline restarts the trainer", evidence)
            self._report(urgent=True)
            return
        which = ", ".join(str(s) for s in suspects)
        self._request_replacement(
            suspects, Reason.SLICE_HUNG, f"{stall.describe()}: {evidence}",
            _Blamed(frozenset(suspects),
                    f"{Reason.SLICE_HUNG}: slice {which} hung in {stall.what} "
                    f"(no result after {stall.seconds:.1f}s, deadline "
                    f"{stall.deadline_seconds:.1f}s), replaced",
                    stall.started_at, stall.detected_at))

    def _request_replacement(self, slices: list[int], reason: str, message: str,
                             blamed: _Blamed) -> None:
        number = (self.slice_replacement.id if self.slice_replacement else 0) + 1
        self._blamed = blamed
        self.slice_replacement = SliceReplacementRequest(
            id=number, slices=slices, reason=reason, requested_at=utc(time.time()),
            message=message[:512])
        self.replacements.append(self.slice_replacement)
        log.warning("asking for slice(s) %s to be replaced (request %d, %s): %s",
                    slices, number, reason, message)
        self._report(urgent=True)
        if self.backend.replace_slices(slices):
            log.info("the simulated backend replaces slice(s) %s itself", slices)

    def _watch_slices(self, step: int) -> None:
        """Each slice's part of the recent steps, where the backend times them: slow
        slices reported (and, with --on-slow-slice Replace, asked to be replaced)."""
        parts = self.backend.slice_parts()
        self.slice_times = None if parts is None else step_times(parts)
        slow = frozenset(slow_slices(self.slice_times)) - self._slow_reported
        if not slow:
            return
        self._slow_reported |= slow  # once per slice and attempt
        times = ", ".join(f"slice {t.slice} {t.relative:g}x" for t in self.slice_times or []
                          if t.slice in slow)
        message = (f"{times} the fastest slice's part of a step (median of the last "
                   f"{len(parts or [])}), at step {step}")
        log.warning("slow slice(s) %s: %s", sorted(slow), message)
        if self.opts.on_slow_slice != "Replace" or self._blamed is not None:
            self._report(urgent=True)
            return
        self._request_replacement(
            sorted(slow), Reason.SLICE_SLOW, message,
            _Blamed(slow, f"{Reason.SLICE_SLOW}: {message}, replaced", None, time.time()))
