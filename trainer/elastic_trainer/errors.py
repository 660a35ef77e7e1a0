"""The errors of elastic training, and the one place that decides what a slice loss is.

A lost slice reaches the single controller as a `jax.errors.JaxRuntimeError`. Which of
those mean "a slice went down" is pathwaysutils' call (`is_error_due_to_slice_down`: the
classifier `Manager.elastic_retry` uses), so both backends and the checkpointer ask
`is_slice_down_error` here and nowhere else.
"""
from __future__ import annotations

from collections.abc import Sequence


class ElasticRetriesExhausted(RuntimeError):
    reason = "ElasticRetriesExhausted"


class ElasticTimeout(RuntimeError):
    reason = "ElasticTimeout"


class ScaleUpSignal(Exception):
    """Raised at a step boundary when inactive slices are healthy again (replica resize);
    the counterpart of pathwaysutils' `ScaleUpSignalError`."""


class CheckpointDirectoryGone(RuntimeError):
    """The checkpoint directory disappeared while training (deleted or unmounted)."""

    reason = "TrainingError"


def slice_down_error(slices: Sequence[int], detail: str | None = None) -> Exception:
    """The error a slice loss raises inside a step: a real `jax.errors.JaxRuntimeError`
    with `DATA_LOSS`, as Pathways raises it."""
    import jax

    which = ", ".join(str(s) for s in sorted(slices))
    one = len(slices) == 1
    noun = "slice" if one else "slices"
    detail = detail or ("is down" if one else "are down")
    return jax.errors.JaxRuntimeError(f"DATA_LOSS: {noun} {which} {detail}")


def is_slice_down_error(err: BaseException) -> bool:
    """pathwaysutils' verdict: a JaxRuntimeError with DATA_LOSS (certain) or
    DEADLINE_EXCEEDED, NOT_FOUND, INTERNAL (treated as likely)."""
    import jax
    from pathwaysutils.elastic.elastic import is_error_due_to_slice_down

    return isinstance(err, jax.errors.JaxRuntimeError) and bool(
        is_error_due_to_slice_down(err, log_traceback=False))
