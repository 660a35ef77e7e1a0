"""The raw REST client both the operator and the trainer talk to the API server with.

Requests go through the kubernetes client's ApiClient (auth, TLS, kubeconfig: both images
ship it) and nothing else of it: objects go in and come out as plain dicts, exactly as
the API server speaks them, so no caller ever sees the client's model classes. The
kubernetes package is imported only when a client is made (`from_environment`) or a
watch is read: a trainer that only imports the status reporter pays nothing for it.
What the API server sends is decoded with orjson (imported as lazily): at 4,096 pods the
pod watch's events are most of the operator's CPU, and the standard library's decoder
was a large part of each event's cost (docs/design/informers.md). Request bodies still go through
the client's own serializer: it json.dumps whatever a JSON content type carries.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from elastic_api.names import GROUP, PLURAL, VERSION

REQUEST_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 10.0
MAX_RETRY_AFTER_RETRIES = 10  # client-go's default
# A watch asked to end after N seconds that has sent nothing for N + this many is stalled.
WATCH_SILENCE_MARGIN_S = 5
PATCH_TYPES = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
               "apply": "application/apply-patch+yaml"}  # server-side apply (JSON is YAML)


class ApiError(Exception):
    """A request the API server answered with an error, with its Status parsed
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#response-status-kind)."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {body[:500]}")
        self.status = status  # the HTTP status code
        self.reason = reason  # the HTTP reason phrase
        self.body = body
        self.api_status = _parse_status(body)  # {} when the body is not a Status

    @property
    def status_reason(self) -> str:
        """The Status's machine-readable reason: NotFound, Forbidden, AlreadyExists..."""
        return _str(self.api_status.get("reason"))

    @property
    def details(self) -> dict[str, Any]:
        details = self.api_status.get("details")
        return details if isinstance(details, dict) else {}

    @property
    def cause_types(self) -> list[str]:
        causes = self.details.get("causes")
        return [_str(c.get("type")) for c in causes if isinstance(c, dict)] \
            if isinstance(causes, list) else []

    @property
    def message(self) -> str:
        """The message of the API server's Status (the body itself if it is not one)."""
        return _str(self.api_status.get("message")) or self.body

    def is_not_found(self, group: str, plural: str) -> bool:
        """404 for an object of this resource (not, say, its namespace)."""
        return self.status == 404 and self.details.get("kind") == plural \
            and self.details.get("group", "") == group

    @property
    def is_conflict(self) -> bool:
        """A conditional write found the object changed since the version it was given."""
        return self.status == 409 and self.status_reason == "Conflict"

    @property
    def namespace_terminating(self) -> bool:
        """Refused because the namespace is being deleted."""
        return self.status == 403 and "NamespaceTerminating" in self.cause_types

    @property
    def denied_by_webhook(self) -> bool:
        """An admission webhook denied the request. The Status carries what the webhook
        answered (any code, usually 403 Forbidden); only its message says whose it is."""
        return self.status >= 400 and self.message.startswith("admission webhook ") \
            and "denied the request" in self.message

    @property
    def refuses_object(self) -> bool:
        """The API server or an admission webhook refused the object for what it is
        (invalid, undecodable, denied): sending the same object again cannot succeed."""
        return self.status in (400, 422) or (self.status == 403 and self.denied_by_webhook)


class WatchStalled(Exception):
    """A watch sent nothing for longer than the API server was asked to keep it open."""


class NotLeading(Exception):
    """A write not sent: the client's `may_write` said no (the operator: this replica
    stopped leading since its reconcile began, one frozen past its renew deadline, say).
    Leader election is not fencing: the check before each write is what keeps a deposed
    leader from writing on."""


def retry_after_s(status: int, header: str | None) -> float | None:
    """Seconds to wait before sending a refused request again: the Retry-After of a 429
    or a 5xx (client-go's rule; in whole seconds, as the API server writes it), None if
    it is not to be sent again. The server's wait, not a backoff of ours: without a
    Retry-After the caller's one Backoff (backoff.py) decides."""
    if (status != 429 and not 500 <= status <= 599) or not header:
        return None
    try:
        seconds = int(header.strip())
    except ValueError:  # an HTTP date: not what the API server sends
        return None
    return float(max(seconds, 0))


def _parse_status(body: str) -> dict[str, Any]:
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) and parsed.get("kind") == "Status" else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def resource_path(api_version: str, plural: str, namespace: str | None = None,
                  name: str | None = None) -> str:
    """/api/v1/namespaces/NS/pods/NAME, /apis/GROUP/VERSION/PLURAL, ... (None: all
    namespaces, or the collection)."""
    base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    where = f"/namespaces/{quote(namespace)}" if namespace else ""
    return f"{base}{where}/{plural}" + (f"/{quote(name)}" if name else "")


def job_path(namespace: str, name: str) -> str:
    """An ElasticTrainingJob's path (its status subresource: + "/status")."""
    return resource_path(f"{GROUP}/{VERSION}", PLURAL, namespace, name)


def _configuration(retries: int | None, pool_maxsize: int | None,
                   kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A Configuration of its own (the process-wide default is left alone), found as
    controller-runtime finds one: `kubeconfig` (kubectl's --kubeconfig), else $KUBECONFIG
    (read now, not when kubernetes was imported; a list of files as kubectl merges them),
    else in-cluster (a pod's service account), else ~/.kube/config. `context`: kubectl's
    --context (the kubeconfig's current-context otherwise)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG")
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, context=context,
                                client_configuration=configuration)
    else:
        try:
            if context:
                raise config.ConfigException("a context is named: read the kubeconfig")
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(config_file=os.path.expanduser("~/.kube/config"),
                                    context=context, client_configuration=configuration)
    if retries is not None:
        configuration.retries = retries
    if pool_maxsize is not None:
        configuration.connection_pool_maxsize = pool_maxsize
    return configuration


# The fence of the write this thread is sending now (its client's `may_write`), None
# while it sends anything else. Read by the connection at each send (below).
_sending = threading.local()


def _fence_at_send(api_client: Any) -> None:
    """Make `api_client`'s connections ask the fence of the write being sent just before
    each chunk of it goes out: the request line with the headers, then the body.
    Asking only before `call_api` (as `request` also does) leaves a window: a replica
    frozen (SIGSTOP, a long GC) after that check but before the send wakes past its
    renew deadline and still sends what it had decided while it led. And urllib3 sends a
    DELETE or a PUT again after a dropped connection (its own Retry) without coming back
    through `request` at all. Both go through the connection's `send`. A chunk refused
    there raises NotLeading, which urllib3 does not retry: it closes the connection, so a
    request cut after its headers is never completed, and the API server acts on none."""
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class FencedHTTPConnection(HTTPConnection):
        def send(self, data: Any) -> None:
            _check_fence()
            super().send(data)

    class FencedHTTPSConnection(HTTPSConnection):
        def send(self, data: Any) -> None:
            _check_fence()
            super().send(data)

    class FencedHTTPConnectionPool(HTTPConnectionPool):
        ConnectionCls = FencedHTTPConnection

    class FencedHTTPSConnectionPool(HTTPSConnectionPool):
        ConnectionCls = FencedHTTPSConnection

    pool_manager = api_client.rest_client.pool_manager
    pool_manager.pool_classes_by_scheme = {"http": FencedHTTPConnectionPool,
                                           "https": FencedHTTPSConnectionPool}
    pool_manager.clear()  # no pool made before this one stays


def _check_fence() -> None:
    may_write = getattr(_sending, "may_write", None)
    if may_write is not None and not may_write():
        raise NotLeading("cut at the send: this replica no longer leads")


class KubeClient:
    """Raw REST: a path and a dict in, the API server's JSON out; ApiError for any
    answer outside 2xx."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client
        # Asked before every try of a write but an unfenced one (the operator's Lease):
        # the operator sets "this replica leads" (app.py); the trainer leaves it.
        self.may_write: Callable[[], bool] = lambda: True
        # (method, path) -> time.monotonic() before which it is not sent again: the end
        # of the last Retry-After answered there, even to a request that gave up on it.
        self._not_before: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_environment(cls, *, retries: int | None = None,
                         pool_maxsize: int | None = None, kubeconfig: str | None = None,
                         context: str | None = None) -> KubeClient:
        """A client with a connection pool of its own. `retries`: urllib3's retries of a
        failed connection or read (None: urllib3's default; 0 for a write that the next
        one replaces anyway); `pool_maxsize`: connections kept (one per watch that runs
        at once, for a watch client); `kubeconfig`, `context`: kubectl's flags."""
        from kubernetes import client

        api_client = client.ApiClient(_configuration(retries, pool_maxsize, kubeconfig,
                                                     context))
        _fence_at_send(api_client)
        return cls(api_client)

    def request(
        self, method: str, path: str, *, body: Any = None,
        query: dict[str, str] | None = None, content_type: str | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S, fenced: bool = True, back_off: bool = True,
    ) -> Any:
        """One request; a 429 (or a 5xx) that says Retry-After is sent again after that
        wait, as client-go does, while the wait fits in `timeout_s` (the server did not
        act on it: API Priority and Fairness rejected it, or storage was not ready). A
        Retry-After longer than that still counts: the client backs off each (method,
        path) for its Retry-After (`back_off`): no request of this method to this path is
        sent before it ends (one that cannot wait so long fails unsent), so the next
        reconcile or the next Event does not knock again at once. A write
        (`fenced`: all but the operator's Lease's) raises NotLeading, unsent, unless
        `may_write()`, asked before each try and again by the connection just before
        each chunk of the request goes out (`_fence_at_send`)."""
        import orjson

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self.api.param_serialize(
            method, path, query_params=list((query or {}).items()), header_params=headers,
            body=body, auth_settings=["BearerToken"],
        )
        deadline = time.monotonic() + timeout_s
        if back_off:
            self._wait_out_retry_after(method, path, deadline)
        fence = self.may_write if fenced and method != "GET" else None
        for attempt in range(MAX_RETRY_AFTER_RETRIES + 1):
            if fence is not None and not fence():
                raise NotLeading(f"{method} {path}: not sent, this replica no longer leads")
            left = deadline - time.monotonic()
            try:
                response = self._call(fence, request, max(left, 1.0))
            except NotLeading as e:
                raise NotLeading(f"{method} {path}: cut at the send, this replica no "
                                 "longer leads") from e
            if 200 <= response.status <= 299:
                return orjson.loads(response.data) if response.data else None
            data = response.data.decode("utf-8") if response.data else ""
            wait = retry_after_s(response.status, response.getheader("Retry-After"))
            if wait is not None:
                with self._lock:
                    self._not_before[(method, path)] = time.monotonic() + wait
            if wait is None or attempt == MAX_RETRY_AFTER_RETRIES \
                    or time.monotonic() + wait >= deadline:
                break
            time.sleep(wait)
        raise ApiError(response.status, str(response.reason or ""), data)

    def _call(self, fence: Callable[[], bool] | None, request: tuple[Any, ...],
              timeout_s: float) -> Any:
        """`call_api`, read whole, with `fence` asked at each send (None: not fenced)."""
        _sending.may_write = fence
        try:
            response = self.api.call_api(*request, _request_timeout=timeout_s)
            response.read()
        finally:
            _sending.may_write = None
        return response

    def _wait_out_retry_after(self, method: str, path: str, deadline: float) -> None:
        """Sleep until the last Retry-After answered to `method path` has passed; if it
        ends past `deadline`, raise a 429 ApiError without sending anything."""
        now = time.monotonic()
        with self._lock:
            until = self._not_before.get((method, path), 0.0)
            if until and until <= now:  # passed: forget it (paths come and go with jobs)
                del self._not_before[(method, path)]
        if until <= now:
            return
        if until >= deadline:
            raise ApiError(429, "Too Many Requests (not sent)",
                           f"{method} {path}: the API server asked to wait "
                           f"{until - now:.1f} s more before sending it again (Retry-After)")
        time.sleep(until - now)

    # --- reads ---

    def get(self, path: str, *, query: dict[str, str] | None = None,
            timeout_s: float = REQUEST_TIMEOUT_S, back_off: bool = True) -> Any:
        return self.request("GET", path, query=query, timeout_s=timeout_s, back_off=back_off)

    def get_or_none(self, path: str, *, query: dict[str, str] | None = None,
                    timeout_s: float = REQUEST_TIMEOUT_S,
                    back_off: bool = True) -> dict[str, Any] | None:
        """The object, or None if the API server answers 404."""
        try:
            result: dict[str, Any] = self.get(path, query=query, timeout_s=timeout_s,
                                              back_off=back_off)
            return result
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list_page(self, path: str, *, limit: int, continue_token: str | None = None,
                  label_selector: str | None = None, field_selector: str | None = None,
                  timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
        """One page of a list (items, metadata.resourceVersion, metadata.continue)."""
        query = {"limit": str(limit)}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if continue_token:
            query["continue"] = continue_token
        page: dict[str, Any] = self.get(path, query=query, timeout_s=timeout_s)
        return page

    def watch(self, path: str, resource_version: str, timeout_s: int, *,
              label_selector: str | None = None,
              field_selector: str | None = None) -> Iterator[dict[str, Any]]:
        """A watch from `resource_version`, with bookmarks: yields the events ({"type":
        ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}) as they arrive. The API
        server ends it after `timeout_s`; a connection that stays silent longer than that
        (plus a margin) is dead: WatchStalled."""
        import orjson
        from urllib3.exceptions import ReadTimeoutError

        query = {"watch": "true", "allowWatchBookmarks": "true",
                 "resourceVersion": resource_version, "timeoutSeconds": str(timeout_s)}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        request = self.api.param_serialize(
            "GET", path, query_params=list(query.items()),
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        silence_s = timeout_s + WATCH_SILENCE_MARGIN_S
        try:
            response = self.api.call_api(*request,
                                         _request_timeout=(CONNECT_TIMEOUT_S, silence_s))
        except ReadTimeoutError as e:
            raise WatchStalled(f"no response in {silence_s} s") from e
        raw = response.response  # the urllib3 response, not read yet
        try:
            if not 200 <= response.status <= 299:
                response.read()
                data = response.data.decode("utf-8") if response.data else ""
                raise ApiError(response.status, str(response.reason or ""), data)
            pending = b""
            for chunk in raw.stream(None, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
        except ReadTimeoutError as e:
            raise WatchStalled(f"nothing received for {silence_s} s") from e
        finally:
            # Closed, not returned to the pool: a watch left half-read is not reusable.
            raw.close()
            raw.release_conn()

    # --- writes ---

    def create(self, path: str, body: dict[str, Any], *,
               timeout_s: float = REQUEST_TIMEOUT_S, fenced: bool = True,
               back_off: bool = True, query: dict[str, str] | None = None) -> Any:
        """POST `body` to the collection at `path`; the object as stored."""
        return self.request("POST", path, body=body, query=query, timeout_s=timeout_s,
                            fenced=fenced, back_off=back_off)

    def patch(self, path: str, body: Any, *, patch_type: str = "merge",
              query: dict[str, str] | None = None,
              timeout_s: float = REQUEST_TIMEOUT_S, fenced: bool = True,
              back_off: bool = True) -> Any:
        """A JSON merge patch (RFC 7386; "merge"), a JSON patch (RFC 6902; "json") or a
        server-side apply ("apply"; `query` names its fieldManager)."""
        return self.request("PATCH", path, body=body, content_type=PATCH_TYPES[patch_type],
                            query=query, timeout_s=timeout_s, fenced=fenced, back_off=back_off)

    def delete(self, path: str, options: dict[str, Any], *,
               timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        """DELETE with these DeleteOptions (propagationPolicy, preconditions, ...)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **options}
        return self.request("DELETE", path, body=body, timeout_s=timeout_s)
