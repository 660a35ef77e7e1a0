"""Pure rendering for the local control plane: node manifests, kubeconfigs, component
configs and command lines. No I/O and no clock; cluster.py does the side effects."""
from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_api.catalog import slice_shape
from elastic_api.names import (
    NODE_POOL_LABEL,
    TOPOLOGY_BLOCK_LABEL,
    TPU_ACCELERATOR_LABEL,
    TPU_RESOURCE,
    TPU_TOPOLOGY_LABEL,
)

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
CPU_POOL = "cpu-np"
ZONE = "us-central1-a"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.0.0.1/16"  # kwok hands out pod IPs from here; its default /24 runs out
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

# kwok opt-in label: pods owned by a Job complete (Succeeded) only when they carry it.
POD_COMPLETE_LABEL = "pod-complete.stage.kwok.x-k8s.io"

JOBSET_MUTATE_PATH = "/mutate-jobset-x-k8s-io-v1alpha2-jobset"
JOBSET_VALIDATE_PATH = "/validate-jobset-x-k8s-io-v1alpha2-jobset"
POD_MUTATE_PATH = "/mutate--v1-pod"
POD_VALIDATE_PATH = "/validate--v1-pod"


# ---------------------------------------------------------------------------- node pools

@dataclass(frozen=True)
class TpuPoolSpec:
    """`count` node pools (one per slice) of `tpu_type` slices with `topology`."""

    tpu_type: str
    topology: str
    count: int = 1

    def __post_init__(self) -> None:
        slice_shape(self.tpu_type, self.topology)  # ValueError naming the valid values
        if self.count < 1:
            raise ValueError(
                f"--tpu-pools: the number of node pools must be >= 1, got {self.count}")

    def __str__(self) -> str:
        return f"{self.tpu_type}:{self.topology}:{self.count}"


# Node pools of one shape per topology block (the TOPOLOGY_BLOCK_LABEL of their nodes).
POOLS_PER_BLOCK = 2
# The article's job (3 slices) and one hot spare pool a failed slice moves to.
DEFAULT_TPU_POOLS = (TpuPoolSpec("v5e", "4x4", 4),)
DEFAULT_CPU_NODES = 4


def parse_tpu_pool(text: str) -> TpuPoolSpec:
    """`TYPE:TOPOLOGY[:COUNT]`, e.g. `v5e:4x4:3` (3 node pools, one v5e 4x4 slice each)."""
    parts = text.strip().split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(
            f"--tpu-pools: expected TYPE:TOPOLOGY[:COUNT] such as v5e:4x4:3, got {text!r}"
        )
    count = 1
    if len(parts) == 3:
        if not parts[2].isdigit():
            raise ValueError(
                f"--tpu-pools: COUNT must be a positive integer, got {parts[2]!r} in {text!r}")
        count = int(parts[2])
    return TpuPoolSpec(parts[0], parts[1], count)


@dataclass(frozen=True)
class NodePool:
    name: str
    nodes: tuple[str, ...]
    labels: dict[str, str]
    capacity: dict[str, str]


def _pool_slug(spec: TpuPoolSpec) -> str:
    return f"tpu-{spec.tpu_type}-{spec.topology}"


def node_pools(
    tpu_pools: Iterable[TpuPoolSpec], cpu_nodes: int = DEFAULT_CPU_NODES
) -> list[NodePool]:
    """The CPU pool and one node pool per TPU slice; a TPU pool has one node per VM."""
    pools = [
        NodePool(
            name=CPU_POOL,
            nodes=tuple(f"{CPU_POOL}-{i}" for i in range(cpu_nodes)),
            labels={NODE_POOL_LABEL: CPU_POOL,
                    "node.kubernetes.io/instance-type": "n2-standard-64"},
            capacity={"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "500Gi"},
        )
    ]
    seen: dict[str, int] = {}
    for spec in tpu_pools:
        shape = slice_shape(spec.tpu_type, spec.topology)
        slug = _pool_slug(spec)
        for _ in range(spec.count):
            index = seen.get(slug, 0)
            seen[slug] = index + 1
            name = f"{slug}-{index}"
            pools.append(
                NodePool(
                    name=name,
                    nodes=tuple(f"{name}-{vm}" for vm in range(shape.vms)),
                    labels={
                        NODE_POOL_LABEL: name,
                        TPU_ACCELERATOR_LABEL: shape.family.accelerator_label,
                        TPU_TOPOLOGY_LABEL: spec.topology,
                        "node.kubernetes.io/instance-type": shape.machine_type,
                        # Kueue's Topology-Aware Scheduling reads these levels (block ->
                        # node pool -> host): two pools per block, as a reservation's.
                        TOPOLOGY_BLOCK_LABEL: f"{slug}-block-{index // POOLS_PER_BLOCK}",
                    },
                    capacity={
                        "cpu": "112",
                        "memory": "192Gi",
                        "pods": "110",
                        "ephemeral-storage": "100Gi",
                        TPU_RESOURCE: str(shape.chips_per_vm),
                    },
                )
            )
    return pools


def node_manifest(pool: NodePool, node: str) -> dict[str, Any]:
    """A Node that kwok manages (annotation), labelled like a GKE node of `pool`."""
    labels = {
        "kubernetes.io/hostname": node,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": ZONE,
        "type": "kwok",
        **pool.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": labels, "annotations": {KWOK_NODE_ANNOTATION: "fake"}},
        "spec": {},
        "status": {"capacity": dict(pool.capacity), "allocatable": dict(pool.capacity)},
    }


def node_manifests(pools: Iterable[NodePool]) -> list[dict[str, Any]]:
    return [node_manifest(pool, node) for pool in pools for node in pool.nodes]


# ------------------------------------------------------------------------------ kubeconfig

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str
) -> dict[str, Any]:
    """A self-contained kubeconfig (credentials embedded) with one context, `etj-local`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "etj-local", "cluster": {
            "server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": _b64(cert_pem), "client-key-data": _b64(key_pem)}}],
        "contexts": [{"name": "etj-local", "context": {"cluster": "etj-local", "user": user}}],
        "current-context": "etj-local",
    }


# ----------------------------------------------------------------------------------- JobSet

def jobset_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """JobSet's Configuration for running outside the cluster: no leader election, our own
    serving cert (no in-cluster cert rotation), everything on loopback, metrics off."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
    }


def _webhook(name: str, url: str, ca_pem: bytes, group: str, resource: str,
             operations: list[str], pods_of_jobsets: bool) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": url, "caBundle": _b64(ca_pem)},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "rules": [{
            "apiGroups": [group],
            "apiVersions": ["v1alpha2" if group else "v1"],
            "operations": operations,
            "resources": [resource],
        }],
    }
    if pods_of_jobsets:  # as JobSet's own manifests: only pods that belong to a JobSet
        hook["objectSelector"] = {"matchExpressions": [
            {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    return hook


def jobset_webhook_configurations(webhook_port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """JobSet's mutating and validating webhooks (same names, paths, rules as its release
    manifests), pointed by URL at the controller on loopback."""
    base = f"https://127.0.0.1:{webhook_port}"
    group = "jobset.x-k8s.io"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "jobset-mutating-webhook-configuration"},
            "webhooks": [
                _webhook("mjobset.kb.io", base + JOBSET_MUTATE_PATH, ca_pem, group, "jobsets",
                         ["CREATE"], False),
                _webhook("mpod.kb.io", base + POD_MUTATE_PATH, ca_pem, "", "pods",
                         ["CREATE"], True),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "jobset-validating-webhook-configuration"},
            "webhooks": [
                _webhook("vjobset.kb.io", base + JOBSET_VALIDATE_PATH, ca_pem, group, "jobsets",
                         ["CREATE", "UPDATE"], False),
                _webhook("vpod.kb.io", base + POD_VALIDATE_PATH, ca_pem, "", "pods",
                         ["CREATE"], True),
            ],
        },
    ]


def jobset_probe(namespace: str = "default") -> dict[str, Any]:
    """A minimal JobSet, created with dryRun=All to prove the webhooks answer."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "etj-webhook-probe", "namespace": namespace},
        "spec": {"replicatedJobs": [{"name": "probe", "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "probe", "image": "busybox"}],
        }}}}}]},
    }


# ------------------------------------------------------------------------------------- kwok

# Stage files from the kwok module (kustomize/stage/...), in the order they are loaded.
# kwok falls back to its built-in defaults only for a resource with no stage given at all,
# so passing the chaos stages with -c means passing the defaults too. Unlike a kubelet,
# kwok's pod-delete strips a deleted pod's finalizers at once and gives it no terminal
# phase: the Job controller here never counts a deleted pod as failed (a kubelet's, not
# Succeeded, would be), nor applies a podFailurePolicy to it
# (docs/design/slice-replacement.md, "Budget").
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "node/chaos/node-not-ready.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
    "pod/chaos/pod-container-running-failed.yaml",
)


# A dead kubelet (faults.kill_node): kwok stops playing the kubelet of a node, and of the
# pods on it, that carry this label, as a dead host's kubelet would.
DEAD_KUBELET_LABEL = "localcluster.elastic.pathways.dev/dead-kubelet"
# The one stage a dead node keeps: reporting it NotReady (kill_node's first step).
NODE_NOT_READY_STAGE = "node-not-ready"
# Pods of a node that faults.make_node_not_ready reports NotReady: their kubelet does not
# say they are Ready again until the node is (POD_READY_AGAIN_STAGE).
NODE_NOT_READY_POD_LABEL = "localcluster.elastic.pathways.dev/node-not-ready"
POD_READY_AGAIN_STAGE = "pod-ready-again"


def pod_ready_again_stage() -> dict[str, Any]:
    """Our one stage of kwok's kubelet: a Running pod whose containers are ready but whose
    Ready condition is False is made Ready again, a second later, as a real kubelet's status
    sync does. Only the node lifecycle controller leaves that mark (MarkPodsNotReady sets
    Ready=False, nothing else, on the pods of a node it believes NotReady; also on a pod
    bound to the node while its view is stale, a NotReady that was undone within the same
    second of heartbeat time), and kwok's pod-ready stage acts only once, before the pod has
    an IP. Pods of a node still NotReady (NODE_NOT_READY_POD_LABEL), being deleted or on a
    dead kubelet (adapt_kwok_stage) keep Ready=False."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": POD_READY_AGAIN_STAGE},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.podIP", "operator": "Exists"},
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": _condition_status("Ready"), "operator": "In", "values": ["False"]},
                {"key": _condition_status("ContainersReady"), "operator": "In",
                 "values": ["True"]},
                {"key": f'.metadata.labels["{NODE_NOT_READY_POD_LABEL}"]',
                 "operator": "DoesNotExist"},
            ]},
            "delay": {"durationMilliseconds": 1000},
            "next": {"statusTemplate": (
                "conditions:\n"
                "- lastTransitionTime: {{ Now | Quote }}\n"
                '  status: "True"\n'
                "  type: Ready\n")},
        },
    }


# A container that exits and is restarted by its kubelet in the same pod (restartPolicy
# OnFailure, a container restart rule): what faults.restart_container asks kwok to play.
# The label's value walks "true" -> "exited" (POD_RESTART_STAGE: the container terminated,
# the pod not Ready) -> gone (POD_RESTARTED_STAGE, after the annotation's delay: running
# again, restartCount + 1, Ready), as a kubelet writes it: the same pod, node and uid.
POD_RESTART_LABEL = "localcluster.elastic.pathways.dev/restart-container"
POD_RESTART_EXIT_ANNOTATION = f"{POD_RESTART_LABEL}-exit-code"
POD_RESTART_DELAY_ANNOTATION = f"{POD_RESTART_LABEL}-delay"  # a duration: "2s"
POD_RESTART_STAGE, POD_RESTARTED_STAGE = "pod-container-restart", "pod-container-restarted"

_EXITED = """{{ $now := Now }}
{{ $code := or ( index ( or .metadata.annotations dict ) "%(exit)s" ) "1" }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
containerStatuses:
{{ range .status.containerStatuses }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: {{ or .restartCount 0 }}
  state:
    running: null
    terminated:
      exitCode: {{ $code }}
      reason: Error
      startedAt: {{ ( or .state.running dict ).startedAt | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
"""
_RESTARTED = """{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
containerStatuses:
{{ range .status.containerStatuses }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: {{ add1 ( or .restartCount 0 ) }}
  lastState:
    terminated: {{ ( or .state.terminated dict ) | toJson }}
  state:
    terminated: null
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
"""


def pod_restart_stages() -> list[dict[str, Any]]:
    """kwok playing a kubelet that restarts a pod's containers in place (faults.
    restart_container): the container exits (the pod stays Running, not Ready), then runs
    again after the delay the pod's annotation gives (default 1 s), restartCount + 1."""
    def stage(name: str, value: str, template: str, label: str | None,
              delay: dict[str, Any]) -> dict[str, Any]:
        # Each step also requires the containers' readiness it changes (True, then False):
        # its status patch and its label patch are two requests, and kwok, seeing the
        # first, must not play the step again (a second restartCount + 1).
        ready = "True" if value == "true" else "False"
        return {
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                "selector": {"matchExpressions": [
                    {"key": f'.metadata.labels["{POD_RESTART_LABEL}"]', "operator": "In",
                     "values": [value]},
                    {"key": _condition_status("ContainersReady"), "operator": "In",
                     "values": [ready]},
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]}]},
                "delay": delay,
                "next": {"patches": [
                    {"subresource": "status", "root": "status", "template": template},
                    {"root": "metadata", "type": "merge",
                     "template": "labels:\n  " + json.dumps(POD_RESTART_LABEL) + ": "
                                 + (json.dumps(label) if label else "null") + "\n"}]},
            },
        }
    return [
        stage(POD_RESTART_STAGE, "true", _EXITED % {"exit": POD_RESTART_EXIT_ANNOTATION},
              "exited", {"durationMilliseconds": 0}),
        stage(POD_RESTARTED_STAGE, "exited", _RESTARTED, None, {
            "durationMilliseconds": 1000, "durationFrom": {"expressionFrom":
                f'.metadata.annotations["{POD_RESTART_DELAY_ANNOTATION}"]'}}),
    ]


def _condition_status(type_: str) -> str:
    return f'.status.conditions.[] | select( .type == "{type_}" ) | .status'


def kwok_stages(loaded: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """kwok's stages (KWOK_STAGE_FILES, loaded) and ours, each adapted."""
    return [adapt_kwok_stage(s)
            for s in [*loaded, pod_ready_again_stage(), *pod_restart_stages()]]


# kwok's node-not-ready stamps every condition's lastTransitionTime with the node's
# creationTimestamp: a node that fails now would say it has been NotReady since it was
# created. A kubelet stamps the moment the status changed. Kueue before v0.19 fails a TAS
# node NotReady for 30 s counted from that stamp, whatever its pods do (v0.17.0
# pkg/controller/tas/node_controller.go Reconcile, NodeFailureDelay in constants.go;
# v0.19 keeps it only behind the gate TASReplaceNodeDueToNotReadyOverFixedTime, off), so
# with kwok's stamp it evicted a job the instant a host died.
KWOK_CREATION_STAMP = "{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}"
# The moment Ready went False: kept while it stays False (the stage runs again), else now.
NOT_READY_SINCE_STAMP = (
    "{{ $lastTransitionTime := $now }}\n"
    "{{ range .status.conditions }}{{ if and (eq .type \"Ready\") (eq .status \"False\") }}"
    "{{ $lastTransitionTime = .lastTransitionTime }}{{ end }}{{ end }}")


def _not_ready_since_the_failure(stage: dict[str, Any]) -> dict[str, Any]:
    next_ = stage["spec"]["next"]
    template = next_["statusTemplate"]
    if KWOK_CREATION_STAMP not in template:
        raise ValueError(f"kwok's {NODE_NOT_READY_STAGE} stage no longer stamps "
                         f"{KWOK_CREATION_STAMP!r}: review render.adapt_kwok_stage")
    stamped = template.replace(KWOK_CREATION_STAMP, NOT_READY_SINCE_STAMP)
    return {**stage, "spec": {**stage["spec"], "next": {**next_, "statusTemplate": stamped}}}


def adapt_kwok_stage(stage: dict[str, Any]) -> dict[str, Any]:
    """Three changes to kwok's stages:

    - kwok's default pod-complete finishes every Running pod owned by a Job at once, which
      would end every JobSet the moment it starts: only pods that opt in with the label
      `pod-complete.stage.kwok.x-k8s.io: "true"` complete.
    - every stage but node-not-ready skips nodes and pods labelled DEAD_KUBELET_LABEL: kwok
      would otherwise keep playing the kubelet of a dead host (heartbeats, and deleting
      its evicted pods at once), kinder than production, where they stay Terminating.
    - node-not-ready stamps Ready=False with the moment of the failure, as a kubelet
      does, not with the node's creation (KWOK_CREATION_STAMP)."""
    name = stage.get("metadata", {}).get("name")
    if name == NODE_NOT_READY_STAGE and "next" in stage.get("spec", {}):
        stage = _not_ready_since_the_failure(stage)
    added = []
    if name == "pod-complete":
        added.append({"key": f'.metadata.labels["{POD_COMPLETE_LABEL}"]', "operator": "In",
                      "values": ["true"]})
    if name != NODE_NOT_READY_STAGE:
        added.append({"key": f'.metadata.labels["{DEAD_KUBELET_LABEL}"]',
                      "operator": "DoesNotExist"})
    adapted = {**stage, "spec": {**stage["spec"],
                                 "selector": {**(stage["spec"].get("selector") or {})}}}
    expressions = list(adapted["spec"]["selector"].get("matchExpressions", []))
    adapted["spec"]["selector"]["matchExpressions"] = expressions + added
    return adapted


# ----------------------------------------------------------------------------- components

@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int
    jobset_webhook: int
    jobset_health: int

    @classmethod
    def from_list(cls, ports: list[int]) -> Ports:
        return cls(*ports)


@dataclass(frozen=True)
class Layout:
    """Where everything lives inside the cluster's state directory."""

    root: Path

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    def component_kubeconfig(self, component: str) -> Path:
        return self.pki / f"{component}.kubeconfig"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def pid(self, component: str) -> Path:
        return self.run / f"{component}.pid"

    @property
    def jobset_config(self) -> Path:
        return self.root / "jobset" / "config.yaml"

    @property
    def jobset_certs(self) -> Path:
        return self.root / "jobset" / "certs"

    @property
    def kwok_stages(self) -> Path:
        return self.root / "kwok" / "stages.yaml"

    @property
    def audit_policy(self) -> Path:
        return self.root / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        return self.logs / "audit.log"


def etcd_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=etj",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=etj={peer}",
        "--unsafe-no-fsync",  # test data: durability is not worth the fsync latency
        "--log-level=warn",
    ]


def apiserver_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    pki = layout.pki
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--allow-privileged=true",
        # Front-proxy (aggregation) settings as kubeadm sets them; without them the
        # controller-manager and scheduler log a missing requestheader CA forever.
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        # The `kubernetes` Service would point at 127.0.0.1, which Endpoints reject.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        # The writes of ServiceAccounts outside kube-system (audit_policy): which replica
        # of an operator wrote what, for the HA fault tests.
        f"--audit-policy-file={layout.audit_policy}",
        f"--audit-log-path={layout.audit_log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=200",
        "--audit-log-maxbackup=1",
    ]


def audit_policy() -> dict[str, Any]:
    """Audit (at Metadata level: who, what, the answer's code) every write made with a
    ServiceAccount token outside kube-system, and nothing else: an operator run as the
    chart's ServiceAccount is audited, the controllers (kube-system ServiceAccounts) and
    the certificate users (admin, kwok, JobSet, Kueue) are not. A token's audit entry
    names its credential (user.extra's credential-id): two replicas with a token each
    are told apart."""
    writes = ["create", "update", "patch", "delete", "deletecollection"]
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [{"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
                      {"level": "Metadata", "userGroups": ["system:serviceaccounts"],
                       "verbs": writes},
                      {"level": "None"}]}


def _component_common(layout: Layout, component: str, port: int) -> list[str]:
    kc = layout.component_kubeconfig(component)
    return [
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={layout.run / (component + '-certs')}",
        "--profiling=false",
    ]


def controller_manager_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    pki = layout.pki
    return [
        str(binary),
        *_component_common(layout, "kube-controller-manager", ports.controller_manager),
        # The default set: job, garbagecollector, nodelifecycle, podgc, namespace,
        # serviceaccount, serviceaccount-token, ... (all but the bootstrap-token ones).
        "--controllers=*",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]


def scheduler_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    return [str(binary), *_component_common(layout, "kube-scheduler", ports.scheduler)]


def kwok_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={layout.component_kubeconfig('kwok')}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
        # kwok renews node Leases, so the node lifecycle controller sees live nodes.
        "--node-lease-duration-seconds=40",
        f"--cidr={POD_CIDR}",
        # Nodes need an address: a hostNetwork pod's IP is its node's, and kwok's pod-ready
        # stage (selector: no podIP) would otherwise re-ready a failed hostNetwork pod forever.
        "--node-ip=10.0.0.1",
        f"--server-address=127.0.0.1:{ports.kwok}",
        f"--config={layout.kwok_stages}",
    ]


def jobset_args(binary: Path, layout: Layout) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={layout.component_kubeconfig('jobset-controller')}",
        f"--config={layout.jobset_config}",
        "--leader-elect=false",
    ]


# --------------------------------------------------------------------------------- naming

_DNS_LABEL = re.compile(r"[^a-z0-9-]+")


def namespace_name(prefix: str, unique: str) -> str:
    """A valid namespace (DNS label, <= 63 chars) from a test name and a unique suffix."""
    base = _DNS_LABEL.sub("-", prefix.lower()).strip("-") or "test"
    room = 63 - len(unique) - 1
    return f"{base[:room].rstrip('-')}-{unique}"
