"""The job as `kubectl get etj -w` shows it, for the scenario of `etj maxtext e2e`: every
version the API server writes is read from a watch (a state shorter than a poll interval
is not missed), printed as a line of the timeline when what it shows changes, and kept,
so the scenario can wait for a state with a deadline and check the order things came in.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from elastic_api.names import GROUP, PLURAL, VERSION
from elastic_devtools.background import BackgroundLoop

Status = dict[str, Any]


@dataclass(frozen=True)
class Sample:
    """One version of the job's status, and when this process read it (monotonic)."""

    at: float
    status: Status

    def condition(self, type_: str) -> tuple[str, str, str]:
        for c in self.status.get("conditions") or []:
            if c.get("type") == type_:
                return c.get("status", ""), c.get("reason", ""), c.get("message", "")
        return "", "", ""

    @property
    def step(self) -> int | None:
        step = (self.status.get("training") or {}).get("step")
        return step if isinstance(step, int) else None

    @property
    def checkpoint(self) -> Status:
        return self.status.get("checkpoint") or {}

    @property
    def activity(self) -> Status:
        """status.training.activity: what the trainer is doing (its phase and frame)."""
        return (self.status.get("training") or {}).get("activity") or {}


def row(sample: Sample, num_slices: int, maxtext_step: int | None) -> str:
    """What the timeline prints for a version: the columns of `kubectl get etj`, and the
    newest step in MaxText's metrics file next to STEP."""
    s, ckpt = sample.status, sample.checkpoint
    step = "-" if sample.step is None else str(sample.step)
    newest = "-" if maxtext_step is None else str(maxtext_step)
    extra = "".join(f" {k} {ckpt[k]}" for k in ("incompleteSteps", "abandonedSteps")
                    if ckpt.get(k))
    return (f"SLICES {s.get('slicesReady', 0)}/{num_slices}  STEP {step:>4} (MaxText "
            f"{newest:>4})  CHECKPOINT {ckpt.get('latestCommittedStep', '-')}{extra}  "
            f"{s.get('phase', '-')}  ACTIVITY {sample.activity.get('phase', '-')}")


@dataclass
class Timeline(BackgroundLoop):
    """Watches one job (`stream` yields its versions) and prints what changes."""

    THREAD_NAME = "maxtext-e2e-watch"
    stream: Callable[[str | None], Iterator[dict[str, Any]]]
    num_slices: int
    say: Callable[[str], None]
    maxtext_step: Callable[[], int | None] = lambda: None
    samples: list[Sample] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _rv: str | None = None
    _last_row: str | None = None
    _conditions: dict[str, tuple[str, str]] = field(default_factory=dict)


    def t(self, at: float | None = None) -> str:
        return f"t={(at if at is not None else time.monotonic()) - self.t0:6.1f}s"

    def note(self, text: str) -> None:
        """A line of the timeline that is not the job's (what the scenario did)."""
        self.say(f"{self.t()}  >> {text}")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for obj in self.stream(self._rv):
                    self._rv = obj["metadata"]["resourceVersion"]
                    self._observe(Sample(time.monotonic(), obj.get("status") or {}))
                    if self._stop.is_set():
                        return
            except Exception:  # the API server may be busy: watch on, from now
                self._rv = None
                time.sleep(0.2)

    def _observe(self, sample: Sample) -> None:
        line = row(sample, self.num_slices, self.maxtext_step())
        if line != self._last_row:
            self.say(f"{self.t(sample.at)}  {line}")
            self._last_row = line
        for c in sample.status.get("conditions") or []:
            key = (c.get("status", ""), c.get("reason", ""))
            before = self._conditions.get(c["type"])
            self._conditions[c["type"]] = key
            if before != key and (before is not None or key[0] == "True"):
                self.say(f"{self.t(sample.at)}     condition {c['type']}={key[0]} "
                         f"({key[1]}): {c.get('message', '')}")
        with self._changed:
            self.samples.append(sample)
            self._changed.notify_all()

    def wait(self, predicate: Callable[[Sample], Any], timeout: float, what: str,
             since: float | None = None) -> Sample:
        """The first version (read at or after `since`, monotonic) that satisfies
        `predicate`, waiting for new ones until `timeout` seconds have passed."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for sample in self.samples[seen:]:
                    if (since is None or sample.at >= since) and predicate(sample):
                        return sample
                seen = len(self.samples)
                left = deadline - time.monotonic()
                if left <= 0:
                    last = self.samples[-1].status if self.samples else {}
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                       f"last status: phase {last.get('phase')}, "
                                       f"conditions {last.get('conditions')}")
                self._changed.wait(timeout=min(left, 1.0))

    def transitions(self, type_: str, since: float) -> list[tuple[str, str]]:
        """The (status, reason) values condition `type_` took from `since` on, in order."""
        out: list[tuple[str, str]] = []
        with self._changed:
            for sample in self.samples:
                if sample.at < since:
                    continue
                value = sample.condition(type_)[:2]
                if not out or out[-1] != value:
                    out.append(value)
        return out

    def between(self, start: float, end: float) -> list[Sample]:
        """The versions read from `start` to `end` (monotonic)."""
        with self._changed:
            return [s for s in self.samples if start <= s.at <= end]

    def steps(self, since: float) -> list[int]:
        """The distinct values of status.training.step seen from `since` on, in order."""
        out: list[int] = []
        with self._changed:
            for sample in self.samples:
                if sample.at >= since and sample.step is not None and \
                        (not out or out[-1] != sample.step):
                    out.append(sample.step)
        return out


def job_stream(custom: Any, namespace: str, name: str
               ) -> Callable[[str | None], Iterator[dict[str, Any]]]:
    """The job's versions from a watch, resumed from the last one read (None: from now)."""
    from kubernetes import watch

    def stream(resource_version: str | None) -> Iterator[dict[str, Any]]:
        kwargs = {"resource_version": resource_version} if resource_version else {}
        for event in watch.Watch().stream(
                custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                field_selector=f"metadata.name={name}", timeout_seconds=10, **kwargs):
            if event["type"] == "ERROR":  # e.g. 410 Gone: start again from now
                raise RuntimeError(f"watch error: {event['object']}")
            yield event["object"]

    return stream
