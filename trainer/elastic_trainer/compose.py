"""The Trainer `etj train` runs: the step loop (loop.py) composed of the default
policies. Kept apart from the loop so that the loop reads on its own, and so that a test
that swaps one policy builds the rest as `etj train` does.
"""
from __future__ import annotations

import time

from elastic_api.budgets import JOBSET_RESTARTS, mean_seconds_between
from elastic_trainer import train
from elastic_trainer.backends import Backend
from elastic_trainer.cadence import Cadence, Cadences, budget_shares
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.checkpoint_requests import CheckpointRequests, RequestSource
from elastic_trainer.configs import ModelConfig
from elastic_trainer.copies import Copies
from elastic_trainer.data import BatchSource
from elastic_trainer.evaluation import Evaluator
from elastic_trainer.executables import ExecutableStore
from elastic_trainer.goodput_tracker import GoodputAccount
from elastic_trainer.loop import LoopOptions, Trainer
from elastic_trainer.mesh_steps import MeshSteps
from elastic_trainer.own_activity import Activity
from elastic_trainer.report import Metrics, StatusReporter
from elastic_trainer.restore import Restorer
from elastic_trainer.retry import SliceLossLimit
from elastic_trainer.retry_hooks import Recovery
from elastic_trainer.snapshots import ReplicaSnapshots
from elastic_trainer.stalls import Stalls
from elastic_trainer.standby import with_standbys
from elastic_trainer.training_status import TrainingStatus
from elastic_trainer.watchdog import Clock, Watchdog


def build_trainer(cfg: ModelConfig, opts: LoopOptions, backend: Backend, data: BatchSource,
                  checkpointer: Checkpointer, reporter: StatusReporter | None = None,
                  metrics: Metrics | None = None, requests: RequestSource | None = None,
                  clock: Clock | None = None, executables: ExecutableStore | None = None
                  ) -> Trainer:
    """The Trainer `etj train` runs: the loop composed of the default policies, its
    snapshots in the slices' memory, its checkpoints `checkpointer`'s, its reports to
    `reporter`, the operator's checkpoint requests read from `requests`; `clock`: what
    the watchdog and the reported phases time by (a test's jumps); `executables`: where
    compiled steps are kept (None: in this process's memory)."""
    # Standby slices held out of the mesh: the loop sees a job of the mesh's slices.
    backend = with_standbys(backend, opts.standby_slices)
    spec = train.StateSpec.of(cfg, opts.steps, opts.learning_rate)
    snapshots = ReplicaSnapshots()
    snapshot_budget, checkpoint_budget = budget_shares(
        opts.overhead_budget_percent / 100, opts.snapshot_period, checkpointer.period)
    # A checkpoint is what a crash restores (main starts again in its pod): its prior is
    # the crashes' share of the published rate for the job's hosts.
    crashes = None if opts.job_hosts is None else \
        mean_seconds_between(JOBSET_RESTARTS, opts.job_hosts)
    cadences = Cadences(Cadence(opts.snapshot_period, snapshot_budget, opts.steps),
                        Cadence(checkpointer.period, checkpoint_budget, opts.steps, crashes),
                        snapshots.costs, checkpointer.save_costs)
    # Slice losses (what --max-retries counts), those of an earlier process included.
    loss_limit = SliceLossLimit(opts.max_retries, used=opts.prior_failures,
                                window_seconds=opts.retry_window_seconds,
                                recent=opts.prior_retry_times)
    started = opts.process_started_at or time.time()
    activity = Activity()
    status = TrainingStatus(
        total_steps=opts.steps, process_started_at=started,
        goodput=GoodputAccount(started, opts.prior_goodput, opts.prior_step),
        checkpointer=checkpointer, snapshots=snapshots, cadences=cadences,
        loss_limit=loss_limit, reporter=reporter, metrics=metrics,
        prior_events=opts.prior_events, checkpoint_ack=opts.prior_ack, activity=activity)
    stalls = Stalls(backend, status, opts.on_slow_slice, opts.slow_slice_seconds)
    watchdog = Watchdog(opts.watchdog, stalls.on_stall, activity, clock)
    return Trainer(
        cfg, opts, backend, data, spec=spec, status=status, checkpointer=checkpointer,
        snapshots=snapshots,
        copies=Copies(cadences, snapshots, checkpointer, backend, status, spec.nbytes),
        restorer=Restorer(spec, snapshots, checkpointer, backend, status),
        recovery=Recovery(backend, status, watchdog, stalls, checkpointer, snapshots,
                          opts.elastic_timeout),
        stalls=stalls, watchdog=watchdog, loss_limit=loss_limit,
        steps=MeshSteps(cfg, spec, backend, batch=opts.batch, seed=opts.seed,
                        steps=opts.steps, learning_rate=opts.learning_rate,
                        store=executables or ExecutableStore(None),
                        budget=opts.overhead_budget_percent / 100,
                        min_slices=opts.min_slices),
        requests=None if requests is None else CheckpointRequests(
            requests, checkpointer, backend, status, watchdog),
        evaluator=None if opts.evaluation.every == 0 else Evaluator(
            opts.evaluation, cfg, opts.seed, opts.batch, backend, status, watchdog,
            opts.min_step_seconds))
