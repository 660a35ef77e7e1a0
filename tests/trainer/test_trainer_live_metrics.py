"""The metrics file read as it is written (elastic_trainer.live_metrics, file_watch): a
write wakes the reader at once, so the train lines MaxText writes just before it cuts the
file at an evaluation's first line are read before the cut; without inotify it still
reads, every FALLBACK_POLL_SECONDS."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from elastic_trainer.file_watch import FileWatch
from elastic_trainer.live_metrics import LiveMetrics
from elastic_trainer.metrics_file import EvalRecord, MetricsFollower, StepRecord


def line(step: int) -> str:
    return json.dumps({"learning/loss": 1.0, "perf/step_time_seconds": 0.1,
                       "step": float(step)}) + "\n"


def running_eval(index: int, loss: float = 5.0) -> str:
    return json.dumps({"eval/avg_loss": loss, "eval/step_time_seconds": 0.01,
                       "step": float(index)}) + "\n"


def write_like_maxtext(path: Path, text: str, step: int) -> None:
    """metric_logger.write_metrics_locally: open to append, truncate at step 0, write."""
    with path.open("a") as f:
        if step == 0:
            f.truncate(0)
        f.write(text)


def test_a_write_wakes_the_watch_at_once(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    watch = FileWatch(path)
    assert watch.why_not == ""  # inotify, on this Linux
    writer = threading.Timer(0.2, lambda: path.write_text("x\n"))
    writer.start()
    started = time.monotonic()
    assert watch.wait(30.0)
    assert time.monotonic() - started < 10.0
    # One write is several events (create, modify, close): the first may wake the watch
    # before the rest are queued. Once the write is over, read them all; then none is left.
    writer.join()
    while watch.wait(0.0):
        pass
    assert not watch.wait(0.05)  # nothing more
    watch.close()


def test_other_files_wake_it_but_do_not_count(tmp_path: Path) -> None:
    watch = FileWatch(tmp_path / "metrics.jsonl")
    (tmp_path / "other").write_text("y")
    assert not watch.wait(5.0)
    watch.close()


def test_train_lines_just_before_an_evaluations_cut_are_read(tmp_path: Path) -> None:
    """MaxText writes the last train line, then one evaluation step later cuts the file.
    The reader sleeps a minute between reads unless woken: each train line is read well
    before the next evaluation's cut, so it can only be the write that woke it."""
    path = tmp_path / "metrics.jsonl"
    live = LiveMetrics(MetricsFollower(path), idle_seconds=60.0).start()
    seen: list[int] = []
    evals = 0
    try:
        time.sleep(0.1)  # the reader waits in the watch
        for evaluation in range(5):
            for step in range(evaluation * 10, evaluation * 10 + 10):
                write_like_maxtext(path, line(step), step)
            deadline = time.monotonic() + 30
            while len(seen) < evaluation * 10 + 10 and time.monotonic() < deadline:
                got = live.drain()
                seen += [r.step for _, r in got if isinstance(r, StepRecord)]
                evals += sum(isinstance(r, EvalRecord) for _, r in got)
                time.sleep(0.01)
            for index in range(3):  # the evaluation: its first line cuts the file
                write_like_maxtext(path, running_eval(index, loss=5.0 - evaluation), index)
    finally:
        live.close()
    assert seen == list(range(50))
    assert live.follower.missed == 0 and live.follower.restarts >= 4


def test_each_line_carries_when_it_was_read(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    live = LiveMetrics(MetricsFollower(path), idle_seconds=0.05).start()
    try:
        write_like_maxtext(path, line(5) + running_eval(1), 5)
        deadline = time.monotonic() + 30
        got: list[object] = []
        while len(got) < 2 and time.monotonic() < deadline:
            got += live.drain()
            time.sleep(0.02)
    finally:
        live.close()
    (t1, first), (t2, second) = got  # type: ignore[misc]
    assert isinstance(first, StepRecord) and isinstance(second, EvalRecord)
    assert t1 == t2 and t1.tzinfo is not None


def test_without_inotify_it_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    live = LiveMetrics(MetricsFollower(path), idle_seconds=5.0)
    live.watch.close()
    live.watch._fd = None  # as where inotify_init1 is not there
    live.watch.why_not = "no inotify"
    live.start()
    try:
        write_like_maxtext(path, line(0), 0)
        deadline = time.monotonic() + 30
        got: list[object] = []
        while not got and time.monotonic() < deadline:
            got += live.drain()
            time.sleep(0.02)
    finally:
        live.close()
    assert [r.step for _, r in got] == [0]  # type: ignore[attr-defined]
