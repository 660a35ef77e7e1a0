"""The loop runs the policies it is given: a test swaps one through the constructor."""
from __future__ import annotations

from pathlib import Path

from elastic_trainer.backends import SimulatedBackend
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.compose import build_trainer
from elastic_trainer.configs import get_config
from elastic_trainer.copies import Copies
from elastic_trainer.data import SyntheticSource
from elastic_trainer.loop import LoopOptions, Trainer
from elastic_trainer.simulated_faults import FaultSchedule


class _NeverDue(Copies):
    def due(self, step: int) -> tuple[bool, bool]:
        return False, False


def test_a_policy_is_swapped_through_the_constructor(tmp_path: Path) -> None:
    cfg = get_config("tiny")
    opts = LoopOptions(steps=4, batch=2, seed=0, max_retries=0, log_every=10**6)
    built = build_trainer(cfg, opts, SimulatedBackend(1, 1, FaultSchedule([])),
                          SyntheticSource(0, 2, cfg.seq_len, cfg.vocab_size),
                          Checkpointer(str(tmp_path), period=1, keep=5, async_save=False))
    never = _NeverDue(built.copies.cadences, built.snapshots, built.checkpointer,
                      built.backend, built.status, built.spec.nbytes)
    trainer = Trainer(cfg, opts, built.backend, built.data, spec=built.spec,
                      status=built.status, checkpointer=built.checkpointer,
                      snapshots=built.snapshots, copies=never, restorer=built.restorer,
                      recovery=built.recovery, stalls=built.stalls, watchdog=built.watchdog,
                      loss_limit=built.loss_limit, steps=built.steps)
    try:
        result = trainer.run()
    finally:
        trainer.backend.close()
    assert result.failure is None and result.final_step == 4
    # Every step was due by --checkpoint-period 1; the loop still saves its last one.
    assert sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == [4]
    assert result.events == [] and result.started_from == (0, "none")
