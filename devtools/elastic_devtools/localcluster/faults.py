"""Fault injection for tests on the local cluster, through kwok's chaos stages (kwok plays
the kubelet, so a "failed container" or a "dead node" is a status kwok writes).

    fail_pod(api, ns, name)          container exits 1, pod phase Failed
    delete_pod(api, ns, name, force) plain delete, or grace 0
    make_node_not_ready(api, node)   Ready=False (node lifecycle then taints the node)
    make_node_ready(api, node)       undo
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

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
    """Node condition Ready=False, as if the kubelet reported the node failed."""
    _label_node(api, node, "true")


def make_node_ready(api: client.ApiClient, node: str) -> None:
    """Undo make_node_not_ready: kwok reports the node healthy again."""
    _label_node(api, node, None)


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
