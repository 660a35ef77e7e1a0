"""The timeline of `etj maxtext e2e`'s scenario: what it prints of a job's version, and
the order of what it saw (from versions fed in, no cluster)."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from elastic_devtools.maxtext.timeline import Sample, Timeline, row


def version(rv: int, step: int | None, recovering: tuple[str, str], **status: Any
            ) -> dict[str, Any]:
    st: dict[str, Any] = {"phase": "Running", "slicesReady": 2, **status, "conditions": [
        {"type": "Recovering", "status": recovering[0], "reason": recovering[1],
         "message": "m"}]}
    if step is not None:
        st["training"] = {"step": step}
    return {"metadata": {"resourceVersion": str(rv)}, "status": st}


def test_a_row_has_the_columns_and_maxtexts_own_step() -> None:
    sample = Sample(0.0, version(1, 12, ("False", "NoFailure"), checkpoint={
        "latestCommittedStep": 25, "incompleteSteps": [50]})["status"])
    assert row(sample, 2, 14) == ("SLICES 2/2  STEP   12 (MaxText   14)  CHECKPOINT 25 "
                                  "incompleteSteps [50]  Running  ACTIVITY -")
    assert "STEP    - (MaxText    -)  CHECKPOINT -" in row(Sample(0.0, {}), 2, None)
    sample.status["training"] = {"activity": {"phase": "Evaluation"}}
    assert row(sample, 2, 14).endswith("Running  ACTIVITY Evaluation")


def test_it_keeps_every_version_in_order_and_waits_for_one() -> None:
    versions = [version(1, 3, ("False", "NoFailure")), version(2, 3, ("True", "SliceDown")),
                version(3, 3, ("True", "SliceDown")), version(4, 5, ("False", "Recovered"))]
    gate = threading.Event()
    lines: list[str] = []

    def stream(rv: str | None) -> Iterator[dict[str, Any]]:
        """A watch from `rv` on that ends after a while (the timeline resumes it)."""
        for v in versions:
            if int(v["metadata"]["resourceVersion"]) > int(rv or 0):
                if v is versions[2]:
                    gate.wait(10)
                yield v
        time.sleep(0.05)

    tl = Timeline(stream, 2, lines.append)
    tl.start()
    try:
        first = tl.wait(lambda s: s.condition("Recovering")[0] == "True", 10, "True")
        gate.set()
        last = tl.wait(lambda s: s.condition("Recovering")[1] == "Recovered", 10, "done",
                       since=first.at)
        with pytest.raises(TimeoutError, match="waiting for never"):
            tl.wait(lambda s: False, 0.2, "never")
    finally:
        tl.stop()
    assert last.step == 5
    assert tl.transitions("Recovering", 0) == [("False", "NoFailure"), ("True", "SliceDown"),
                                                ("False", "Recovered")]
    assert tl.steps(0) == [3, 5]
    assert sum("condition Recovering=True (SliceDown)" in line for line in lines) == 1
