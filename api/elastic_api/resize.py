"""Training on fewer slices with the same global batch (replica resize), written once:
how many micro-batches keep a global batch on the slices left (the bundled trainer's
micro-batching), and how many slices a job needs when spec.elastic.minSlices is unset
(the renderer's `--min-slices`; docs/api.md, "spec.elastic.minSlices").

Unset, a job of TRAIN_ON_FROM_SLICES slices or more trains on while up to one slice in
TRAIN_ON_SHARE (at least one) is being replaced, where the bundled trainer's global batch
splits over every count of slices left; otherwise it waits for every slice (pause and
resume). At 16,384 hosts an interruption comes every ~23 minutes and a replacement takes
minutes: pausing the whole job for each costs several percent. Another trainer
(`trainer.command`) gets no `--min-slices`: its own options decide (docs/trainer.md).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Final

TRAIN_ON_FROM_SLICES: Final = 4
TRAIN_ON_SHARE: Final = 16
# The simulated backend's devices per slice (the trainer's --devices-per-slice default).
SIMULATED_DEVICES_PER_SLICE: Final = 2


def micro_batches(global_batch: int, total_slices: int, active_slices: int,
                  devices_per_slice: int) -> int | None:
    """How many micro-batches keep `global_batch` on `active_slices` of `total_slices`:
    1 with every slice; with fewer, the smallest m >= total / active such that each
    micro-batch divides evenly over the active devices. None: no m does."""
    active_devices = active_slices * devices_per_slice
    if active_devices < 1 or global_batch % active_devices:
        return None  # m micro-batches of global_batch / m over them: D divides the batch
    per_device = global_batch // active_devices  # m divides it
    start = -(-total_slices // active_slices)  # ceil
    return next((m for m in range(start, per_device + 1) if per_device % m == 0), None)


@lru_cache(maxsize=1024)
def default_min_slices(num_slices: int, batch: int | None, devices_per_slice: int) -> int:
    """The slices a job needs to train when spec.elastic.minSlices is unset (`batch`:
    the bundled trainer's global batch; None: another trainer)."""
    if batch is None or num_slices < TRAIN_ON_FROM_SLICES:
        return num_slices
    missing = max(1, num_slices // TRAIN_ON_SHARE)
    while missing and any(micro_batches(batch, num_slices, num_slices - k,
                                        devices_per_slice) is None
                          for k in range(1, missing + 1)):
        missing -= 1  # fewer slices missing, where the batch splits over them
    return num_slices - missing
