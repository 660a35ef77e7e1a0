"""What a hung step points at on Pathways (slice_health.py): each slice's answer to
pathwaysutils' health check, asked in parallel and bounded, and the verdict on them; then
the real `PathwaysBackend.blame` under pathwaysutils' DeviceLossSimulator."""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pathwaysutils.elastic import elastic

from elastic_trainer.backends import PathwaysBackend
from elastic_trainer.slice_health import DOWN, ERROR, SILENT, UP, probe, verdict
from tests.support.device_loss import LosableSlices


@pytest.mark.parametrize(("answers", "suspects", "said"), [
    ({0: UP, 1: DOWN}, [1], "slice 1 failed it with a slice-down error"),
    # A slice that ran it is idle: the one that did not is still in the step.
    ({0: UP, 1: SILENT, 2: UP}, [1], "one that did not still is"),
    ({0: SILENT, 1: DOWN}, [1], "slice 0 did not answer within 5s"),
    # A hang in a collective keeps every slice waiting: nothing to tell them apart.
    ({0: SILENT, 1: SILENT}, [], "Potential culprit workers"),
    ({0: UP, 1: UP}, [], "no slice is busy with the step"),
    ({0: ERROR, 1: UP}, [], "slice 0 failed it otherwise"),
    ({}, [], "no active slice"),
])
def test_the_verdict(answers: dict[int, str], suspects: list[int], said: str) -> None:
    blamed, evidence = verdict(answers, 5.0)
    assert blamed == suspects
    assert said in evidence


def test_each_slice_answers_on_its_own_within_the_timeout(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    stuck = threading.Event()

    def health(slice_to_devices: Mapping[int, Sequence[Any]], checker: Any = None
               ) -> frozenset[int]:
        [index] = slice_to_devices
        if index == 1:
            stuck.wait(30)  # its devices are busy with the hung step
        if index == 3:
            raise ValueError("Error with _simple_execution for slice_index=3")
        return frozenset() if index == 2 else frozenset({index})

    monkeypatch.setattr(elastic, "get_active_slice_indices", health)
    started = time.monotonic()
    try:
        answers = probe({i: [f"device {i}"] for i in range(4)}, timeout=0.5)
    finally:
        stuck.set()
    assert answers == {0: UP, 1: SILENT, 2: DOWN, 3: ERROR}
    assert time.monotonic() - started < 5  # the silent slice costs the timeout, once


def test_pathways_blame_under_the_device_loss_simulator(cpu_devices: list[Any]) -> None:
    with LosableSlices(cpu_devices, 2, 2) as hw:
        backend = PathwaysBackend(manager=hw.manager(), health_timeout=60)
        assert backend.blame()[0] == []  # both idle
        hw.lose(1)
        suspects, evidence = backend.blame()
        assert suspects == [1]
        assert evidence.startswith("pathwaysutils' health check")
        assert "slice 0 ran it" in evidence
        hw.bring_back(1)
        assert backend.blame()[0] == []
