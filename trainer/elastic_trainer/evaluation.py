"""Evaluation (`etj train --eval-every N --eval-steps M`): after every N-th train step, the
mean loss of M batches of a held-out synthetic stream (data.eval_batch), computed from
the parameters alone. Nothing of training is touched (no state, no data, no random
draw), so a run with evaluations ends bitwise equal to one without.

The evaluation is a phase of its own (Evaluation, elastic_api.phases), nested in the wait
for the next step: each evaluation step is a heartbeat (the watchdog's deadline counts
from it; status.training.activity.lastActivityAt), so an evaluation longer than a step's
deadline is no stall; and the next step's time leaves it out.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import jax

from elastic_trainer import train
from elastic_trainer.backends import Backend
from elastic_trainer.configs import ModelConfig
from elastic_trainer.data import eval_batch
from elastic_trainer.training_status import TrainingStatus
from elastic_trainer.watchdog import EVALUATION, Watchdog

log = logging.getLogger("elastic_trainer")


@dataclass(frozen=True)
class EvalOptions:
    every: int = 0  # train steps between evaluations; 0: none
    steps: int = 10  # evaluation steps (batches) each


class Evaluator:
    def __init__(self, opts: EvalOptions, cfg: ModelConfig, seed: int, batch: int,
                 backend: Backend, status: TrainingStatus, watchdog: Watchdog,
                 min_step_seconds: float = 0.0) -> None:
        """`min_step_seconds`: an evaluation step takes at least this long, as a train
        step does (--min-step-seconds: demos on CPU)."""
        self.opts, self.cfg, self.seed, self.batch = opts, cfg, seed, batch
        self.backend, self.status, self.watchdog = backend, status, watchdog
        self.min_step_seconds = min_step_seconds

    def due(self, step: int) -> bool:
        """An evaluation follows train step `step`."""
        return self.opts.every > 0 and step % self.opts.every == 0

    def run(self, compiled: train.CompiledStep, params: Any, step: int,
            active: set[int]) -> float:
        """Evaluate `params` (after train step `step`, on `compiled`'s mesh over `active`):
        the mean loss. A slice lost meanwhile fails it as it fails a step."""
        started = time.time()
        total = 0.0
        with self.watchdog.during(EVALUATION, step + 1):
            self.status.report()  # the phase is reported before it can block
            for index in range(self.opts.steps):
                total += self._step(compiled, params, index, active)
                self.watchdog.beat()
                self.status.report()
        loss = total / self.opts.steps
        self.status.eval_losses.append((step, loss))
        log.info("evaluation after step %d: loss %.4f (%d batch(es), %.2fs)", step, loss,
                 self.opts.steps, time.time() - started)
        return loss

    def _step(self, compiled: train.CompiledStep, params: Any, index: int,
              active: set[int]) -> float:
        t_start = time.time()
        tokens = train.shape_batch(
            eval_batch(self.seed, index, self.batch, self.cfg.seq_len, self.cfg.vocab_size),
            compiled.micro_batches)
        loss = float(compiled.eval_fn(params, jax.device_put(tokens, compiled.batch_sharding)))
        self.backend.check(active)  # simulated: a slice lost fails the evaluation
        pause = self.min_step_seconds - (time.time() - t_start)
        if pause > 0:
            time.sleep(pause)
        return loss
