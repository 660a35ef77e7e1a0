"""Goodput: where the training thread's time went (status.training.goodput). Pure: the
loop passes the times in; nothing here reads a clock.

The account follows one cursor through the process's wall time, so every second since
the process started goes to exactly one place (the counters add up to the wall time):

    begin(activity, now)   the time since the last mark goes to the activity that was
                           going on; `activity` goes on from `now`
    step_done(step, now)   a step finished: the time since the last mark is its time
    restored(step, now)    the restore finished (the time since the mark is `restore`);
                           steps after `step` will be done again
    failed(now, activity)  the activity under way failed (a lost slice): a step cut
                           short is recomputed work; `activity` goes on from `now`

Activities: "startup", "waiting_for_slices", "restore", "checkpointing" (the badput
causes of TrainerGoodput) and "step". Time marked during "step" without a step
finishing (the loop's own work after a step: the report, the log line) counts with the
step before it (before the first step after a restore: with the next one); a step cut
short by a failure is `recomputed_steps`.

The first step after a restore compiles for the mesh: its time beyond the median step is
`recompile` (`startup` for a process's first step); the rest counts as a normal step.
Without a median yet (the job's very first step), the split waits for the next step.

Steps whose results are thrown away by a restore of an older step move from productive
to `recomputed_steps`: those of this process by their own time; those of an earlier
process (the job's last reported step beyond the restored one) by the median step.

A step's time the job lost while it ran: on fewer slices than the job's, the missing
slices' share (`fewer_slices`); held up by a slow slice, its time beyond the fastest
slice's part (`slow_slices`). A step that hung is `stalled` until the watchdog noticed it
(beyond a normal step), the rest of it `recomputed_steps`. The causes are the benchmark
model's (elastic_api.badput): a live job is read in the same words.
"""
from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass

from elastic_api.models import GoodputCounters, TrainerGoodput

CAUSES = ("waiting_for_slices", "fewer_slices", "startup", "restore", "recompile",
          "recomputed_steps", "stalled", "slow_slices", "checkpointing")
ACTIVITIES = ("startup", "waiting_for_slices", "restore", "checkpointing", "step")
MEDIAN_WINDOW = 256  # normal steps the median is taken over (the newest)
KEPT_STEPS = 100_000  # step times remembered for moving redone steps out of productive


@dataclass
class _FirstStep:
    """A first step after a restore, not yet split into a normal step and the rest."""

    step: int
    seconds: float
    cause: str  # "startup" or "recompile"


class GoodputAccount:
    def __init__(self, started_at: float, prior: TrainerGoodput | None = None,
                 prior_step: int = 0) -> None:
        """`started_at`: the process's start; `prior`, `prior_step`: the goodput and the
        step an earlier process of the job last reported (status.training)."""
        self.productive = prior.productive_seconds if prior is not None else 0.0
        counters = prior.badput_seconds if prior is not None else GoodputCounters()
        self.badput: dict[str, float] = {c: float(getattr(counters, c)) for c in CAUSES}
        self._prior_median = prior.median_step_seconds if prior is not None else None
        self._prior_step = prior_step
        self._cursor = started_at
        self._activity = "startup"
        self._carry = 0.0  # "step" time marked without a step finishing
        self._normal: deque[float] = deque(maxlen=MEDIAN_WINDOW)
        self._kept: OrderedDict[int, float] = OrderedDict()  # this process's kept steps
        self._first: _FirstStep | None = None
        self._last_step: int | None = None  # the last step done since the last restore
        self._next_first: str | None = None  # the cause of the next step's excess
        self._steps_done = 0
        self._restores = 0

    # --- marks ---------------------------------------------------------------------------

    def _elapsed(self, now: float) -> float:
        seconds = max(0.0, now - self._cursor)
        self._cursor = max(self._cursor, now)
        return seconds

    def begin(self, activity: str, now: float) -> None:
        if activity not in ACTIVITIES:
            raise ValueError(f"unknown activity {activity!r}")
        seconds = self._elapsed(now)
        if self._activity != "step":
            self.badput[self._activity] += seconds
        elif self._last_step is None:
            self._carry += seconds
        else:  # the loop's own work after a step that was kept
            self.productive += seconds
            self._kept[self._last_step] = self._kept.get(self._last_step, 0.0) + seconds
        self._activity = activity

    def failed(self, now: float, then: str = "waiting_for_slices",
               stalled: float = 0.0) -> None:
        """The activity under way failed at `now` (a slice was lost); `then` goes on.
        `stalled`: seconds of it a hung step stood still before the watchdog noticed."""
        seconds = self._elapsed(now)
        cause = "recomputed_steps" if self._activity == "step" else self._activity
        stuck = min(seconds, max(0.0, stalled)) if self._activity == "step" else 0.0
        self.badput["stalled"] += stuck
        self.badput[cause] += seconds - stuck
        self.badput["recomputed_steps"] += self._carry  # the loop's work since the step
        self._carry = 0.0
        self._activity = then

    def restored(self, step: int, now: float) -> None:
        """The restore that began at the last mark finished at `now`, at `step`."""
        self.begin("step", now)  # the interval goes to the activity marked: "restore"
        self._settle_first(final=True)
        for done in [s for s in self._kept if s > step]:
            self._recompute(self._kept.pop(done))
        if self._restores == 0 and self._prior_step > step:
            # The earlier process's steps after `step` are done again; their time is
            # known only as a median step each.
            median = self.median_step_seconds()
            if median is not None:
                self._recompute((self._prior_step - step) * median)
        self._restores += 1
        self._last_step = None
        self._next_first = "startup" if self._steps_done == 0 else "recompile"

    def step_done(self, step: int, now: float, fewer: float = 0.0, slow: float = 0.0) -> None:
        """Step `step` finished at `now`; `fewer`, `slow`: the shares of its time lost to
        training on fewer slices and to a slow slice."""
        seconds = self._elapsed(now) + self._carry
        shares = {"fewer_slices": max(0.0, fewer), "slow_slices": max(0.0, slow)}
        total = sum(shares.values())
        scale = 1.0 / total if total > 1.0 else 1.0  # never more than the step itself
        for cause, share in shares.items():
            self.badput[cause] += seconds * share * scale
        seconds *= 1.0 - min(total, 1.0)
        self._carry = 0.0
        self._activity = "step"
        self._steps_done += 1
        self._last_step = step
        if self._next_first is not None:
            self._first = _FirstStep(step, seconds, self._next_first)
            self._next_first = None
        else:
            self._normal.append(seconds)
            self._keep(step, seconds)
        self._settle_first(final=False)

    def finish(self, now: float) -> None:
        """The run ended at `now`: close the open interval and settle every step (the
        loop's own work after the last step counts with the steps)."""
        self.begin(self._activity, now)
        self._settle_first(final=True)
        self.productive += self._carry
        self._carry = 0.0

    # --- bookkeeping -----------------------------------------------------------------------

    def _keep(self, step: int, seconds: float) -> None:
        self.productive += seconds
        self._kept[step] = self._kept.get(step, 0.0) + seconds
        self._kept.move_to_end(step)
        while len(self._kept) > KEPT_STEPS:
            self._kept.popitem(last=False)

    def _recompute(self, seconds: float) -> None:
        moved = min(seconds, self.productive)
        self.productive -= moved
        self.badput["recomputed_steps"] += moved

    def _settle_first(self, final: bool) -> None:
        first = self._first
        median = self.median_step_seconds()
        if first is None or (median is None and not final):
            return
        normal = first.seconds if median is None else min(first.seconds, median)
        self.badput[first.cause] += first.seconds - normal
        self._keep(first.step, normal)
        self._first = None

    def median_step_seconds(self) -> float | None:
        if self._normal:
            return statistics.median(self._normal)
        return self._prior_median

    def report(self) -> TrainerGoodput:
        """The counters as of the last mark (a first step not yet split is left out)."""
        median = self.median_step_seconds()
        return TrainerGoodput(
            productive_seconds=round(self.productive, 3),
            badput_seconds=GoodputCounters(**{c: round(v, 3) for c, v in self.badput.items()}),
            median_step_seconds=None if median is None else round(median, 4),
        )

    def total_seconds(self) -> float:
        """Everything accounted for so far (a first step not yet split included)."""
        pending = (self._first.seconds if self._first else 0.0) + self._carry
        return self.productive + sum(self.badput.values()) + pending
