"""Stalls and slow slices, and the slices the trainer asks to be replaced for them
(status.training.stall, .sliceReplacement, .sliceStepTimes; docs/trainer.md, "Watchdog").

    on_stall         the watchdog's thread (watchdog.py): a phase past its deadline.
                     Every thread's stack to the log, the stall reported (a device call
                     the training thread is blocked in named), and the slices
                     the backend's evidence blames asked to be replaced: their loss is the
                     DATA_LOSS of any lost slice, and its elastic event names the hang
    step_completed   the stalled step completed after all: a false alarm, cleared
    watch_slices     each slice's part of the recent steps, where the backend times them:
                     slow slices (elastic_api.stragglers) reported, and with
                     --on-slow-slice Replace asked to be replaced too
    take_blamed      a slice was lost: what was asked for, for the event to name
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from elastic_api.conditions import Reason
from elastic_api.models import SliceReplacementRequest, StallReport
from elastic_api.stragglers import SLOW_SLICE_SECONDS, slow_slices, step_times, sustained
from elastic_trainer.backends import Backend
from elastic_trainer.events import utc
from elastic_trainer.training_status import TrainingStatus
from elastic_trainer.watchdog import Stall, log_stacks

log = logging.getLogger("elastic_trainer")


@dataclass(frozen=True)
class Blamed:
    """Slices the trainer asked to be replaced, and why: the elastic event their loss
    becomes names it."""

    slices: frozenset[int]
    cause: str
    fault_at: float | None  # when the fault began, if known (the hung step's start)
    detected_at: float


class Stalls:
    def __init__(self, backend: Backend, status: TrainingStatus,
                 on_slow_slice: str = "Report",
                 slow_seconds: float = SLOW_SLICE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`on_slow_slice`: "Report", or "Replace" (ask for a straggler's replacement
        once it has been slow `slow_seconds` on end, by `clock`)."""
        self.backend, self.status, self.on_slow_slice = backend, status, on_slow_slice
        self.slow_seconds, self.clock = slow_seconds, clock
        self._blamed: Blamed | None = None
        self._slow_reported: frozenset[int] = frozenset()
        self._slow_since: dict[int, float] = {}

    def attempt_started(self) -> None:
        self._slow_reported = frozenset()  # a slow slice is reported once per attempt
        self._slow_since = {}

    def on_stall(self, stall: Stall) -> None:
        """The watchdog's thread: a phase ran past its deadline. Stacks to the log, the
        stall in the status, and the slices the evidence blames asked to be replaced."""
        where = stall.where
        log.error("watchdog: %s%s; every thread's stack follows", stall.describe(),
                  "" if where is None else f", the training thread in {where.frame}")
        self.status.metrics.on_stall()
        log_stacks(log)
        suspects, evidence = self.backend.blame()
        if where is not None and where.device_call:
            evidence = (f"the training thread is blocked {stall.seconds:.0f}s in "
                        f"{where.frame}; {evidence}")
        self.status.stall = StallReport(
            step=stall.step, phase=stall.stall_phase, started_at=utc(stall.started_at),
            detected_at=utc(stall.detected_at),
            deadline_seconds=round(stall.deadline_seconds, 3), suspect_slices=suspects,
            evidence=evidence[:512])
        self.status.stalls.append(self.status.stall)
        if not suspects:
            log.error("watchdog: no slice to blame (%s): reported; the operator's progress "
                      "deadline restarts the trainer", evidence)
            self.status.report(urgent=True)
            return
        which = ", ".join(str(s) for s in suspects)
        self._request_replacement(
            suspects, Reason.SLICE_HUNG, f"{stall.describe()}: {evidence}",
            Blamed(frozenset(suspects),
                   f"{Reason.SLICE_HUNG}: slice {which} hung in {stall.what} "
                   f"(no result after {stall.seconds:.1f}s, deadline "
                   f"{stall.deadline_seconds:.1f}s), replaced",
                   stall.started_at, stall.detected_at))

    def step_completed(self, step: int, seconds: float | None) -> None:
        """`step` completed after `seconds`: a stall reported for it that blamed no slice
        was a false alarm (the watchdog's deadline now allows for it)."""
        if self.status.stall is not None and self._blamed is None:
            log.warning("watchdog: step %d completed after all, after %.1fs (a false "
                        "alarm: the deadline now allows for it)", step, seconds or 0.0)
            self.status.stall = None
            self.status.report(urgent=True)

    def take_blamed(self) -> Blamed | None:
        """A slice was lost: the slices asked to be replaced (if any), forgotten with the
        stall; the elastic event names them when they are the ones lost."""
        blamed, self._blamed, self.status.stall = self._blamed, None, None
        return blamed

    def watch_slices(self, step: int) -> None:
        """Each slice's part of the recent steps, where the backend times them: slow
        slices reported, and (--on-slow-slice Replace) asked to be replaced once slow
        for `slow_seconds` on end (elastic_api.stragglers)."""
        parts = self.backend.slice_parts()
        times = None if parts is None else step_times(parts)
        self.status.slice_step_times = times
        now_slow = slow_slices(times)
        self._slow_since, found = sustained(self._slow_since, times, self.clock(),
                                            self.slow_seconds)
        new = frozenset(now_slow) - self._slow_reported
        if new:
            log.warning("slow slice(s) %s: %s", sorted(new), self._slow_words(times, new,
                                                                             parts, step))
            self.status.report(urgent=True)
        self._slow_reported |= new  # reported once per slice and attempt
        if not found or self.on_slow_slice != "Replace" or self._blamed is not None:
            return
        message = self._slow_words(times, found, parts, step) + \
            f", slow for {self.slow_seconds:g} s or more"
        self._request_replacement(
            found, Reason.SLICE_SLOW, message,
            Blamed(frozenset(found), f"{Reason.SLICE_SLOW}: {message}, replaced", None,
                   time.time()))

    @staticmethod
    def _slow_words(times: Any, slow: Iterable[int], parts: Any, step: int) -> str:
        shown = ", ".join(f"slice {t.slice} {t.relative:g}x" for t in times or []
                          if t.slice in set(slow))
        return (f"{shown} the fastest slice's part of a step (median of the last "
                f"{len(parts or [])}), at step {step}")

    def _request_replacement(self, slices: list[int], reason: str, message: str,
                             blamed: Blamed) -> None:
        current = self.status.slice_replacement
        number = (current.id if current else 0) + 1
        self._blamed = blamed
        request = SliceReplacementRequest(
            id=number, slices=slices, reason=reason, requested_at=utc(time.time()),
            message=message[:512])
        self.status.slice_replacement = request
        self.status.replacements.append(request)
        log.warning("asking for slice(s) %s to be replaced (request %d, %s): %s",
                    slices, number, reason, message)
        self.status.report(urgent=True)
        if self.backend.replace_slices(slices):
            log.info("the simulated backend replaces slice(s) %s itself", slices)
