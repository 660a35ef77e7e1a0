"""The operator's checkpoint requests (status.checkpointRequest): the pure decisions, and
the loop on simulated slices answering them (save, commit, acknowledge, pause)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from elastic_api.models import CheckpointAck, CheckpointRequest
from elastic_trainer.backends import SimulatedBackend
from elastic_trainer.checkpoint import COMMIT_MARKER, Checkpointer
from elastic_trainer.checkpoint_requests import (
    RequestView,
    pause_ends,
    request_view,
    to_answer,
)
from elastic_trainer.compose import build_trainer
from elastic_trainer.configs import get_config
from elastic_trainer.data import SyntheticSource
from elastic_trainer.events import RunResult
from elastic_trainer.loop import LoopOptions, Trainer
from tests.support.trainer_run import Reports

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _request(id: int = 1, phase: str = "Requested", pause: bool = True,
             pause_seconds: int = 600, deadline_s: float = 300) -> CheckpointRequest:
    return CheckpointRequest(
        id=id, reason="Maintenance", slices=[1], requested_at=datetime.now(UTC),
        deadline=datetime.now(UTC) + timedelta(seconds=deadline_s), pause=pause,
        pause_seconds=pause_seconds, phase=phase)  # type: ignore[arg-type]


# --- the decisions -------------------------------------------------------------------------


def test_only_an_open_request_not_yet_answered_is_answered() -> None:
    assert to_answer(None, 0) is None
    assert to_answer(RequestView(None), 0) is None
    request = _request(1)
    assert to_answer(RequestView(request), 0) is request
    assert to_answer(RequestView(_request(1)), answered=1) is None
    assert to_answer(RequestView(_request(2)), answered=1) is not None
    for phase in ("Acknowledged", "Moving", "Released", "Expired"):
        assert to_answer(RequestView(_request(3, phase)), 0) is None
    # The status already carries the acknowledgement (an earlier process gave it).
    assert to_answer(RequestView(_request(3), acked_id=3), 0) is None


def test_the_pause_ends_when_released_expired_replaced_or_timed_out() -> None:
    request = _request(2, pause_seconds=60)
    assert pause_ends(RequestView(request.model_copy(update={"phase": "Moving"})), request,
                     10) is None
    assert pause_ends(None, request, 10) is None  # not read yet: paused on
    for phase in ("Released", "Expired"):
        assert pause_ends(RequestView(request.model_copy(update={"phase": phase})), request,
                         10) == phase
    assert "replaced" in (pause_ends(RequestView(_request(3)), request, 10) or "")
    assert "pauseSeconds" in (pause_ends(RequestView(request), request, 60) or "")


def test_the_view_of_a_status_is_untrusted_input() -> None:
    wire = _request(4).model_dump(by_alias=True, mode="json")
    view = request_view({"checkpointRequest": wire,
                         "training": {"checkpointAck": {"id": 3, "step": 9}}})
    assert view.request is not None and view.request.id == 4 and view.acked_id == 3
    for garbage in (None, "x", {"checkpointRequest": {"id": "one"}},
                    {"checkpointRequest": [1], "training": {"checkpointAck": {"id": True}}}):
        assert request_view(garbage) == RequestView(None, None)


# --- the loop on simulated slices --------------------------------------------------------------


class ManualHealth:
    """Slices go down when the test says so, for `seconds`."""

    def __init__(self) -> None:
        self._down: dict[int, tuple[float, float]] = {}  # slice: (since, until)
        self._losses: dict[int, int] = {}
        self._lock = threading.Lock()

    def down(self, index: int, seconds: float) -> None:
        with self._lock:
            now = time.time()
            self._down[index] = (now, now + seconds)
            self._losses[index] = self._losses.get(index, 0) + 1

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def on_phase(self, phase: str, step: int) -> None:
        pass

    def down_slices(self) -> dict[int, float]:
        with self._lock:
            now = time.time()
            return {i: since for i, (since, until) in self._down.items() if until > now}

    def losses(self) -> dict[int, int]:
        with self._lock:
            return dict(self._losses)


class Operator:
    """Plays the operator's side of one request, from what the loop does: the request
    appears once the loop has reached `at_step`; once the trainer pauses, `during_pause`
    runs (once) and the request is Moving; after an elastic event it is Released.

    The loop sees a step done when it reads its loss, after it has dispatched the next
    one: the first boundary after the request appears, where it answers, is the one
    after step at_step + 1 (ANSWERED_AFTER)."""

    def __init__(self, trainer: Callable[[], Trainer], request: CheckpointRequest,
                 at_step: int, during_pause: Callable[[], None] | None = None,
                 acked_id: int | None = None) -> None:
        self.trainer, self.request, self.at_step = trainer, request, at_step
        self.during_pause, self.acked_id = during_pause, acked_id
        self.pauses_seen = 0

    def view(self) -> RequestView | None:
        t = self.trainer().status
        if t.progress.step < self.at_step and self.request.phase == "Requested":
            return RequestView(None, self.acked_id)
        ack = t.checkpoint_ack
        if ack is not None and ack.id == self.request.id and self.request.phase == "Requested":
            self.request = self.request.model_copy(update={"phase": "Moving"})
        if ack is not None and ack.paused and self.during_pause is not None:
            self.pauses_seen += 1
            self.during_pause()
            self.during_pause = None
        if t.events and self.request.phase == "Moving":
            self.request = self.request.model_copy(update={"phase": "Released"})
        return RequestView(self.request, self.acked_id)

    def close(self) -> None:
        pass


STEPS = 16
ANSWERED_AFTER = 1  # steps after `at_step` (see Operator)


def _trainer(tmp_path: Path, health: Any, operator: Callable[[Trainer], Any] | None,
             prior_ack: CheckpointAck | None = None) -> tuple[Trainer, Reports]:
    cfg = get_config("tiny")
    # No snapshots: the restore after the move is of the checkpoint the request saved.
    opts = LoopOptions(steps=STEPS, batch=8, seed=0, elastic_timeout=60, max_retries=3,
                       snapshot_period=0, log_every=10**6, prior_ack=prior_ack)
    reports = Reports()
    holder: dict[str, Trainer] = {}
    requests = operator(lambda: holder["t"]) if operator is not None else None
    trainer = build_trainer(cfg, opts, SimulatedBackend(2, 2, health),
                            SyntheticSource(0, 8, cfg.seq_len, cfg.vocab_size),
                            Checkpointer(str(tmp_path / "ckpt"), period=100, keep=5),
                            reporter=cast(Any, reports), requests=requests)
    holder["t"] = trainer
    return trainer, reports


def _run(trainer: Trainer) -> RunResult:
    try:
        return trainer.run()
    finally:
        trainer.backend.close()


def _committed(tmp_path: Path) -> list[int]:
    return sorted(int(p.name) for p in (tmp_path / "ckpt").iterdir()
                  if p.name.isdigit() and (p / COMMIT_MARKER).exists())


@pytest.fixture(scope="module")
def undisturbed_digest(cpu_devices: list[Any], tmp_path_factory: pytest.TempPathFactory
                       ) -> str:
    trainer, _ = _trainer(tmp_path_factory.mktemp("undisturbed"), ManualHealth(), None)
    result = _run(trainer)
    assert result.failure is None and result.final_step == STEPS
    return result.params_digest


def test_a_maintenance_request_costs_no_step(tmp_path: Path, undisturbed_digest: str) -> None:
    """Request -> committed save of the current step -> ack -> pause -> the slice is lost
    (the move) -> elastic event -> restore of exactly the acknowledged step."""
    health = ManualHealth()
    operators: list[Operator] = []

    def operator(trainer: Callable[[], Trainer]) -> Operator:
        operators.append(Operator(trainer, _request(1), at_step=5,
                                  during_pause=lambda: health.down(1, 0.5)))
        return operators[0]

    trainer, reports = _trainer(tmp_path, health, operator)
    result = _run(trainer)
    assert result.failure is None and result.final_step == STEPS
    saved = 5 + ANSWERED_AFTER
    [event] = result.events
    assert (event.failed_step, event.slices_down) == (saved, [1])
    assert (event.restored_from_step, event.restore_source, event.steps_lost) == (
        saved, "checkpoint", 0)
    assert result.params_digest == undisturbed_digest  # nothing lost, nothing redone
    assert operators[0].pauses_seen >= 1
    # The acknowledgement went out at once, after the save of the step was committed.
    acks = [(r, urgent) for r, urgent in reports.sent if r.checkpoint_ack is not None]
    first, urgent = acks[0]
    assert urgent and first.checkpoint_ack == CheckpointAck(
        id=1, step=saved, committed_at=first.checkpoint_ack.committed_at, paused=True)
    assert first.step == saved and saved in _committed(tmp_path)
    assert first.checkpoint_ack.committed_at <= first.observed_at
    # The loss ended the pause: later reports no longer say paused.
    assert acks[-1][0].checkpoint_ack is not None and not acks[-1][0].checkpoint_ack.paused
    # No step ran while paused: the steps done are 1..16 once each.
    assert [s for s, _ in result.step_times] == list(range(1, STEPS + 1))
    goodput = result.goodput
    assert goodput is not None
    assert goodput.badput_seconds.recomputed_steps == 0.0  # no step redone
    assert goodput.badput_seconds.checkpointing > 0 and goodput.badput_seconds.restore > 0


def test_without_pause_the_loop_saves_acknowledges_and_goes_on(tmp_path: Path) -> None:
    def operator(trainer: Callable[[], Trainer]) -> Operator:
        return Operator(trainer, _request(7, pause=False, pause_seconds=0), at_step=3)

    trainer, reports = _trainer(tmp_path, ManualHealth(), operator)
    result = _run(trainer)
    assert result.failure is None and result.final_step == STEPS and result.events == []
    acks = [r.checkpoint_ack for r, _ in reports.sent if r.checkpoint_ack is not None]
    ack = acks[0]
    assert all(a == ack for a in acks)
    assert (ack.id, ack.step, ack.paused) == (7, 3 + ANSWERED_AFTER, False)
    assert _committed(tmp_path) == [3 + ANSWERED_AFTER, STEPS]


def test_a_request_an_earlier_process_acknowledged_is_not_answered_again(
        tmp_path: Path) -> None:
    earlier = CheckpointAck(id=4, step=2, committed_at=NOW, paused=True)

    def operator(trainer: Callable[[], Trainer]) -> Operator:
        return Operator(trainer, _request(4), at_step=3)

    trainer, reports = _trainer(tmp_path, ManualHealth(), operator, prior_ack=earlier)
    result = _run(trainer)
    assert result.failure is None and result.final_step == STEPS
    assert _committed(tmp_path) == [STEPS]  # no save for the request
    # Its acknowledgement is still reported (the operator may not have seen it yet).
    assert reports.sent and all(r.checkpoint_ack == earlier for r, _ in reports.sent)


def test_a_request_past_its_deadline_is_given_up_once(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    def operator(trainer: Callable[[], Trainer]) -> Operator:
        return Operator(trainer, _request(2, deadline_s=-1), at_step=3)

    trainer, reports = _trainer(tmp_path, ManualHealth(), operator)
    result = _run(trainer)
    assert result.failure is None and result.final_step == STEPS
    assert all(r.checkpoint_ack is None for r, _ in reports.sent)  # never acknowledged
    assert _committed(tmp_path) == [STEPS]
    given_up = [r for r in caplog.records if "deadline passed" in r.getMessage()]
    assert len(given_up) == 1  # not tried again at every step
