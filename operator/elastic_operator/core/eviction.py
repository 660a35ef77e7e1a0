"""Kueue's waitForPodsReady clock (on by default from Kueue v0.19): when Kueue evicts the
job unless every pod is Ready, said before it happens (condition EvictionPending,
status.admission.podsReadyDeadline, one Warning Event once half the time has gone).

Kueue evicts an admitted Workload whose pods are not all Ready `timeout` after its
admission (PodsReady False, WaitForStart), or `recoveryTimeout` after they stopped being
all Ready (WaitForRecovery, from the PodsReady condition's transition); a JobSet is
Ready for Kueue only when every replicated Job is. So a slice replacement (seconds), a
move off a dead node or a maintenance move, and training on fewer slices while one comes
back, all run on that clock: the default (30 min) is far longer than a replacement, and
a slice that cannot come back (no healthy node pool) costs the whole job an eviction
(PodsReadyTimeout), after which Kueue readmits it and the trainer resumes from the newest
committed checkpoint (docs/operations.md, "With Kueue").

The timeouts are in Kueue's Configuration, not on the Workload: the operator is told them
(`--kueue-pods-ready-timeout-seconds`, `--kueue-recovery-timeout-seconds`). The start of
the clock is the Workload's. Pure: `now` is passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from elastic_api.models import AdmissionStatus, Condition, SliceStatus
from elastic_api.queueing import (
    EVICTION_PENDING,
    PODS_READY_WAIT_FOR_RECOVERY,
    REASON_NOT_ADMITTED,
    REASON_PODS_READY,
    REASON_WAITING_FOR_RECOVERY,
    REASON_WAITING_FOR_START,
    WORKLOAD_ADMITTED,
    WORKLOAD_PODS_READY,
)
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import duration, iso
from elastic_operator.model.objects import ObservedWorkload

# Kueue's defaults (apis/config/v1beta2/defaults.go): timeout 30 min, recoveryTimeout
# the same.
DEFAULT_PODS_READY_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class PodsReadyTimeouts:
    """Kueue's waitForPodsReady timeouts, as the operator is told them."""

    timeout_s: float = DEFAULT_PODS_READY_TIMEOUT_S
    recovery_timeout_s: float | None = None  # None: timeout_s, as Kueue defaults it

    @property
    def recovery_s(self) -> float:
        return self.timeout_s if self.recovery_timeout_s is None else self.recovery_timeout_s


@dataclass(frozen=True)
class EvictionClock:
    """What one reconcile concludes about Kueue's waitForPodsReady clock."""

    condition: Condition | None = None  # None: not a queued job under waitForPodsReady
    deadline: datetime | None = None  # when Kueue evicts unless all pods are Ready
    warned: datetime | None = None  # the deadline the Warning Event was posted for
    events: list[StatusEvent] = field(default_factory=list)


@dataclass(frozen=True)
class _Running:
    """The clock, while it runs: which one, since when, until when."""

    reason: str
    since: datetime
    window_s: float
    setting: str  # the Kueue setting and the operator flag it comes from

    @property
    def deadline(self) -> datetime:
        return self.since + timedelta(seconds=self.window_s)

    @property
    def warn_at(self) -> datetime:
        """Half the time gone: the slice is not coming back by itself."""
        return self.since + timedelta(seconds=self.window_s / 2)


def eviction_clock(setter: ConditionSetter, workload: ObservedWorkload | None,
                   queued: bool, previous: AdmissionStatus | None,
                   slices: list[SliceStatus], timeouts: PodsReadyTimeouts,
                   terminal: bool, prev_condition: Condition | None) -> EvictionClock:
    """EvictionPending, the deadline and its Warning Event. Set on a queued job whose
    Workload carries Kueue's PodsReady condition (waitForPodsReady on); a finished job
    keeps what it had."""
    if terminal:
        return EvictionClock(condition=prev_condition)
    if workload is None or workload.condition(WORKLOAD_PODS_READY) is None:
        return EvictionClock()
    if queued or not workload.is_true(WORKLOAD_ADMITTED):
        return EvictionClock(setter.false(
            EVICTION_PENDING, REASON_NOT_ADMITTED,
            "Kueue does not run the job now: no waitForPodsReady clock"))
    running = _running(workload, timeouts)
    if running is None:
        return EvictionClock(setter.false(
            EVICTION_PENDING, REASON_PODS_READY,
            "every pod is Ready (Kueue's PodsReady): Kueue's waitForPodsReady evicts "
            "nothing"))
    condition = setter.true(EVICTION_PENDING, running.reason,
                            _message(running, slices, setter.now))
    warned = previous.eviction_warned if previous is not None else None
    events = []
    if setter.now >= running.warn_at and warned != running.deadline:
        warned = running.deadline
        events.append(StatusEvent(reason=EVICTION_PENDING, type="Warning",
                                  message=_warning(running, slices, setter.now)))
    return EvictionClock(condition, running.deadline, warned, events)


def _running(workload: ObservedWorkload, timeouts: PodsReadyTimeouts) -> _Running | None:
    ready = workload.condition(WORKLOAD_PODS_READY)
    if ready is None or ready.status == "True" or ready.last_transition_time is None:
        return None
    if ready.reason == PODS_READY_WAIT_FOR_RECOVERY:
        return _Running(REASON_WAITING_FOR_RECOVERY, ready.last_transition_time,
                        timeouts.recovery_s, f"recoveryTimeout {duration(timeouts.recovery_s)}"
                        " (--kueue-recovery-timeout-seconds)")
    admitted = workload.condition(WORKLOAD_ADMITTED)
    since = admitted.last_transition_time if admitted is not None else None
    if since is None:
        return None
    return _Running(REASON_WAITING_FOR_START, since, timeouts.timeout_s,
                    f"timeout {duration(timeouts.timeout_s)} (--kueue-pods-ready-timeout-"
                    "seconds)")


def _not_ready(slices: list[SliceStatus]) -> str:
    out = [f"{s.index} ({s.state}" + (f": {s.reason}" if s.reason else "") + ")"
           for s in slices if s.state != "Ready"]
    if not out:
        return "the head, or a slice between two looks of the operator"
    return ("slice " if len(out) == 1 else "slices ") + ", ".join(out)


def _message(running: _Running, slices: list[SliceStatus], now: datetime) -> str:
    since = f"since its admission at {iso(running.since)}" \
        if running.reason == REASON_WAITING_FOR_START else f"since {iso(running.since)}"
    left = (running.deadline - now).total_seconds()
    when = f"in {duration(left)}" if left > 0 else "now (the deadline has passed)"
    return (f"Kueue evicts the whole job at {iso(running.deadline)}, {when}, unless every "
            f"pod is Ready by then (not all Ready {since}; waitForPodsReady "
            f"{running.setting}): {_not_ready(slices)}. Evicted, it is requeued and "
            "resumes from its newest committed checkpoint when readmitted")


def _warning(running: _Running, slices: list[SliceStatus], now: datetime) -> str:
    left = max(0.0, (running.deadline - now).total_seconds())
    return (f"{_not_ready(slices)} not Ready for {duration((now - running.since).total_seconds())}"
            f": Kueue's waitForPodsReady evicts the whole job at {iso(running.deadline)} (in "
            f"{duration(left)}) unless every pod is Ready by then ({running.setting})")


def next_look_in(admission: AdmissionStatus | None, timeouts: PodsReadyTimeouts,
                 now: datetime) -> float | None:
    """Seconds until the Warning Event may be due (a reconcile then posts it), None: none
    is. The status keeps the deadline, not which of Kueue's two clocks runs: each one's
    half-way time is a candidate, the next one to come first (a wake that finds nothing
    due costs one reconcile)."""
    if admission is None or admission.pods_ready_deadline is None \
            or admission.eviction_warned == admission.pods_ready_deadline:
        return None
    candidates = sorted(admission.pods_ready_deadline - timedelta(seconds=t / 2)
                        for t in {timeouts.timeout_s, timeouts.recovery_s})
    future = [c for c in candidates if c > now]
    return (future[0] - now).total_seconds() if future else 0.0
