"""A watch-fed cache of one kind of object, as client-go's reflector and informer keep
one: list once (in pages), then watch from the list's resourceVersion, and keep in memory
what the objects parse to. Everything either side watches comes through one of these.

- A watch the API server ends (every `watch_timeout_s`) is resumed from the last
  resourceVersion seen (bookmarks included); nothing is listed again.
- A watch that sends nothing for longer than that (plus a margin) is stalled: a half-open
  connection, a proxy that stopped forwarding. Reading it times out, and the cache lists
  everything again, so what the silence hid is not lost.
- "410 Gone" (the resourceVersion is older than the API server keeps; after an API server
  restart) lists again as well. Any other error (the API server is down) is retried with a
  capped backoff, resuming the watch where it stopped (or, with `relist_on_error`,
  listing again). An outage is logged once, as a warning; its recovery once, as info.
- A list replaces the whole store and reports the difference: objects gone while we were
  not watching are reported deleted. Meanwhile the store keeps what it last knew.

Every change calls `on_change(key, old, new)` (None: absent) from the informer's own
thread, after the store is updated: whatever it wakes reads at least that change.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

from elastic_api.kube.backoff import Backoff
from elastic_api.kube.client import ApiError, WatchStalled

V = TypeVar("V")
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
ListPage = Callable[[str | None], dict[str, Any]]  # continue token -> one page of a List
Watch = Callable[[str], Iterator[dict[str, Any]]]  # resourceVersion -> watch events
ChangeCallback = Callable[[Key, Any, Any], None]
MIN_WATCH_S = 0.5
# A watch that keeps failing is tried again after 0.5 s, doubling up to 10 s.
WATCH_BACKOFF = Backoff(base_s=0.5, cap_s=10.0)


class ResourceVersionExpired(Exception):
    """410 Gone: the API server no longer has the history from our resourceVersion."""


class Informer(Generic[V]):
    """The store of one resource, kept current by one thread (`start`).

    `keep(key)`: only the objects it accepts are stored and reported (a namespace
    filter on a cluster-wide watch), and only those that `parse` does not turn into
    None; `index(key, value)`: a secondary index
    (`indexed`); `on_relist(resource, reason, objects)` after every list (reason:
    start, expired, stalled, error)."""

    def __init__(
        self, resource: str, list_page: ListPage, watch: Watch,
        parse: Callable[[dict[str, Any]], V | None], *,
        index: Callable[[Key, V], Hashable | None] = lambda _key, _value: None,
        keep: Callable[[Key], bool] = lambda _key: True,
        on_change: ChangeCallback | None = None,
        on_relist: Callable[[str, str, int], None] | None = None,
        backoff: Backoff = WATCH_BACKOFF, relist_on_error: bool = False,
        logger: logging.Logger | None = None,
    ) -> None:
        self.resource = resource
        self._list_page = list_page
        self._watch = watch
        self._parse = parse
        self._index_of = index
        self._keep = keep
        self._on_change = on_change or (lambda _k, _o, _n: None)
        self._on_relist = on_relist or (lambda _r, _why, _n: None)
        self._backoff = backoff
        self._relist_on_error = relist_on_error
        self._log = logger or logging.getLogger(__name__)
        self._lock = threading.Lock()
        self._store: dict[Key, tuple[str, V]] = {}  # key -> (resourceVersion, value)
        self._index: dict[Hashable, dict[Key, V]] = {}
        self._resource_version: str | None = None
        self._relist_reason = "start"
        self._failures = 0  # attempts in a row that failed before a watch got anywhere
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # time.monotonic() when the API server was last heard (event, bookmark, list, or
        # the end of a watch).
        self.last_event_at: float | None = None

    # --- reads (any thread) ---

    @property
    def synced(self) -> bool:
        """The first list is in: the store holds every object (as of some moment)."""
        return self._synced.is_set()

    def get(self, key: Key) -> V | None:
        with self._lock:
            entry = self._store.get(key)
            return entry[1] if entry is not None else None

    def version(self, key: Key) -> str | None:
        """The resourceVersion of the object as stored (None: not stored)."""
        with self._lock:
            entry = self._store.get(key)
            return entry[0] if entry is not None else None

    def stored_keys(self) -> list[Key]:
        with self._lock:
            return list(self._store)

    def indexed(self, index_key: Hashable) -> dict[Key, V]:
        """The objects whose index function returned `index_key` (a copy)."""
        with self._lock:
            return dict(self._index.get(index_key, {}))

    def __len__(self) -> int:
        with self._lock:
            return len(self._store)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- the thread ---

    def start(self, *, list_first: bool = False) -> None:
        """Start the thread. `list_first`: make the first list here, before returning
        (a failure is the first of the outage, and the thread goes on trying)."""
        if list_first:
            self._attempt(watch=False)
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.resource}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current read returns (the thread is a daemon: it never holds
        the process up)."""
        self._stopping.set()

    def run(self) -> None:
        while not self._stopping.is_set():
            if self._failures and self._stopping.wait(self._backoff.delay(self._failures)):
                return
            self._attempt()

    def _attempt(self, watch: bool = True) -> None:
        """List if there is no resourceVersion to resume from, then watch until the API
        server ends the watch; an error is counted, logged and decides what comes next."""
        doing = "list"
        try:
            if self._resource_version is None:
                self.relist(self._relist_reason)
            if not watch:
                return
            doing, started = "watch", time.monotonic()
            self.watch_once()
            self._recovered("watching")
            if time.monotonic() - started < MIN_WATCH_S:  # never spin on a closing watch
                self._stopping.wait(MIN_WATCH_S)
        except ResourceVersionExpired:
            self._expired()
        except WatchStalled:
            self._resource_version, self._relist_reason = None, "stalled"
            self._log.warning("%s: the watch sent nothing for too long; listing again",
                              self.resource)
        except Exception as e:  # the API server is down or refused
            if isinstance(e, ApiError) and e.status == 410:  # answered as such, not an event
                self._expired()
            elif not self._stopping.is_set():
                self._failed(doing, e)

    def _expired(self) -> None:
        self._resource_version, self._relist_reason = None, "expired"
        self._log.info("%s: watch expired (410: resourceVersion too old); listing again",
                       self.resource)

    def _failed(self, doing: str, error: Exception) -> None:
        self._failures += 1
        if self._relist_on_error:
            self._resource_version, self._relist_reason = None, "error"
        delay = self._backoff.delay(self._failures)
        then = "listing again" if self._resource_version is None else "resuming the watch"
        # Once per outage, not once per attempt.
        self._log.log(logging.WARNING if self._failures == 1 else logging.DEBUG,
                      "%s: %s failed (%s: %s); %s in %.2f s", self.resource, doing,
                      type(error).__name__, _first_line(error), then, delay)

    def _recovered(self, doing: str) -> None:
        if self._failures > 1:
            self._log.info("%s: %s again after %d failed attempt(s)", self.resource, doing,
                           self._failures)
        self._failures = 0

    def relist(self, reason: str) -> None:
        """List every object (in pages), replace the store, report the difference."""
        fresh: dict[Key, tuple[str, V]] = {}
        token: str | None = None
        while True:
            page = self._list_page(token)
            for obj in page.get("items") or []:
                key, version = _identity(obj)
                value = self._parse(obj) if self._keep(key) else None
                if value is not None:
                    fresh[key] = (version, value)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                break
        with self._lock:
            old = self._store
            self._store = fresh
            self._index = {}
            for key, (_, value) in fresh.items():
                self._add_to_index(key, value)
            self._resource_version = str(meta.get("resourceVersion") or "") or None
        self.last_event_at = time.monotonic()
        if self._failures > 1:
            self._log.info("%s: listed again after %d failed attempt(s)", self.resource,
                           self._failures)
            self._failures = 1  # said; a watch that fails next is the same outage
        self._on_relist(self.resource, reason, len(fresh))
        self._log.info("%s: listed %d (%s)", self.resource, len(fresh), reason)
        for key in old.keys() - fresh.keys():
            self._notify(key, old[key][1], None)
        for key, (version, value) in fresh.items():
            before = old.get(key)
            if before is None or before[0] != version:
                self._notify(key, before[1] if before else None, value)
        self._synced.set()

    def watch_once(self) -> None:
        """Apply one watch's events until the API server ends it."""
        assert self._resource_version is not None
        for event in self._watch(self._resource_version):
            if self._stopping.is_set():
                return
            self.last_event_at = time.monotonic()
            self.apply(event)
            if self._failures:
                self._recovered("watching")  # it got somewhere: a new outage starts at 1
        self.last_event_at = time.monotonic()  # the API server ended it: alive too

    def apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise ResourceVersionExpired(obj.get("message", ""))
            raise ApiError(int(obj.get("code") or 500), str(obj.get("reason") or ""),
                           str(obj.get("message") or obj))
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if kind == "BOOKMARK":
            self._resource_version = version or self._resource_version
            return
        key, _ = _identity(obj)
        if not self._keep(key):
            self._resource_version = version or self._resource_version
            return
        new = self._parse(obj) if kind in ("ADDED", "MODIFIED") else None
        with self._lock:
            before = self._store.pop(key, None)
            if before is not None:
                self._remove_from_index(key, before[1])
            if new is not None:
                self._store[key] = (version, new)
                self._add_to_index(key, new)
            if version:
                self._resource_version = version
        if before is not None or new is not None:
            self._notify(key, before[1] if before else None, new)

    def _notify(self, key: Key, old: V | None, new: V | None) -> None:
        try:
            self._on_change(key, old, new)
        except Exception:  # a consumer's bug must not stop the cache
            self._log.exception("%s: handling the change of %s/%s failed", self.resource,
                                *key)

    def _add_to_index(self, key: Key, value: V) -> None:
        index_key = self._index_of(key, value)
        if index_key is not None:
            self._index.setdefault(index_key, {})[key] = value

    def _remove_from_index(self, key: Key, value: V) -> None:
        index_key = self._index_of(key, value)
        bucket = self._index.get(index_key) if index_key is not None else None
        if bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del self._index[index_key]


def _identity(obj: dict[str, Any]) -> tuple[Key, str]:
    meta = obj.get("metadata") or {}
    return ((str(meta.get("namespace") or ""), str(meta.get("name") or "")),
            str(meta.get("resourceVersion") or ""))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
