"""elastic_api.kube.Informer (the operator's caches, the trainer's pod watch) against a
scripted API: what it lists (in pages), what each watch sends and how it ends. Checks
the store, the index, the changes reported, what is listed or watched again after a
watch ends, expires (410), stalls or fails, and what an outage logs.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from elastic_api.kube import ApiError, Backoff, Informer, WatchStalled


def pod(name: str, version: int, job: str = "a", namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(version),
                         "labels": {"job": job}}}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def bookmark(version: int) -> dict[str, Any]:
    return event("BOOKMARK", {"metadata": {"resourceVersion": str(version)}})


GONE = event("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                       "message": "too old resource version"})


class ScriptedApi:
    """`lists`: the object lists served in turn (each split in pages of two);
    `watches`: per watch, the events it sends, then how it ends (None: the server ends
    it; an exception: raised)."""

    def __init__(self, lists: list[list[dict[str, Any]]],
                 watches: list[tuple[list[dict[str, Any]], Exception | None]]) -> None:
        self.lists = lists
        self.watches = watches
        self.listed_at: list[int] = []  # list resourceVersion served
        self.pages = 0
        self.watched_from: list[str] = []
        self.version = 100
        self.informer: Informer[dict[str, Any]] | None = None
        self._current: list[dict[str, Any]] | None = None

    def list_page(self, token: str | None) -> dict[str, Any]:
        if token is None:
            self._current = self.lists.pop(0)
            self.version += 100
            self.listed_at.append(self.version)
        assert self._current is not None
        start = int(token or 0)
        self.pages += 1
        page = self._current[start:start + 2]
        more = start + 2 < len(self._current)
        return {"items": page, "metadata": {"resourceVersion": str(self.version),
                                            "continue": str(start + 2) if more else ""}}

    def watch(self, version: str) -> Iterator[dict[str, Any]]:
        self.watched_from.append(version)
        if not self.watches:
            assert self.informer is not None
            self.informer.stop()  # the script is over
            return
        events, end = self.watches.pop(0)
        yield from events
        if end is not None:
            raise end


Changes = list[tuple[str, Any, Any]]


def informer(api: ScriptedApi, **options: Any
             ) -> tuple[Informer[dict[str, Any]], Changes, list[str]]:
    """The informer, the changes it reports (name, old, new) and why it listed."""
    changes: list[tuple[str, Any, Any]] = []
    relists: list[str] = []

    def changed(key: tuple[str, str], old: Any, new: Any) -> None:
        changes.append((key[1], old and old["v"], new and new["v"]))

    inf: Informer[dict[str, Any]] = Informer(
        "pods", api.list_page, api.watch,
        lambda obj: {"v": int(obj["metadata"]["resourceVersion"]),
                     "job": obj["metadata"]["labels"]["job"]},
        index=lambda key, value: (key[0], value["job"]), on_change=changed,
        on_relist=lambda _res, why, _n: relists.append(why),
        backoff=Backoff(base_s=0.001, cap_s=0.001), **options)
    api.informer = inf
    return inf, changes, relists


def test_lists_in_pages_then_applies_watch_events_to_the_store_and_index() -> None:
    api = ScriptedApi(
        lists=[[pod("p1", 1), pod("p2", 2), pod("p3", 3, job="b")]],
        watches=[([event("MODIFIED", pod("p1", 150)), event("ADDED", pod("p4", 160)),
                   event("DELETED", pod("p2", 170)), bookmark(180)], None)])
    inf, changes, relists = informer(api)
    inf.run()
    assert api.pages == 2 and inf.synced
    assert sorted(k[1] for k in inf.indexed(("ns", "a"))) == ["p1", "p4"]
    assert list(inf.indexed(("ns", "b"))) == [("ns", "p3")]
    assert inf.get(("ns", "p1")) == {"v": 150, "job": "a"} and inf.get(("ns", "p2")) is None
    assert changes == [("p1", None, 1), ("p2", None, 2), ("p3", None, 3),
                       ("p1", 1, 150), ("p4", None, 160), ("p2", 2, None)]
    # The next watch resumes from the bookmark; nothing is listed again.
    assert api.watched_from == ["200", "180"] and api.listed_at == [200]
    assert relists == ["start"]


def test_a_pod_that_changes_job_label_moves_between_index_buckets() -> None:
    api = ScriptedApi(lists=[[pod("p1", 1)]],
                      watches=[([event("MODIFIED", pod("p1", 5, job="b"))], None)])
    inf, _, _ = informer(api)
    inf.run()
    assert inf.indexed(("ns", "a")) == {} and list(inf.indexed(("ns", "b"))) == [("ns", "p1")]


def test_an_expired_resource_version_lists_again_and_reports_what_vanished() -> None:
    """410 Gone (the API server restarted, or we fell behind): list again; p2 was deleted
    while we could not watch, and is reported deleted; p1 changed, p3 is new."""
    api = ScriptedApi(
        lists=[[pod("p1", 1), pod("p2", 2)], [pod("p1", 250), pod("p3", 260)]],
        watches=[([GONE], None)])
    inf, changes, relists = informer(api)
    inf.run()
    assert relists == ["start", "expired"]
    assert changes[2:] == [("p2", 2, None), ("p1", 1, 250), ("p3", None, 260)]
    assert sorted(k[1] for k in inf.indexed(("ns", "a"))) == ["p1", "p3"]


def test_a_watch_request_answered_410_lists_again() -> None:
    """Not as an ERROR event in the stream but as the HTTP answer: the same expiry."""
    api = ScriptedApi(lists=[[pod("p1", 1)], [pod("p1", 2)]],
                      watches=[([], ApiError(410, "Gone", '{"kind": "Status", "code": 410}'))])
    inf, _, relists = informer(api)
    inf.run()
    assert relists == ["start", "expired"]


def test_a_stalled_watch_lists_again() -> None:
    api = ScriptedApi(lists=[[pod("p1", 1)], [pod("p1", 2)]],
                      watches=[([], WatchStalled("nothing received for 35 s"))])
    inf, changes, relists = informer(api)
    inf.run()
    assert relists == ["start", "stalled"]
    assert changes == [("p1", None, 1), ("p1", 1, 2)]


def test_a_relist_that_finds_nothing_new_reports_nothing() -> None:
    api = ScriptedApi(lists=[[pod("p1", 1)], [pod("p1", 1)]],
                      watches=[([], WatchStalled("silent"))])
    inf, changes, relists = informer(api)
    inf.run()
    assert changes == [("p1", None, 1)] and relists == ["start", "stalled"]


def test_a_failed_watch_is_retried_from_where_it_stopped() -> None:
    """The API server is down for a while (connection refused, reset): resume the watch
    from the last version seen, with no list in between."""
    api = ScriptedApi(
        lists=[[pod("p1", 1)]],
        watches=[([event("MODIFIED", pod("p1", 210))], ConnectionResetError("reset")),
                 ([], ConnectionRefusedError("refused")),
                 ([event("MODIFIED", pod("p1", 220))], None)])
    inf, changes, relists = informer(api)
    inf.run()
    assert api.watched_from == ["200", "210", "210", "220"] and relists == ["start"]
    assert changes == [("p1", None, 1), ("p1", 1, 210), ("p1", 210, 220)]
    assert inf.get(("ns", "p1")) == {"v": 220, "job": "a"}


def test_a_consumer_that_raises_does_not_stop_the_cache() -> None:
    api = ScriptedApi(lists=[[pod("p1", 1)]],
                      watches=[([event("ADDED", pod("p2", 201))], None)])
    inf: Informer[dict[str, Any]] = Informer(
        "pods", api.list_page, api.watch, lambda obj: obj,
        on_change=lambda *_: 1 / 0)
    api.informer = inf
    inf.run()
    assert len(inf) == 2


def test_with_relist_on_error_a_failed_watch_lists_again() -> None:
    """The trainer's pod watch: after any error, list again (what changed while the
    connection was down is in the list), then watch from the new list."""
    api = ScriptedApi(lists=[[pod("p1", 1)], [pod("p1", 250), pod("p2", 260)]],
                      watches=[([event("MODIFIED", pod("p1", 210))],
                                ConnectionResetError("reset")), ([], None)])
    inf, changes, relists = informer(api, relist_on_error=True)
    inf.run()
    assert relists == ["start", "error"] and api.watched_from == ["200", "300", "300"]
    assert changes == [("p1", None, 1), ("p1", 1, 210), ("p1", 210, 250), ("p2", None, 260)]


def test_only_what_keep_accepts_is_stored_and_reported() -> None:
    """A cluster-wide watch served for some namespaces (globs): the others are neither
    kept nor reported, and their versions still move the watch on."""
    api = ScriptedApi(lists=[[pod("p1", 1, namespace="team-a"), pod("p2", 2, namespace="x")]],
                      watches=[([event("ADDED", pod("p3", 210, namespace="x")),
                                 event("ADDED", pod("p4", 220, namespace="team-b"))], None)])
    inf, changes, _ = informer(api, keep=lambda key: key[0].startswith("team-"))
    inf.run()
    assert sorted(inf.stored_keys()) == [("team-a", "p1"), ("team-b", "p4")]
    assert changes == [("p1", None, 1), ("p4", None, 220)]
    assert api.watched_from == ["200", "220"]


def test_what_parses_to_none_is_not_stored() -> None:
    api = ScriptedApi(lists=[[pod("p1", 1), pod("p2", 2, job="-")]],
                      watches=[([event("ADDED", pod("p3", 210, job="-"))], None)])
    inf: Informer[dict[str, Any]] = Informer(
        "pods", api.list_page, api.watch,
        lambda obj: None if obj["metadata"]["labels"]["job"] == "-" else obj)
    api.informer = inf
    inf.run()
    assert inf.stored_keys() == [("ns", "p1")] and inf.version(("ns", "p1")) == "1"


def test_an_outage_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.informer")
    caplog.set_level(logging.INFO, logger=log.name)
    refused = ([], ConnectionRefusedError("refused"))
    api = ScriptedApi(lists=[[pod("p1", 1)]],
                      watches=[refused, refused, refused,
                               ([event("MODIFIED", pod("p1", 210))], None),
                               refused])
    inf, _, _ = informer(api, logger=log)
    inf.run()
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == log.name]
    warnings = [m for level, m in records if level == logging.WARNING]
    assert len(warnings) == 2, records  # the first outage, and the second
    assert warnings[0].startswith("pods: watch failed (ConnectionRefusedError: refused); "
                                  "resuming the watch in")
    assert (logging.INFO, "pods: watching again after 3 failed attempt(s)") in records


def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_list_first_lists_before_start_returns_and_keeps_trying_if_it_fails() -> None:
    api = ScriptedApi(lists=[[pod("p1", 1)]], watches=[])
    inf, _, _ = informer(api)
    inf.start(list_first=True)
    assert inf.synced and inf.get(("ns", "p1")) is not None

    failing = ScriptedApi(lists=[[pod("p1", 1)]], watches=[])
    failures = [ConnectionRefusedError("refused")]
    checked = threading.Event()  # the retry waits for the test to look first

    def list_page(token: str | None) -> dict[str, Any]:
        if failures:
            raise failures.pop()
        assert checked.wait(30), "the test never looked"
        return failing.list_page(token)

    inf2: Informer[dict[str, Any]] = Informer(
        "pods", list_page, failing.watch, lambda obj: obj,
        backoff=Backoff(base_s=0.001, cap_s=0.001))
    failing.informer = inf2
    inf2.start(list_first=True)
    assert not inf2.synced  # every object still unknown
    checked.set()
    _until(lambda: inf2.synced, "the second list")
