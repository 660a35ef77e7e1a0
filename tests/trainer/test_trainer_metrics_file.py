"""The metrics follower of `etj progress` against MaxText's real metrics file and a hostile
one: partial writes, garbage, truncation, rotation, a restarted MaxText; never a crash,
every bad line skipped and counted.

The fixture metrics-local.jsonl is what MaxText 0.2.5 wrote on CPU (`etj maxtext e2e
--record`, tests/fixtures/maxtext-0.2.5/job-local.yaml: 30 steps)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_trainer.metrics_file import (
    EvalRecord,
    MetricsFollower,
    NotAMetricsLine,
    StepRecord,
    parse_maxtext_record,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "maxtext-0.2.5"
REAL_LINES = (FIXTURES / "metrics-local.jsonl").read_text().splitlines(keepends=True)
# An eval summary and a running-eval line as MaxText 0.2.5's metric_logger writes them to the
# same file (`write_metrics` for metric types eval and running_eval): no learning/loss.
EVAL_LINE = json.dumps({"eval/avg_loss": 5.9, "eval/avg_perplexity": 365.0,
                        "eval/total_weights": 64.0, "step": 19.0, "run_name": "r"}) + "\n"
RUNNING_EVAL_LINE = json.dumps({"eval/avg_loss": 5.9, "eval/step_time_seconds": 0.01,
                                "step": 0.0, "run_name": "r"}) + "\n"


def line(step: int, loss: float = 1.5, seconds: float = 0.25) -> str:
    return json.dumps({"learning/loss": loss, "perf/step_time_seconds": seconds,
                       "step": float(step), "run_name": "r"}) + "\n"


def append(path: Path, text: str | bytes) -> None:
    with path.open("ab") as f:
        f.write(text.encode() if isinstance(text, str) else text)


def steps(records: list[StepRecord]) -> list[int]:
    return [r.step for r in records]


def test_maxtexts_own_file_is_read_step_by_step(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    follower = MetricsFollower(path)
    assert follower.poll() == []  # not written yet
    seen: list[StepRecord] = []
    for text in REAL_LINES:
        append(path, text)
        seen += follower.poll()
    expected = [json.loads(t) for t in REAL_LINES]
    assert steps(seen) == list(range(30))
    assert [r.loss for r in seen] == [e["learning/loss"] for e in expected]
    assert [r.step_seconds for r in seen] == [e["perf/step_time_seconds"] for e in expected]
    assert (follower.skipped, follower.ignored, follower.restarts) == (0, 0, 0)


def test_eval_lines_are_ignored_not_counted_as_garbage(tmp_path: Path) -> None:
    path = tmp_path / "m"
    append(path, line(18) + RUNNING_EVAL_LINE + EVAL_LINE + line(19))
    follower = MetricsFollower(path)
    assert steps(follower.poll()) == [18, 19]
    assert (follower.ignored, follower.skipped) == (2, 0)


def test_eval_lines_are_the_evaluations_heartbeat(tmp_path: Path) -> None:
    """poll_all: each running_eval line (its index, its time) and the summary."""
    path = tmp_path / "m"
    append(path, line(18) + RUNNING_EVAL_LINE + EVAL_LINE + line(19))
    follower = MetricsFollower(path)
    assert follower.poll_all() == [
        StepRecord(18, 1.5, 0.25), EvalRecord(summary=False, eval_step=0, step_seconds=0.01),
        EvalRecord(summary=True, eval_step=None, step_seconds=None), StepRecord(19, 1.5, 0.25)]
    assert parse_maxtext_record(RUNNING_EVAL_LINE.replace('"step": 0.0', '"step": 0.5')) == \
        EvalRecord(summary=False, eval_step=None, step_seconds=0.01)


def test_an_evaluations_cut_keeps_the_train_steps_read_before_it(tmp_path: Path) -> None:
    """MaxText truncates the file at an evaluation's first line (step 0): the train
    steps read before it stay read, the evaluation is read from the new start, and the
    steps written before the cut but never read are counted."""
    path = tmp_path / "m"
    append(path, "".join(line(s) for s in range(10)))
    follower = MetricsFollower(path)
    assert steps(follower.poll()) == list(range(10))
    append(path, line(10) + line(11))  # written, then cut before the follower looked
    with path.open("r+b") as f:
        f.truncate(0)
    append(path, RUNNING_EVAL_LINE + RUNNING_EVAL_LINE.replace('"step": 0.0', '"step": 1.0'))
    records = follower.poll_all()
    assert [r.eval_step for r in records if isinstance(r, EvalRecord)] == [0, 1]
    assert (follower.restarts, follower.missed) == (1, 0)
    append(path, EVAL_LINE + line(12))
    assert steps(follower.poll()) == [12]
    assert follower.missed == 2  # steps 10 and 11


def test_a_run_from_scratch_misses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m"
    append(path, line(0) + line(1))
    follower = MetricsFollower(path)
    follower.poll()
    with path.open("r+b") as f:
        f.truncate(0)
    append(path, line(0))
    assert steps(follower.poll()) == [0] and follower.missed == 0


def test_a_partial_last_line_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "m"
    text = REAL_LINES[0]
    append(path, text[:50])
    follower = MetricsFollower(path)
    assert follower.poll() == []
    append(path, text[50:-1])  # all but the newline
    assert follower.poll() == []
    append(path, "\n" + line(1))
    assert steps(follower.poll()) == [0, 1]
    assert follower.skipped == 0


HOSTILE = [
    b"not json",
    b"[1, 2, 3]",
    b'"a string"',
    b"{}",
    b'{"learning/loss": 1.0}',  # no step
    b'{"step": 1.0}',  # neither a train nor an eval line
    b'{"step": "3", "learning/loss": 1.0}',
    b'{"step": true, "learning/loss": 1.0}',
    b'{"step": -1.0, "learning/loss": 1.0}',
    b'{"step": 2.5, "learning/loss": 1.0}',
    b'{"step": NaN, "learning/loss": 1.0}',
    b'{"step": Infinity, "learning/loss": 1.0}',
    b'{"step": 1e400, "learning/loss": 1.0}',
    b'{"step": 9007199254740993, "learning/loss": 1.0}',  # beyond 2**53
    b'{"step": ' + b"9" * 400 + b', "learning/loss": 1.0}',  # beyond any float
    b'{"step": 1.0, "learning/loss": "low"}',
    b'{"step": 1.0, "learning/loss": null}',
    b'{"step": 1.0, "learning/loss": 1.0, "perf/step_time_seconds": [1]}',
    b"[" * 100_000 + b"]" * 100_000,  # nested beyond the parser's recursion limit
    b"\xff\xfe\x00 not utf-8",
    b"   ",
    b'{"step": 1.0, "learning/loss": 1.0',  # cut mid-object
]


@pytest.mark.parametrize("bad", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_line_is_skipped_and_counted(tmp_path: Path, bad: bytes) -> None:
    path = tmp_path / "m"
    append(path, line(1).encode() + bad + b"\n" + line(2).encode())
    follower = MetricsFollower(path)
    assert steps(follower.poll()) == [1, 2]
    assert follower.skipped == 1 and follower.last_problem


def test_non_finite_loss_or_step_time_keeps_the_step(tmp_path: Path) -> None:
    path = tmp_path / "m"
    append(path, '{"step": 4.0, "learning/loss": NaN, "perf/step_time_seconds": -1.0}\n'
                 '{"step": 5.0, "learning/loss": Infinity, "perf/step_time_seconds": NaN}\n')
    records = MetricsFollower(path).poll()
    assert records == [StepRecord(4, None, None), StepRecord(5, None, None)]


def test_an_overlong_line_is_dropped_without_holding_it(tmp_path: Path) -> None:
    path = tmp_path / "m"
    follower = MetricsFollower(path, max_line_bytes=1000)
    append(path, line(1) + "x" * 5000)  # no newline yet: not buffered beyond the limit
    assert steps(follower.poll()) == [1]
    assert follower.skipped == 1
    append(path, "y" * 5000)
    assert follower.poll() == [] and follower.skipped == 1  # one line, counted once
    append(path, "\n" + line(2))
    assert steps(follower.poll()) == [2]
    assert follower.skipped == 1


def test_truncated_and_started_anew_like_a_maxtext_run_from_scratch(tmp_path: Path) -> None:
    """MaxText truncates the file when it writes step 0."""
    path = tmp_path / "m"
    append(path, "".join(line(s) for s in range(10)))
    follower = MetricsFollower(path)
    assert steps(follower.poll()) == list(range(10))
    with path.open("r+b") as f:
        f.truncate(0)
    append(path, line(0, loss=9.0) + line(1, loss=8.0))
    records = follower.poll()
    assert steps(records) == [0, 1] and records[0].loss == 9.0
    assert follower.restarts == 1 and follower.skipped == 0


def test_rewritten_from_its_start_to_a_greater_size_is_noticed(tmp_path: Path) -> None:
    """A cut that the size alone does not show: other bytes where the file began."""
    path = tmp_path / "m"
    append(path, line(5) + line(6))
    follower = MetricsFollower(path)
    assert steps(follower.poll()) == [5, 6]
    with path.open("r+b") as f:
        f.truncate(0)
    append(path, "".join(line(s, loss=2.0) for s in range(4)))
    assert steps(follower.poll()) == [0, 1, 2, 3]
    assert follower.restarts == 1


def test_cut_mid_line_counts_the_lost_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "m"
    append(path, line(1) + line(2)[:20])
    follower = MetricsFollower(path)
    assert steps(follower.poll()) == [1]
    with path.open("r+b") as f:
        f.truncate(0)
    append(path, line(0))
    assert steps(follower.poll()) == [0]
    assert (follower.restarts, follower.skipped) == (1, 1)


def test_rotated_file_is_read_to_its_end_then_the_new_one_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "m"
    append(path, line(1))
    follower = MetricsFollower(path)
    assert steps(follower.poll()) == [1]
    append(path, line(2))  # written to the old file before it moves
    os.rename(path, tmp_path / "m.1")
    append(path, line(3))
    assert steps(follower.poll()) == [2, 3]
    assert follower.restarts == 1


def test_a_removed_file_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "m"
    append(path, line(1))
    follower = MetricsFollower(path)
    assert steps(follower.poll()) == [1]
    path.unlink()
    assert follower.poll() == []
    assert follower.poll() == []
    append(path, line(0))
    assert steps(follower.poll()) == [0]


def test_an_unreadable_path_is_no_crash(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    follower = MetricsFollower(directory)
    assert follower.poll() == [] and follower.poll() == []


def test_parse_keeps_whole_float_steps_and_rejects_the_rest() -> None:
    assert parse_maxtext_record('{"step": 7.0, "learning/loss": 2.0}') == StepRecord(7, 2.0,
                                                                                      None)
    assert parse_maxtext_record('{"step": 7, "learning/loss": 2}') == StepRecord(7, 2.0, None)
    assert not isinstance(parse_maxtext_record(EVAL_LINE), StepRecord)
    with pytest.raises(NotAMetricsLine):
        parse_maxtext_record('{"step": 7.5, "learning/loss": 2.0}')


GOOD = st.integers(0, 10**6).map(lambda s: line(s).encode())
JUNK = st.binary(max_size=80).filter(lambda b: b"\n" not in b)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.one_of(GOOD, JUNK.map(lambda b: b + b"\n")), max_size=30),
       cuts=st.lists(st.integers(0, 3000), max_size=8))
def test_any_mix_of_lines_in_any_chunks_is_accounted_for(
        tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], cuts: list[int]) -> None:
    """Whatever arrives and however it is split into writes: no exception, every good line
    read once and in order, every other line skipped or ignored."""
    path = tmp_path_factory.mktemp("fuzz") / "m"
    path.touch()
    data = b"".join(lines)
    follower = MetricsFollower(path)
    records: list[StepRecord] = []
    pos = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        append(path, data[pos:cut])
        pos = max(pos, min(cut, len(data)))
        records += follower.poll()
    expected = [json.loads(raw)["step"] for raw in lines if raw in _goods(lines)]
    assert steps(records) == [int(s) for s in expected]
    assert len(records) + follower.skipped + follower.ignored == len(lines)


def _goods(lines: list[bytes]) -> set[bytes]:
    good = set()
    for raw in lines:
        try:
            if isinstance(parse_maxtext_record(raw.decode().strip()), StepRecord):
                good.add(raw)
        except (NotAMetricsLine, UnicodeDecodeError):
            pass
    return good
