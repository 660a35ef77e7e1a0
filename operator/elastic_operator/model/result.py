"""What one reconcile returns to its caller, the work queue (controller-runtime's
`ctrl.Result`): whether it worked, when to look at the job again, and the work that
follows its status write (the replacement's writes, the Event posts), which the queue's
worker that ran the reconcile runs after it, in order (work_queue.py); the queue keeps the
soonest look asked for each job, by the reconcile or by its follow-ups. A reconcile asks
the queue for nothing while it runs: everything it wants of it is here.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

logger = logging.getLogger("elastic_operator")

# A look for something that comes due is asked a little after it: the check compares
# against the clock then, and one a hair early would find it not due yet.
PAST_DUE_S = 0.1
# Look again at once (someone else wrote the job while our status write was on its way).
AT_ONCE = 0.0
# Wake a job's reconcile after some seconds, thread-safe (WorkQueue.add_after).
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
    # What follows the status write, in order (`FollowUp`): run after the reconcile by
    # the worker that ran it, whatever the verdict (the status records what each does).
    follow_ups: tuple[FollowUp, ...] = field(default=(), compare=False, repr=False)


FAILED = Result(ok=False)
# A piece of work after a status write: its outcome (ok False: failed, logged and counted
# by the piece, retried after the queue's backoff; requeue_after: a look again, e.g. a
# throttled write). Safe to run late or not at all: the written status records it, and the
# next reconcile (this replica's or a new leader's) does what is left.
FollowUp = Callable[[], Result]


def run_follow_ups(work: Iterable[FollowUp]) -> Result:
    """Run each piece in order, one that raises stopping none after it; their outcome as
    one: failed if any failed, the soonest look any asked."""
    ok, looks = True, []
    for piece in work:
        try:
            outcome = piece()
        except Exception:  # each piece logs its own failures; this is a bug
            logger.exception("a follow-up raised")
            outcome = FAILED
        ok = ok and outcome.ok
        looks.append(outcome.requeue_after)
    return Result(ok=ok, requeue_after=soonest(*looks))


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
