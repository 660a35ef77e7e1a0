"""A watch-fed cache of one kind of object (pods of the jobs, nodes), as client-go's
reflector and informer keep one: list once (in pages), then watch from the list's
resourceVersion, and keep in memory what the objects parse to.

- A watch the API server ends (every `watch_timeout_s`) is resumed from the last
  resourceVersion seen (bookmarks included); nothing is listed again.
- A watch that sends nothing for longer than that (plus a margin) is stalled: a half-open
  connection, a proxy that stopped forwarding. Reading it times out, and the cache lists
  everything again, so what the silence hid is not lost.
- "410 Gone" (the resourceVersion is older than the API server keeps; after an API server
  restart) lists again as well. Any other error (the API server is down) is retried with a
  capped backoff, resuming the watch where it stopped.
- A list replaces the whole store and reports the difference: objects gone while we were
  not watching are reported deleted.

Every change calls `on_change(key, old, new)` (None: absent) from the informer's own
thread, after the store is updated: a reconcile it wakes reads at least that change.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from elastic_operator.kube import ApiError, WatchStalled

logger = logging.getLogger("elastic_operator")

V = TypeVar("V")
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
ListPage = Callable[[str | None], dict[str, Any]]  # continue token -> one page of a List
Watch = Callable[[str], Iterator[dict[str, Any]]]  # resourceVersion -> watch events
ChangeCallback = Callable[[Key, Any, Any], None]
MIN_WATCH_S = 0.5


class ResourceVersionExpired(Exception):
    """410 Gone: the API server no longer has the history from our resourceVersion."""


@dataclass(frozen=True)
class Backoff:
    base_s: float = 0.5
    cap_s: float = 10.0

    def delay(self, failures: int) -> float:
        return float(min(self.cap_s, self.base_s * 2 ** min(max(failures - 1, 0), 30)))


class Informer(Generic[V]):
    """The store of one resource, kept current by one thread (`start`)."""

    def __init__(
        self, resource: str, list_page: ListPage, watch: Watch,
        parse: Callable[[dict[str, Any]], V], *,
        index: Callable[[Key, V], Hashable | None] = lambda _key, _value: None,
        on_change: ChangeCallback | None = None,
        on_relist: Callable[[str, str, int], None] | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.resource = resource
        self._list_page = list_page
        self._watch = watch
        self._parse = parse
        self._index_of = index
        self._on_change = on_change or (lambda _k, _o, _n: None)
        # (resource, reason, objects) after each list: reason start, expired, stalled.
        self._on_relist = on_relist or (lambda _r, _why, _n: None)
        self._backoff = backoff or Backoff()
        self._lock = threading.Lock()
        self._store: dict[Key, tuple[str, V]] = {}  # key -> (resourceVersion, value)
        self._index: dict[Hashable, dict[Key, V]] = {}
        self._resource_version: str | None = None
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

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def get(self, key: Key) -> V | None:
        with self._lock:
            entry = self._store.get(key)
            return entry[1] if entry is not None else None

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

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.resource}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current read returns (the thread is a daemon: it never holds
        the process up)."""
        self._stopping.set()

    def run(self) -> None:
        failures = 0
        relist_reason = "start"
        while not self._stopping.is_set():
            try:
                if self._resource_version is None:
                    self.relist(relist_reason)
                started = time.monotonic()
                self.watch_once()
                failures = 0
                if time.monotonic() - started < MIN_WATCH_S:  # never spin on a closing watch
                    self._stopping.wait(MIN_WATCH_S)
            except ResourceVersionExpired:
                self._resource_version, relist_reason = None, "expired"
                logger.info("%s: resourceVersion expired; listing again", self.resource)
            except WatchStalled:
                self._resource_version, relist_reason = None, "stalled"
                logger.warning("%s: the watch sent nothing for too long; listing again",
                               self.resource)
            except Exception as e:  # the API server is down or refused: retry, resume
                failures += 1
                delay = self._backoff.delay(failures)
                logger.warning("%s: %s: %s; retrying in %.1f s", self.resource,
                               type(e).__name__, str(e)[:600], delay)
                self._stopping.wait(delay)

    def relist(self, reason: str) -> None:
        """List every object (in pages), replace the store, report the difference."""
        fresh: dict[Key, tuple[str, V]] = {}
        token: str | None = None
        while True:
            page = self._list_page(token)
            for obj in page.get("items") or []:
                key, version = _identity(obj)
                fresh[key] = (version, self._parse(obj))
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
        self._on_relist(self.resource, reason, len(fresh))
        logger.info("%s: listed %d (%s)", self.resource, len(fresh), reason)
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
            logger.exception("%s: handling the change of %s/%s failed", self.resource, *key)

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
