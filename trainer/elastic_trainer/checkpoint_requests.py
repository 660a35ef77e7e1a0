"""The operator's requests for a checkpoint now (status.checkpointRequest; docs/status-
contract.md): how the trainer learns of them, and what it decides, purely.

`JobRequestWatcher` reads the job (GET, the head's Role allows it) every `interval`
seconds on a thread of its own, never on the training thread, and keeps the newest
`RequestView`. The loop asks, at each step boundary, `to_answer(view, answered)`: a
request it must answer now (phase Requested, an id it has not answered, and not the id
the status already carries as acknowledged: a replacement process never answers the same
request twice). After the committed save and the acknowledgement, with `pause` it holds
until `hold_ends(...)` says why not any longer (Released, Expired, a newer request, or
pauseSeconds passed); a slice lost meanwhile ends the hold as the ordinary elastic event.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from elastic_api.kube import KubeClient, job_path
from elastic_api.models import CheckpointRequest

log = logging.getLogger(__name__)

ENDS_HOLD = ("Released", "Expired")


@dataclass(frozen=True)
class RequestView:
    """What the job's status says now: the open (or last) request and the id of the
    acknowledgement status.training carries."""

    request: CheckpointRequest | None
    acked_id: int | None = None


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
    return RequestView(request, acked_id)


def to_answer(view: RequestView | None, answered: int) -> CheckpointRequest | None:
    """The request to answer now: open (Requested), newer than the last one answered
    (`answered`: 0 for none), and not the one the status says is acknowledged."""
    if view is None or view.request is None:
        return None
    request = view.request
    if request.phase != "Requested" or request.id <= answered or request.id == view.acked_id:
        return None
    return request


def hold_ends(view: RequestView | None, request: CheckpointRequest,
              held_seconds: float) -> str | None:
    """Why the hold after answering `request` ends now (None: it goes on)."""
    current = view.request if view is not None else None
    if current is not None and current.id == request.id and current.phase in ENDS_HOLD:
        return current.phase
    if current is not None and current.id > request.id:
        return f"request {current.id} replaced it"
    if held_seconds >= request.pause_seconds:
        return f"pauseSeconds ({request.pause_seconds}) passed"
    return None


class JobRequestWatcher:
    """Reads the job every `interval` s on its own thread; `view()` is the newest read. A
    failed read is logged (once per 30 s) and the last view is kept."""

    def __init__(self, namespace: str, name: str, interval: float = 1.0,
                 request_timeout: float = 3.0) -> None:
        self.namespace, self.name = namespace, name
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

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(self.interval)

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
