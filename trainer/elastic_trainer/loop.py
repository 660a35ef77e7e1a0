"""The single-controller training loop with in-process elastic recovery.

    run():
      settle checkpoints (finish or fail the in-flight save, delete incomplete steps)
      loop over attempts:
        wait for slices (all = pause and resume; >= --min-slices = replica resize)
        build (or reuse) the step for a mesh over the healthy slices
        restore from the newer of the in-memory snapshot and the last committed
        checkpoint (or initialize), then train step by step:
          the step raises JaxRuntimeError(DATA_LOSS) when a slice of the mesh is down
          -> elastic event: settle checkpoints, count the retry, next attempt
          in replica resize, a slice that is back -> snapshot the live state, next attempt
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
import numpy as np

from elastic_api.models import ElasticEventReport, TrainingReport
from elastic_trainer import train
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.configs import ModelConfig
from elastic_trainer.data import BatchSource
from elastic_trainer.elastic import (
    Backend,
    ElasticRetriesExhausted,
    ElasticTimeout,
    ScaleUpSignal,
)
from elastic_trainer.report import Metrics, StatusReporter

log = logging.getLogger("elastic_trainer")


def utc(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


@dataclass
class LoopOptions:
    steps: int
    batch: int
    seed: int
    min_slices: int | None = None
    elastic_timeout: float | None = 300.0
    max_retries: int = 10
    snapshot_period: int = 0
    log_every: int = 10
    learning_rate: float | None = None
    min_step_seconds: float = 0.0
    simulated_write_seconds: float = 0.0
    # Carried over from an earlier process of the same job (report.prior_run): event ids
    # and the retry budget go on, never start again at 0.
    prior_events: int = 0
    prior_failures: int = 0


@dataclass
class ElasticEvent:
    id: int
    kind: str  # "slice_down" or "scale_up"
    error: str
    failed_step: int
    slices_down: list[int]
    detected_at: float
    fault_at: float | None
    phase: str = "Detected"
    restored_from_step: int | None = None
    restore_source: str | None = None
    restore_seconds: float | None = None
    restored_at: float | None = None
    resumed_at: float | None = None
    resumed_step: int | None = None
    active_slices_after: int | None = None

    @property
    def steps_lost(self) -> int | None:
        if self.restored_from_step is None:
            return None
        return self.failed_step - self.restored_from_step

    def summary(self) -> dict[str, Any]:
        detect = None if self.fault_at is None else max(0.0, self.detected_at - self.fault_at)
        resume = None if self.resumed_at is None else self.resumed_at - self.detected_at
        return {
            "id": self.id, "kind": self.kind, "error": self.error,
            "failed_step": self.failed_step, "restored_from_step": self.restored_from_step,
            "restore_source": self.restore_source, "slices_down": self.slices_down,
            "detect_seconds": detect, "restore_seconds": self.restore_seconds,
            "resume_seconds": resume, "steps_lost": self.steps_lost,
            "resumed_step": self.resumed_step, "active_slices_after": self.active_slices_after,
            "detected_at": self.detected_at, "resumed_at": self.resumed_at,
        }

    def report(self) -> ElasticEventReport:
        return ElasticEventReport(
            id=self.id, phase=self.phase,
            detected_at=utc(self.detected_at),
            error=self.error, failed_step=self.failed_step, slices_down=self.slices_down,
            restored_from_step=self.restored_from_step,
            restore_source=self.restore_source,
            restored_at=utc(self.restored_at), resumed_at=utc(self.resumed_at),
            resumed_step=self.resumed_step,
        )


@dataclass
class Snapshot:
    step: int
    state: Any  # host copy: numpy tree (simulated) or pinned_host arrays (Pathways)


@dataclass
class RunResult:
    final_step: int
    final_loss: float | None
    params_digest: str
    step_times: list[tuple[int, float]]
    losses: list[tuple[int, float]]
    events: list[ElasticEvent]
    checkpoint_write_failures: int
    failure: BaseException | None = None
    elastic_events_total: int = 0  # with an earlier process's (LoopOptions.prior_events)
    started_from: tuple[int, str] | None = None


@dataclass
class _Progress:
    step: int = 0  # last completed step (high-water mark of this process)
    loss: float | None = None
    tokens_per_second: float | None = None
    active_slices: int | None = None
    state: str = "Initializing"
    step_times: list[tuple[int, float]] = field(default_factory=list)
    losses: list[tuple[int, float]] = field(default_factory=list)


class Trainer:
    def __init__(self, cfg: ModelConfig, opts: LoopOptions, backend: Backend,
                 data: BatchSource, checkpointer: Checkpointer,
                 reporter: StatusReporter | None = None, metrics: Metrics | None = None) -> None:
        self.cfg, self.opts, self.backend, self.data = cfg, opts, backend, data
        self.checkpointer = checkpointer
        self.reporter, self.metrics = reporter, metrics or Metrics(None)
        self.optimizer = train.make_optimizer(cfg, opts.steps, opts.learning_rate)
        self.abstract = train.abstract_state(cfg, self.optimizer)
        self.snapshot: Snapshot | None = None
        self.events: list[ElasticEvent] = []
        self.failures = opts.prior_failures  # slice-down events (what --max-retries counts)
        self.progress = _Progress()
        self.current_event: ElasticEvent | None = None
        self._compiled: dict[tuple[tuple[int, ...], int], train.CompiledStep] = {}
        self._last_snapshot_step: int | None = None
        self.started_from: tuple[int, str] | None = None  # (step, source) of this process
        self.process_started_at = time.time()
        self._tokens_per_step = opts.batch * cfg.seq_len
        self._save_meshes: dict[int, set[int]] = {}  # checkpoint step -> slices it came from
        if backend.name == "simulated":
            checkpointer.write_hook = self._checkpoint_written

    def _checkpoint_written(self, step: int) -> None:
        """Simulated backend, in the background commit of a checkpoint: a slice of the
        mesh that went down while its shards were written loses them; the save fails
        (on Pathways the runtime fails it by itself)."""
        if self.opts.simulated_write_seconds > 0:
            time.sleep(self.opts.simulated_write_seconds)  # the shards take this long
        self.backend.on_phase("checkpoint", step)
        down = sorted(self._save_meshes.pop(step, set()) - self.backend.healthy_slices())
        if down:
            from elastic_trainer.elastic import slice_down_error

            raise slice_down_error(down, "went down during the checkpoint write")

    def _next_event_id(self) -> int:
        return self.opts.prior_events + len(self.events) + 1

    # --- reporting ----------------------------------------------------------------------

    def training_report(self, reason: str | None = None, message: str | None = None
                        ) -> TrainingReport:
        p = self.progress
        return TrainingReport(
            observed_at=datetime.now(UTC), state=p.state,
            reason=reason, message=message, step=p.step, total_steps=self.opts.steps,
            loss=p.loss, tokens_per_second=p.tokens_per_second, attempt=len(self.events),
            active_slices=p.active_slices,
            last_committed_checkpoint_step=self.checkpointer.latest_committed_step_cached(),
            last_snapshot_step=self._last_snapshot_step,
            elastic_events_total=self.opts.prior_events + len(self.events),
            retries_remaining=max(0, self.opts.max_retries - self.failures),
            process_id=os.getpid(), host_name=socket.gethostname(),
            process_started_at=utc(self.process_started_at),
            elastic_event=self.current_event.report() if self.current_event else None,
        )

    def _report(self, urgent: bool = False, reason: str | None = None,
                message: str | None = None) -> None:
        if self.reporter is not None:
            self.reporter.update(self.training_report(reason, message), urgent=urgent)

    # --- the outer loop: attempts --------------------------------------------------------

    def run(self) -> RunResult:
        self.backend.start()
        deleted = self.checkpointer.settle()
        if deleted:
            log.info("deleted incomplete checkpoint steps %s", deleted)
        self._report(urgent=True)
        failure: BaseException | None = None
        state: Any = None
        while True:
            try:
                state = self._attempt()
                break
            except ScaleUpSignal:
                continue
            except (ElasticRetriesExhausted, ElasticTimeout) as err:
                failure = err
                break
            except jax.errors.JaxRuntimeError as err:
                if not self.backend.is_slice_down_error(err):
                    raise
                try:
                    self._on_slice_down(err)
                except ElasticRetriesExhausted as exhausted:
                    failure = exhausted
                    break
        if failure is not None:
            self._fail(failure)
            digest = ""
        else:
            digest = train.params_digest(state["params"])
            self.checkpointer.close()
            self.checkpointer.latest_committed_step()  # refresh for the final report
            self.progress.state = "Succeeded"
            self._report(urgent=True)
            log.info("training done: step %d, loss %.4f, params %s", self.progress.step,
                     self.progress.loss or float("nan"), digest[:16])
        return RunResult(
            final_step=self.progress.step, final_loss=self.progress.loss, params_digest=digest,
            step_times=self.progress.step_times, losses=self.progress.losses,
            events=self.events, checkpoint_write_failures=self.checkpointer.write_failures,
            failure=failure, elastic_events_total=self.opts.prior_events + len(self.events),
            started_from=self.started_from,
        )

    def _fail(self, err: BaseException) -> None:
        reason = getattr(err, "reason", "TrainingError")
        log.error("%s: %s", reason, err)
        if self.current_event is not None and self.current_event.resumed_at is None:
            self.current_event.phase = "Failed"
        self.progress.state = "Failed"
        try:
            self.checkpointer.close()
        except Exception as close_err:
            log.warning("closing checkpoints: %s", close_err)
        self._report(urgent=True, reason=reason, message=str(err))

    def _on_slice_down(self, err: jax.errors.JaxRuntimeError) -> None:
        detected = time.time()
        self.backend.on_elastic_event()
        active = self.progress.active_slices
        down, fault_at = self.backend.failed_slices(err)
        event = ElasticEvent(
            id=self._next_event_id(), kind="slice_down", error=str(err).splitlines()[0],
            failed_step=self.progress.step, slices_down=down, detected_at=detected,
            fault_at=fault_at,
        )
        self.events.append(event)
        self.current_event = event
        self.failures += 1
        self.progress.state = "Recovering"
        self.metrics.on_event()
        log.warning("elastic event %d: %s at step %d (mesh of %s slices)", event.id,
                    event.error, event.failed_step, active)
        self._report(urgent=True)
        # Before any restore: finish or fail the save that may be in flight, and delete
        # the incomplete steps nothing will write any more.
        self.checkpointer.settle()
        if self.failures > self.opts.max_retries:
            raise ElasticRetriesExhausted(
                f"{self.failures} elastic events, --max-retries is {self.opts.max_retries}; "
                f"last: {event.error}"
            ) from err

    # --- one attempt: mesh, restore, steps -----------------------------------------------

    def _wait_for_slices(self) -> set[int]:
        total = self.backend.total_slices
        need = self.opts.min_slices or total
        if len(self.backend.healthy_slices()) < need:
            if self.current_event is not None and self.current_event.resumed_at is None:
                self.current_event.phase = "WaitingForSlices"
                self._report(urgent=True)
            log.info("waiting for %d healthy slice(s) (timeout %ss)", need,
                     self.opts.elastic_timeout)
        return self.backend.wait_for_slices(need, self.opts.elastic_timeout)

    def _compiled_for(self, active: tuple[int, ...]) -> train.CompiledStep:
        micro = train.micro_batches_for(self.opts.batch, self.backend.total_slices,
                                        len(active), self.backend.devices_per_slice)
        key = (active, micro)
        if key not in self._compiled:
            mesh = train.make_mesh(self.backend.slice_devices(active))
            self._compiled[key] = train.build_step(self.cfg, self.optimizer, mesh, micro,
                                                   self.opts.seed)
        return self._compiled[key]

    def _restore(self, compiled: train.CompiledStep) -> tuple[Any, int, str]:
        snap_step = self.snapshot.step if self.snapshot else None
        ckpt_step = self.checkpointer.latest_committed_step()
        if snap_step is not None and (ckpt_step is None or snap_step >= ckpt_step):
            assert self.snapshot is not None
            state = jax.device_put(self.snapshot.state, compiled.shardings)
            return state, snap_step, "snapshot"
        if ckpt_step is not None:
            target = jax.tree.map(
                lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                self.abstract, compiled.shardings,
            )
            return self.checkpointer.restore(ckpt_step, target), ckpt_step, "checkpoint"
        return compiled.init_fn(), 0, "none"

    def _take_snapshot(self, step: int, state: Any) -> None:
        kind = self.backend.snapshot_memory_kind
        if kind is None:
            # Own copies: on CPU a fetched array can share the device buffer, which the
            # next step (state is donated) may overwrite.
            host = jax.tree.map(lambda x: np.array(x, copy=True), jax.device_get(state))
        else:
            host = jax.device_put(state, jax.tree.map(
                lambda s: s.with_memory_kind(kind), jax.tree.map(lambda x: x.sharding, state)))
        self.snapshot = Snapshot(step, host)
        self._last_snapshot_step = step

    def _attempt(self) -> Any:
        active_set = self._wait_for_slices()
        active = tuple(sorted(active_set))
        compiled = self._compiled_for(active)
        event = self.current_event if (
            self.current_event is not None and self.current_event.resumed_at is None
        ) else None
        if event is not None:
            event.phase = "Restoring"
            self._report(urgent=True)
        t0 = time.time()
        state, from_step, source = self._restore(compiled)
        jax.block_until_ready(state)
        # A slice lost during the restore fails this attempt like a lost step would. The
        # phase carries the step that was running when the event hit.
        self.backend.on_phase("restore", self.progress.step + 1)
        self.backend.check(active_set)
        restore_seconds = time.time() - t0
        if event is not None:
            event.restored_from_step, event.restore_source = from_step, source
            event.restore_seconds, event.restored_at = restore_seconds, time.time()
            event.active_slices_after = len(active)
        elif self.started_from is None:
            self.started_from = (from_step, source)
        self.progress.active_slices = len(active)
        # A new process that resumes from a checkpoint starts its count there.
        self.progress.step = max(self.progress.step, from_step)
        self.progress.state = "Recovering" if event is not None else "Training"
        log.info("attempt %d: %d slice(s) %s, %d micro-batch(es); start at step %d (%s, %.2fs)",
                 len(self.events), len(active), list(active), compiled.micro_batches,
                 from_step, source, restore_seconds)
        self._report(urgent=True)

        resize = self.opts.min_slices is not None and self.opts.min_slices < \
            self.backend.total_slices
        step = from_step
        while step < self.opts.steps:
            if resize and len(active) < self.backend.total_slices:
                back = self.backend.returned_slices(active_set)
                if back:
                    self._scale_up(step, state, back)
            next_step = step + 1
            self.backend.on_phase("step", next_step)
            t_start = time.time()
            tokens = jax.device_put(
                train.shape_batch(self.data.batch(step), compiled.micro_batches),
                compiled.batch_sharding,
            )
            state, metrics = compiled.step_fn(state, tokens)
            pause = self.opts.min_step_seconds - (time.time() - t_start)
            if pause > 0:
                time.sleep(pause)  # a paced step: a fault during it still fails it
            # The slice-down error surfaces here, inside the step, as on Pathways.
            self.backend.check(active_set)
            loss = float(metrics["loss"])
            now = time.time()
            step = next_step
            self._after_step(step, loss, now - t_start, now, event)
            event = None if (event is not None and event.resumed_at is not None) else event
            if self.opts.snapshot_period and step % self.opts.snapshot_period == 0:
                self._take_snapshot(step, state)
            # The last step is always saved: a restarted head then finds the run done.
            if self.checkpointer.should_save(step) or step == self.opts.steps:
                self._save_meshes[step] = active_set
                self.checkpointer.save(step, state)
        return state

    def _after_step(self, step: int, loss: float, seconds: float, now: float,
                    event: ElasticEvent | None) -> None:
        p = self.progress
        p.step, p.loss = step, loss
        p.tokens_per_second = self._tokens_per_step / seconds if seconds > 0 else None
        p.step_times.append((step, now))
        p.losses.append((step, loss))
        self.metrics.on_step(step, loss, seconds, p.active_slices or 0)
        urgent = False
        if event is not None:
            event.resumed_at, event.resumed_step, event.phase = now, step, "Resumed"
            p.state = "Training"
            urgent = True
            self._log_event(event)
            self.metrics.on_resumed(now - event.detected_at, event.steps_lost or 0)
        if step % self.opts.log_every == 0 or step == self.opts.steps or urgent:
            log.info("step %d/%d loss %.4f (%.3fs/step, %d slice(s))", step, self.opts.steps,
                     loss, seconds, p.active_slices or 0)
        self._report(urgent=urgent)

    def _log_event(self, event: ElasticEvent) -> None:
        s = event.summary()
        if event.kind == "scale_up":
            log.info("elastic event %d: scale up to %d slices at step %d; snapshot restored in "
                     "%.2fs; resumed at step %s after %.1fs; 0 steps lost", event.id,
                     event.active_slices_after or 0, event.failed_step,
                     event.restore_seconds or 0.0, event.resumed_step, s["resume_seconds"])
            return
        slices = ", ".join(str(i) for i in event.slices_down) or "?"
        noun = "slices" if len(event.slices_down) > 1 else "slice"
        detect = (
            "" if s["detect_seconds"] is None
            else f", detected after {s['detect_seconds']:.1f}s"
        )
        log.info(
            "elastic event %d: %s %s down at step %d (%s%s); restored step %s from %s in "
            "%.1fs; resumed at step %s after %.1fs; %s steps lost",
            event.id, noun, slices, event.failed_step, event.error.split(":")[0], detect,
            event.restored_from_step, event.restore_source, event.restore_seconds or 0.0,
            event.resumed_step, s["resume_seconds"], event.steps_lost,
        )

    def _scale_up(self, step: int, state: Any, back: set[int]) -> None:
        """Replica resize: slices are back. Keep the live state as a snapshot (nothing is
        lost) and start a new attempt on the larger mesh."""
        now = time.time()
        self._take_snapshot(step, state)
        event = ElasticEvent(
            id=self._next_event_id(), kind="scale_up",
            error=f"slices {sorted(back)} are back", failed_step=step, slices_down=[],
            detected_at=now, fault_at=None,
        )
        self.events.append(event)
        self.current_event = event
        log.info("elastic event %d: slices %s are back at step %d; scaling up", event.id,
                 sorted(back), step)
        self._report(urgent=True)
        raise ScaleUpSignal(event.error)


def summary_dict(result: RunResult, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "params_digest": result.params_digest,
        "final_step": result.final_step,
        "final_loss": result.final_loss,
        "process_id": os.getpid(),
        "host_name": socket.gethostname(),
        "step_times": [[s, t] for s, t in result.step_times],
        "losses": [[s, float(np.float64(v))] for s, v in result.losses],
        "elastic_events": [e.summary() for e in result.events],
        "elastic_events_total": result.elastic_events_total,
        "started_from": (None if result.started_from is None else
                         {"step": result.started_from[0], "source": result.started_from[1]}),
        "checkpoint_write_failures": result.checkpoint_write_failures,
        "status": "Failed" if result.failure else "Succeeded",
        "reason": getattr(result.failure, "reason", None) if result.failure else None,
        "message": str(result.failure) if result.failure else None,
    }
    out.update(extra or {})
    return out
