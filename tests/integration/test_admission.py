"""Admission on the real API server: the generated CRD accepts good jobs and refuses bad
ones with exactly the messages the Python validator gives; the spec is immutable except
`suspend`; the examples are ready to apply."""
from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException

from elastic_api import GROUP, PLURAL, VERSION, maxtext
from elastic_api.catalog import CATALOG, CUBE_LABEL
from elastic_api.crd import build_crd
from elastic_api.images import DEFAULT_PATHWAYS_VERSION
from elastic_api.models import BUNDLED_TRAINER_FIELDS, INT32_MAX, MAX_SLICE_RESTARTS, MAX_SLICES
from elastic_api.validation import (
    BUNDLED_FIELD,
    CHECKPOINT_FIELD_TWICE,
    CHECKPOINT_FIELD_UNREAD,
    CHECKPOINT_PERIOD_RUN,
    COLOCATED_NEEDS_PATHWAYS,
    COLOCATED_SIDECAR_REQUIRED,
    COMMAND_EMPTY,
    DATA_URL,
    HARDWARE_EXIT_CODES_TWICE,
    HARDWARE_NEEDS_REPLACEMENT,
    HARDWARE_REASONS_TWICE,
    IMAGE_MOVES,
    MAXTEXT_METRICS_FILE_ARG,
    MODEL_UNKNOWN,
    MULTIKUEUE_CHECKPOINT_DIRECTORY,
    MULTIKUEUE_VOLUME,
    NUM_SLICES,
    OVERHEAD_BUDGET,
    PATHWAYS_VERSION_MOVES,
    PROGRESS_METRICS_FILE_PATH,
    PROGRESS_METRICS_FILE_REQUIRED,
    PROGRESS_NEEDS_COMMAND,
    SNAPSHOT_MAXTEXT,
    SNAPSHOT_PERIOD_RUN,
    STEPS_REQUIRED,
    TAS_CUBE,
    TAS_HOSTNAME,
    TAS_LEVEL_FORMAT,
    TAS_PLACEMENT,
    TAS_SAME_LEVEL,
    TAS_SUPER_SLICE,
    TOPOLOGY,
    VOLUME_MOUNT,
    VOLUME_NAME,
    VOLUME_SOURCE,
    validate_job,
)

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


def install_crd(api: client.ApiClient, timeout: float = 60,
                crd: dict[str, Any] | None = None) -> None:
    """Server-side apply the generated CRD (or `crd`) and wait until the API serves the
    resource."""
    crd = crd or build_crd()
    name = crd["metadata"]["name"]
    ext = client.ApiextensionsV1Api(api)
    ext.patch_custom_resource_definition(
        name, crd, field_manager="etj-admission-tests", force=True,
        _content_type="application/apply-patch+yaml",
    )
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    while True:
        current = ext.read_custom_resource_definition(name)
        established = any(c.type == "Established" and c.status == "True"
                          for c in (current.status.conditions or []))
        served = False
        if established:
            try:
                custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1)
                served = True
            except ApiException as exc:
                if exc.status != 404:
                    raise
        if served:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} not served after {timeout}s")
        time.sleep(0.2)


def rejection(exc: ApiException) -> tuple[int, list[str], str]:
    """(HTTP status, the causes' messages, the whole message) of a refused request."""
    body: dict[str, Any] = json.loads(exc.body or "{}")
    causes = [c.get("message", "") for c in (body.get("details") or {}).get("causes") or []]
    return int(exc.status or 0), causes, str(body.get("message", ""))


def cause_with(causes: list[str], expected: str) -> bool:
    """A CEL/OpenAPI cause reads `[Invalid value: "...": ]<message>`; match its tail exactly."""
    return any(c == expected or c.endswith(": " + expected) for c in causes)


@pytest.fixture(scope="module")
def custom(cluster: Any) -> Iterator[client.CustomObjectsApi]:
    api = cluster.api_client()
    install_crd(api)
    yield client.CustomObjectsApi(api)
    api.close()


def good_job(name: str = "train") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "tpu": {"type": "v5e", "topology": "4x4", "numSlices": 3},
            "checkpoint": {"directory": "gs://bucket/ckpt"},
            "trainer": {"image": "trainer:1", "steps": 100},
            "pathways": {"gcsScratch": "gs://bucket/scratch"},
        },
    }


def create(custom: client.CustomObjectsApi, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, obj)
    return result


def _admitted_dry_run(custom: client.CustomObjectsApi, namespace: str,
                      obj: dict[str, Any]) -> bool:
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                               copy.deepcopy(obj), dry_run="All")
    except ApiException as exc:
        if exc.status != 422:
            raise
        return False
    return True


def _until_the_rules_apply(custom: client.CustomObjectsApi, namespace: str,
                           obj: dict[str, Any], admitted: bool, timeout: float = 30) -> None:
    """Until a dry run of `obj` is admitted (or refused): the API server validates with
    the CRD it just replaced for a moment after it serves the new one, so the first
    create after install_crd can meet the other CRD's rules."""
    deadline = time.monotonic() + timeout
    while _admitted_dry_run(custom, namespace, obj) != admitted:
        assert time.monotonic() < deadline, \
            f"the CRD's rules did not {'admit' if admitted else 'refuse'} it in {timeout}s"
        time.sleep(0.2)


def refused(call: Callable[[], Any]) -> tuple[list[str], str]:
    with pytest.raises(ApiException) as info:
        call()
    status, causes, message = rejection(info.value)
    assert status == 422, message
    return causes, message


def test_good_job_is_accepted_and_defaulted(custom: client.CustomObjectsApi, namespace: str):
    stored = create(custom, namespace, good_job())
    spec = stored["spec"]
    assert spec["backend"] == "pathways"
    assert spec["suspend"] is False
    # No progress deadline stored: the operator learns it from the job's own steps.
    # No restart count stored: each is derived per window (elastic_api.budgets); nor
    # onSlowSlice: Replace where the operator replaces slices.
    assert spec["elastic"] == {"timeoutSeconds": 300, "onStall": "Recover"}
    assert "maxRestarts" not in spec
    # No period given: none stored (the trainer chooses), within the default budget.
    assert "periodSteps" not in spec["checkpoint"]
    assert spec["snapshot"] == {}
    assert spec["overheadBudgetPercent"] == 2.0
    assert spec["pathways"]["version"] == DEFAULT_PATHWAYS_VERSION  # a dated build
    # The API server's defaults and the models' defaults agree.
    assert validate_job(stored).spec.model_dump() == validate_job(good_job()).spec.model_dump()


def _mutate(path: str, value: Any) -> dict[str, Any]:
    obj = good_job()
    node = obj
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is _DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return obj


_DELETE = object()


def _mutated(*changes: tuple[str, Any]) -> dict[str, Any]:
    obj = good_job()
    for path, value in changes:
        *parents, leaf = path.split(".")
        node = obj
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return obj


MAXTEXT = ["python3", "-m", "maxtext.trainers.pre_train.train"]
PROGRESS = {"image": "registry/elastic-trainer:0.1.0"}
CHECKPOINT = "gs://bucket/ckpt"


def _checkpoint_message(template: str, field: str, key: str) -> str:
    return (template.replace("{field}", field).replace("{key}", key)
            .replace("{env}", maxtext.env_key(key)))

# (test id, the bad object, the exact message the API server and validate_job both give)
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("topology", _mutate("spec.tpu.topology", "2x2x2"),
     "spec.tpu.topology: '2x2x2' is not a v5e topology; use one of "
     "1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"),
    ("topology-v5p", _mutate("spec.tpu", {"type": "v5p", "topology": "4x4", "numSlices": 1}),
     "spec.tpu.topology: '4x4' is not a v5p topology; use one of 2x2x1, 2x2x2, 2x2x4, "
     "2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8, 8x8x16, 8x16x16, 16x16x16, 16x16x24, or AxBxC "
     "with each a multiple of 4 up to 256, A <= B <= C, of at most 140 cubes of 4x4x4 "
     "(A/4 x B/4 x C/4)"),
    # The 3D rule in CEL (issue 81): past v5p's 140 cubes, out of order, not whole cubes.
    *((f"topology-v5p-{topology}",
       _mutate("spec.tpu", {"type": "v5p", "topology": topology, "numSlices": 1}),
       TOPOLOGY.format(topology=topology, type="v5p", valid=CATALOG["v5p"].describe()))
      for topology in ("16x24x24", "8x4x4", "4x4x6", "4x4x260")),
    ("topology-tpu7x-past-the-pod",
     _mutate("spec.tpu", {"type": "tpu7x", "topology": "24x24x24", "numSlices": 1}),
     TOPOLOGY.format(topology="24x24x24", type="tpu7x", valid=CATALOG["tpu7x"].describe())),
    ("num-slices-cap", _mutate("spec.tpu", {"type": "v5e", "topology": "16x16",
                                            "numSlices": MAX_SLICES + 1}), NUM_SLICES),
    ("min-slices", _mutate("spec.elastic", {"minSlices": 4}),
     "spec.elastic.minSlices: must not be more than spec.tpu.numSlices; set minSlices to at "
     "most numSlices (numSlices: pause and resume), or leave it unset for the default"),
    ("elastic-slices", _mutate("spec.elastic", {"elasticSlices": 5}),
     "spec.elastic.elasticSlices: must not be more than spec.tpu.numSlices; set it to at most "
     "numSlices (it counts the slices that may be missing), or leave it unset"),
    ("name-too-long", _mutate("metadata.name", "a-name-of-23-characters"),
     "metadata.name: 'a-name-of-23-characters' is longer than 22 characters; use at most 22, "
     "so that the JobSet coordinator label '<name>-pathways-head-0-0.<name>' fits in 63 "
     "characters"),
    ("name-dots", _mutate("metadata.name", "train.v1"),
     "metadata.name: 'train.v1' is not a DNS-1035 label; use lowercase letters, digits and '-', "
     "starting with a letter and ending with a letter or digit (JobSet derives Job, Service "
     "and host names from it)"),
    ("no-scratch", _mutate("spec.pathways", _DELETE),
     "spec.pathways.gcsScratch: required when spec.backend is pathways; set it to a gs:// "
     "location for Pathways' scratch files (or use backend simulated)"),
    ("max-restarts-int32", _mutate("spec.maxRestarts", INT32_MAX + 1),
     "spec.maxRestarts: must be at most 2147483647 (JobSet's failurePolicy.maxRestarts is an "
     "int32); set it lower"),
    ("max-slice-restarts", _mutate("spec.elastic", {"maxSliceRestarts": MAX_SLICE_RESTARTS + 1}),
     "spec.elastic.maxSliceRestarts: must be at most 33554431, so that the worker Jobs' "
     "backoffLimit (VMs per slice x maxSliceRestarts) fits an int32 for every slice of up "
     "to 64 VMs (a larger slice has a lower bound); set it lower"),
    ("windowed-count", _mutate("spec.elastic", {"restartWindowSeconds": 3600,
                                                 "maxRetries": 64}),
     "spec.elastic.maxRetries: at most 63 while spec.elastic.restartWindowSeconds is set (the "
     "status keeps the time of each restart a window counts); set it lower, or leave "
     "restartWindowSeconds unset to count over the whole run"),
    ("windowed-jobset-count", _mutated(("spec.elastic", {"restartWindowSeconds": 600}),
                                       ("spec.maxRestarts", 100)),
     "spec.maxRestarts: at most 63 while spec.elastic.restartWindowSeconds is set (the "
     "status keeps the time of each restart a window counts); set it lower, or leave "
     "restartWindowSeconds unset to count over the whole run"),
    ("max-slice-restarts-v5p-largest", _mutated(
        ("spec.tpu", {"type": "v5p", "topology": "16x16x24", "numSlices": 1}),
        ("spec.elastic", {"maxSliceRestarts": 1398102})),
     "spec.elastic.maxSliceRestarts: must be at most 1398101 for a v5p 16x16x24 slice (1536 "
     "VMs), so that the worker Jobs' backoffLimit (VMs per slice x maxSliceRestarts) fits "
     "an int32; set it lower"),
    ("tas-cube", _mutate("spec.tpu", {"type": "v5p", "topology": "8x8x8", "numSlices": 1,
                                      "topologyAware": {"sliceLevel": CUBE_LABEL}}),
     TAS_CUBE.format(type="v5p", topology="8x8x8")),
    ("tas-super-slice", _mutate("spec.tpu", {"type": "tpu7x", "topology": "4x4x20",
                                             "numSlices": 1,
                                             "topologyAware": {"sliceLevel": CUBE_LABEL}}),
     TAS_SUPER_SLICE.format(type="tpu7x", topology="4x4x20")),
    ("service-account", _mutate("spec.serviceAccountName", "Bad SA"),
     "spec.serviceAccountName: not a DNS-1123 subdomain, so no ServiceAccount can have this "
     "name; use lowercase letters, digits, '-' and '.', starting and ending with a letter or "
     "digit, or leave it unset for the namespace's default account"),
    ("steps-required", _mutate("spec.trainer", {"image": "t:1"}), STEPS_REQUIRED),
    ("command-with-steps", _mutate("spec.trainer", {"image": "t:1", "command": ["python3"],
                                                   "steps": 10}),
     BUNDLED_FIELD.format(field="steps")),
    ("command-with-model", _mutate("spec.trainer", {"image": "t:1", "command": ["python3"],
                                                   "model": "tiny"}),
     BUNDLED_FIELD.format(field="model")),
    ("command-empty-string", _mutate("spec.trainer", {"image": "t:1",
                                                     "command": ["python3", ""]}),
     COMMAND_EMPTY),
    ("command-empty", _mutate("spec.trainer", {"image": "t:1", "command": []}), COMMAND_EMPTY),
    ("volume-two-sources", _mutate("spec.trainer", {
        "image": "t:1", "steps": 1,
        "volumes": [{"name": "v", "emptyDir": {}, "persistentVolumeClaim": {"claimName": "c"}}]}),
     VOLUME_SOURCE),
    ("multikueue-local-checkpoint", _mutated(
        ("spec.managedBy", "kueue.x-k8s.io/multikueue"),
        ("spec.checkpoint", {"directory": "/ckpt"})), MULTIKUEUE_CHECKPOINT_DIRECTORY),
    ("multikueue-pvc", _mutated(
        ("spec.managedBy", "kueue.x-k8s.io/multikueue"),
        ("spec.trainer", {"image": "t:1", "steps": 1, "volumes": [
            {"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]})), MULTIKUEUE_VOLUME),
    ("volume-shared-tmp", _mutate("spec.trainer", {
        "image": "t:1", "steps": 1, "volumes": [{"name": "shared-tmp", "emptyDir": {}}]}),
     VOLUME_NAME),
    ("mount-no-volume", _mutate("spec.trainer", {
        "image": "t:1", "steps": 1, "volumeMounts": [{"name": "data", "mountPath": "/data"}]}),
     VOLUME_MOUNT),
    ("spares", _mutate("spec.tpu", {"type": "v5e", "topology": "4x4", "numSlices": 3,
                                    "spares": 4}),
     "spec.tpu.spares: must not be more than spec.tpu.numSlices (a spare node pool stands in "
     "for one failed slice at a time); set it to at most numSlices"),
    ("worker-toleration", _mutate("spec.recovery", {"nodeNotReadySeconds": 60,
                                                    "workerNodeTolerationSeconds": 30}),
     "spec.recovery.workerNodeTolerationSeconds: must be at least "
     "spec.recovery.nodeNotReadySeconds, or the Kubernetes eviction of a worker on a NotReady "
     "node comes before the operator's replacement; raise it or lower nodeNotReadySeconds"),
    ("hardware-without-replacement", _mutate("spec.recovery", {"replaceSlices": False,
                                                               "hardwareExitCodes": [42]}),
     HARDWARE_NEEDS_REPLACEMENT),
    ("hardware-exit-codes-twice", _mutate("spec.recovery", {"hardwareExitCodes": [42, 7, 42]}),
     HARDWARE_EXIT_CODES_TWICE),
    ("hardware-reasons-twice", _mutate("spec.recovery", {"hardwareReasons": ["A", "A"]}),
     HARDWARE_REASONS_TWICE),
    ("checkpoint-timeout", _mutate("spec.maintenance", {"leadSeconds": 120,
                                                        "checkpointTimeoutSeconds": 300}),
     "spec.maintenance.checkpointTimeoutSeconds: must be less than "
     "spec.maintenance.leadSeconds, or the maintenance starts before the checkpoint request "
     "times out; lower it or raise leadSeconds"),
    ("budget-zero", _mutate("spec.overheadBudgetPercent", 0), OVERHEAD_BUDGET),
    ("budget-above-50", _mutate("spec.overheadBudgetPercent", 50.5), OVERHEAD_BUDGET),
    ("budget-negative", _mutate("spec.overheadBudgetPercent", -2), OVERHEAD_BUDGET),
    ("snapshot-period-beyond-the-run", _mutate("spec.snapshot", {"periodSteps": 101}),
     SNAPSHOT_PERIOD_RUN),
    ("placement-any-pathways", _mutate("spec.placement", "Any"),
     "spec.placement: Any is for backend simulated only (Pathways workers need TPU nodes); "
     "remove it or set it to TPU"),
    ("tas-level-not-a-label", _mutate("spec.tpu", {
        "type": "v5e", "topology": "4x4", "numSlices": 3,
        "topologyAware": {"sliceLevel": "Node Pool"}}),
     TAS_LEVEL_FORMAT.replace("{field}", "sliceLevel")),
    ("tas-job-level-prefix-too-long", _mutate("spec.tpu", {
        "type": "v5e", "topology": "4x4", "numSlices": 3,
        "topologyAware": {"sliceLevel": "cloud.google.com/gke-nodepool",
                          "jobLevel": "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "."
                          + "d" * 63 + "/block"}}),
     TAS_LEVEL_FORMAT.replace("{field}", "jobLevel")),
    ("tas-same-level", _mutate("spec.tpu", {
        "type": "v5e", "topology": "4x4", "numSlices": 3,
        "topologyAware": {"sliceLevel": "cloud.google.com/gke-nodepool",
                          "jobLevel": "cloud.google.com/gke-nodepool"}}),
     TAS_SAME_LEVEL),
    ("tas-hostname-multi-host", _mutate("spec.tpu", {
        "type": "v5e", "topology": "4x4", "numSlices": 3,
        "topologyAware": {"sliceLevel": "kubernetes.io/hostname"}}),
     TAS_HOSTNAME.format(type="v5e", topology="4x4")),
    ("tas-placement-any", _mutated(
        ("spec.backend", "simulated"), ("spec.placement", "Any"),
        ("spec.tpu", {"type": "v5e", "topology": "4x4", "numSlices": 3,
                      "topologyAware": {"sliceLevel": "cloud.google.com/gke-nodepool"}})),
     TAS_PLACEMENT),
    ("progress-bundled", _mutate("spec.trainer", {"image": "t:1", "steps": 1,
                                                 "progress": PROGRESS}),
     PROGRESS_NEEDS_COMMAND),
    ("progress-no-metrics-file", _mutate("spec.trainer", {
        "image": "t:1", "command": ["python3", "train.py"], "progress": PROGRESS}),
     PROGRESS_METRICS_FILE_REQUIRED),
    ("progress-metrics-file-path", _mutate("spec.trainer", {
        "image": "t:1", "command": MAXTEXT,
        "progress": {**PROGRESS, "metricsFile": "/tmp/../etc/m"}}),
     PROGRESS_METRICS_FILE_PATH),
    ("progress-maxtext-arg", _mutate("spec.trainer", {
        "image": "t:1", "command": MAXTEXT, "args": ["metrics_file=/data/m.jsonl"],
        "progress": PROGRESS}),
     MAXTEXT_METRICS_FILE_ARG),
    ("progress-maxtext-arg-differs", _mutate("spec.trainer", {
        "image": "t:1", "command": ["python3"],
        "args": ["-m", "MaxText.train", "metrics_file=/tmp/a"],
        "progress": {**PROGRESS, "metricsFile": "/tmp/b"}}),
     MAXTEXT_METRICS_FILE_ARG),
    ("keep-unread", _mutated(("spec.checkpoint", {"directory": CHECKPOINT, "keep": 2}),
                             ("spec.trainer", {"image": "t:1", "command": ["python3", "t.py"]})),
     _checkpoint_message(CHECKPOINT_FIELD_UNREAD, "keep", maxtext.KEEP_KEY)),
    ("async-unread", _mutated(("spec.checkpoint", {"directory": CHECKPOINT, "async": False}),
                              ("spec.trainer", {"image": "t:1", "command": ["python3", "t.py"]})),
     _checkpoint_message(CHECKPOINT_FIELD_UNREAD, "async", maxtext.ASYNC_KEY)),
    ("async-twice", _mutated(("spec.checkpoint", {"directory": CHECKPOINT, "async": True}),
                             ("spec.trainer", {"image": "t:1", "command": MAXTEXT,
                                               "args": ["async_checkpointing=true"]})),
     _checkpoint_message(CHECKPOINT_FIELD_TWICE, "async", maxtext.ASYNC_KEY)),
    ("keep-twice-env", _mutated(
        ("spec.checkpoint", {"directory": CHECKPOINT, "keep": 2}),
        ("spec.trainer", {"image": "t:1", "command": MAXTEXT,
                          "env": [{"name": "M_MAX_NUM_CHECKPOINTS_TO_KEEP", "value": "5"}]})),
     _checkpoint_message(CHECKPOINT_FIELD_TWICE, "keep", maxtext.KEEP_KEY)),
    ("snapshot-maxtext", _mutated(("spec.snapshot", {"periodSteps": 10}),
                                  ("spec.trainer", {"image": "t:1", "command": MAXTEXT})),
     SNAPSHOT_MAXTEXT),
    # What the bundled trainer would refuse at start (tests/unit/test_examples_start.py).
    ("data-url", _mutate("spec.trainer.data", "gs://bucket/datasets/c4"), DATA_URL),
    ("model-unknown", _mutate("spec.trainer.model", "qwen3-32b"), MODEL_UNKNOWN),
    # Pathways images that move in the registry (elastic_api/images.py).
    ("version-latest", _mutate("spec.pathways.version", "latest"), PATHWAYS_VERSION_MOVES),
    ("server-untagged", _mutate("spec.pathways.images", {
        "server": "registry.local:5000/pathways/server"}),
     IMAGE_MOVES.replace("{field}", "images.server")),
    ("proxy-latest-bad-digest", _mutate("spec.pathways.images", {
        "proxy": "registry.local:5000/pathways/proxy_server:latest@sha256:abc"}),
     IMAGE_MOVES.replace("{field}", "images.proxy")),
    ("sidecar-latest", _mutate("spec.pathways.colocatedPython", {"image": "sidecar:latest"}),
     IMAGE_MOVES.replace("{field}", "colocatedPython.image")),
    ("sidecar-simulated", _mutated(("spec.backend", "simulated"),
                                   ("spec.pathways.colocatedPython", {"image": "sidecar:1"})),
     COLOCATED_NEEDS_PATHWAYS),
    ("colocated-without-sidecar", _mutate("spec.trainer", {
        "image": "t:1", "command": MAXTEXT, "args": ["colocated_python_checkpointing= True"]}),
     COLOCATED_SIDECAR_REQUIRED),
    ("colocated-env-without-sidecar", _mutate("spec.trainer", {
        "image": "t:1", "command": MAXTEXT,
        "env": [{"name": "M_COLOCATED_PYTHON_CHECKPOINTING", "value": "YES"}]}),
     COLOCATED_SIDECAR_REQUIRED),
]


@pytest.mark.parametrize(("obj", "expected"), [(o, m) for _, o, m in BAD],
                         ids=[i for i, _, _ in BAD])
def test_bad_job_is_refused_with_the_same_message(custom: client.CustomObjectsApi,
                                                   namespace: str, obj: dict[str, Any],
                                                   expected: str):
    causes, _ = refused(lambda: create(custom, namespace, copy.deepcopy(obj)))
    assert cause_with(causes, expected), f"{expected!r} not among {causes!r}"
    with pytest.raises(ValueError) as info:
        validate_job(copy.deepcopy(obj))
    assert expected in str(info.value).splitlines()


@pytest.mark.parametrize("budget", [50, 0.5, 2])
def test_a_budget_within_the_range_is_accepted_as_an_integer_or_not(
        custom: client.CustomObjectsApi, namespace: str, budget: float):
    obj = _mutate("spec.overheadBudgetPercent", budget)
    stored = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj,
                                                    dry_run="All")
    assert stored["spec"]["overheadBudgetPercent"] == budget
    assert validate_job(obj).spec.overhead_budget_percent == budget


def test_a_job_that_gives_its_periods_keeps_them(custom: client.CustomObjectsApi,
                                                 namespace: str):
    obj = good_job("periods")
    obj["spec"]["checkpoint"]["periodSteps"] = 100  # as jobs stored before this release
    obj["spec"]["snapshot"] = {"periodSteps": 0}
    spec = create(custom, namespace, obj)["spec"]
    assert spec["checkpoint"]["periodSteps"] == 100 and spec["snapshot"] == {"periodSteps": 0}


def test_num_slices_zero_is_refused(custom: client.CustomObjectsApi, namespace: str):
    obj = _mutate("spec.tpu", {"type": "v5e", "topology": "4x4", "numSlices": 0})
    causes, _ = refused(lambda: create(custom, namespace, obj))
    expected = "spec.tpu.numSlices in body should be greater than or equal to 1"
    assert cause_with(causes, expected), causes
    with pytest.raises(ValueError, match=r"^spec\.tpu\.numSlices: "):
        validate_job(obj)


def test_a_restart_window_too_short_to_stop_a_crash_loop_is_refused(
        custom: client.CustomObjectsApi, namespace: str):
    obj = _mutate("spec.elastic", {"restartWindowSeconds": 60})
    causes, _ = refused(lambda: create(custom, namespace, obj))
    expected = ("spec.elastic.restartWindowSeconds in body should be greater than or equal "
                "to 600")
    assert cause_with(causes, expected), causes
    with pytest.raises(ValueError, match=r"^spec\.elastic\.restartWindowSeconds: "):
        validate_job(obj)


def test_a_quantity_that_is_not_one_is_refused(custom: client.CustomObjectsApi, namespace: str):
    obj = _mutate("spec.trainer.resources", {"limits": {"cpu": "lots"}})
    causes, _ = refused(lambda: create(custom, namespace, obj))
    # An OpenAPI pattern (no CEL rule: see QUANTITY_PATTERN), so the API server's own words.
    assert any("spec.trainer.resources.limits.cpu in body should match '^" in c
               for c in causes), causes
    with pytest.raises(ValueError, match=r"^spec\.trainer\.resources\.limits\.cpu: not a "
                                         r"Kubernetes quantity; "):
        validate_job(obj)


# Strings at the edges of the quantity pattern; ints are not held to it.
QUANTITY_EDGES: list[Any] = [
    "1", "+1", "-1", ".5", "1.", "1E", "1e3", "1E-9", "2e+18", "1e99", "0.5Gi", "7n", -5,
    "lots", "", " 1", "1\n", "+", "-", ".", "1e", "1e1.5", "1e100", "1ki", "1KiB", "\u0661",
]


def test_api_server_and_validate_job_agree_on_quantities(custom: client.CustomObjectsApi,
                                                         namespace: str):
    disagreements = []
    for value in QUANTITY_EDGES:
        obj = _mutate("spec.trainer.resources", {"requests": {"cpu": value}})
        try:
            validate_job(copy.deepcopy(obj))
            python_admits = True
        except ValueError:
            python_admits = False
        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj,
                                                   dry_run="All")
            api_admits = True
        except ApiException as exc:
            assert exc.status == 422, exc.body
            api_admits = False
        if python_admits != api_admits:
            disagreements.append(f"{value!r}: API server {api_admits}, validate_job "
                                 f"{python_admits}")
    assert not disagreements, disagreements


def test_simulated_job_needs_no_gcs(custom: client.CustomObjectsApi, namespace: str):
    obj = _mutate("spec.checkpoint", {"directory": "/tmp/ckpt"})
    obj["spec"]["backend"] = "simulated"
    del obj["spec"]["pathways"]
    create(custom, namespace, obj)


def test_spec_is_immutable_except_suspend_and_multi_cluster(custom: client.CustomObjectsApi,
                                                            namespace: str):
    create(custom, namespace, good_job("immutable"))

    def patch(spec: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "immutable", {"spec": spec})
        return result

    def immutable(field: str) -> str:
        return (f"spec.{field} is immutable: only spec.suspend and spec.multiCluster may "
                "change after creation; delete and recreate the job to change it")

    causes, _ = refused(lambda: patch({"tpu": {"numSlices": 2}}))
    assert cause_with(causes, immutable("tpu")), causes
    causes, _ = refused(lambda: patch({"trainer": {"steps": 200}}))
    assert cause_with(causes, immutable("trainer")), causes
    # Adding an optional field is a change too.
    causes, _ = refused(lambda: patch({"priorityClassName": "high"}))
    assert cause_with(causes, immutable("priorityClassName")), causes
    # Handing a job to MultiKueue after creation (or taking it back) is refused.
    causes, _ = refused(lambda: patch({"managedBy": "kueue.x-k8s.io/multikueue"}))
    assert cause_with(causes, immutable("managedBy")), causes

    assert patch({"suspend": True})["spec"]["suspend"] is True
    assert patch({"suspend": False})["spec"]["suspend"] is False
    # What the manager may do when the job's worker cluster is lost: mutable, defaulted.
    assert patch({"multiCluster": {}})["spec"]["multiCluster"] == {"redispatch": "Never"}
    assert patch({"multiCluster": {"redispatch": "OnWorkerLost"}})["spec"]["multiCluster"] \
        == {"redispatch": "OnWorkerLost"}


def test_status_subresource_takes_the_trainer_report(custom: client.CustomObjectsApi,
                                                      namespace: str):
    create(custom, namespace, good_job("status"))
    report = {"observedAt": "2026-01-01T00:00:00Z", "state": "Training", "step": 42,
              "lastCommittedCheckpointStep": 40}
    patched = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "status",
        {"status": {"phase": "Running", "training": report}})
    assert patched["status"]["training"]["step"] == 42
    assert patched["status"]["phase"] == "Running"
    # The spec did not move through the status subresource.
    assert patched["spec"]["tpu"]["numSlices"] == 3


def test_a_queue_label_that_is_no_label_value_is_refused(custom: client.CustomObjectsApi,
                                                         namespace: str):
    """The API server refuses any label value that is not one, naming metadata.labels; a
    valid label value that is no LocalQueue name is admitted (CEL rules cannot read
    labels), and validate_job refuses it for `etj render` and the operator."""
    obj = good_job("queued")
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team a/queue"}
    _, message = refused(lambda: create(custom, namespace, obj))
    assert "metadata.labels" in message and "a valid label must be" in message, message
    with pytest.raises(ValueError, match=r"^metadata\.labels\[kueue\.x-k8s\.io/queue-name\]: "
                                         r"'team a/queue' is not a valid LocalQueue name"):
        validate_job(copy.deepcopy(obj))
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "Team_A"}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj,
                                           dry_run="All")
    with pytest.raises(ValueError, match=r"'Team_A' is not a valid LocalQueue name"):
        validate_job(copy.deepcopy(obj))


@pytest.mark.parametrize("example", sorted(p.stem for p in (REPO / "examples").glob("*.yaml")))
def test_examples_are_ready_to_apply(custom: client.CustomObjectsApi, namespace: str,
                                     example: str):
    obj = yaml.safe_load((REPO / "examples" / f"{example}.yaml").read_text())
    stored = create(custom, namespace, obj)
    assert stored["metadata"]["name"] == obj["metadata"]["name"]


BUNDLED_VALUES = {"model": "tiny", "steps": 10, "batch": 8, "seed": 0, "data": "synthetic"}
# Trainer volumes and mounts, each valid for the schema (only the CEL rules may refuse).
VOLUME_CASES: dict[str, dict[str, Any]] = {
    "none": {},
    "gcsfuse": {"volumes": [{"name": "data", "csi": {
        "driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"bucketName": "b"}}}],
        "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}]},
    "no-source": {"volumes": [{"name": "data"}]},
    "two-sources": {"volumes": [{"name": "data", "emptyDir": {},
                                 "persistentVolumeClaim": {"claimName": "c"}}]},
    "bad-name": {"volumes": [{"name": "Data", "emptyDir": {}}]},
    "same-name": {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]},
    "mount-tmp": {"volumes": [{"name": "a", "emptyDir": {}}],
                  "volumeMounts": [{"name": "a", "mountPath": "/tmp"}]},
    "mount-nothing": {"volumeMounts": [{"name": "a", "mountPath": "/a"}]},
}


def trainer_spec(command: list[str] | None, bundled: set[str],
                 volumes: dict[str, Any]) -> dict[str, Any]:
    trainer: dict[str, Any] = {"image": "trainer:1", **copy.deepcopy(volumes)}
    if command is not None:
        trainer["command"] = command
    trainer.update({f: BUNDLED_VALUES[f] for f in bundled})
    return trainer


def _cel_messages(causes: list[str]) -> set[str]:
    """The messages of the CEL rules (all on objects) among the causes. Up to Kubernetes
    1.35 such a cause reads `Invalid value: "object": <message>`; from 1.36 the value of an
    object is omitted: `Invalid value: <message>` (apiextensions-apiserver
    schema/cel/validation.go, OmitValueType). A schema error always shows the value it
    refused (quoted, or a number)."""
    prefix, old_value = "Invalid value: ", '"object": '
    out = set()
    for cause in causes:
        if not cause.startswith(prefix):
            continue
        rest = cause[len(prefix):]
        if rest.startswith(old_value):
            out.add(rest[len(old_value):])
        elif rest[:1].isalpha():
            out.add(rest)
    return out


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["train", "x" * 22, "x" * 23, "train.v1", "1train", "a-b-c"]),
    tpu_type=st.sampled_from(sorted(CATALOG)),
    topology=st.sampled_from(sorted({t for f in CATALOG.values() for t in f.topologies})),
    num_slices=st.integers(1, 4) | st.sampled_from([MAX_SLICES, MAX_SLICES + 1]),
    min_slices=st.none() | st.integers(1, 6),
    elastic_slices=st.none() | st.integers(0, 6),
    backend=st.sampled_from(["pathways", "simulated"]),
    scratch=st.booleans(),
    max_restarts=st.sampled_from([0, INT32_MAX, INT32_MAX + 1]),
    max_slice_restarts=st.sampled_from([5, 932067, 932068, MAX_SLICE_RESTARTS,
                                        MAX_SLICE_RESTARTS + 1]),
    service_account=st.none() | st.sampled_from(["default", "a.b-c", "Bad SA", "", "a..b"]),
    trainer=st.builds(
        lambda command, bundled, volumes: {"command": command, "bundled": bundled,
                                           "volumes": volumes},
        st.none() | st.lists(st.sampled_from(["python3", "-m", "", "x"]), max_size=3),
        st.sets(st.sampled_from(BUNDLED_TRAINER_FIELDS)),
        st.sampled_from(list(VOLUME_CASES))),
)
def test_api_server_and_validate_job_agree(custom: client.CustomObjectsApi, namespace: str,
                                           name: str, tpu_type: str, topology: str,
                                           num_slices: int, min_slices: int | None,
                                           elastic_slices: int | None, backend: str,
                                           scratch: bool, max_restarts: int,
                                           max_slice_restarts: int,
                                           service_account: str | None,
                                           trainer: dict[str, Any]):
    obj = good_job(name)
    spec = obj["spec"]
    spec["backend"] = backend
    spec["tpu"] = {"type": tpu_type, "topology": topology, "numSlices": num_slices}
    spec["elastic"] = {k: v for k, v in (("minSlices", min_slices),
                                         ("elasticSlices", elastic_slices)) if v is not None}
    spec["elastic"]["maxSliceRestarts"] = max_slice_restarts
    spec["maxRestarts"] = max_restarts
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    if not scratch:
        del spec["pathways"]
    spec["trainer"] = trainer_spec(trainer["command"], trainer["bundled"],
                                   VOLUME_CASES[trainer["volumes"]])
    try:
        validate_job(copy.deepcopy(obj))
        python_messages: set[str] = set()
    except ValueError as exc:
        python_messages = set(str(exc).splitlines())
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj,
                                               dry_run="All")
        api_messages: set[str] = set()
    except ApiException as exc:
        status, causes, message = rejection(exc)
        assert status == 422, message
        api_messages = _cel_messages(causes)
        assert api_messages, message
    assert api_messages == python_messages


def _crd_before_the_maxtext_rules() -> dict[str, Any]:
    """The CRD as the release before the MaxText rules had it, where it matters here:
    checkpoint.keep and checkpoint.async defaulted (3, true), no rule about them."""
    crd = build_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    checkpoint = spec["properties"]["checkpoint"]["properties"]
    checkpoint["keep"]["default"], checkpoint["async"]["default"] = 3, True
    spec["x-kubernetes-validations"] = [r for r in spec["x-kubernetes-validations"]
                                        if not r.get("optionalOldSelf")]
    return crd


def test_a_job_stored_with_the_old_checkpoint_defaults_stays_writable(
        custom: client.CustomObjectsApi, namespace: str):
    """Upgrading the CRD must not reject stored jobs: a job of another program, stored
    with the old defaults keep 3 and async true, can still be suspended and its status
    written; only a new job with those fields is refused."""
    api = custom.api_client
    obj = _mutate("spec.trainer", {"image": "t:1", "command": ["python3", "train.py"]})
    try:
        install_crd(api, crd=_crd_before_the_maxtext_rules())
        _until_the_rules_apply(custom, namespace, obj, admitted=True)
        stored = create(custom, namespace, copy.deepcopy(obj))
        assert stored["spec"]["checkpoint"]["keep"] == 3
        assert stored["spec"]["checkpoint"]["async"] is True
    finally:
        install_crd(api)
    name = obj["metadata"]["name"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                          {"spec": {"suspend": True}})
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": {"phase": "Suspended"}})
    again = copy.deepcopy(stored["spec"])
    fresh = {**obj, "metadata": {"name": "train-again"}, "spec": again}
    _until_the_rules_apply(custom, namespace, fresh, admitted=False)
    causes, _ = refused(lambda: create(custom, namespace, fresh))
    expected = _checkpoint_message(CHECKPOINT_FIELD_UNREAD, "keep", maxtext.KEEP_KEY)
    assert cause_with(causes, expected), causes


def test_a_job_stored_with_the_old_checkpoint_period_stays_writable(
        custom: client.CustomObjectsApi, namespace: str):
    """A bundled-trainer job stored while periodSteps defaulted to 100, with fewer steps,
    can still be suspended; only a new job whose checkpoint period exceeds its run is
    refused (the rule applies at creation: optionalOldSelf)."""
    api = custom.api_client
    obj = good_job("old-period")
    obj["spec"]["checkpoint"]["periodSteps"] = 100
    obj["spec"]["trainer"]["steps"] = 50
    try:
        install_crd(api, crd=_crd_before_the_maxtext_rules())
        _until_the_rules_apply(custom, namespace, obj, admitted=True)
        stored = create(custom, namespace, copy.deepcopy(obj))
    finally:
        install_crd(api)
    name = obj["metadata"]["name"]
    patched = custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                    {"spec": {"suspend": True}})
    assert patched["spec"]["suspend"] is True
    fresh = {**obj, "metadata": {"name": "old-period-again"},
             "spec": copy.deepcopy(stored["spec"])}
    _until_the_rules_apply(custom, namespace, fresh, admitted=False)
    causes, _ = refused(lambda: create(custom, namespace, fresh))
    assert cause_with(causes, CHECKPOINT_PERIOD_RUN), causes
    with pytest.raises(ValueError) as info:
        validate_job(copy.deepcopy(fresh))
    assert CHECKPOINT_PERIOD_RUN in str(info.value).splitlines()


def _without_create_only_rules(node: Any) -> None:
    """Drop every rule that applies at creation only (optionalOldSelf), at any depth."""
    if isinstance(node, dict):
        rules = node.get("x-kubernetes-validations")
        if rules is not None:
            node["x-kubernetes-validations"] = [r for r in rules
                                                if not r.get("optionalOldSelf")]
        for value in node.values():
            _without_create_only_rules(value)
    elif isinstance(node, list):
        for value in node:
            _without_create_only_rules(value)


def test_a_job_stored_with_the_old_latest_default_and_a_gs_data_url_stays_writable(
        custom: client.CustomObjectsApi, namespace: str):
    """A job stored while spec.pathways.version defaulted to latest (and data could be a
    URL) can still be suspended and its status written: the rules that refuse them apply
    at creation only. A new job like it is refused, naming both fields."""
    api = custom.api_client
    obj = good_job("old-latest")
    obj["spec"]["pathways"]["version"] = "latest"
    obj["spec"]["trainer"]["data"] = "gs://bucket/datasets/c4"
    before = _crd_before_the_maxtext_rules()
    _without_create_only_rules(before)
    try:
        install_crd(api, crd=before)
        _until_the_rules_apply(custom, namespace, obj, admitted=True)
        stored = create(custom, namespace, copy.deepcopy(obj))
    finally:
        install_crd(api)
    name = obj["metadata"]["name"]
    patched = custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                    {"spec": {"suspend": True}})
    assert patched["spec"]["suspend"] is True
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": {"phase": "Suspended"}})
    fresh = {**obj, "metadata": {"name": "new-latest"}, "spec": copy.deepcopy(stored["spec"])}
    _until_the_rules_apply(custom, namespace, fresh, admitted=False)
    causes, _ = refused(lambda: create(custom, namespace, fresh))
    assert cause_with(causes, PATHWAYS_VERSION_MOVES), causes
    assert cause_with(causes, DATA_URL), causes
