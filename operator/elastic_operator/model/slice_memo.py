"""SliceMemo: what a reconcile derived from one slice's pods and nodes, kept for the next
reconcile of the same job while those pods and nodes are the same objects.

Why: the status is recomputed from everything observed at each reconcile (level-based),
and at 4,096 pods most of that was the per-slice verdicts over pods that had not changed
since the last look (docs/benchmarks.md, the scale benchmark). The caches hand out
the same parsed object until the API server sends a new version of it, so "same object"
is a cheap and exact test of "nothing changed", and a slice whose pods and nodes did not
change gets back what was derived from them: a failure costs the reconcile about what
one slice costs, not what the whole job does.

Only pure functions of the inputs are kept (the memo never decides anything): the value
computed from equal inputs is the same, so a reconcile with the memo computes exactly what
one without it does (tests/unit/test_slice_memo.py feeds both the same observations). The
memo holds its inputs, so an object it compares by identity cannot be freed and its
address reused by another. Lost on restart, like any cache: the first reconcile computes
everything again.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class SliceMemo:
    """One job's memo: per slice, the inputs last seen and the values derived from them.
    Reconciles of one job do not overlap (the work queue runs one at a time per job), so
    no lock."""

    def __init__(self) -> None:
        self._inputs: dict[int, tuple[object, ...]] = {}
        self._values: dict[int, dict[str, tuple[tuple[object, ...], object]]] = {}
        self._of_job: dict[str, tuple[tuple[object, ...], object]] = {}
        self.hits = 0
        self.misses = 0

    def get(self, what: str, index: int, inputs: tuple[object, ...],
            compute: Callable[[], T], more: tuple[object, ...] = ()) -> T:
        """compute(), or what it returned before for the same `inputs` (the slice's pods
        and nodes) and `more`: each element the same object or equal to it. `compute`
        must be a pure function of them, and its result is shared between reconciles:
        never mutated."""
        return self._kept(self._current(index, inputs), what, more, compute)

    def of_job(self, what: str, inputs: tuple[object, ...], compute: Callable[[], T]) -> T:
        """The same for a value derived from all of the job's pods (their grouping by
        slice): kept while `inputs` is equal, element by element, to the last one."""
        return self._kept(self._of_job, what, inputs, compute)

    def _current(self, index: int, inputs: tuple[object, ...]
                 ) -> dict[str, tuple[tuple[object, ...], object]]:
        """The values derived from `inputs`: those kept, if the slice's inputs are the
        same (tuple equality tries identity first, element by element), else none."""
        old = self._inputs.get(index)
        if old is not inputs:
            self._inputs[index] = inputs  # later calls of this reconcile: `is`
            if old is None or old != inputs:
                self._values[index] = {}
        return self._values.setdefault(index, {})

    def _kept(self, table: dict[str, tuple[tuple[object, ...], object]], what: str,
              inputs: tuple[object, ...], compute: Callable[[], T]) -> T:
        """table[what]'s value if it was computed from `inputs` (equal element by element,
        identity first), else compute() kept in its place; counted as a hit or a miss."""
        entry = table.get(what)
        if entry is not None and entry[0] == inputs:
            self.hits += 1
            return entry[1]  # type: ignore[return-value]
        self.misses += 1
        value = compute()
        table[what] = (inputs, value)
        return value
