"""What one reconcile returns to its caller, the work queue (controller-runtime's
`ctrl.Result`): whether it worked, and when to look at the job again; the queue
(work_queue.py) keeps the soonest look asked for each job. A reconcile asks the queue for
nothing while it runs: everything it wants of it is here.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# A look for something that comes due is asked a little after it: the check compares
# against the clock then, and one a hair early would find it not due yet.
PAST_DUE_S = 0.1
# Look again at once (someone else wrote the job while our status write was on its way).
AT_ONCE = 0.0
# Wake a job's reconcile after some seconds, thread-safe (WorkQueue.add_after): what the
# follow-ups (followups.py) ask once they end, after their reconcile returned.
Wake = Callable[[str, str, float], None]


@dataclass(frozen=True)
class Result:
    # False: it failed (logged and counted); the queue retries it after a backoff.
    ok: bool = True
    # Look again in this many seconds (a grace period or deadline that ends); None: no need.
    requeue_after: float | None = None
    # A progress-only status write waits this long (core/pacing.py): look again then, for
    # progress only (a run it starts may start over if the job is requeued meanwhile:
    # core/startover.py).
    paced_after: float | None = None
    # The pass was cut short, the job requeued meanwhile (core/startover.py): the rest of
    # the reconcile, for its caller to run at once, once it has covered every naming of
    # the job so far (app.py `queued_reconcile`). None: the reconcile ended.
    again: Callable[[], Result] | None = field(default=None, compare=False, repr=False)


FAILED = Result(ok=False)


class Refused(Exception):
    """The API server refused an object the spec renders to (reported as InvalidSpec:
    writes/executor.py raises it, the reconcile reports it)."""


def due_in(waits: Iterable[float | None]) -> float | None:
    """When to look again for the soonest of `waits` (seconds until each comes due; None:
    nothing due), a little past it."""
    due = [w for w in waits if w is not None]
    return max(0.0, min(due)) + PAST_DUE_S if due else None


def soonest(*delays: float | None) -> float | None:
    """The soonest of some looks asked (None: none)."""
    asked = [d for d in delays if d is not None]
    return min(asked) if asked else None
