"""Following a trainer's metrics file: MaxText's `metrics_file`, one JSON object per line.

MaxText 0.2.5 (`maxtext/common/metric_logger.py`, `write_metrics_locally`) opens the file for
appending for every line and writes `json.dumps` of the step's scalars, each a float, plus
`"step"` (a float) and `"run_name"`: a train line has `learning/loss` and
`perf/step_time_seconds`. A step's line is written one step late (when the next step has
been dispatched; the last ones at the end of the run). An evaluation writes to the same
file (`eval/...` keys, no learning/loss): a "running_eval" line per evaluation step (its
index as `step`, one step late, with `eval/step_time_seconds`), then a summary with the
train step as `step`: `EvalRecord`s, the evaluation's heartbeat. When it writes a line
whose step is 0 it truncates the file first: a run from scratch starts it anew, and so
does every evaluation's first line (a run resumed from a checkpoint appends). The train
lines written before such a cut and not read yet are lost; `missed` counts the steps the
next train line skips. A loss that is NaN or infinite is written as JSON's
`NaN`/`Infinity` extension.

A follower never trusts the file: a line that is not a metrics line (a partial write, a
line cut by a truncation, bytes that are not UTF-8 JSON) is skipped and counted, a file
replaced (another inode) or cut (shorter than what was read, or other bytes where it
began) is read again from its start, and a missing file is waited for. Nothing here
raises on the file's content.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Lines longer than this are not metrics lines (MaxText's are a few hundred bytes): their
# bytes are dropped up to the next newline, so a file without newlines cannot fill memory.
MAX_LINE_BYTES = 1 << 20
# At most this much is read per poll; the rest waits for the next one.
MAX_READ_BYTES = 8 << 20
# What is remembered of the file's start, to notice it was rewritten from there.
HEAD_BYTES = 256
LOSS_KEY, STEP_TIME_KEY, STEP_KEY = "learning/loss", "perf/step_time_seconds", "step"
EVAL_PREFIX, EVAL_STEP_TIME_KEY = "eval/", "eval/step_time_seconds"
# Steps are reported as JSON numbers the API server reads exactly (status.training.step).
MAX_STEP = 2**53 - 1


@dataclass(frozen=True)
class StepRecord:
    """One completed train step, as the metrics file tells it."""

    step: int
    loss: float | None  # None: not finite (NaN, Infinity)
    step_seconds: float | None


@dataclass(frozen=True)
class EvalRecord:
    """One evaluation line: a running_eval line (an evaluation step done) or the
    evaluation's summary (the evaluation over)."""

    summary: bool
    eval_step: int | None  # a running_eval line's index (None: not a whole number)
    step_seconds: float | None  # the evaluation step's time (running_eval lines)


Record = StepRecord | EvalRecord


class NotAMetricsLine(ValueError):
    """A line that cannot be a metrics line; the message says why."""


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NotAMetricsLine(f"{key} is not a number: {str(value)[:40]!r}")
    try:
        return float(value)
    except OverflowError:  # an integer beyond any float
        raise NotAMetricsLine(f"{key} is out of range") from None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _eval_record(obj: dict[str, Any], step: float) -> EvalRecord:
    if EVAL_STEP_TIME_KEY not in obj:
        return EvalRecord(summary=True, eval_step=None, step_seconds=None)
    seconds = _finite(_number(obj[EVAL_STEP_TIME_KEY], EVAL_STEP_TIME_KEY))
    whole = math.isfinite(step) and step.is_integer() and 0 <= step <= MAX_STEP
    return EvalRecord(summary=False, eval_step=int(step) if whole else None,
                      step_seconds=seconds if seconds is not None and seconds >= 0 else None)


def parse_maxtext_record(text: str) -> Record:
    """A train line's or an evaluation line's record; NotAMetricsLine else."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as err:  # RecursionError: nested too deep
        raise NotAMetricsLine(f"not JSON ({str(err)[:80]})") from None
    if not isinstance(obj, dict):
        raise NotAMetricsLine(f"not a JSON object: {text[:40]!r}")
    if STEP_KEY not in obj:
        raise NotAMetricsLine("no step")
    step = _number(obj[STEP_KEY], STEP_KEY)
    if LOSS_KEY not in obj:
        if any(isinstance(k, str) and k.startswith(EVAL_PREFIX) for k in obj):
            return _eval_record(obj, step)
        raise NotAMetricsLine(f"no {LOSS_KEY}")
    if not (math.isfinite(step) and step.is_integer() and 0 <= step <= MAX_STEP):
        raise NotAMetricsLine(f"step is not a whole number >= 0: {step!r}")
    loss = _finite(_number(obj[LOSS_KEY], LOSS_KEY))
    seconds = None
    if STEP_TIME_KEY in obj:
        value = _finite(_number(obj[STEP_TIME_KEY], STEP_TIME_KEY))
        seconds = value if value is not None and value >= 0 else None
    return StepRecord(step=int(step), loss=loss, step_seconds=seconds)


# A parser returns None for a metrics line that is neither a train step nor an evaluation's.
Parser = Callable[[str], "Record | None"]


class MetricsFollower:
    """The records of the complete lines appended to `path` since the last poll: `poll()`
    the train steps, `poll_all()` the evaluation lines too.

    Counters: `skipped` lines that are not metrics lines (and the partial line a cut or a
    replacement left behind), `ignored` metrics lines that are not train steps, `restarts`
    times the file was replaced or cut and read again from its start, `missed` train
    steps never read (the gap from a step read to the next one: lines written before a
    cut and cut before the follower read them); `last_problem` says what the last skipped
    line was."""

    def __init__(self, path: str | Path, parse: Parser = parse_maxtext_record,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.path = str(path)
        self.parse, self.max_line_bytes = parse, max_line_bytes
        self.skipped = self.ignored = self.restarts = self.missed = 0
        self.last_problem = ""
        self._last_step: int | None = None  # the newest train step read
        self._cut_after: int | None = None  # the last step read before a cut
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._head = b""
        self._partial = b""
        self._discarding = False  # inside an overlong line: drop bytes up to its newline

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def poll(self) -> list[StepRecord]:
        return [r for r in self.poll_all() if isinstance(r, StepRecord)]

    def poll_all(self) -> list[Record]:
        records: list[Record] = []
        try:
            st: os.stat_result | None = os.stat(self.path)
        except OSError:
            st = None
        if self._fd is not None:
            if st is None or (st.st_dev, st.st_ino) != self._identity:
                # Removed or replaced: what the old file still holds, then the new one.
                records += self._read()
                self._forget_partial("the file was replaced or removed mid-line")
                self.close()
                if st is not None:
                    self.restarts += 1
            elif st.st_size < self._offset or not self._same_head():
                self._forget_partial("the file was cut mid-line")
                self._offset, self._head = 0, b""
                self.restarts += 1
                self._cut_after = self._last_step
        if self._fd is None and st is not None:
            self._open()
        if self._fd is not None:
            records += self._read()
        return records

    def _open(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return
        st = os.fstat(fd)
        self._fd, self._identity = fd, (st.st_dev, st.st_ino)
        self._offset, self._head = 0, b""

    def _same_head(self) -> bool:
        if not self._head or self._fd is None:
            return True
        try:
            return os.pread(self._fd, len(self._head), 0) == self._head
        except OSError:
            return False

    def _read(self) -> list[Record]:
        if self._fd is None:
            return []
        records: list[Record] = []
        budget = MAX_READ_BYTES
        while budget > 0:
            try:
                chunk = os.pread(self._fd, min(budget, 1 << 20), self._offset)
            except OSError:
                break
            if not chunk:
                break
            if len(self._head) < HEAD_BYTES and self._offset < HEAD_BYTES:
                self._head = (self._head + chunk)[:HEAD_BYTES]
            self._offset += len(chunk)
            budget -= len(chunk)
            records += self._lines(chunk)
        return records

    def _lines(self, chunk: bytes) -> list[Record]:
        records: list[Record] = []
        *complete, rest = (self._partial + chunk).split(b"\n")
        for raw in complete:
            if self._discarding:  # the end of an overlong line, counted when it began
                self._discarding = False
                continue
            record = self._record(raw)
            if record is not None:
                records.append(record)
        if len(rest) > self.max_line_bytes:
            if not self._discarding:
                self._skip(f"a line longer than {self.max_line_bytes} bytes")
            self._discarding, rest = True, b""
        self._partial = rest
        return records

    def _record(self, raw: bytes) -> Record | None:
        try:
            text = raw.decode("utf-8").strip()
            if len(raw) > self.max_line_bytes:
                raise NotAMetricsLine(f"a line longer than {self.max_line_bytes} bytes")
            if not text:
                raise NotAMetricsLine("an empty line")
            record = self.parse(text)
        except (UnicodeDecodeError, NotAMetricsLine) as err:
            self._skip(str(err))
            return None
        if not isinstance(record, StepRecord):
            self.ignored += 1
        else:
            self._count_missed(record.step)
        return record

    def _count_missed(self, step: int) -> None:
        """A train line after a cut, or after a cut not seen (the file cut and grown past
        the offset read while the follower did not look), that skips steps."""
        last = self._cut_after if self._cut_after is not None else self._last_step
        if last is not None and step > last + 1:
            self.missed += step - last - 1
        self._cut_after = None
        self._last_step = step

    def _skip(self, why: str) -> None:
        self.skipped += 1
        self.last_problem = why

    def _forget_partial(self, why: str) -> None:
        if self._partial or self._discarding:
            if not self._discarding:
                self._skip(why)
            self._partial, self._discarding = b"", False
