"""What the goodput replay reads from the trainer's own log (`etj train --log-every 1`):
each step done, each restore, each sign that the trainer noticed a fault. The log is the
one record that survives a killed process (a JobSet restart gives the trainer no time to
write its summary), with millisecond timestamps on the machine's clock."""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench.goodput_account import Step

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+: (.*)$")
_STEP = re.compile(r"^step (\d+)/\d+ loss \S+ \(([\d.]+)s/step, (\d+) slice")
_ATTEMPT = re.compile(r"^attempt \d+: .* start at step (\d+) \((\w+), ([\d.]+)s\)")
# The trainer's first word on a fault: a slice lost, its watchdog, the operator's
# checkpoint request for a maintenance.
_NOTICED = re.compile(r"^(elastic event \d+: \S+: |watchdog: |checkpoint request \d+ )")
# A slow slice asked to be replaced (its index, the first named).
_MOVE = re.compile(r"^asking for slice\(s\) \[(\d+).*\(request \d+, SliceSlow\)")
# Training on the slices left: the lost one is back (a scale-up follows).
_BACK = re.compile(r"^elastic event \d+: slices .* are back at step (\d+)")


@dataclass(frozen=True)
class Record:
    at: float
    what: str  # "step", "attempt" (a restore done: training starts from `value`),
    # "noticed", "back" (a slice back while training on the others), "move" (a slow
    # slice asked to be replaced: `value` is the slice)
    value: int
    process: int
    seconds: float = 0.0  # an attempt's restore; a step's own time
    source: str = ""  # an attempt's: snapshot, checkpoint, none; a step's slices


def parse_line(line: str, process: int) -> Record | None:
    match = _LINE.match(line)
    if match is None:
        return None
    at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    text = match.group(2)
    if step := _STEP.match(text):
        return Record(at, "step", int(step.group(1)), process, float(step.group(2)),
                      step.group(3))
    if attempt := _ATTEMPT.match(text):
        return Record(at, "attempt", int(attempt.group(1)), process,
                      float(attempt.group(3)), attempt.group(2))
    if _NOTICED.match(text):
        return Record(at, "noticed", 0, process)
    if back := _BACK.match(text):
        return Record(at, "back", int(back.group(1)), process)
    if move := _MOVE.match(text):
        return Record(at, "move", int(move.group(1)), process)
    return None


class Logs:
    """The logs of a side's trainer processes (one file each, in start order), read as
    they grow."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self._offsets: list[int] = []
        self.records: list[Record] = []

    def add(self, path: Path) -> int:
        self.paths.append(path)
        self._offsets.append(0)
        return len(self.paths) - 1

    def refresh(self) -> None:
        for process, path in enumerate(self.paths):
            if not path.exists():
                continue
            with path.open("rb") as f:
                f.seek(self._offsets[process])
                data = f.read()
            complete = data[:data.rfind(b"\n") + 1]
            self._offsets[process] += len(complete)
            new = [r for line in complete.decode(errors="replace").splitlines()
                   if (r := parse_line(line, process)) is not None]
            if new:
                self.records.extend(new)
                self.records.sort(key=lambda r: r.at)  # nearly sorted: cheap

    def first(self, what: str, after: float) -> Record | None:
        start = bisect.bisect_right(self.records, after, key=lambda r: r.at)
        return next((r for r in self.records[start:] if r.what == what), None)

    def last(self, what: str, before: float) -> Record | None:
        end = bisect.bisect_right(self.records, before, key=lambda r: r.at)
        return next((r for r in reversed(self.records[:end]) if r.what == what), None)

    def steps(self) -> list[Step]:
        return [Step(r.at, r.value, r.process) for r in self.records if r.what == "step"]

    def count(self, what: str) -> int:
        return sum(1 for r in self.records if r.what == what)
