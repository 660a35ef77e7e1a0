"""The retry policy, apart from one attempt: the counterpart of pathwaysutils'
`Manager.elastic_retry`, for a loop that must record and report every phase.

`run_elastic(backend, attempt, ...)` does what `elastic_retry` does around a function:
before each attempt it waits for enough healthy slices (all of them = pause and resume;
`min_slices` = replica resize) and makes them the active set; it calls
`attempt(active)` under `jax.default_device(backend.default_device())`; a slice-down
`JaxRuntimeError` (errors.is_slice_down_error) or a `ScaleUpSignal` is an elastic event:
the backend cleans up, the retry policy decides, the hooks record it, and the next
attempt starts. Any other error goes through unchanged.

A retry policy has pathwaysutils' `RetryPolicy` signature, `(attempt, error) -> bool`
with `attempt` counted from 1, so `pathwaysutils.elastic.manager.ElasticRetryLimit(n)`
can be passed as it is and then counts exactly as `elastic_retry` does (every attempt,
scale-ups included). The trainer's default, `SliceLossLimit`, counts differently, on
purpose (docs/trainer.md, "Retries").
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import jax

from elastic_api.budgets import ELASTIC_RETRIES, Budget
from elastic_trainer.backends import Backend
from elastic_trainer.errors import ElasticRetriesExhausted, ScaleUpSignal, is_slice_down_error

log = logging.getLogger(__name__)

T = TypeVar("T")
RetryPolicy = Callable[[int, Exception], bool]


class SliceLossLimit:
    """At most `max_retries` slice losses, over the whole run or (`window_seconds`) within
    any window of that many seconds: the restart budget rule both sides apply
    (elastic_api.budgets). Those of an earlier process of the same job count too (`used`
    over the run, `recent`: when those within the window came); a scale-up is not a
    failure and costs nothing. `--max-retries 0`: the first slice loss ends the run."""

    def __init__(self, max_retries: int, used: int = 0, *, window_seconds: int | None = None,
                 recent: Sequence[datetime] = (),
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        if max_retries < 0:
            raise ValueError(f"--max-retries must be >= 0, got {max_retries}")
        self.budget = Budget(ELASTIC_RETRIES, max_retries, window_seconds, False, 0)
        self.used, self.now = used, now
        self.times: tuple[datetime, ...] = self.budget.recent(recent, now()) \
            if window_seconds is not None else ()
        self.last_used = used

    @property
    def max_retries(self) -> int:
        return self.budget.allowed

    def __call__(self, attempt: int, error: Exception) -> bool:
        if isinstance(error, ScaleUpSignal):
            return True
        charge = self.budget.charge(self.used, self.times, self.now())
        self.used += 1
        self.times, self.last_used = charge.recent, charge.used
        return charge.allowed

    @property
    def remaining(self) -> int:
        return self.budget.remaining(self.used, self.times, self.now())

    @property
    def recent(self) -> list[datetime] | None:
        """When the slice losses that count now came (None: a count over the whole run)."""
        if self.budget.window_seconds is None:
            return None
        return list(self.budget.recent(self.times, self.now()))

    def exhausted_message(self, error: BaseException) -> str:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        span = "" if self.budget.window_seconds is None else f" {self.budget.span()}"
        return (f"{self.last_used} elastic events{span}, --max-retries is "
                f"{self.max_retries}; last: {first}")


class ElasticHooks(Protocol):
    """What the caller records at each point of the retry loop."""

    def on_waiting(self, need: int) -> None:
        """Fewer than `need` slices are healthy: the wait begins."""
        ...

    def on_slices_ready(self, active: set[int], waited_seconds: float) -> None: ...

    def on_slice_down(self, error: jax.errors.JaxRuntimeError, retrying: bool) -> None: ...

    def on_scale_up(self, signal: ScaleUpSignal, retrying: bool) -> None: ...


def run_elastic(backend: Backend, attempt: Callable[[set[int]], T], *, policy: RetryPolicy,
                min_slices: int | None, timeout: float | None, hooks: ElasticHooks) -> T:
    """Run `attempt` until it returns, retrying it after elastic events while `policy`
    allows. Raises ElasticRetriesExhausted (from the last error) when it does not, and
    ElasticTimeout when the slices do not come back in time."""
    need = min_slices or backend.total_slices
    number = 1
    while True:
        started = time.monotonic()
        if len(backend.healthy_slices()) < need:
            hooks.on_waiting(need)
        active = backend.wait_for_slices(need, timeout)
        hooks.on_slices_ready(active, time.monotonic() - started)
        error: Exception
        try:
            with jax.default_device(backend.default_device()):
                return attempt(active)
        except ScaleUpSignal as signal:
            backend.on_elastic_event()
            retrying = policy(number, signal)
            hooks.on_scale_up(signal, retrying)
            error = signal
        except jax.errors.JaxRuntimeError as err:
            if not is_slice_down_error(err):
                raise
            backend.on_elastic_event()
            retrying = policy(number, err)
            hooks.on_slice_down(err, retrying)
            error = err
        if not retrying:
            raise ElasticRetriesExhausted(_exhausted_message(policy, number, error)) from error
        number += 1


def _exhausted_message(policy: Any, attempt: int, error: BaseException) -> str:
    describe = getattr(policy, "exhausted_message", None)
    if describe is not None:
        return str(describe(error))
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"attempt {attempt} failed and the retry policy allows no more; last: {first}"
