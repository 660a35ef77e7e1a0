"""Waiting for the article's job to reach a status: every version the API server wrote is
seen from a watch (a state the operator keeps for less than a poll interval is not
missed), with a deadline and a message that says where the job got to."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Phase
from elastic_api.names import GROUP, PLURAL, VERSION
from tests.support.article_job import JOB, TIMEOUT, get_job, is_true, worker_job_uid


def wait_status(api: client.ApiClient, ns: str, predicate: Callable[[dict[str, Any]], Any],
                what: str, timeout: float = TIMEOUT, since: str | None = None
                ) -> dict[str, Any]:
    """The first status of the job that satisfies `predicate`, among every version written
    after `since` (a resourceVersion taken before a fault; default: the current one).
    The versions come from a watch, not from polls: a state the operator keeps for less
    than a poll interval (a slice replaced within a second) is still seen; only across an
    API server restart (the history gone: 410) does it go on from the current version."""
    job = get_job(api, ns)
    last: dict[str, Any] = job.get("status") or {}
    if since is None and predicate(last):
        return last
    rv = since or job["metadata"]["resourceVersion"]
    deadline = time.monotonic() + timeout
    custom = client.CustomObjectsApi(api)
    while (left := deadline - time.monotonic()) > 0:
        stream = watch.Watch().stream(
            custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
            field_selector=f"metadata.name={JOB}", resource_version=rv,
            timeout_seconds=max(1, int(left)))
        try:
            for event in stream:
                obj = event["object"]
                rv = obj["metadata"]["resourceVersion"]
                last = obj.get("status") or {}
                if event["type"] != "DELETED" and predicate(last):
                    return last
        except client.ApiException as err:
            if err.status != 410:
                raise
            # The history is gone (an API server restart): go on from the current version.
            job = get_job(api, ns)
            last, rv = job.get("status") or {}, job["metadata"]["resourceVersion"]
            if predicate(last):
                return last
    conds = {c["type"]: (c["status"], c["reason"], c.get("message", ""))
             for c in last.get("conditions", [])}
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last phase "
                       f"{last.get('phase')}, slices "
                       f"{[(x.get('index'), x.get('state')) for x in last.get('slices', [])]}, "
                       f"conditions {conds}")


def job_version(api: client.ApiClient, ns: str) -> str:
    """The job's resourceVersion now: wait_status(since=...) sees every write after it."""
    rv: str = get_job(api, ns)["metadata"]["resourceVersion"]
    return rv


def wait_running(api: client.ApiClient, ns: str) -> dict[str, Any]:
    return wait_status(api, ns, lambda s: s.get("phase") == Phase.RUNNING and is_true(s, C.READY),
                       "job Running with all 3 slices Ready")


def ready_on_new_job(api: client.ApiClient, ns: str, index: int, old_uid: str | None,
                     what: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    """The slice Ready again, on a worker Job other than `old_uid`. The status must say
    the replacement is over (no record open): a version written before the old Job went
    (a Move is recorded while the slice is still Ready) read once the new Job exists would
    otherwise pass for it."""
    def check(s: dict[str, Any]) -> bool:
        slice_ = s["slices"][index]
        if slice_["state"] != "Ready" or slice_.get("replacement") is not None:
            return False
        uid = worker_job_uid(api, ns, index)
        return uid is not None and uid != old_uid
    return wait_status(api, ns, check, what, timeout=timeout)
