"""The operator's requests for a checkpoint now (status.checkpointRequest; docs/status-
contract.md): how the trainer learns of them, what it decides (purely), and how the loop
answers them.

`JobRequestWatcher` reads the job (GET, the head's Role allows it) every `interval`
seconds on a thread of its own, never on the training thread, and keeps the newest
`RequestView`. The loop asks, at each step boundary, `to_answer(view, answered)`: a
request it must answer now (phase Requested, an id it has not answered, and not the id
the status already carries as acknowledged: a replacement process never answers the same
request twice). `CheckpointRequests` answers it: the committed save of the step, the
acknowledgement, and with `pause` a pause until `pause_ends(...)` says why not any longer
(Released, Expired, a newer request, or pauseSeconds passed); a slice lost meanwhile ends
the pause as the ordinary elastic event.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from elastic_api.kube import KubeClient, job_path
from elastic_api.models import CheckpointAck, CheckpointRequest
from elastic_trainer.backends import Backend
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.events import utc
from elastic_trainer.snapshots import to_pinned_host
from elastic_trainer.step_commit import commit_step
from elastic_trainer.training_status import TrainingStatus
from elastic_trainer.watchdog import STEP, Watchdog

log = logging.getLogger(__name__)
loop_log = logging.getLogger("elastic_trainer")

ENDS_PAUSE = ("Released", "Expired")
PAUSE_POLL_SECONDS = 0.1  # how often a paused loop looks at the request (and check())
PAUSE_HEALTH_SECONDS = 1.0  # how often it runs the backend's health check


@dataclass(frozen=True)
class RequestView:
    """What the job's status says now: the open (or last) request and the id of the
    acknowledgement status.training carries."""

    request: CheckpointRequest | None
    acked_id: int | None = None
    # status.progress.restart asks the process that started then to exit (in place).
    restart_asked_of: datetime | None = None


class RequestSource(Protocol):
    def view(self) -> RequestView | None:
        """The newest view of the job's status (None: not read yet)."""
        ...

    def close(self) -> None: ...


def request_view(status: Any) -> RequestView:
    """The view from a job's status (untrusted: a request that does not parse is none)."""
    status = status if isinstance(status, dict) else {}
    request = None
    raw = status.get("checkpointRequest")
    if isinstance(raw, dict):
        try:
            request = CheckpointRequest.model_validate(raw)
        except ValueError as err:
            log.warning("status.checkpointRequest does not parse, ignored: %s",
                        str(err).splitlines()[0])
    training = status.get("training")
    ack = training.get("checkpointAck") if isinstance(training, dict) else None
    acked = ack.get("id") if isinstance(ack, dict) else None
    acked_id = acked if isinstance(acked, int) and not isinstance(acked, bool) else None
    return RequestView(request, acked_id, _restart_asked_of(status.get("progress")))


def _restart_asked_of(progress: Any) -> datetime | None:
    """The processStartedAt of the trainer process the operator asks to exit, so that its
    pod restarts main in place (status.progress.restart with inPlace), if any."""
    restart = progress.get("restart") if isinstance(progress, dict) else None
    if not isinstance(restart, dict) or restart.get("inPlace") is not True:
        return None
    started = restart.get("processStartedAt")
    try:
        at = datetime.fromisoformat(started) if isinstance(started, str) else None
    except ValueError:
        return None
    return at if at is not None and at.tzinfo is not None else None


def asked_to_exit(view: RequestView | None, started_at: float) -> bool:
    """The operator asks this process (started at `started_at`, unix time, as it reported
    it) to exit: its restart in place for a stall."""
    asked = view.restart_asked_of if view is not None else None
    return asked is not None and abs(asked.timestamp() - started_at) < 1e-3


def to_answer(view: RequestView | None, answered: int) -> CheckpointRequest | None:
    """The request to answer now: open (Requested), newer than the last one answered
    (`answered`: 0 for none), and not the one the status says is acknowledged."""
    if view is None or view.request is None:
        return None
    request = view.request
    if request.phase != "Requested" or request.id <= answered or request.id == view.acked_id:
        return None
    return request


def pause_ends(view: RequestView | None, request: CheckpointRequest,
              paused_seconds: float) -> str | None:
    """Why the pause after answering `request` ends now (None: it goes on)."""
    current = view.request if view is not None else None
    if current is not None and current.id == request.id and current.phase in ENDS_PAUSE:
        return current.phase
    if current is not None and current.id > request.id:
        return f"request {current.id} replaced it"
    if paused_seconds >= request.pause_seconds:
        return f"pauseSeconds ({request.pause_seconds}) passed"
    return None


class JobRequestWatcher:
    """Reads the job every `interval` s on its own thread; `view()` is the newest read. A
    failed read is logged (once per 30 s) and the last view is kept."""

    def __init__(self, namespace: str, name: str, interval: float = 1.0,
                 request_timeout: float = 3.0,
                 on_view: Callable[[RequestView], None] | None = None) -> None:
        self.namespace, self.name = namespace, name
        self.on_view = on_view  # called on this thread with each new view
        self.interval, self.request_timeout = interval, request_timeout
        self.reads = self.failed = 0
        self._view: RequestView | None = None
        self._stop = threading.Event()
        self._last_error_log = -1e9
        self._api: KubeClient | None = None
        self._thread = threading.Thread(target=self._run, name="checkpoint-requests",
                                        daemon=True)
        self._thread.start()

    def view(self) -> RequestView | None:
        return self._view

    def _read(self) -> None:
        try:
            if self._api is None:
                self._api = KubeClient.from_environment(retries=0)
            job = self._api.get(job_path(self.namespace, self.name),
                                timeout_s=self.request_timeout)
        except Exception as err:  # the next read tries again; training never waits on it
            self.failed += 1
            now = time.monotonic()
            if now - self._last_error_log > 30:
                self._last_error_log = now
                log.warning("reading %s/%s for checkpoint requests failed (%d so far): %s",
                            self.namespace, self.name, self.failed, str(err).splitlines()[0])
            return
        self._view = request_view(job.get("status") if isinstance(job, dict) else None)
        self.reads += 1
        if self.on_view is not None:
            self.on_view(self._view)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(self.interval)

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)


class CheckpointRequests:
    """The loop's answers to the operator's requests, read from `source`: at a step
    boundary, `take` the request to answer (if any), then `answer` it with that step."""

    def __init__(self, source: RequestSource, checkpointer: Checkpointer, backend: Backend,
                 status: TrainingStatus, watchdog: Watchdog) -> None:
        self.source, self.checkpointer, self.backend = source, checkpointer, backend
        self.status, self.watchdog = status, watchdog
        # The newest request acted on (answered, or given up on at its deadline); an
        # earlier process's acknowledgement is kept, not repeated.
        ack = status.checkpoint_ack
        self._done = ack.id if ack is not None else 0

    def take(self) -> CheckpointRequest | None:
        """The request to answer now, if any: answered now or never, once."""
        request = to_answer(self.source.view(), self._done)
        if request is not None:
            self._done = request.id
        return request

    def answer(self, request: CheckpointRequest, step: int, state: Any, active: set[int],
               mesh: Any) -> None:
        """Save `step` now (its state `state`, on `active` slices), wait until it is
        committed (within the request's deadline), acknowledge it, and pause if asked.
        `mesh`: what the watchdog times the next step against."""
        committed_at = self._save(request, step, state, active)
        if committed_at is None:
            return
        self.status.checkpoint_ack = CheckpointAck(id=request.id, step=step,
                                                   committed_at=utc(committed_at),
                                                   paused=request.pause)
        loop_log.info("checkpoint request %d (%s, slices %s): step %d committed%s",
                      request.id, request.reason, request.slices, step,
                      "; paused until released" if request.pause else "")
        self.status.report(urgent=True)
        if request.pause:
            self._pause(request, active, mesh)

    def _save(self, request: CheckpointRequest, step: int, state: Any, active: set[int]
              ) -> float | None:
        """Save `step` (unless a save of it is in flight or committed) and wait for the
        commit until the request's deadline: when it was committed, or None."""
        started = time.time()
        self.status.goodput.begin("checkpointing", started)
        try:
            timeout = request.deadline.timestamp() - started
            if timeout <= 0:
                loop_log.warning("checkpoint request %d: its deadline passed before step "
                                 "%d; not answered", request.id, step)
                return None
            committed = commit_step(
                self.checkpointer, self.watchdog, self.status, step,
                lambda: self._start_save(step, state, active), timeout=timeout,
                phase_step=step + 1)
            if not committed:
                loop_log.warning("checkpoint request %d: the save of step %d was not "
                                 "committed by the deadline; not answered", request.id, step)
                return None
            return time.time()
        finally:
            self.status.goodput.begin("step", time.time())

    def _start_save(self, step: int, state: Any, active: set[int]) -> None:
        self.checkpointer.save(step, to_pinned_host(state),
                               write_hook=self.backend.checkpoint_write_hook(active))

    def _pause(self, request: CheckpointRequest, active: set[int], mesh: Any) -> None:
        """No step until the request is released (or expired, replaced, pauseSeconds
        passed); a slice lost meanwhile raises here or in the next step, the ordinary
        elastic event, and the restore finds the step just saved."""
        self.status.goodput.begin("waiting_for_slices", time.time())
        self.watchdog.disarm()  # a hold is no stall: the request says when it ends
        started = last_health = time.monotonic()
        while True:
            why = pause_ends(self.source.view(), request, time.monotonic() - started)
            self.backend.check(active)  # simulated: the loss raised here, as in a step
            if why is None and time.monotonic() - last_health >= PAUSE_HEALTH_SECONDS:
                # On Pathways the loss surfaces in the next step; a health check (a small
                # program per slice) says when to take it.
                last_health = time.monotonic()
                if active - self.backend.healthy_slices():
                    why = "a slice of the mesh is down"
            if why is not None:
                break
            time.sleep(PAUSE_POLL_SECONDS)
        loop_log.info("checkpoint request %d: going on after %.1fs (%s)", request.id,
                      time.monotonic() - started, why)
        self.status.goodput.begin("step", time.time())
        self.watchdog.arm(STEP, self.status.progress.step + 1, mesh)
        ack = self.status.checkpoint_ack
        if ack is not None and ack.id == request.id:
            self.status.checkpoint_ack = ack.model_copy(update={"paused": False})
        self.status.report(urgent=True)
