"""A slice event of the largest jobs stays the size of a slice event: a 1,536-host slice
(v5p 16x16x24) whose every pod failed posts the Events of one slice, each short, and its
status names a few hosts and counts the rest; the record job (199 x 64 hosts) failing
whole writes a status far below etcd's 1.5 MiB (it was 2.1 MB, past the limit)."""
from __future__ import annotations

from collections import Counter

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import MAX_EVENT_MESSAGE
from elastic_operator.core.slices import MAX_HOSTS_NAMED
from elastic_operator.core.status_events import outbox
from elastic_operator.core.wording import fmt_slices
from tests.builders import at
from tests.support.large_jobs import LARGEST_SLICE, RECORD, LargeRun

ETCD_REQUEST_LIMIT = 1_572_864  # bytes: etcd's --max-request-bytes default (1.5 MiB)


def size(run: LargeRun) -> int:
    return len(run.status.model_dump_json(by_alias=True, exclude_none=True))


def test_a_1536_host_slice_failing_whole_posts_the_events_of_one_slice() -> None:
    run = LargeRun(*LARGEST_SLICE)
    ready, events = run.look(run.healthy(), 5)
    assert (ready.slices_ready, events) == (1, [])
    status, events = run.look(run.failed({0: range(1536)}, at(9)), 10)
    assert status.slices[0].state == "Down" and status.slices[0].hosts == 1536
    assert Counter(e.reason for e in events) == {Reason.SLICE_DOWN: 1,
                                                  Reason.SLICE_REPLACING: 1}
    down = events[0]
    assert down.message.startswith("slice 0 is down: host 0 (pod article-worker-0-0-g0) "
                                   "failed (containerFailed, exit code 1); host 1 ")
    assert down.message.endswith(f"; and {1536 - MAX_HOSTS_NAMED} more hosts down")
    assert all(len(e.message) < 512 for e in events)
    assert all(len(p.message) <= MAX_EVENT_MESSAGE for p in
               outbox("article", "uid-1", events, status))
    assert len(status.slices[0].message or "") < 512
    assert size(run) < 8_000  # was 245 KB: every host named twice (slice, condition)


def test_four_largest_slices_failing_together_post_two_events_each() -> None:
    run = LargeRun(4, *LARGEST_SLICE[1:])
    run.look(run.healthy(), 5)
    _, events = run.look(run.failed({i: range(1536) for i in range(4)}, at(9)), 10)
    assert Counter((e.reason, e.slice_index) for e in events) == {
        (reason, i): 1 for reason in (Reason.SLICE_DOWN, Reason.SLICE_REPLACING)
        for i in range(4)}
    assert size(run) < 16_000  # was 971 KB


def test_the_record_job_failing_whole_writes_a_status_etcd_takes() -> None:
    run = LargeRun(*RECORD)
    run.look(run.healthy(), 5)
    status, events = run.look(run.failed({i: range(64) for i in range(199)}, at(9)), 10)
    # A slice event is two Events: the job's 199 slices at once, 398; never one per host.
    assert len(events) == 2 * 199
    assert max(len(e.message) for e in events) < 512
    down = next(c for c in status.conditions if c.type == ConditionType.SLICE_DOWN)
    assert down.message.endswith("; and 191 more slices down")
    assert len(down.message) < 4_000
    ready = next(c for c in status.conditions if c.type == ConditionType.READY)
    assert "slices 0-198" in ready.message
    assert size(run) < ETCD_REQUEST_LIMIT / 4  # was 2.09 MB: refused by etcd


def test_one_host_of_the_record_job_is_one_slice_event() -> None:
    run = LargeRun(*RECORD)
    run.look(run.healthy(), 5)
    status, events = run.look(run.failed({42: [5]}, at(9)), 10)
    assert [(e.reason, e.slice_index) for e in events] == [(Reason.SLICE_DOWN, 42),
                                                           (Reason.SLICE_REPLACING, 42)]
    assert status.slices_ready == 198


def test_slice_lists_name_runs_by_their_ends() -> None:
    assert fmt_slices([2]) == "slice 2"
    assert fmt_slices([2, 0]) == "slices 0, 2"
    assert fmt_slices([0, 1, 2, 5, 6, *range(8, 199)]) == "slices 0-2, 5, 6, 8-198"
