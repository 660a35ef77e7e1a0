"""Pure parts of the local control plane: node pools, kubeconfig, JobSet config and
webhooks, kwok stages, component command lines."""
from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from elastic_devtools.localcluster import cluster_config
from elastic_devtools.localcluster.cluster_config import (
    DEFAULT_TPU_POOLS,
    Layout,
    Ports,
    TpuPoolSpec,
    parse_tpu_pool,
)


def test_parse_tpu_pool_forms() -> None:
    assert parse_tpu_pool("v5e:4x4:3") == TpuPoolSpec("v5e", "4x4", 3)
    assert parse_tpu_pool("v6e:2x2") == TpuPoolSpec("v6e", "2x2", 1)
    assert str(parse_tpu_pool(" v5p:2x2x1:2 ")) == "v5p:2x2x1:2"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("v5e", "TYPE:TOPOLOGY"),
        ("v5e:4x4:3:1", "TYPE:TOPOLOGY"),
        ("v5e::3", "TYPE:TOPOLOGY"),
        ("v5e:4x4:x", "COUNT"),
        ("v5e:4x4:0", ">= 1"),
        ("v9:4x4", "unknown TPU type"),
        ("v5e:3x3", "2x4, 4x4"),
    ],
)
def test_parse_tpu_pool_errors_name_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment.replace("+", r"\+")):
        parse_tpu_pool(text)


def test_default_pools_hold_the_articles_job_and_one_spare() -> None:
    pools = cluster_config.node_pools(DEFAULT_TPU_POOLS)
    cpu, *tpu = pools
    assert cpu.name == "cpu-np" and len(cpu.nodes) == 4
    assert cpu.labels[cluster_config.NODE_POOL_LABEL] == "cpu-np"
    assert cluster_config.TPU_RESOURCE not in cpu.capacity
    # 3 slices + 1 hot spare a failed slice moves to.
    assert [p.name for p in tpu] == ["tpu-v5e-4x4-0", "tpu-v5e-4x4-1", "tpu-v5e-4x4-2",
                                     "tpu-v5e-4x4-3"]
    for pool in tpu:
        assert len(pool.nodes) == 4  # 16 chips / 4 chips per VM
        assert pool.labels == {
            cluster_config.NODE_POOL_LABEL: pool.name,
            cluster_config.TPU_ACCELERATOR_LABEL: "tpu-v5-lite-podslice",
            cluster_config.TPU_TOPOLOGY_LABEL: "4x4",
            "node.kubernetes.io/instance-type": "ct5lp-hightpu-4t",
            # Topology-Aware Scheduling's block level: two pools per block.
            cluster_config.TOPOLOGY_BLOCK_LABEL: f"tpu-v5e-4x4-block-{int(pool.name[-1]) // 2}",
        }
        assert pool.capacity[cluster_config.TPU_RESOURCE] == "4"
    names = [n for p in pools for n in p.nodes]
    assert len(names) == len(set(names)) == 20  # 4 CPU + 4 pools x 4 TPU VMs


def test_pools_follow_the_catalog_and_names_stay_unique() -> None:
    pools = cluster_config.node_pools(
        [TpuPoolSpec("v6e", "1x1", 1), TpuPoolSpec("v5p", "2x2x2", 1),
         TpuPoolSpec("v6e", "1x1", 2)], cpu_nodes=1)
    by_name = {p.name: p for p in pools}
    assert list(by_name) == ["cpu-np", "tpu-v6e-1x1-0", "tpu-v5p-2x2x2-0",
                             "tpu-v6e-1x1-1", "tpu-v6e-1x1-2"]
    single = by_name["tpu-v6e-1x1-0"]
    assert len(single.nodes) == 1 and single.capacity[cluster_config.TPU_RESOURCE] == "1"
    assert single.labels["node.kubernetes.io/instance-type"] == "ct6e-standard-1t"
    v5p = by_name["tpu-v5p-2x2x2-0"]
    assert len(v5p.nodes) == 2
    assert v5p.labels[cluster_config.TPU_ACCELERATOR_LABEL] == "tpu-v5p-slice"


def test_node_manifest_is_a_kwok_node_with_status() -> None:
    pool = cluster_config.node_pools(DEFAULT_TPU_POOLS)[1]
    node = cluster_config.node_manifest(pool, pool.nodes[0])
    meta = node["metadata"]
    assert meta["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert meta["labels"]["kubernetes.io/hostname"] == pool.nodes[0]
    assert meta["labels"][cluster_config.TPU_TOPOLOGY_LABEL] == "4x4"
    assert node["status"]["capacity"] == node["status"]["allocatable"] == pool.capacity
    # The manifest is a copy: editing it must not change the pool.
    node["status"]["capacity"]["cpu"] = "1"
    assert pool.capacity["cpu"] == "112"


def test_kubeconfig_embeds_credentials() -> None:
    kc = cluster_config.kubeconfig("https://127.0.0.1:6443", b"CA", b"CERT", b"KEY", "me")
    round_tripped = yaml.safe_load(yaml.safe_dump(kc))
    cluster = round_tripped["clusters"][0]["cluster"]
    user = round_tripped["users"][0]["user"]
    assert cluster["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"CA"
    assert base64.b64decode(user["client-certificate-data"]) == b"CERT"
    assert base64.b64decode(user["client-key-data"]) == b"KEY"
    ctx = round_tripped["contexts"][0]
    assert round_tripped["current-context"] == ctx["name"]
    assert ctx["context"] == {"cluster": "etj-local", "user": "me"}


def test_jobset_config_runs_out_of_cluster() -> None:
    cfg = cluster_config.jobset_config(40001, 40002, Path("/state/jobset/certs"))
    assert cfg["kind"] == "Configuration"
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 40001, "certDir": "/state/jobset/certs"}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:40002"


def test_jobset_webhooks_point_at_loopback_with_ca() -> None:
    mutating, validating = cluster_config.jobset_webhook_configurations(40001, b"PEM")
    hooks = {h["name"]: h for cfg in (mutating, validating) for h in cfg["webhooks"]}
    assert hooks["mjobset.kb.io"]["clientConfig"]["url"] == (
        "https://127.0.0.1:40001/mutate-jobset-x-k8s-io-v1alpha2-jobset")
    assert hooks["vjobset.kb.io"]["clientConfig"]["url"] == (
        "https://127.0.0.1:40001/validate-jobset-x-k8s-io-v1alpha2-jobset")
    assert hooks["vjobset.kb.io"]["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    for hook in hooks.values():
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"PEM"
        assert hook["failurePolicy"] == "Fail"
    # Pod webhooks only see pods of JobSets.
    for name in ("mpod.kb.io", "vpod.kb.io"):
        assert hooks[name]["objectSelector"]["matchExpressions"][0]["key"] == (
            "jobset.sigs.k8s.io/jobset-name")
        assert hooks[name]["rules"][0]["apiVersions"] == ["v1"]
    assert "objectSelector" not in hooks["mjobset.kb.io"]


DEAD = {"key": '.metadata.labels["localcluster.elastic.pathways.dev/dead-kubelet"]',
        "operator": "DoesNotExist"}


def test_pod_complete_is_opt_in_and_every_stage_but_not_ready_skips_dead_kubelets() -> None:
    stage = {"metadata": {"name": "pod-complete"},
             "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}}
    adapted = cluster_config.adapt_kwok_stage(stage)
    keys = [e["key"] for e in adapted["spec"]["selector"]["matchExpressions"]]
    assert keys == ["a", '.metadata.labels["pod-complete.stage.kwok.x-k8s.io"]', DEAD["key"]]
    assert len(stage["spec"]["selector"]["matchExpressions"]) == 1  # input untouched
    ready = cluster_config.adapt_kwok_stage({"metadata": {"name": "pod-ready"}, "spec": {}})
    assert ready["spec"]["selector"]["matchExpressions"] == [DEAD]
    chaos = {"metadata": {"name": "node-not-ready"}, "spec": {"selector": {}}}
    assert cluster_config.adapt_kwok_stage(chaos)["spec"]["selector"] == {"matchExpressions": []}


def test_node_not_ready_is_stamped_with_the_failure_not_the_nodes_creation() -> None:
    template = ("{{ $now := Now }}\n" + cluster_config.KWOK_CREATION_STAMP + "\nconditions:\n"
                "- lastTransitionTime: {{ $lastTransitionTime | Quote }}\n")
    stage = {"metadata": {"name": "node-not-ready"},
             "spec": {"selector": {}, "next": {"statusTemplate": template}}}
    adapted = cluster_config.adapt_kwok_stage(stage)["spec"]["next"]["statusTemplate"]
    assert "creationTimestamp" not in adapted
    assert adapted.startswith("{{ $now := Now }}\n{{ $lastTransitionTime := $now }}")
    # An existing Ready=False keeps its stamp when the stage runs again.
    assert '(eq .status "False") }}{{ $lastTransitionTime = .lastTransitionTime }}' in adapted
    assert stage["spec"]["next"]["statusTemplate"] == template  # input untouched
    with pytest.raises(ValueError, match="no longer stamps"):
        cluster_config.adapt_kwok_stage({"metadata": {"name": "node-not-ready"},
                                 "spec": {"next": {"statusTemplate": "conditions: []"}}})


def test_kwok_stages_add_the_kubelets_ready_again_to_kwoks_own() -> None:
    loaded = [{"metadata": {"name": "pod-ready"}, "spec": {}}]
    stages = cluster_config.kwok_stages(loaded)
    assert [s["metadata"]["name"] for s in stages] == [
        "pod-ready", "pod-ready-again",
        cluster_config.POD_RESTART_STAGE, cluster_config.POD_RESTARTED_STAGE]
    again = stages[1]["spec"]
    assert again["resourceRef"] == {"apiGroup": "v1", "kind": "Pod"}
    selector = {e["key"]: (e["operator"], e.get("values"))
                for e in again["selector"]["matchExpressions"]}
    # The mark the node lifecycle controller leaves (Ready only) on a Running pod that
    # kwok's pod-ready stage has already seen (it has an IP), not being deleted...
    assert selector['.status.conditions.[] | select( .type == "Ready" ) | .status'] == (
        "In", ["False"])
    assert selector['.status.conditions.[] | select( .type == "ContainersReady" ) | .status'] \
        == ("In", ["True"])
    assert selector[".status.phase"] == ("In", ["Running"])
    assert selector[".status.podIP"] == ("Exists", None)
    assert selector[".metadata.deletionTimestamp"] == ("DoesNotExist", None)
    # ...and neither on a node still NotReady nor on a dead kubelet.
    assert selector[f'.metadata.labels["{cluster_config.NODE_NOT_READY_POD_LABEL}"]'] == (
        "DoesNotExist", None)
    assert selector[DEAD["key"]] == ("DoesNotExist", None)
    template = yaml.safe_load(again["next"]["statusTemplate"].replace("{{ Now | Quote }}", "t"))
    assert template == {"conditions": [{"lastTransitionTime": "t", "status": "True",
                                        "type": "Ready"}]}
    assert again["delay"]["durationMilliseconds"] >= 1000  # a status sync, not at once


def test_kwok_stages_include_defaults_and_chaos() -> None:
    files = cluster_config.KWOK_STAGE_FILES
    for needed in ("node/fast/node-initialize.yaml", "pod/fast/pod-ready.yaml",
                   "pod/fast/pod-delete.yaml", "node/chaos/node-not-ready.yaml",
                   "pod/chaos/pod-container-running-failed.yaml"):
        assert needed in files


PORTS = Ports(2379, 2380, 6443, 10257, 10259, 10247, 9443, 8081)


def test_component_args_use_the_chosen_ports_and_paths() -> None:
    layout = Layout(Path("/state"))
    etcd = cluster_config.etcd_args(Path("/bin/etcd"), layout, PORTS)
    assert "--unsafe-no-fsync" in etcd
    assert "--listen-client-urls=http://127.0.0.1:2379" in etcd
    assert "--initial-cluster=etj=http://127.0.0.1:2380" in etcd
    api = cluster_config.apiserver_args(Path("/bin/apiserver"), layout, PORTS)
    assert "--secure-port=6443" in api and "--authorization-mode=RBAC" in api
    assert "--etcd-servers=http://127.0.0.1:2379" in api
    assert "--service-account-signing-key-file=/state/pki/sa.key" in api
    kcm = cluster_config.controller_manager_args(Path("/bin/kcm"), layout, PORTS)
    assert "--secure-port=10257" in kcm and "--leader-elect=false" in kcm
    assert "--kubeconfig=/state/pki/kube-controller-manager.kubeconfig" in kcm
    assert "--service-account-private-key-file=/state/pki/sa.key" in kcm
    sched = cluster_config.scheduler_args(Path("/bin/sched"), layout, PORTS)
    assert "--secure-port=10259" in sched
    kwok = cluster_config.kwok_args(Path("/bin/kwok"), layout, PORTS)
    assert "--manage-all-nodes=false" in kwok
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in kwok
    assert "--config=/state/kwok/stages.yaml" in kwok
    assert "--server-address=127.0.0.1:10247" in kwok
    js = cluster_config.jobset_args(Path("/bin/jobset"), layout)
    assert js[0] == "/bin/jobset" and "--config=/state/jobset/config.yaml" in js
    for argv in (etcd, api, kcm, sched, kwok, js):
        # Nothing listens beyond loopback.
        assert not any("0.0.0.0" in a for a in argv)


def test_layout_paths() -> None:
    layout = Layout(Path("/s"))
    assert layout.kubeconfig == Path("/s/kubeconfig")
    assert layout.log("etcd") == Path("/s/logs/etcd.log")
    assert layout.pid("kwok") == Path("/s/run/kwok.pid")


@given(st.text(max_size=120), st.text(alphabet="0123456789abcdef", min_size=1, max_size=8))
def test_namespace_names_are_dns_labels(prefix: str, unique: str) -> None:
    import re

    name = cluster_config.namespace_name(prefix, unique)
    assert len(name) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    assert name.endswith("-" + unique)


def test_kwok_restarts_a_container_in_its_pod_in_two_steps() -> None:
    """faults.restart_container's label walks true -> exited -> gone: the container
    terminated with the annotation's code (the pod Running, not Ready), then running again
    after the annotation's delay, restartCount + 1 and the ended run as lastState."""
    exited, restarted = cluster_config.pod_restart_stages()
    def label_after(stage: dict[str, Any]) -> Any:
        patch = next(p for p in stage["spec"]["next"]["patches"] if p["root"] == "metadata")
        return yaml.safe_load(patch["template"])["labels"][cluster_config.POD_RESTART_LABEL]

    def wants(stage: dict[str, Any]) -> Any:
        return next(e["values"] for e in stage["spec"]["selector"]["matchExpressions"]
                    if e["key"] == f'.metadata.labels["{cluster_config.POD_RESTART_LABEL}"]')
    assert (wants(exited), label_after(exited)) == (["true"], "exited")
    assert (wants(restarted), label_after(restarted)) == (["exited"], None)
    status = next(p for p in exited["spec"]["next"]["patches"] if p["root"] == "status")
    assert status["subresource"] == "status" and "terminated" in status["template"]
    assert cluster_config.POD_RESTART_EXIT_ANNOTATION in status["template"]
    again = next(p for p in restarted["spec"]["next"]["patches"] if p["root"] == "status")
    assert "add1" in again["template"] and "lastState" in again["template"]
    assert restarted["spec"]["delay"]["durationFrom"]["expressionFrom"] == (
        f'.metadata.annotations["{cluster_config.POD_RESTART_DELAY_ANNOTATION}"]')


def test_each_restart_step_needs_the_readiness_it_changes() -> None:
    """A step's status patch lands before its label patch: seen in between, the step must
    no longer match, or kwok plays it twice (restartCount + 2)."""
    exited, restarted = cluster_config.pod_restart_stages()
    key = '.status.conditions.[] | select( .type == "ContainersReady" ) | .status'
    for stage, needs in ((exited, ["True"]), (restarted, ["False"])):
        expressions = {e["key"]: e.get("values") for e in
                       stage["spec"]["selector"]["matchExpressions"]}
        assert expressions[key] == needs
