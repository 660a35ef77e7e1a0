"""Pieces of the elastic runtime that need no training: errors, the fault schedule, the
pod watch's bookkeeping (against a stand-in for the pods API)."""
from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import pytest
from builders import etj

from elastic_trainer.backends import SimulatedBackend
from elastic_trainer.errors import is_slice_down_error, slice_down_error
from elastic_trainer.pods import RELIST_BACKOFF, PodReadiness, WorkerPod, slice_readiness
from elastic_trainer.simulated_faults import Fault, FaultSchedule


def test_slice_down_error_is_the_error_pathways_raises() -> None:
    err = slice_down_error([2])
    assert isinstance(err, jax.errors.JaxRuntimeError)
    assert str(err) == "DATA_LOSS: slice 2 is down"
    assert str(slice_down_error([1, 0])) == "DATA_LOSS: slices 0, 1 are down"
    assert is_slice_down_error(err)
    # The classifier is pathwaysutils' (the one elastic_retry uses).
    assert is_slice_down_error(jax.errors.JaxRuntimeError("DEADLINE_EXCEEDED: rpc"))
    assert not is_slice_down_error(jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: oom"))
    assert not is_slice_down_error(RuntimeError("DATA_LOSS: not from the runtime"))


@pytest.mark.parametrize(("text", "fault"), [
    ("23:1", Fault(23, 1, "step")),
    ("5:0:checkpoint", Fault(5, 0, "checkpoint")),
    ("9:1:restore", Fault(9, 1, "restore")),
    ("30-80:1", Fault(30, 1, "step", back_at_step=80)),
])
def test_fault_parse(text: str, fault: Fault) -> None:
    assert Fault.parse(text, total_slices=2) == fault


@pytest.mark.parametrize(("text", "message"), [
    ("23", "expected STEP:SLICE"),
    ("a:1", "expected STEP:SLICE"),
    ("3:2", "slice 2 does not exist"),
    ("0:1", "STEP must be >= 1"),
    ("3:1:later", "phase must be"),
    ("30-20:1", "BACK must be a later step"),
    ("30-x:1", "expected STEP:SLICE"),
])
def test_fault_parse_errors_name_the_flag(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        Fault.parse(text, total_slices=2)
    assert "--fail-at" in str(info.value)


def test_fault_schedule_fires_once_and_the_slice_comes_back() -> None:
    schedule = FaultSchedule([Fault(3, 1)], duration=0.2)
    schedule.on_phase("step", 2)
    assert schedule.down_slices() == {}
    before = time.time()
    schedule.on_phase("step", 3)
    down = schedule.down_slices()
    assert list(down) == [1] and before <= down[1] <= time.time()
    deadline = time.monotonic() + 10
    while schedule.down_slices():
        assert time.monotonic() < deadline, "slice never came back"
        time.sleep(0.02)
    schedule.on_phase("step", 3)  # a rewind past the step does not fire it again
    assert schedule.down_slices() == {}


def test_a_step_range_fault_lasts_until_the_loop_reaches_step_back() -> None:
    schedule = FaultSchedule([Fault(3, 0, back_at_step=6)], duration=0.0)
    schedule.on_phase("step", 3)
    time.sleep(0.01)  # the time-based duration does not apply
    for step in (4, 5):
        schedule.on_phase("step", step)
        assert list(schedule.down_slices()) == [0]
    schedule.on_phase("step", 6)
    assert schedule.down_slices() == {}


def test_simulated_backend_raises_inside_the_step_only_for_slices_of_the_mesh() -> None:
    schedule = FaultSchedule([Fault(1, 0)], duration=30)
    backend = SimulatedBackend(1, 1, schedule)
    backend.check({0})
    backend.on_phase("step", 1)
    backend.check(set())  # slice 0 is not in this mesh
    with pytest.raises(jax.errors.JaxRuntimeError, match="DATA_LOSS: slice 0 is down"):
        backend.check({0})
    assert backend.healthy_slices() == set()


def test_a_slice_that_blinks_during_a_step_still_fails_it() -> None:
    # Down for no time at all: back before the step ends, yet what it held is gone.
    schedule = FaultSchedule([Fault(2, 0)], duration=0.0)
    backend = SimulatedBackend(1, 1, schedule)
    assert backend.wait_for_slices(1, timeout=10) == {0}
    backend.on_phase("step", 2)
    assert backend.healthy_slices() == {0}
    with pytest.raises(jax.errors.JaxRuntimeError, match="DATA_LOSS: slice 0 is down"):
        backend.check({0})
    assert backend.failed_slices(slice_down_error([0]))[0] == [0]
    # A new attempt starts with the slice's memory forgotten; the next steps are fine.
    assert backend.wait_for_slices(1, timeout=10) == {0}
    backend.check({0})


def test_simulated_backend_needs_the_device_count() -> None:
    with pytest.raises(RuntimeError, match="xla_force_host_platform_device_count=64"):
        SimulatedBackend(32, 2, FaultSchedule([]))


# --- slice health from worker pods (PodReadiness) -----------------------------------------


def test_slice_readiness_counts_ready_pods_per_slice() -> None:
    pods = [WorkerPod(0, True, 2), WorkerPod(0, True, 2), WorkerPod(1, False, 2),
            WorkerPod(1, True, 2), WorkerPod(3, False, 4)]
    assert slice_readiness(pods) == {0: (2, 2), 1: (1, 2), 3: (0, 4)}
    assert slice_readiness([]) == {}


def test_relist_backoff_doubles_and_is_bounded() -> None:
    first, longest = RELIST_BACKOFF.base_s, RELIST_BACKOFF.cap_s
    delays = [RELIST_BACKOFF.delay(n) for n in range(1, 12)]
    assert delays[0] == first and delays[1] == 2 * first
    assert delays == sorted(delays) and max(delays) == longest == delays[-1]


def _pod(name: str, slice_index: int, ready: bool, rv: int, job: str = "demo") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "resourceVersion": str(rv), "labels": {
                "elastic.pathways.dev/job-name": job,
                "jobset.sigs.k8s.io/replicatedjob-name": "worker",
                "jobset.sigs.k8s.io/job-index": str(slice_index)}},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


class _Stream:
    """A watch: the events queued for it; an exception queued is raised (a dropped
    connection), None ends it (the server's timeout)."""

    def __init__(self) -> None:
        self.lines: queue.Queue[dict[str, Any] | BaseException | None] = queue.Queue()

    def events(self) -> Iterator[dict[str, Any]]:
        while True:
            item = self.lines.get(timeout=30)
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


class FakePodsApi:
    """The pod calls of elastic_api.kube.KubeClient, as PodReadiness makes them:
    `list_page` serves `pods`, `watch` a `_Stream` the test feeds. `list_errors` are
    raised by the next lists, one each."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.rv = 100
        self.list_errors: list[BaseException] = []
        self.job: Any = None  # what `get` of the ElasticTrainingJob returns
        self.watches: queue.Queue[tuple[dict[str, Any], _Stream]] = queue.Queue()
        self.streams: list[_Stream] = []

    def get(self, path: str, timeout_s: float = 15) -> Any:
        assert path.endswith("/namespaces/ns/elastictrainingjobs/demo"), path
        return self.job

    def list_page(self, path: str, *, limit: int, continue_token: str | None = None,
                  label_selector: str | None = None, timeout_s: float = 15) -> dict[str, Any]:
        assert path == "/api/v1/namespaces/ns/pods"
        if self.list_errors:
            raise self.list_errors.pop(0)
        return {"apiVersion": "v1", "kind": "PodList", "items": list(self.pods.values()),
                "metadata": {"resourceVersion": str(self.rv)}}

    def watch(self, path: str, resource_version: str, timeout_s: int, *,
              label_selector: str | None = None) -> Iterator[dict[str, Any]]:
        stream = _Stream()
        self.watches.put(({"path": path, "resource_version": resource_version,
                           "label_selector": label_selector}, stream))
        return stream.events()

    def next_watch(self) -> tuple[dict[str, Any], _Stream]:
        kwargs, stream = self.watches.get(timeout=30)
        self.streams.append(stream)
        return kwargs, stream

    def end_watches(self) -> None:
        for stream in self.streams:
            stream.lines.put(None)


def _until(predicate: Callable[[], Any], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_pod_readiness_watches_and_lists_again_after_a_dropped_connection(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="elastic_trainer.pods")
    api = FakePodsApi([_pod("w-0-0", 0, True, 1), _pod("w-0-1", 0, True, 2),
                       _pod("w-1-0", 1, True, 3), _pod("w-1-1", 1, False, 4)])
    health = PodReadiness("ns", "demo", total_slices=2, hosts_per_slice=2, client=api)
    health.start()
    try:
        assert list(health.down_slices()) == [1] and health.lists == 1
        kwargs, stream = api.next_watch()
        assert kwargs["resource_version"] == "100" and kwargs["label_selector"] == (
            "elastic.pathways.dev/job-name=demo,jobset.sigs.k8s.io/replicatedjob-name=worker")

        # Events arrive through the watch: no list.
        stream.lines.put({"type": "MODIFIED", "object": _pod("w-1-1", 1, True, 101)})
        _until(lambda: health.down_slices() == {}, "slice 1 up from a watch event")
        stream.lines.put({"type": "DELETED", "object": _pod("w-0-1", 0, True, 102)})
        _until(lambda: list(health.down_slices()) == [0], "slice 0 down from a deletion")
        assert health.lists == 1

        # The connection drops; what changed meanwhile is in the next list.
        api.pods["w-1-1"] = _pod("w-1-1", 1, True, 101)
        del api.pods["w-0-1"]
        api.pods["w-0-1b"] = _pod("w-0-1b", 0, True, 103)
        api.pods["w-1-0"] = _pod("w-1-0", 1, False, 104)
        api.rv = 104
        stream.lines.put(ConnectionResetError(104, "Connection reset by peer"))
        kwargs, stream = api.next_watch()
        assert kwargs["resource_version"] == "104" and health.lists == 2
        assert list(health.down_slices()) == [1] and health.watching

        # The server ends the watch: the next one resumes where it was, without a list.
        stream.lines.put({"type": "MODIFIED", "object": _pod("w-1-0", 1, True, 105)})
        stream.lines.put(None)
        kwargs, stream = api.next_watch()
        assert kwargs["resource_version"] == "105" and health.lists == 2
        assert health.down_slices() == {}

        # An expired resourceVersion (410) lists again.
        stream.lines.put({"type": "ERROR", "object": {
            "kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}})
        kwargs, stream = api.next_watch()
        assert health.lists == 3 and kwargs["resource_version"] == "104"
    finally:
        health.close()
        api.end_watches()
    broke = [r for r in caplog.records if "worker pods: watch failed" in r.getMessage()]
    expired = [r for r in caplog.records if "worker pods: watch expired" in r.getMessage()]
    assert [r.levelno for r in broke] == [logging.WARNING], caplog.text
    assert [r.levelno for r in expired] == [logging.INFO], caplog.text


def test_pod_readiness_keeps_listing_with_backoff_while_the_api_is_away(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="elastic_trainer.pods")
    api = FakePodsApi([_pod("w-0-0", 0, True, 1)])
    api.list_errors = [ConnectionRefusedError(111, "refused")] * 3
    health = PodReadiness("ns", "demo", total_slices=1, hosts_per_slice=1, client=api)
    health.start()  # its list fails: every slice stays down
    assert list(health.down_slices()) == [0] and health.lists == 0
    try:
        api.next_watch()  # two more failed lists, then one that works
        assert health.lists == 1 and health.down_slices() == {}
    finally:
        health.close()
        api.end_watches()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert sum(level == logging.WARNING for level, _ in messages) == 1, messages
    assert (logging.INFO, "worker pods: listed again after 3 failed attempt(s)") \
        in messages, messages


@pytest.mark.parametrize(("job", "expected"), [
    ({}, 64),  # the spec as the builder writes it
    # The spec alone is read: a status a buggy trainer wrote does not hide the shape.
    ({"status": {"training": {"step": -1}}}, 64),
    ({"spec": {"tpu": "nonsense"}}, None),  # the Jobs' parallelism says
    (None, None),
])
def test_pod_readiness_reads_the_hosts_per_slice_from_the_jobs_spec(
        job: dict[str, Any] | None, expected: int | None) -> None:
    """Without ETJ_HOSTS_PER_SLICE, a slice is up with as many Ready pods as its TPU
    shape has VMs (v5e 16x16: 64), read from the job's spec as the operator reads it."""
    api = FakePodsApi([])
    built = etj().tpu("v5e", "16x16", 2).build().model_dump(by_alias=True, mode="json")
    api.job = None if job is None else {**built, **job}
    health = PodReadiness("ns", "demo", total_slices=2, client=api)
    health.start()
    try:
        api.next_watch()  # watching: a stream that `end_watches` ends
        assert health.hosts_per_slice == expected
    finally:
        health.close()
        api.end_watches()
