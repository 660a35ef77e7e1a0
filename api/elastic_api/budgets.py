"""Restart budgets: how many restarts of each kind a job may make before it stops trying,
and the one rule that spends them (issue 67). The operator spends a slice's restarts, the
trainer restarts it makes for stalls and the JobSet's restarts; the trainer its elastic
events (`--max-retries`). docs/api.md, "Restart budgets", is the user's page of it.

A budget is a count over a window: at most `allowed` restarts within any `window`
seconds, a sliding window, as Kubernetes lets a crashing container run again at once
but backs off ever longer while it keeps crashing, forgetting it all after 10 minutes of
running (KEP-4603). A long run at the published failure rates never reaches its count;
a crash loop (the same failure again within seconds or minutes) reaches it at once and
is stopped. The times in the window are kept in the job's status, so an operator or a
trainer that starts again goes on counting: nothing resets a budget but time.

The spec's counts (spec.elastic.maxSliceRestarts, maxRetries, maxStallRestarts and
spec.maxRestarts) and spec.elastic.restartWindowSeconds:

  count set, window unset   the count over the whole run (its meaning before windows)
  count unset               derived for the window (restartWindowSeconds, else
                            DEFAULT_RESTART_WINDOW_SECONDS) from the hosts it covers
  window set                every count per that window, set or derived

A derived count is what a window reaches once in a million at the highest published
interruption rate (HIGHEST_RATE, Meta's RSC-1) plus slow hosts moved away (SLOW_RATE),
for the share of interruptions that kind of restart answers (SHARES, Llama 3's mix), and
the hosts it covers (a slice's, or the job's); never fewer than MIN_ALLOWED. So a month of
a 16,384-host job reaches none of them, and a crash loop is stopped after a few restarts
(at most MIN_ALLOWED + 1 for a small job).

NVRx's in-process restarts cap the iterations of a run (RetryController's
max_iterations, unlimited by default) and its launcher the restarts of a job
(--max-restarts): counts over the whole run, as ours were before; neither has a window.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from elastic_api.catalog import slice_shape
from elastic_api.models import DEFAULT_RESTART_WINDOW_SECONDS, ElasticTrainingJobSpec

MIN_ALLOWED: Final = 3
# A derived count is reached by one window in TAIL at the rates below.
TAIL: Final = 1e-6


@dataclass(frozen=True)
class PublishedRate:
    """Interruptions per 1,000 host-days, and where the figure is from."""

    per_1000_host_days: float
    source: str


# The highest interruption rate published for large training clusters; Llama 3's (3.79)
# and Meta's RSC-2 (2.34) are lower.
HIGHEST_RATE: Final = PublishedRate(
    6.50, "Meta's RSC-1 (Kokolis et al., arXiv 2410.21680): 6.50 failures per 1,000 "
    "node-days")
# Slow hosts the operator moves away (each move restarts the slice): FALCON publishes no
# rate per host (arXiv 2410.12588); one per 1,000 host-days is assumed.
SLOW_RATE: Final = PublishedRate(
    1.0, "slow hosts (Alibaba FALCON, arXiv 2410.12588, no rate per host published): one "
    "per 1,000 host-days assumed")
# Llama 3's interruptions by cause (Meta, 2024, "The Llama 3 Herd of Models", 3.3.4):
# software bugs 12.9 % (the program crashes: the JobSet restarts), NCCL watchdog
# timeouts 1.7 % (a hang: a stall), the rest hardware and maintenance (a slice lost).
CRASH_SHARE: Final = 0.129
HANG_SHARE: Final = 0.017


@dataclass(frozen=True)
class Kind:
    """One kind of restart: the spec field that counts it, the share of interruptions it
    answers, whether slow-host moves count too, and whether it covers one slice."""

    field: str
    share: float
    slow_moves: bool
    per_slice: bool


SLICE_RESTARTS: Final = Kind("spec.elastic.maxSliceRestarts", 1.0, True, True)
ELASTIC_RETRIES: Final = Kind("spec.elastic.maxRetries", 1.0 - CRASH_SHARE, True, False)
STALL_RESTARTS: Final = Kind("spec.elastic.maxStallRestarts", HANG_SHARE, False, False)
JOBSET_RESTARTS: Final = Kind("spec.maxRestarts", CRASH_SHARE, False, False)


@dataclass(frozen=True)
class Charge:
    """One restart charged: whether the budget allows it, how many the window (or the run)
    holds with it, and the times to keep (the window's, oldest first)."""

    allowed: bool
    used: int
    recent: tuple[datetime, ...]


@dataclass(frozen=True)
class Budget:
    """A count of restarts over a window (None: over the whole run), and why this count."""

    kind: Kind
    allowed: int
    window_seconds: int | None
    derived: bool
    hosts: int  # the hosts it covers (a slice's or the job's)

    def recent(self, times: Sequence[datetime], now: datetime) -> tuple[datetime, ...]:
        """The times that count now, oldest first: those within the window (all for a
        budget over the run), no more than one past the count (enough to know it spent)."""
        kept = sorted(times)
        if self.window_seconds is not None:
            since = now - timedelta(seconds=self.window_seconds)
            kept = [t for t in kept if t > since]
        return tuple(kept[-(self.allowed + 1):])

    def used(self, total: int, times: Sequence[datetime], now: datetime) -> int:
        """Restarts that count against the budget now: the run's `total` for a budget
        over the run, else those within the window."""
        if self.window_seconds is None:
            return total
        return len(self.recent(times, now))

    def remaining(self, total: int, times: Sequence[datetime], now: datetime) -> int:
        return max(0, self.allowed - self.used(total, times, now))

    def charge(self, total: int, times: Sequence[datetime], now: datetime) -> Charge:
        """Charge a restart at `now` to a budget that held `total` over the run and
        `times` in its window before it."""
        used = self.used(total, times, now) + 1
        recent = self.recent([*times, now], now) if self.window_seconds is not None else ()
        return Charge(used <= self.allowed, used, recent)

    def span(self) -> str:
        """What the count is over, in words: `within any 1 h`, `over the whole run`."""
        if self.window_seconds is None:
            return "over the whole run"
        return f"within any {_duration(self.window_seconds)}"

    def short(self) -> str:
        """The rule in a few words: `maxSliceRestarts 0`, `maxRetries 5 within any 1 h`."""
        name = self.kind.field.rsplit(".", 1)[1]
        if self.window_seconds is None:
            return f"{name} {self.allowed}"
        return f"{name} {self.allowed} {self.span()}"

    def describe(self) -> str:
        """The rule in words, for the status and the Events."""
        name = self.kind.field.rsplit(".", 1)[1]
        if self.window_seconds is None:
            return (f"{self.allowed} over the whole run ({name}; set "
                    "spec.elastic.restartWindowSeconds to count them per window)")
        window = _duration(self.window_seconds)
        if not self.derived:
            return f"{self.allowed} within any {window} ({name})"
        scope = "a slice" if self.kind.per_slice else "the job"
        return (f"{self.allowed} within any {window} ({name} unset: derived for {scope}'s "
                f"{self.hosts:,} hosts at {rate_per_1000_host_days(self.kind):g} "
                "interruptions per 1,000 host-days, which reach more once in a million "
                f"windows; at least {MIN_ALLOWED})")


@dataclass(frozen=True)
class Budgets:
    """The four budgets of one job."""

    slice_restarts: Budget
    elastic_retries: Budget
    stall_restarts: Budget
    jobset_restarts: Budget


def rate_per_1000_host_days(kind: Kind) -> float:
    """The interruptions per 1,000 host-days a kind of restart is derived from."""
    slow = SLOW_RATE.per_1000_host_days if kind.slow_moves else 0.0
    return round(HIGHEST_RATE.per_1000_host_days * kind.share + slow, 4)


def derived_allowed(kind: Kind, hosts: int, window_seconds: int) -> int:
    """The count a window of `window_seconds` over `hosts` hosts exceeds once in 1/TAIL
    windows at the kind's rate (a Poisson process), at least MIN_ALLOWED."""
    expected = rate_per_1000_host_days(kind) / 1000 * max(hosts, 1) * window_seconds / 86400
    allowed, term = 0, math.exp(-expected)
    below = term  # P(X <= allowed)
    while 1.0 - below > TAIL:
        allowed += 1
        term *= expected / allowed
        below += term
    return max(MIN_ALLOWED, allowed)


def mean_seconds_between(kind: Kind, hosts: int) -> float:
    """The mean seconds between a kind's interruptions on `hosts` hosts at the rate its
    budgets are derived from (`rate_per_1000_host_days`: the highest published). The
    trainer's prior for a copy's Young-Daly period (elastic_trainer.cadence): the highest
    rate makes a period lengthened toward it err short."""
    return 86400.0 * 1000.0 / (rate_per_1000_host_days(kind) * max(hosts, 1))


def job_hosts(spec: ElasticTrainingJobSpec) -> int:
    """The hosts of all the job's slices."""
    return hosts_per_slice(spec) * spec.tpu.num_slices


def hosts_per_slice(spec: ElasticTrainingJobSpec) -> int:
    # A shape the catalog does not know is refused at admission; one host keeps the
    # arithmetic sound.
    return known_hosts_per_slice(spec) or 1


def known_hosts_per_slice(spec: ElasticTrainingJobSpec) -> int | None:
    """The VMs per slice of the spec's TPU shape (None: a shape the catalog does not
    know, for a reader with a better fallback than one host)."""
    try:
        return slice_shape(spec.tpu.type, spec.tpu.topology).vms
    except ValueError:
        return None


def spec_of(job: Any) -> ElasticTrainingJobSpec | None:
    """The spec of a job object as the API returns it (None: not a spec that parses).
    The spec alone: a status a newer operator wrote need not parse for a reader of the
    spec (the trainer reading its job's shape)."""
    try:
        return ElasticTrainingJobSpec.model_validate(job["spec"])
    except (TypeError, KeyError, ValueError):  # not an object, no spec, a bad spec
        return None


def budget(kind: Kind, count: int | None, spec: ElasticTrainingJobSpec) -> Budget:
    """The budget of `kind` whose spec count is `count` (None: unset)."""
    hosts = hosts_per_slice(spec) if kind.per_slice else job_hosts(spec)
    window = spec.elastic.restart_window_seconds
    if count is not None:
        return Budget(kind, count, window, False, hosts)
    seconds = window if window is not None else DEFAULT_RESTART_WINDOW_SECONDS
    return Budget(kind, derived_allowed(kind, hosts, seconds), seconds, True, hosts)


def budgets_of(spec: ElasticTrainingJobSpec) -> Budgets:
    elastic = spec.elastic
    return Budgets(
        slice_restarts=budget(SLICE_RESTARTS, elastic.max_slice_restarts, spec),
        elastic_retries=budget(ELASTIC_RETRIES, elastic.max_retries, spec),
        stall_restarts=budget(STALL_RESTARTS, elastic.max_stall_restarts, spec),
        jobset_restarts=budget(JOBSET_RESTARTS, spec.max_restarts, spec),
    )


def _duration(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def asks_main_in_place(spec: ElasticTrainingJobSpec) -> bool:
    """The spec asks that a crash of `main` restart it in its pod: restarts in place
    allowed (spec.recovery.restartInPlace) and a JobSet restart budget to charge them to.
    Whether the cluster's API server can is the operator's to decide (its
    core/server_features.py); the renderer and the status both read this one rule."""
    return spec.recovery.in_place_allowed and budgets_of(spec).jobset_restarts.allowed > 0
