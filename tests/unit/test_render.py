"""The pure renderer: the Pathways JobSet shape, the simulated variant, trainer RBAC."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import etj
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_api.budgets import budgets_of
from elastic_api.catalog import CATALOG, slice_shape
from elastic_api.models import ElasticTrainingJob
from elastic_api.validation import validate_job
from elastic_operator.render import (
    JOB_NAME_LABEL,
    jobset_name,
    pathways_security_context,
    render,
    render_jobset,
    trainer_command,
)

REPO = Path(__file__).resolve().parents[2]


def load_example(name: str) -> ElasticTrainingJob:
    return validate_job(yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text()))


def make(**spec: Any) -> ElasticTrainingJob:
    base: dict[str, Any] = {
        "tpu": {"type": "v5e", "topology": "4x4", "numSlices": 3},
        "checkpoint": {"directory": "gs://b/ckpt"},
        "trainer": {"image": "trainer:1", "steps": 100},
        "pathways": {"gcsScratch": "gs://b/scratch"},
    }
    base.update(spec)
    return validate_job({
        "apiVersion": "elastic.pathways.dev/v1alpha1", "kind": "ElasticTrainingJob",
        "metadata": {"name": "train", "namespace": "ml"}, "spec": base,
    })


def rjobs(jobset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in jobset["spec"]["replicatedJobs"]}


def pod(rjob: dict[str, Any]) -> dict[str, Any]:
    return rjob["template"]["spec"]["template"]["spec"]


def containers(pod_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod_spec.get("initContainers", []) + pod_spec["containers"]}


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_article_jobset_top_level():
    job = load_example("article")
    js = render_jobset(job)
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert js["metadata"]["name"] == jobset_name(job) == "article"
    spec = js["spec"]
    assert spec["coordinator"] == {"replicatedJob": "pathways-head", "jobIndex": 0, "podIndex": 0}
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True,
                               "subdomain": "article"}
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["pathways-head"]}
    assert spec["failurePolicy"] == {"maxRestarts": 0, "restartStrategy": "Recreate"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert spec["suspend"] is False
    assert [r["name"] for r in spec["replicatedJobs"]] == ["pathways-head", "worker"]


def test_article_head():
    head = rjobs(render_jobset(load_example("article")))["pathways-head"]
    assert head["replicas"] == 1 and "dependsOn" not in head
    assert head["template"]["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"}
    job_spec = head["template"]["spec"]
    assert (job_spec["backoffLimit"], job_spec["completions"], job_spec["parallelism"],
            job_spec["completionMode"]) == (0, 1, 1, "Indexed")
    p = pod(head)
    assert p["hostNetwork"] is True and p["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert p["restartPolicy"] == "Never"
    assert p["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-np"}
    assert p["serviceAccountName"] == "default"
    assert head["template"]["spec"]["template"]["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    assert [c["name"] for c in p["initContainers"]] == ["pathways-rm", "pathways-proxy"]
    assert [c["name"] for c in p["containers"]] == ["main"]
    c = containers(p)
    rm, proxy, main = c["pathways-rm"], c["pathways-proxy"], c["main"]
    assert rm["restartPolicy"] == proxy["restartPolicy"] == "Always"
    # A dated build (the example's, also the default), kept on the node once pulled.
    pathways = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"
    assert rm["image"] == f"{pathways}/server:20261001-jax_0.10.2"
    assert proxy["image"] == f"{pathways}/proxy_server:20261001-jax_0.10.2"
    assert rm["imagePullPolicy"] == proxy["imagePullPolicy"] == "IfNotPresent"
    assert rm["args"] == [
        "--server_port=29001", "--gcs_scratch_location=gs://my-bucket/article/pathways-scratch",
        "--node_type=resource_manager", "--instance_count=3", "--instance_type=tpuv5e:4x4",
    ]
    assert env(rm)["TPU_SKIP_MDS_QUERY"] == "true"
    assert env(rm)["HOST_ADDRESS"] == {
        "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/coordinator']"}}
    assert [p_["containerPort"] for p_ in rm["ports"]] == [29001, 29002]
    assert rm["resources"] == {"limits": {"cpu": "8", "memory": "32G"}}
    assert proxy["args"] == [
        "--server_port=29000", "--resource_manager_address=$(PATHWAYS_HEAD):29001",
        "--gcs_scratch_location=gs://my-bucket/article/pathways-scratch",
        "--num_elastic_slices=3",
    ]
    assert [p_["containerPort"] for p_ in proxy["ports"]] == [29000]
    assert proxy["resources"] == {"limits": {"cpu": "16", "memory": "100G"}}
    main_env = env(main)
    assert main_env["JAX_PLATFORMS"] == "proxy"
    assert main_env["XCLOUD_ENVIRONMENT"] == "GCP"
    assert main_env["JAX_BACKEND_TARGET"] == "grpc://$(PATHWAYS_HEAD):29000"
    assert main_env["ENABLE_PATHWAYS_PERSISTENCE"] == "1"
    assert main_env["ETJ_JOB_NAME"] == "article"
    assert main_env["ETJ_JOB_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    names = [e["name"] for e in main["env"]]
    assert names.index("PATHWAYS_HEAD") < names.index("JAX_BACKEND_TARGET")  # $(VAR) order


def test_article_trainer_command():
    assert trainer_command(load_example("article")) == [
        "etj", "train", "--config", "qwen3-0.6b", "--steps", "10000", "--batch", "48",
        "--seed", "0", "--data", "synthetic", "--checkpoint-dir",
        "gs://my-bucket/article/checkpoints", "--checkpoint-period", "auto",
        "--checkpoint-keep", "3", "--snapshot-period", "auto", "--overhead-budget-percent",
        "2.0", "--min-slices", "3", "--elastic-timeout", "300", "--max-retries", "10",
        "--retry-window-seconds", "0", "--backend", "pathways", "--on-slow-slice", "Replace",
    ]


def test_the_restart_budgets_are_rendered_as_elastic_api_derives_them():
    """A job that sets no count: each budget per hour, derived from its hosts (the
    trainer's --max-retries and its window, the workers' backoffLimit), and JobSet
    restarts the operator counts, failing the JobSet by the head's deadline once spent;
    one that sets counts: over the whole run, JobSet's own maxRestarts."""
    job = etj().tpu("v5e", "16x16", 16).build()  # 1,024 hosts
    budgets = budgets_of(job.spec)
    cmd = trainer_command(job)
    assert cmd[cmd.index("--max-retries") + 1] == str(budgets.elastic_retries.allowed) == "5"
    assert cmd[cmd.index("--retry-window-seconds") + 1] == "3600"
    js = render_jobset(job)
    assert rjobs(js)["worker"]["template"]["spec"]["backoffLimit"] == 64 * 3
    assert js["spec"]["failurePolicy"] == {
        "maxRestarts": 2**31 - 1, "restartStrategy": "Recreate",
        "rules": [{"name": "RestartBudgetSpent", "action": "FailJobSet",
                   "onJobFailureReasons": ["DeadlineExceeded"],
                   "targetReplicatedJobs": ["pathways-head"]}]}
    # Counts over the whole run: JobSet's own maxRestarts; main's restarts in place (on by
    # default) are the operator's to add, hence the same rule.
    counted = etj().spec(maxRestarts=2, elastic={"maxRetries": 7}).build()
    assert render_jobset(counted)["spec"]["failurePolicy"] == {
        "maxRestarts": 2, "restartStrategy": "Recreate",
        "rules": js["spec"]["failurePolicy"]["rules"]}
    not_in_place = etj().spec(maxRestarts=2, recovery={"restartInPlace": False}).build()
    assert render_jobset(not_in_place)["spec"]["failurePolicy"] == {
        "maxRestarts": 2, "restartStrategy": "Recreate"}
    cmd = trainer_command(counted)
    assert cmd[cmd.index("--max-retries") + 1:cmd.index("--retry-window-seconds") + 2] == [
        "7", "--retry-window-seconds", "0"]


def test_periods_given_win_and_the_budget_is_rendered():
    job = load_example("article").model_copy(deep=True)
    job.spec.checkpoint.period_steps = 100  # a job stored while 100 was the default
    job.spec.snapshot.period_steps = 0
    job.spec.overhead_budget_percent = 0.5
    cmd = trainer_command(job)
    assert cmd[cmd.index("--checkpoint-period") + 1] == "100"
    assert cmd[cmd.index("--snapshot-period") + 1] == "0"
    assert cmd[cmd.index("--overhead-budget-percent") + 1] == "0.5"


def test_article_workers():
    worker = rjobs(render_jobset(load_example("article")))["worker"]
    assert worker["replicas"] == 3
    assert worker["dependsOn"] == [{"name": "pathways-head", "status": "Ready"}]
    assert worker["template"]["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    job_spec = worker["template"]["spec"]
    # v5e 4x4 = 16 chips = 4 VMs; maxSliceRestarts 5.
    assert (job_spec["completions"], job_spec["parallelism"], job_spec["backoffLimit"],
            job_spec["completionMode"]) == (4, 4, 20, "Indexed")
    p = pod(worker)
    assert p["restartPolicy"] == "OnFailure" and p["hostNetwork"] is True
    assert p["terminationGracePeriodSeconds"] == 30
    assert p["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                                 "cloud.google.com/gke-tpu-topology": "4x4"}
    assert p["tolerations"] == [
        {"key": "google.com/tpu", "operator": "Exists"},
        # spec.recovery.workerNodeTolerationSeconds, not the API server's 300 s
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 30},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 30},
    ]
    assert p["affinity"] == QUARANTINE_AFFINITY
    assert p["serviceAccountName"] == "default"  # the head's: one ServiceAccount
    assert "annotations" not in worker["template"]["spec"]["template"]["metadata"]
    # The TPU VM's own /tmp, as xpk mounts it (the TPU runtime's logs and chip lock).
    assert p["volumes"] == [{"name": "shared-tmp",
                             "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}]
    assert "initContainers" not in p  # no colocated Python sidecar unless asked for
    (c,) = p["containers"]
    assert c["name"] == "pathways-worker"
    assert c["image"] == "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:20261001-jax_0.10.2"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["volumeMounts"] == [{"name": "shared-tmp", "mountPath": "/tmp"}]
    assert c["args"] == ["--server_port=29005", "--resource_manager_address=$(PATHWAYS_HEAD):29001",
                         "--gcs_scratch_location=gs://my-bucket/article/pathways-scratch"]
    assert c["resources"] == {"limits": {"google.com/tpu": "4"}}
    assert [p_["containerPort"] for p_ in c["ports"]] == [29005, 29006, 8471, 8080]
    e = env(c)
    label = "metadata.labels['jobset.sigs.k8s.io/{}']".format
    assert e["MEGASCALE_SLICE_ID"] == {"fieldRef": {"fieldPath": label("job-index")}}
    assert e["MEGASCALE_NUM_SLICES"] == {"fieldRef": {"fieldPath": label("replicatedjob-replicas")}}
    assert e["MEGASCALE_COORDINATOR_ADDRESS"] == {"fieldRef": {"fieldPath": label("coordinator")}}
    assert e["TPU_MIN_LOG_LEVEL"] == e["TF_CPP_MIN_LOG_LEVEL"] == "0"
    assert e["MEGASCALE_GRPC_ENABLE_XOR_TRACER"] == "false"  # as pathways-job and xpk


def test_labels_on_every_object_and_pod_template():
    for name in ("article", "simulated"):
        objects = render(load_example(name))
        for obj in objects:
            assert obj["metadata"]["labels"][JOB_NAME_LABEL] == name
            assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == name
            assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"]
            assert "ownerReferences" not in obj["metadata"]
        for rjob in objects[-1]["spec"]["replicatedJobs"]:
            pod_labels = rjob["template"]["spec"]["template"]["metadata"]["labels"]
            assert pod_labels[JOB_NAME_LABEL] == name


def test_rbac():
    objects = render(make())
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Role", "RoleBinding", "JobSet"]  # no ServiceAccount of our own
    role, binding, _ = objects
    assert role["metadata"] == {**role["metadata"], "name": "train-trainer", "namespace": "ml"}
    assert role["rules"] == [
        {"apiGroups": ["elastic.pathways.dev"], "resources": ["elastictrainingjobs"],
         "resourceNames": ["train"], "verbs": ["get"]},
        {"apiGroups": ["elastic.pathways.dev"], "resources": ["elastictrainingjobs/status"],
         "resourceNames": ["train"], "verbs": ["get", "patch"]},
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "train-trainer"}
    # Bound to the account the pods run as: the namespace's default.
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "default",
                                    "namespace": "ml"}]


def test_simulated_rbac_can_watch_pods():
    role = render(load_example("simulated"))[0]
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]} in role["rules"]


def test_user_service_account_is_every_pods_and_the_trainers():
    objects = render(make(serviceAccountName="tpu-sa"))
    assert [o["kind"] for o in objects] == ["Role", "RoleBinding", "JobSet"]
    assert objects[1]["subjects"][0]["name"] == "tpu-sa"
    r = rjobs(objects[-1])
    assert pod(r["pathways-head"])["serviceAccountName"] == "tpu-sa"
    assert pod(r["worker"])["serviceAccountName"] == "tpu-sa"


QUARANTINE_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "elastic.pathways.dev/quarantined", "operator": "DoesNotExist"}]}]}}}


def test_simulated_workers_are_placed_like_tpu_workers():
    """So that a spare node pool exists for them on the local cluster (and the tests and
    the demo show a slice moving to it): the same placement as Pathways' workers, minus
    hostNetwork; the head stays on the CPU pool."""
    r = rjobs(render_jobset(load_example("simulated")))
    head, worker = pod(r["pathways-head"]), pod(r["worker"])
    assert head["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-np"}
    assert worker["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                      "cloud.google.com/gke-tpu-topology": "2x4"}
    assert worker["containers"][0]["resources"] == {"limits": {"google.com/tpu": "4"}}
    assert worker["affinity"] == QUARANTINE_AFFINITY
    assert r["worker"]["template"]["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    assert "hostNetwork" not in head and "hostNetwork" not in worker


def test_placement_any_renders_no_tpu_placement():
    job = make(backend="simulated", placement="Any")
    r = rjobs(render_jobset(job))
    head, worker = pod(r["pathways-head"]), pod(r["worker"])
    assert "nodeSelector" not in head and "nodeSelector" not in worker
    assert "affinity" not in worker and "google.com/tpu" not in yaml.safe_dump(r)
    assert "annotations" not in r["worker"]["template"]["metadata"]


def test_baseline_without_replacement_keeps_kubernetes_defaults():
    """replaceSlices false: no node-failure tolerations (the API server's 300 s apply),
    no quarantine affinity: what JobSet and the Job controller do alone."""
    worker = pod(rjobs(render_jobset(make(recovery={"replaceSlices": False})))["worker"])
    assert worker["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists"}]
    assert "affinity" not in worker


def test_worker_node_toleration_seconds_is_rendered():
    worker = pod(rjobs(render_jobset(make(recovery={"workerNodeTolerationSeconds": 120})))[
        "worker"])
    assert {t["key"]: t.get("tolerationSeconds") for t in worker["tolerations"]} == {
        "google.com/tpu": None, "node.kubernetes.io/not-ready": 120,
        "node.kubernetes.io/unreachable": 120}


def test_simulated_shape():
    job = load_example("simulated")
    r = rjobs(render_jobset(job))
    head, worker = pod(r["pathways-head"]), pod(r["worker"])
    assert [c["name"] for c in head["containers"]] == ["main"] and "initContainers" not in head
    assert "hostNetwork" not in head and "tolerations" not in head
    assert trainer_command(job)[-8:] == ["--backend", "simulated", "--on-slow-slice",
                                         "Replace", "--simulate-slices", "2",
                                         "--slice-health", "pods"]
    assert env(head["containers"][0])["JAX_PLATFORMS"] == "cpu"
    (agent,) = worker["containers"]
    assert agent["name"] == "slice-agent"
    assert agent["command"] == ["etj", "slice-agent"]
    assert agent["image"] == job.spec.trainer.image
    # Same shape as the TPU job: v6e 2x4 = 2 VMs per slice.
    assert r["worker"]["replicas"] == 2
    assert r["worker"]["template"]["spec"]["completions"] == 2
    assert r["worker"]["template"]["spec"]["backoffLimit"] == 2 * 3  # derived: 3 per hour
    assert r["worker"]["dependsOn"] == [{"name": "pathways-head", "status": "Ready"}]


@pytest.mark.parametrize("example", ["article", "simulated"])
def test_trainer_image_containers_are_locked_down_with_only_tmp_writable(example: str):
    """The containers running our trainer image (head `main`; `slice-agent` on simulated
    workers): non-root, no escalation, no capabilities, read-only root with /tmp an
    emptyDir. Pathways' own containers run as Google ships them (root, writable root) but
    with no capability and no escalation (pathways_security_context; a Pathways worker's
    /tmp is its TPU VM's, test_article_workers)."""
    js = render_jobset(load_example(example))
    ours = {"main", "slice-agent"} if example == "simulated" else {"main"}
    seen = set()
    for rjob in js["spec"]["replicatedJobs"]:
        p = pod(rjob)
        volumes = {v["name"]: v for v in p["volumes"]}
        for name, c in containers(p).items():
            (tmp,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
            if name == "pathways-worker":
                assert "hostPath" in volumes[tmp["name"]]
                continue
            assert volumes[tmp["name"]] == {"name": tmp["name"], "emptyDir": {}}, name
            if name not in ours:
                assert c["securityContext"] == pathways_security_context(), name
                continue
            seen.add(name)
            assert c["image"] == load_example(example).spec.trainer.image
            assert c["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            }, name
    assert seen == ours


def test_options_flow_through():
    job = make(
        elastic={"minSlices": 2, "elasticSlices": 0, "maxSliceRestarts": 7, "timeoutSeconds": 60,
                 "maxRetries": 3},
        maxRestarts=2, suspend=True, priorityClassName="hi", terminationGracePeriodSeconds=5,
        nodeSelector={"team": "ml"}, tolerations=[{"key": "spot", "operator": "Exists"}],
        checkpoint={"directory": "gs://b/c", "async": False, "persistence": False, "keep": 2,
                    "periodSteps": 10},
        snapshot={"periodSteps": 4},
        trainer={"image": "t:2", "steps": 19, "args": ["--x", "1"],
                 "env": [{"name": "JAX_PLATFORMS", "value": "proxy,cpu"},
                         {"name": "A", "value": "b"}]},
        pathways={"gcsScratch": "gs://s", "version": "v9",
                  "proxy": {"args": ["--p"], "resources": {"limits": {"memory": "200G"}}},
                  "worker": {"resources": {"requests": {"cpu": "1"}}}},
    )
    js = render_jobset(job)
    assert js["spec"]["suspend"] is True
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 2
    r = rjobs(js)
    head, worker = pod(r["pathways-head"]), pod(r["worker"])
    assert r["worker"]["template"]["spec"]["backoffLimit"] == 4 * 7
    for p in (head, worker):
        assert p["priorityClassName"] == "hi"
        assert p["terminationGracePeriodSeconds"] == 5
        assert p["nodeSelector"]["team"] == "ml"
        assert {"key": "spot", "operator": "Exists"} in p["tolerations"]
    c = containers(head)
    assert c["pathways-proxy"]["args"][-1] == "--p"
    assert not any(a.startswith("--num_elastic_slices") for a in c["pathways-proxy"]["args"])
    assert c["pathways-proxy"]["resources"] == {"limits": {"cpu": "16", "memory": "200G"}}
    assert c["pathways-rm"]["image"].endswith("/server:v9")
    main = c["main"]
    assert "ENABLE_PATHWAYS_PERSISTENCE" not in env(main)
    assert env(main)["JAX_PLATFORMS"] == "proxy,cpu"  # the user's value wins
    assert [e["name"] for e in main["env"]].count("JAX_PLATFORMS") == 1
    assert env(main)["A"] == "b"
    cmd = main["command"]
    assert "--no-async-checkpoint" in cmd
    assert cmd[cmd.index("--min-slices") + 1] == "2"
    assert cmd[cmd.index("--snapshot-period") + 1] == "4"
    assert cmd[-4:] == ["--backend", "pathways", "--on-slow-slice", "Replace"]
    assert main["args"] == ["--x", "1"]  # after the command, as in a core/v1 container
    assert worker["containers"][0]["resources"] == {
        "limits": {"google.com/tpu": "4"}, "requests": {"cpu": "1"}}


def test_render_is_pure():
    job = load_example("article")
    before = job.model_dump()
    first = render(job)
    second = render(job)
    assert first == second
    assert job.model_dump() == before
    first[-1]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["volumes"].append({})
    assert render(job) == second  # no shared mutable state between calls


def test_pathways_without_scratch_is_refused():
    job = make()
    broken = job.model_copy(deep=True)
    broken.spec.pathways.gcs_scratch = None
    with pytest.raises(ValueError, match=r"spec\.pathways\.gcsScratch"):
        render(broken)


topologies = st.sampled_from([(t, topo) for t, f in CATALOG.items() for topo in f.topologies])


@settings(max_examples=60, deadline=None)
@given(topologies, st.integers(1, 64), st.integers(0, 20),
       st.sampled_from(["pathways", "simulated"]), st.data())
def test_shape_invariants(tpu: tuple[str, str], num_slices: int, restarts: int, backend: str,
                          data: st.DataObject):
    min_slices = data.draw(st.integers(1, num_slices))
    job = make(tpu={"type": tpu[0], "topology": tpu[1], "numSlices": num_slices}, backend=backend,
               elastic={"minSlices": min_slices, "maxSliceRestarts": restarts})
    shape = slice_shape(*tpu)
    r = rjobs(render_jobset(job))
    w = r["worker"]
    assert w["replicas"] == num_slices
    assert w["template"]["spec"]["parallelism"] == w["template"]["spec"]["completions"] == shape.vms
    assert w["template"]["spec"]["backoffLimit"] == shape.vms * restarts
    cmd = pod(r["pathways-head"])["containers"][0]["command"]
    assert cmd[cmd.index("--min-slices") + 1] == str(min_slices)
    if backend == "pathways":
        rm = containers(pod(r["pathways-head"]))["pathways-rm"]
        assert f"--instance_count={num_slices}" in rm["args"]
        assert f"--instance_type={shape.pathways_instance_type}" in rm["args"]
        limits = pod(w)["containers"][0]["resources"]["limits"]
        assert limits["google.com/tpu"] == str(shape.chips_per_vm)
    else:  # placed like a TPU worker (spec.placement TPU, the default)
        limits = pod(w)["containers"][0]["resources"]["limits"]
        assert limits == {"google.com/tpu": str(shape.chips_per_vm)}


def test_v6e_single_chip_slice():
    job = make(tpu={"type": "v6e", "topology": "1x1", "numSlices": 2})
    worker = rjobs(render_jobset(job))["worker"]
    assert worker["template"]["spec"]["completions"] == 1
    assert pod(worker)["containers"][0]["resources"]["limits"]["google.com/tpu"] == "1"


def test_namespace_only_when_known():
    job = load_example("article")
    assert job.metadata.namespace is None
    assert all("namespace" not in o["metadata"] for o in render(job))
    namespaced = copy.deepcopy(job)
    namespaced.metadata.namespace = "ml"
    assert all(o["metadata"]["namespace"] == "ml" for o in render(namespaced))
