"""Jobs and Events as the API server returns them to `kubectl etj` (plain dicts): the
demo's story (a host of slice 2 dies, the slice moves to the spare pool, training resumes
in the same process), a job Kueue keeps queued, and a job an older operator wrote."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)  # the job's creation
NAMESPACE = "etj-demo"
UID = "0b0e5c1e-uid"


def iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _slice(index: int, pool: str, **extra: Any) -> dict[str, Any]:
    return {"index": index, "state": "Ready", "readyHosts": 4, "hosts": 4, "restarts": 0,
            "reason": "AllHostsReady", "lastTransitionTime": iso(20), "pool": pool, **extra}


def _cadence(period: int, overhead: float) -> dict[str, Any]:
    return {"periodSteps": period, "chosenBy": "Trainer", "reason": "WithinBudget",
            "overheadPercent": overhead, "message": "a copy costs 3.0 ms, a step 100.0 ms"}


def recovered_job(name: str = "demo") -> dict[str, Any]:
    """After the demo's failure: slice 2 moved from pool -1 to -3, resumed at 208 s."""
    moved = _slice(2, "tpu-v5e-4x4-3", restarts=1, lastTransitionTime=iso(204.2),
                   lastReplacement={"action": "Replace", "reason": "NodeNotReady",
                                    "requestedAt": iso(194.6), "readyAt": iso(204.4),
                                    "seconds": 9.8, "fromPool": "tpu-v5e-4x4-1",
                                    "toPool": "tpu-v5e-4x4-3", "blame": "Node"})
    status = {
        "phase": "Running", "slicesDesired": 3, "slicesReady": 3, "jobSetName": name,
        "slices": [_slice(0, "tpu-v5e-4x4-0"), _slice(1, "tpu-v5e-4x4-2"), moved],
        "conditions": [{"type": "Ready", "status": "True", "reason": "AllSlicesReady",
                        "message": "3/3 slices ready", "lastTransitionTime": iso(204.2)},
                       {"type": "Recovering", "status": "False", "reason": "Recovered",
                        "message": "resumed after 8.7 s of downtime",
                        "lastTransitionTime": iso(202.9)}],
        "counters": {"sliceFailures": 1, "elasticEvents": 1, "jobSetRestarts": 0,
                     "trainerRestarts": 0, "preemptions": 0, "evictions": 0},
        "lastRecovery": {"detectedAt": iso(194.2), "resumedAt": iso(202.9),
                         "downtimeSeconds": 8.7, "stepsLost": 3, "restoredFromStep": 80,
                         "restoreSource": "snapshot", "slices": [2], "closedBy": "Trainer",
                         "closedAt": iso(202.9)},
        "checkpoint": {"directory": "/tmp/ckpt", "latestCommittedStep": 60,
                       "observedAt": iso(150)},
        "pools": [{"name": "tpu-v5e-4x4-1", "quarantined": "NodeNotReady",
                   "quarantinedAt": iso(194.7),
                   "quarantineCause": f"{NAMESPACE}/{name}: node tpu-v5e-4x4-1-0 NotReady",
                   "failures": [{"at": iso(194.6), "blame": "Node", "reason": "NodeNotReady"}]}],
        "sparePools": 0,
        "goodput": {"since": iso(0), "observedAt": iso(300), "wallSeconds": 300.0,
                    "productiveSeconds": 240.0, "ratio": 0.8, "sliceDownSeconds": 10.0,
                    "badputSeconds": {"waitingForSlices": 8.0, "restore": 0.1,
                                      "recompile": 0.5, "recomputedSteps": 0.3,
                                      "checkpointing": 1.1, "startup": 30.0, "other": 20.0}},
        "training": {"observedAt": iso(300), "state": "Training", "step": 250,
                     "totalSteps": 300, "processId": 5181, "hostName": "laptop",
                     "attempt": 1, "elasticEventsTotal": 1,
                     "snapshotCadence": _cadence(2, 1.5), "checkpointCadence": _cadence(40, 0.8),
                     "elasticEvent": {"id": 1, "phase": "Resumed", "detectedAt": iso(195.1),
                                      "error": "DATA_LOSS: slice 2 is down", "failedStep": 83,
                                      "slicesDown": [2], "restoredFromStep": 80,
                                      "restoreSource": "snapshot", "restoredAt": iso(202.8),
                                      "resumedAt": iso(202.9), "resumedStep": 81}},
    }
    return job(name, status)


def job(name: str, status: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "elastic.pathways.dev/v1alpha1", "kind": "ElasticTrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": UID,
                     "creationTimestamp": iso(0), "resourceVersion": "42"},
        "spec": {"tpu": {"type": "v5e", "topology": "4x4", "numSlices": 3}, **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def event(reason: str, seconds: float, message: str, type_: str = "Normal",
          name: str = "demo", uid: str = UID) -> dict[str, Any]:
    return {"metadata": {"name": f"{name}.{reason.lower()}{int(seconds)}",
                         "namespace": NAMESPACE},
            "involvedObject": {"kind": "ElasticTrainingJob", "name": name, "uid": uid,
                               "namespace": NAMESPACE},
            "reason": reason, "message": message, "type": type_,
            "firstTimestamp": iso(seconds), "lastTimestamp": iso(seconds), "count": 1}


def demo_events(name: str = "demo") -> list[dict[str, Any]]:
    return [
        event("SliceDown", 194.2, "slice 2 is down: host 0 (pod demo-worker-2-0-2sx8f): node "
              "tpu-v5e-4x4-1-0 is NotReady", "Warning", name),
        event("SliceReplacing", 194.6, "slice 2 failed on node pool tpu-v5e-4x4-1 "
              "(NodeNotReady); recreating its worker Job (restart 1 of 5)", "Warning", name),
        event("PoolQuarantined", 194.7, "node pool tpu-v5e-4x4-1 quarantined (NodeNotReady): "
              "replacement slices avoid its 4 nodes until they are healthy", "Warning", name),
        event("Recovered", 202.9, "resumed after 8.7 s of downtime (slice 2 went down); 3 "
              "steps lost; restored from step 80 (snapshot)", "Normal", name),
        event("SliceReplaced", 204.4, "slice 2 replaced and Ready 9.8 s after the operator "
              "acted, moved from node pool tpu-v5e-4x4-1 to tpu-v5e-4x4-3", "Normal", name),
        # An earlier job of the same name: not this one's history.
        event("SliceDown", 100, "slice 0 is down", "Warning", name, uid="an-older-job"),
    ]


def queued_job(name: str = "waiting") -> dict[str, Any]:
    """Kueue keeps it out: no quota in its ClusterQueue."""
    status = {
        "phase": "Queued", "slicesDesired": 3, "slicesReady": 0,
        "slices": [{"index": i, "state": "Pending", "readyHosts": 0, "hosts": 4,
                    "reason": "WaitingForAdmission"} for i in range(3)],
        "conditions": [{"type": "Admitted", "status": "False", "reason": "WaitingForAdmission",
                        "message": "waiting in queue lq (Workload jobset-waiting-1a2b3): "
                                   "Kueue: couldn't assign flavors to pod set worker: "
                                   "insufficient quota for google.com/tpu in flavor v5e",
                        "lastTransitionTime": iso(5)}],
        "counters": {"sliceFailures": 0},
        "admission": {"workload": "jobset-waiting-1a2b3", "queueName": "lq"},
    }
    return job(name, status)


def node(name: str, pool: str, *, ready: bool = True, quarantined: str | None = None,
         cause: str | None = None) -> dict[str, Any]:
    labels = {"cloud.google.com/gke-nodepool": pool,
              "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
              "cloud.google.com/gke-tpu-topology": "4x4"}
    if quarantined:
        labels["elastic.pathways.dev/quarantined"] = quarantined
    return {"metadata": {"name": name, "labels": labels,
                         "annotations": {"elastic.pathways.dev/quarantine-cause": cause}
                         if cause else {}},
            "status": {"conditions": [{"type": "Ready",
                                       "status": "True" if ready else "False"}]}}


def pools_nodes(pools: int = 4, dead: str | None = None,
                quarantined: str | None = None) -> list[dict[str, Any]]:
    out = []
    for p in range(pools):
        pool = f"tpu-v5e-4x4-{p}"
        for h in range(4):
            out.append(node(f"{pool}-{h}", pool, ready=f"{pool}-{h}" != dead,
                            quarantined="NodeNotReady" if pool == quarantined else None,
                            cause="etj-demo/demo: node NotReady" if pool == quarantined
                            else None))
    return out


# --- the record job: 199 slices of v5e 16x16 (64 hosts each) -------------------------

RECORD_SLICES, RECORD_HOSTS = 199, 64


def _big_slice(index: int, **extra: Any) -> dict[str, Any]:
    return {"index": index, "state": "Ready", "readyHosts": RECORD_HOSTS,
            "hosts": RECORD_HOSTS, "restarts": 0, "reason": "AllHostsReady",
            "lastTransitionTime": iso(20 + index * 0.01), "pool": f"tpu-v5e-16x16-{index}",
            **extra}


def record_job(name: str = "record") -> dict[str, Any]:
    """The record job mid-incident: 199 slices of v5e 16x16; slice 7 was replaced (moved
    to pool -199) and is Ready again; slice 42 is Down (a host's pod failed), slice 121
    Restarting on no healthy pool, slice 198 Pending (never Ready); the other 195 Ready,
    never failed."""
    slices = [_big_slice(i) for i in range(RECORD_SLICES)]
    slices[7] = _big_slice(7, restarts=1, pool="tpu-v5e-16x16-199",
                           lastTransitionTime=iso(150.4),
                           lastReplacement={"action": "Replace", "reason": "NodeNotReady",
                                            "requestedAt": iso(120.6), "readyAt": iso(150.4),
                                            "seconds": 29.8, "fromPool": "tpu-v5e-16x16-7",
                                            "toPool": "tpu-v5e-16x16-199", "blame": "Node"})
    slices[42] |= {"state": "Down", "reason": "PodFailed", "readyHosts": 63,
                   "lastTransitionTime": iso(290), "restarts": 1,
                   "message": "host 5 (pod record-worker-42-5-x) failed (Error, exit code 1)",
                   "replacement": {"action": "Replace", "reason": "PodFailed", "blame": "Job",
                                   "requestedAt": iso(290.5),
                                   "evidence": "container main exited 1 on a healthy node"}}
    slices[121] |= {"state": "Restarting", "reason": "NoHealthyPool", "readyHosts": 0,
                    "lastTransitionTime": iso(250), "restarts": 2, "pool": None,
                    "message": "no healthy pool of shape v5e 16x16"}
    slices[198] |= {"state": "Pending", "reason": "WaitingForHosts", "readyHosts": 12,
                    "lastTransitionTime": iso(5), "message": "12/64 hosts ready"}
    status = {
        "phase": "SliceDown", "slicesDesired": RECORD_SLICES, "slicesReady": 196,
        "jobSetName": name, "slices": slices,
        "conditions": [{"type": "Ready", "status": "False", "reason": "SliceDown",
                        "message": "196/199 slices ready",
                        "lastTransitionTime": iso(290)}],
        "counters": {"sliceFailures": 4, "elasticEvents": 2, "jobSetRestarts": 0,
                     "trainerRestarts": 0, "preemptions": 0, "evictions": 0},
        "lastRecovery": {"detectedAt": iso(290), "slices": [42, 121]},
        "training": {"observedAt": iso(300), "state": "Recovering", "step": 250,
                     "totalSteps": 300, "attempt": 1},
    }
    obj = job(name, status)
    obj["spec"]["tpu"] = {"type": "v5e", "topology": "16x16", "numSlices": RECORD_SLICES}
    return obj


def record_events(name: str = "record") -> list[dict[str, Any]]:
    """record_job()'s story: slice 7 replaced, then 121 and 42 went down."""
    return [
        event("SliceDown", 120, "slice 7 is down: host 3 (pod record-worker-7-3-x): node "
              "tpu-v5e-16x16-7-3 is NotReady", "Warning", name),
        event("SliceReplacing", 120, "slice 7 failed on node pool tpu-v5e-16x16-7 "
              "(NodeNotReady); recreating its worker Job (restart 1 of 5)", "Warning", name),
        event("SliceReplaced", 150, "slice 7 replaced and Ready 29.8 s after the operator "
              "acted, moved from node pool tpu-v5e-16x16-7 to tpu-v5e-16x16-199", "Normal",
              name),
        event("SliceDown", 240, "slice 121 is down: host 0 (pod record-worker-121-0-x): "
              "node tpu-v5e-16x16-121-0 is NotReady", "Warning", name),
        event("SliceReplacing", 250, "slice 121 failed on node pool tpu-v5e-16x16-121 "
              "(NodeNotReady); recreating its worker Job (restart 2 of 5)", "Warning", name),
        event("SliceDown", 290, "slice 42 is down: host 5 (pod record-worker-42-5-x) failed "
              "(Error, exit code 1)", "Warning", name),
    ]


def record_nodes(pools: int = RECORD_SLICES + 2, hosts: int = RECORD_HOSTS
                 ) -> list[dict[str, Any]]:
    """The nodes of record_job(): a pool per slice and two spares (-199 runs slice 7,
    -200 is free); pool -121 has a NotReady node and is quarantined."""
    out = []
    for p in range(pools):
        pool = f"tpu-v5e-16x16-{p}"
        for h in range(hosts):
            n = node(f"{pool}-{h}", pool, ready=not (p == 121 and h == 0),
                     quarantined="NodeNotReady" if p == 121 else None,
                     cause="etj-demo/record: node NotReady" if p == 121 else None)
            n["metadata"]["labels"]["cloud.google.com/gke-tpu-topology"] = "16x16"
            out.append(n)
    return out
