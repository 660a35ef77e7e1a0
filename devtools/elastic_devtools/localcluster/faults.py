"""Fault injection for tests on the local cluster, through kwok's chaos stages (kwok plays
the kubelet, so a "failed container" or a "dead node" is a status kwok writes).

    fail_pod(api, ns, name)          container exits 1, pod phase Failed
    restart_container(api, ns, name) container exits 1 and runs again in the same pod
                                     (the kubelet's restart in place), restartCount + 1
    delete_pod(api, ns, name, force) plain delete, or grace 0
    make_node_not_ready(api, node)   Ready=False, the kubelet alive (kwok goes on playing
                                     it: an evicted pod vanishes at once; its pods stay
                                     NotReady once the node lifecycle controller marks them)
    make_node_ready(api, node)       undo (the kubelet says its pods are Ready again)
    kill_node(api, node)             a dead host: Ready=False (or, silent, Unknown after
                                     the node-monitor grace), no heartbeat, and nothing
                                     acts on its pods (a deleted pod stays Terminating)
    revive_node(api, node)           the host back (kwok takes the node over again)
    schedule_maintenance(api, pool, in_seconds)   GKE's scheduled-maintenance-time label
    start_maintenance(api, pool)     GKE's active-maintenance label and termination taint
    end_maintenance(api, pool)       the signals removed
    throttle(api, name, ns, sa)      API Priority and Fairness: a FlowSchema and a priority
                                     level with no seats of its own for that
                                     ServiceAccount (429 with Retry-After when it sends two
                                     requests at once); unthrottle(api, name) undoes it
    rejected_requests(api, name)     how many requests that priority level rejected
"""
from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from elastic_api.names import (
    ACTIVE_MAINTENANCE_LABEL,
    IMPENDING_TERMINATION_TAINT,
    NODE_POOL_LABEL,
    SCHEDULED_MAINTENANCE_LABEL,
)
from elastic_devtools.localcluster import server_metrics
from elastic_devtools.localcluster.cluster_config import (
    DEAD_KUBELET_LABEL,
    NODE_NOT_READY_POD_LABEL,
    POD_RESTART_DELAY_ANNOTATION,
    POD_RESTART_EXIT_ANNOTATION,
    POD_RESTART_LABEL,
)

POD_FAILED_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
NODE_NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"


def fail_pod(api: client.ApiClient, namespace: str, name: str, *, exit_code: int = 1,
             reason: str = "containerFailed", message: str = "container failed",
             container: str | None = None) -> None:
    """Make a Running pod's containers (or only `container`) terminate with `exit_code`;
    the pod's phase becomes Failed, as if the process crashed. kwok acts within a second;
    use wait_for_pod_phase."""
    annotations = {
        f"{POD_FAILED_LABEL}/exit-code": str(exit_code),
        f"{POD_FAILED_LABEL}/reason": reason,
        f"{POD_FAILED_LABEL}/message": message,
        f"{POD_FAILED_LABEL}/delay": "0s",
        f"{POD_FAILED_LABEL}/jitter-delay": "0s",
    }
    if container is not None:
        annotations[f"{POD_FAILED_LABEL}/container-name"] = container
    body = {"metadata": {"labels": {POD_FAILED_LABEL: "true"}, "annotations": annotations}}
    client.CoreV1Api(api).patch_namespaced_pod(name, namespace, body)


def restart_container(api: client.ApiClient, namespace: str, name: str, *, exit_code: int = 1,
                      down: str = "1s") -> None:
    """Make a Running pod's containers exit with `exit_code` and run again in the same pod
    `down` later (a Go duration), as a kubelet restarts a container that exited (restartPolicy
    OnFailure): the pod stays Running, not Ready meanwhile, then Ready with restartCount + 1.
    kwok acts within a second (render.pod_restart_stages)."""
    body = {"metadata": {"labels": {POD_RESTART_LABEL: "true"},
                         "annotations": {POD_RESTART_EXIT_ANNOTATION: str(exit_code),
                                         POD_RESTART_DELAY_ANNOTATION: down}}}
    client.CoreV1Api(api).patch_namespaced_pod(name, namespace, body)


def delete_pod(api: client.ApiClient, namespace: str, name: str, *, force: bool = False) -> None:
    """Delete a pod; force=True uses grace period 0 (gone at once, like `--force`)."""
    options = client.V1DeleteOptions(grace_period_seconds=0) if force else None
    client.CoreV1Api(api).delete_namespaced_pod(
        name, namespace, body=options, grace_period_seconds=0 if force else None)


def _label_node(api: client.ApiClient, node: str, value: str | None) -> None:
    annotations: dict[str, Any] = {f"{NODE_NOT_READY_LABEL}/delay": "0s",
                                   f"{NODE_NOT_READY_LABEL}/jitter-delay": "0s"}
    if value is None:
        annotations = {k: None for k in annotations}
    client.CoreV1Api(api).patch_node(
        node, {"metadata": {"labels": {NODE_NOT_READY_LABEL: value}, "annotations": annotations}})


def make_node_not_ready(api: client.ApiClient, node: str) -> None:
    """Node condition Ready=False, as if the kubelet reported the node failed. Its pods are
    labelled first: the pods the node lifecycle controller then marks Ready=False stay so
    (render.pod_ready_again_stage) until make_node_ready."""
    _label_node_pods(client.CoreV1Api(api), node, NODE_NOT_READY_POD_LABEL, "true")
    _label_node(api, node, "true")


def make_node_ready(api: client.ApiClient, node: str) -> None:
    """Undo make_node_not_ready: kwok reports the node healthy again, and a second later
    its pods Ready again (render.pod_ready_again_stage), as a real kubelet's status sync.

    Not within the second of the NotReady report: the node lifecycle controller takes in a
    node's status only when its Ready heartbeat time (whole seconds) changes, and kwok
    stamps both reports with the time it writes them. A Ready report in the same second
    would leave the controller believing the node NotReady until kwok's next heartbeat
    (10 minutes), marking NotReady every pod bound to the node meanwhile."""
    core = client.CoreV1Api(api)
    _after_ready_heartbeat_second(core, node)
    _label_node(api, node, None)
    _label_node_pods(core, node, NODE_NOT_READY_POD_LABEL, None)


def _after_ready_heartbeat_second(core: client.CoreV1Api, node: str) -> None:
    """Return once the clock (kwok's: the same host) is past the second of the node's
    Ready heartbeat: a deterministic wait of at most a second, for a known instant."""
    status = core.read_node(node).status
    conditions = (status.conditions if status is not None else None) or []
    ready = next((c for c in conditions if c.type == "Ready"), None)
    if ready is not None and ready.last_heartbeat_time is not None:
        time.sleep(max(0.0, ready.last_heartbeat_time.timestamp() + 1 - time.time()))


# --------------------------------------------------------------------------- dead hosts

NODE_LEASE_NAMESPACE = "kube-node-lease"
DEAD_HOLDER = "etj-dead-kubelet"


def kill_node(api: client.ApiClient, node: str, *, report_not_ready: bool = True) -> None:
    """The host dies. With report_not_ready the node says Ready=False at once (kwok's chaos
    stage), and so do its pods (its kubelet's last report; what Pathways sees too: the
    worker process is gone, which a simulated trainer learns from pod readiness); without,
    it just goes silent and the node lifecycle controller marks it Unknown after its
    node-monitor grace (50 s). Either way its heartbeats stop (its Lease is held by
    another identity) and kwok stops playing the kubelet of the node and of every pod on
    it (render.adapt_kwok_stage): a pod deleted there stays Terminating until it is
    force-deleted, as on a real dead host."""
    core = client.CoreV1Api(api)
    if report_not_ready:
        make_node_not_ready(api, node)
        wait_for_node_ready(api, node, False)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.CoordinationV1Api(api).patch_namespaced_lease(node, NODE_LEASE_NAMESPACE, {"spec": {
        "holderIdentity": DEAD_HOLDER, "leaseDurationSeconds": 86400, "renewTime": now}})
    core.patch_node(node, {"metadata": {"labels": {DEAD_KUBELET_LABEL: "true"}}})
    for pod in _node_pods(core, node):
        _label_pod(core, pod, DEAD_KUBELET_LABEL, "true")
        if report_not_ready:
            _pod_not_ready(core, pod)


def revive_node(api: client.ApiClient, node: str, timeout: float = 30) -> None:
    """The host is back: kwok plays its kubelet again (the Lease expired at once, kwok takes
    it within its renew interval) and reports it Ready. Returns once kwok holds the Lease
    and the node is Ready: until then the node lifecycle controller still reads an
    expired Lease, and a pod placed on the node meanwhile (the next test's) is marked
    NotReady with it."""
    core = client.CoreV1Api(api)
    _label_node_pods(core, node, DEAD_KUBELET_LABEL, None)
    make_node_ready(api, node)
    core.patch_node(node, {"metadata": {"labels": {DEAD_KUBELET_LABEL: None}}})
    leases = client.CoordinationV1Api(api)
    leases.patch_namespaced_lease(node, NODE_LEASE_NAMESPACE, {"spec": {
        "leaseDurationSeconds": 1, "renewTime": "2000-01-01T00:00:00.000000Z"}})
    wait_for(lambda: _lease_renewed(leases, node) and node_ready(api, node), timeout,
             f"node {node} Ready, its Lease renewed by kwok")


def _lease_renewed(leases: client.CoordinationV1Api, node: str) -> bool:
    """kwok renewed the Lease revive_node expired (dated 2000)."""
    spec = leases.read_namespaced_lease(node, NODE_LEASE_NAMESPACE).spec
    return spec is not None and spec.renew_time is not None and spec.renew_time.year > 2000


def _node_pods(core: client.CoreV1Api, node: str) -> list[Any]:
    pods: list[Any] = core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node}").items
    return pods


def _label_node_pods(core: client.CoreV1Api, node: str, key: str, value: str | None) -> None:
    for pod in _node_pods(core, node):
        if (pod.metadata.labels or {}).get(key) != value:
            _label_pod(core, pod, key, value)


def _label_pod(core: client.CoreV1Api, pod: Any, key: str, value: str | None) -> None:
    try:
        core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                  {"metadata": {"labels": {key: value}}})
    except client.ApiException as err:
        if err.status != 404:  # gone meanwhile
            raise


def _pod_not_ready(core: client.CoreV1Api, pod: Any) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [{"type": t, "status": "False", "lastTransitionTime": now,
                   "reason": "NodeDied"} for t in ("Ready", "ContainersReady")]
    try:
        core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace,
                                         {"status": {"conditions": conditions}})
    except client.ApiException as err:
        if err.status != 404:
            raise


# -------------------------------------------------------------------------- maintenance

def pool_nodes(api: client.ApiClient, pool: str) -> list[str]:
    nodes: list[Any] = client.CoreV1Api(api).list_node(
        label_selector=f"{NODE_POOL_LABEL}={pool}").items
    return sorted(str(n.metadata.name) for n in nodes)


def schedule_maintenance(api: client.ApiClient, pool: str, in_seconds: float) -> int:
    """GKE announces a maintenance of every node of `pool` starting in `in_seconds`: the
    cloud.google.com/scheduled-maintenance-time label (Unix seconds). Returns that time."""
    at_ = int(time.time() + in_seconds)
    for node in pool_nodes(api, pool):
        client.CoreV1Api(api).patch_node(
            node, {"metadata": {"labels": {SCHEDULED_MAINTENANCE_LABEL: str(at_)}}})
    return at_


def start_maintenance(api: client.ApiClient, pool: str) -> None:
    """The maintenance begins: cloud.google.com/active-node-maintenance=ONGOING and the
    cloud.google.com/impending-node-termination:NoSchedule taint on every node."""
    core = client.CoreV1Api(api)
    for node in pool_nodes(api, pool):
        taints = [*_other_taints(api, node),
                  {"key": IMPENDING_TERMINATION_TAINT, "effect": "NoSchedule"}]
        core.patch_node(node, {"metadata": {"labels": {ACTIVE_MAINTENANCE_LABEL: "ONGOING"}},
                               "spec": {"taints": taints}})


def end_maintenance(api: client.ApiClient, pool: str) -> None:
    """The maintenance is over: every signal removed from the pool's nodes."""
    core = client.CoreV1Api(api)
    for node in pool_nodes(api, pool):
        core.patch_node(node, {"metadata": {"labels": {SCHEDULED_MAINTENANCE_LABEL: None,
                                                       ACTIVE_MAINTENANCE_LABEL: None}},
                               "spec": {"taints": _other_taints(api, node)}})


def _other_taints(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    """The node's taints but GKE's impending-termination one, as plain dicts."""
    spec: Any = client.CoreV1Api(api).read_node(node).spec
    taints: list[dict[str, Any]] = [api.sanitize_for_serialization(t)
                                    for t in (spec.taints or []) if spec is not None]
    return [t for t in taints if t.get("key") != IMPENDING_TERMINATION_TAINT]


# ------------------------------------------------------------------ API Priority and Fairness

FLOWCONTROL = "flowcontrol.apiserver.k8s.io"


def throttle(api: client.ApiClient, name: str, namespace: str, service_account: str,
             matching_precedence: int = 100) -> None:
    """Put every request of the ServiceAccount in a priority level of its own with no
    nominal seats, nothing to borrow and `Reject` as the answer: the API server runs one
    of its requests at a time and answers the others at once with 429 Too Many Requests
    and a Retry-After. The FlowSchema outranks the default `service-accounts` one (9000)."""
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(FLOWCONTROL, "v1", "prioritylevelconfigurations", {
        "apiVersion": f"{FLOWCONTROL}/v1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Reject"}}}})
    every = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"],
             "clusterScope": True}
    custom.create_cluster_custom_object(FLOWCONTROL, "v1", "flowschemas", {
        "apiVersion": f"{FLOWCONTROL}/v1", "kind": "FlowSchema", "metadata": {"name": name},
        "spec": {"priorityLevelConfiguration": {"name": name},
                 "matchingPrecedence": matching_precedence,
                 "distinguisherMethod": {"type": "ByUser"},
                 "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                     "namespace": namespace, "name": service_account}}],
                     "resourceRules": [every],
                     "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}})
    wait_for(lambda: _flow_schema_active(custom, name), 30,
             f"FlowSchema {name} in effect", interval=0.2)


def _flow_schema_active(custom: client.CustomObjectsApi, name: str) -> bool:
    schema: Any = custom.get_cluster_custom_object(FLOWCONTROL, "v1", "flowschemas", name)
    return any(c.get("type") == "Dangling" and c.get("status") == "False"
               for c in (schema.get("status") or {}).get("conditions") or [])


def unthrottle(api: client.ApiClient, name: str) -> None:
    custom = client.CustomObjectsApi(api)
    for plural in ("flowschemas", "prioritylevelconfigurations"):
        try:
            custom.delete_cluster_custom_object(FLOWCONTROL, "v1", plural, name)
        except client.ApiException as err:
            if err.status != 404:
                raise


def rejected_requests(api: client.ApiClient, priority_level: str) -> int:
    """Requests the API server's priority level `priority_level` has rejected (429) since
    the API server started (its apiserver_flowcontrol_rejected_requests_total)."""
    series = server_metrics.scrape(api, ("apiserver_flowcontrol_rejected_requests_total{",))
    return int(sum(v for k, v in series.items() if f'priority_level="{priority_level}"' in k))


# ------------------------------------------------------------------------------- waiting

def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll until `predicate()` returns something truthy (returned); TimeoutError names
    `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def node_ready(api: client.ApiClient, node: str) -> bool:
    status = client.CoreV1Api(api).read_node(node).status
    conditions = (status.conditions if status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def wait_for_node_ready(api: client.ApiClient, node: str, ready: bool, timeout: float = 30) -> None:
    state = "Ready" if ready else "NotReady"
    wait_for(lambda: node_ready(api, node) == ready, timeout, f"node {node} {state}")


def wait_for_pod_phase(api: client.ApiClient, namespace: str, name: str, phase: str,
                       timeout: float = 30) -> client.V1Pod:
    core = client.CoreV1Api(api)

    def check() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status is not None and pod.status.phase == phase else None

    pod: client.V1Pod = wait_for(check, timeout, f"pod {namespace}/{name} phase {phase}")
    return pod


def wait_for_pod_failed_or_gone(api: client.ApiClient, namespace: str, name: str,
                                timeout: float = 30) -> None:
    """Until the pod is Failed, or deleted: an operator that acts at once on the failure
    can remove the pod (with its Job) between two looks, and that too says it landed."""
    core = client.CoreV1Api(api)

    def check() -> bool:
        try:
            pod = core.read_namespaced_pod(name, namespace)
        except client.ApiException as e:
            if e.status == 404:
                return True
            raise
        return pod.status is not None and pod.status.phase == "Failed"

    wait_for(check, timeout, f"pod {namespace}/{name} Failed or gone")


def wait_for_pod_gone(api: client.ApiClient, namespace: str, name: str, uid: str | None = None,
                      timeout: float = 30) -> None:
    """Until no pod `name` exists (or only a newer one with another uid)."""
    core = client.CoreV1Api(api)

    def gone() -> bool:
        try:
            pod = core.read_namespaced_pod(name, namespace)
        except client.ApiException as err:
            if err.status == 404:
                return True
            raise
        return uid is not None and pod.metadata is not None and pod.metadata.uid != uid

    wait_for(gone, timeout, f"pod {namespace}/{name} deleted")
