"""The scale benchmark's in-place round, in the same run and on the same jobs as its pod
failures, before them (every slice Ready, the same load): each slice fails as a healthy
host's process that exits (host 0's container; kwok plays its kubelet restarting it in
the pod, `faults.restart_container`), and comes back Ready in place. Beside the pod
failures that follow (the same slices' pods failed: the worker Job recreated), per
event:

    seen        the victim pod not Ready -> the job's status counts the slice down
    ready       the victim pod not Ready -> the job's status says the slice Ready again
    requests    the operator's own requests, and every client's (the API server's count
                of requests other than watches, so the kubelet's status writes, kwok's
                here, count), over the round, per event

and that no pod was replaced: every victim is the same pod (name and uid) Running again,
and each slice's lastReplacement says RestartInPlace.
"""
from __future__ import annotations

import time
from typing import Any

from bench.common import ratio, stats
from bench.internals import SERVER_FAMILIES, requests_but_watches

# How long kwok's kubelet takes to run the container again (a real one: at once for a
# first crash, then the container's start).
DOWN = "1s"


def _scrape(api: Any) -> dict[str, float]:
    from elastic_devtools.localcluster import server_metrics

    try:
        return dict(server_metrics.scrape(api, SERVER_FAMILIES))
    except Exception:  # the figures of the round stand without it
        return {}


def run(cluster: Any, namespace: str, events: list[Any], victim_of: Any, tl: Any,
        operator: Any, timeout: float, log: Any) -> dict[str, Any]:
    """Restart host 0 of each slice of `events` in place, in turn every 0.5 s; wait until
    each is Ready again (or `timeout`); the round's figures."""
    from elastic_devtools.localcluster.faults import restart_container, wait_for

    api = cluster.api_client()
    victims = _victims(events, victim_of, tl)
    if not victims:
        return {"error": "no slice had a Running, Ready host 0 to restart"}
    events = list(victims)
    uids = _uids(api, namespace, victims.values())
    before = (operator.requests(), _scrape(api), time.time())
    for event, pod in victims.items():
        tl.arm(event, pod, 0)
        restart_container(api, namespace, pod, down=DOWN)
        time.sleep(0.5)

    def back() -> bool:
        with tl.lock:
            return all(e in tl.ready_again for e in events)
    try:
        wait_for(back, timeout, "every slice Ready again in place", 0.25)
    except TimeoutError as err:
        tl.errors.append(f"in place: {err}")
    time.sleep(2.0)  # the trailing writes (Events) of the last one
    after = (operator.requests(), _scrape(api), time.time())
    kept = sum(1 for pod, uid in _uids(api, namespace, victims.values()).items()
               if uid is not None and uid == uids.get(pod))
    return _figures(tl, events, kept, _in_place(api, namespace, events), before, after, log)


def _victims(events: list[Any], victim_of: Any, tl: Any) -> dict[Any, str]:
    """Host 0's pod of each event's slice, where it runs and is Ready (a slice the first
    round has not brought back yet is left out, and said so)."""
    out = {}
    for event in events:
        try:
            out[event] = victim_of(tl, event)
        except RuntimeError as err:
            tl.errors.append(f"in place: {err}")
    return out


def _uids(api: Any, namespace: str, pods: Any) -> dict[str, str | None]:
    """Each pod's uid now (None: gone)."""
    from kubernetes import client

    core, out = client.CoreV1Api(api), {}
    for name in pods:
        try:
            meta = core.read_namespaced_pod(name, namespace).metadata
        except client.ApiException:
            meta = None
        out[name] = meta.uid if meta is not None else None
    return out


def _in_place(api: Any, namespace: str, events: list[Any]) -> int:
    """How many of the events' slices say their last replacement was RestartInPlace."""
    from kubernetes import client

    from elastic_api.names import GROUP, PLURAL, VERSION

    custom, count = client.CustomObjectsApi(api), 0
    for job in {name for name, _ in events}:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, namespace, PLURAL, job)
        slices = (obj.get("status") or {}).get("slices") or []
        count += sum(1 for s in slices if (job, s.get("index")) in events
                     and (s.get("lastReplacement") or {}).get("action") == "RestartInPlace")
    return count


def _figures(tl: Any, events: list[Any], kept: int, in_place: int,
             before: tuple[Any, ...], after: tuple[Any, ...], log: Any) -> dict[str, Any]:
    n = len(events)
    with tl.lock:
        seen = [tl.operator[e] - tl.pod_failed[e] for e in events
                if e in tl.operator and e in tl.pod_failed]
        ready = [tl.ready_again[e] - tl.pod_failed[e] for e in events
                 if e in tl.ready_again and e in tl.pod_failed]
    ours = sum(after[0].values()) - sum(before[0].values())
    every = requests_but_watches(before[1], after[1]) if before[1] and after[1] else None
    figures = {
        "events": n,
        "operator_slice_down_seconds": stats(seen),
        "slice_ready_again_in_place_seconds": stats(ready),
        "pods_kept": kept, "slices_restarted_in_place": in_place,
        "seconds": round(after[2] - before[2], 1),
        "operator_requests_per_event": ratio(ours, n),
        "api_requests_per_event_every_client": ratio(every, n) if every is not None else None,
    }
    log(f"in place: {len(ready)}/{n} slices Ready again, p50 "
        f"{figures['slice_ready_again_in_place_seconds']['p50']} s; {kept} pods kept, "
        f"{in_place} RestartInPlace; requests per event: operator "
        f"{figures['operator_requests_per_event']}, every client "
        f"{figures['api_requests_per_event_every_client']}")
    return figures
