"""Every file under examples/, as written, on the real API server with JobSet, Kueue and
the CRD installed: each object of each file is admitted (a server-side dry run goes
through the schema, the CRD's CEL rules and the admission webhooks, Kueue's among them).
Then the GKE walk-through's objects (examples/gke/) are created for real, and Kueue admits
the JobSet of examples/maxtext.yaml with them: the head on the CPU pool's flavor, the
workers on the TPU slices' (docs/gke.md). The rendered JobSets of the jobs are checked
against JobSet's webhooks in test_admission_jobset.py, the trainers' start in
tests/unit/test_examples_start.py."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils

from elastic_api import GROUP
from elastic_api.names import KUEUE_GROUP, KUEUE_QUEUE_NAME_LABEL
from elastic_api.validation import validate_job
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster import kueue_queues as kq
from elastic_devtools.localcluster.crds import install_crd
from elastic_devtools.localcluster.faults import wait_for
from elastic_operator.render import render_jobset
from tests.support.server_version import server_features

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FILES = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml"))
GKE = EXAMPLES / "gke"
# The custom kinds among the examples, by plural; and the cluster-scoped kinds.
CUSTOM = {"ElasticTrainingJob": "elastictrainingjobs", "ResourceFlavor": "resourceflavors",
          "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}
CLUSTER_SCOPED = {"Namespace", "PriorityClass", "ResourceFlavor", "ClusterQueue"}
TIMEOUT = 90


@pytest.fixture(scope="module")
def api(kueue: Cluster) -> Iterator[client.ApiClient]:
    api_client = kueue.api_client()
    install_crd(api_client)
    yield api_client
    api_client.close()


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def gke_namespace() -> str:
    (ns,) = documents(GKE / "namespace.yaml")
    name: str = ns["metadata"]["name"]
    return name


def into(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The object in the test's namespace: a namespaced object of examples/gke/ must be in
    the walk-through's namespace (namespace.yaml); one of examples/ names none."""
    if obj["kind"] in CLUSTER_SCOPED:
        return obj
    meta = obj["metadata"]
    assert meta.get("namespace") in (None, gke_namespace()), meta
    return {**obj, "metadata": {**meta, "namespace": namespace}}


def create(api: client.ApiClient, obj: dict[str, Any], namespace: str, *,
           dry_run: bool) -> None:
    run = {"dry_run": "All"} if dry_run else {}
    group, _, version = obj["apiVersion"].rpartition("/")
    if obj["kind"] not in CUSTOM:
        utils.create_from_dict(api, obj, namespace=namespace, **run)
        return
    assert group in (GROUP, KUEUE_GROUP), obj["apiVersion"]
    plural = CUSTOM[obj["kind"]]
    custom = client.CustomObjectsApi(api)
    if obj["kind"] not in CLUSTER_SCOPED:
        custom.create_namespaced_custom_object(group, version, namespace, plural, obj, **run)
    else:
        custom.create_cluster_custom_object(group, version, plural, obj, **run)


def delete(api: client.ApiClient, obj: dict[str, Any], namespace: str) -> None:
    group, _, version = obj["apiVersion"].rpartition("/")
    name = obj["metadata"]["name"]
    try:
        if obj["kind"] == "PriorityClass":
            client.SchedulingV1Api(api).delete_priority_class(name)
            return
        plural = CUSTOM[obj["kind"]]
        custom = client.CustomObjectsApi(api)
        if obj["kind"] not in CLUSTER_SCOPED:
            custom.delete_namespaced_custom_object(group, version, namespace, plural, name)
        else:
            custom.delete_cluster_custom_object(group, version, plural, name)
    except client.ApiException as err:
        if err.status != 404:
            raise


@pytest.mark.parametrize("name", FILES)
def test_every_object_of_every_example_file_is_admitted(api: client.ApiClient, namespace: str,
                                                        name: str):
    objects = documents(EXAMPLES / name)
    assert objects, name
    for obj in objects:
        create(api, into(obj, namespace), namespace, dry_run=True)


def test_kueue_admits_the_maxtext_job_with_the_walkthroughs_objects(api: client.ApiClient,
                                                                    namespace: str):
    job = yaml.safe_load((EXAMPLES / "maxtext.yaml").read_text())
    queue = job["metadata"]["labels"][KUEUE_QUEUE_NAME_LABEL]
    job["metadata"]["namespace"] = namespace
    jobset = render_jobset(validate_job(job))
    made = [into(o, namespace) for f in ("priorityclasses.yaml", "kueue.yaml")
            for o in documents(GKE / f)]
    assert any(o["kind"] == "LocalQueue" and o["metadata"]["name"] == queue for o in made)
    jobsets = client.CustomObjectsApi(api)
    with ExitStack() as cleanup:
        for obj in made:
            create(api, obj, namespace, dry_run=False)
            cleanup.callback(delete, api, obj, namespace)
        created = jobsets.create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", jobset)
        cleanup.callback(lambda: jobsets.delete_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", jobset["metadata"]["name"],
            propagation_policy="Background"))
        uid = created["metadata"]["uid"]
        admitted: dict[str, Any] = wait_for(
            lambda: next((w for w in kq.workloads_of(api, namespace, uid)
                          if kq.is_true(w, "Admitted")), None),
            TIMEOUT, "Kueue to admit the maxtext example's Workload")
        flavors = {a["name"]: a["flavors"]
                   for a in admitted["status"]["admission"]["podSetAssignments"]}
        assert flavors == {"pathways-head": {"cpu": "cpu-user", "memory": "cpu-user"},
                           "worker": {"google.com/tpu": "tpu-v5e-4x4"}}, flavors


def _pods(jobset: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The JobSet's pod templates as Pods (the priority class aside: another admission
    plugin's question)."""
    pods = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        template = rjob["template"]["spec"]["template"]
        spec = {k: v for k, v in template["spec"].items() if k != "priorityClassName"}
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"generateName": f"{rjob['name']}-", "namespace": namespace,
                                  "labels": template["metadata"].get("labels", {})},
                     "spec": spec})
    return pods


def test_the_walkthroughs_pod_security_level_admits_the_jobs_pods_and_baseline_does_not(
        api: client.ApiClient, namespace: str):
    """examples/gke/namespace.yaml's Pod Security labels admit the pods of
    examples/maxtext.yaml (head and worker: host network, the TPU VM's /tmp, the progress
    sidecar's SYS_PTRACE); `baseline` refuses them, naming why (docs/gke.md, step 9)."""
    (ns_obj,) = documents(GKE / "namespace.yaml")
    job = yaml.safe_load((EXAMPLES / "maxtext.yaml").read_text())
    job["metadata"]["namespace"] = namespace
    # As the operator renders them for this server (1.32 refuses main's restart rules).
    pods = _pods(render_jobset(validate_job(job), server_features(api)), namespace)
    core = client.CoreV1Api(api)

    def label(labels: dict[str, str]) -> None:
        core.patch_namespace(namespace, {"metadata": {"labels": labels}})

    # Pod Security's labels alone: the tenant-policy label would have a chart installed
    # by an earlier module on this control plane judge the admin's pods too.
    label({k: v for k, v in ns_obj["metadata"]["labels"].items()
           if k.startswith("pod-security.kubernetes.io/")})
    for pod in pods:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    label({key: "baseline" for key in ns_obj["metadata"]["labels"]
           if key.startswith("pod-security.kubernetes.io/")})

    def refusal(pod: dict[str, Any]) -> client.ApiException | None:
        try:
            core.create_namespaced_pod(namespace, pod, dry_run="All")
        except client.ApiException as err:
            return err
        return None

    for pod, forbidden in zip(pods, (("hostNetwork", "SYS_PTRACE"), ("hostNetwork", "hostPath")),
                              strict=True):
        # Pod Security admission reads the namespace's labels from the API server's cache,
        # which may not have the new level yet on a loaded machine.
        err = wait_for(lambda pod=pod: refusal(pod), 30,
                       "Pod Security admission to apply the baseline level", interval=0.2)
        assert err.status == 403, err.body
        assert all(word in str(err.body) for word in ("PodSecurity", *forbidden)), err.body
