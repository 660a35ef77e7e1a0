"""Rendering any trainer (MaxText first) and Kueue's labels: the user's command runs
unchanged with the Pathways environment, the security context stays hardened where the
user does not relax it, and the job's Kueue labels reach the JobSet."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_api.models import ElasticTrainingJob
from elastic_api.validation import validate_job
from elastic_operator.render import render, render_jobset, trainer_command
from elastic_trainer.train_cli import add_arguments

REPO = Path(__file__).resolve().parents[2]
HARDENED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
MAXTEXT_ARGS = [
    "run_name=maxtext-article", "base_output_directory=gs://my-bucket/maxtext",
    "model_name=qwen3-0.6b", "tokenizer_path=src/maxtext/assets/tokenizers/qwen3-tokenizer",
    "dataset_type=grain", "grain_file_type=arrayrecord",
    "grain_train_files=/data/glaive/*.array_record", "grain_use_elastic_iterator=true",
    "packing=false", "per_device_batch_size=1", "steps=10000", "enable_checkpointing=true",
    "checkpoint_period=100", "enable_single_controller=True",
    "elastic_enabled=True", "elastic_timeout_seconds=300", "elastic_max_retries=10",
]
# What the renderer adds for MaxText's trainer: the progress sidecar's metrics file, and
# checkpoint.keep and checkpoint.async as MaxText's flags.
MAXTEXT_RENDERED_ARGS = ["metrics_file=/tmp/etj-metrics.jsonl", "max_num_checkpoints_to_keep=3",
                         "async_checkpointing=True"]


def job(trainer: dict[str, Any], *, labels: dict[str, str] | None = None,
        **spec: Any) -> ElasticTrainingJob:
    body: dict[str, Any] = {
        "tpu": {"type": "v5e", "topology": "4x4", "numSlices": 3},
        "checkpoint": {"directory": "gs://b/ckpt"},
        "trainer": {"image": "img:1", **trainer},
        "pathways": {"gcsScratch": "gs://b/scratch"},
        **spec,
    }
    return validate_job({
        "apiVersion": "elastic.pathways.dev/v1alpha1", "kind": "ElasticTrainingJob",
        "metadata": {"name": "train", "namespace": "ml", "labels": labels or {}}, "spec": body,
    })


def head_pod(jobset: dict[str, Any]) -> dict[str, Any]:
    (head,) = [r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "pathways-head"]
    template: dict[str, Any] = head["template"]["spec"]["template"]
    return template


def pods(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["template"]["spec"]["template"]["spec"] for r in jobset["spec"]["replicatedJobs"]]


def main_container(jobset: dict[str, Any]) -> dict[str, Any]:
    (main,) = head_pod(jobset)["spec"]["containers"]
    assert main["name"] == "main"
    return dict(main)


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_maxtext_example_runs_the_command_unchanged_with_the_pathways_env():
    example = validate_job(yaml.safe_load((REPO / "examples" / "maxtext.yaml").read_text()))
    js = render_jobset(example)
    main = main_container(js)
    assert main["command"] == ["python3", "-m", "maxtext.trainers.pre_train.train"]
    assert main["args"] == MAXTEXT_ARGS + MAXTEXT_RENDERED_ARGS
    assert main["image"] == "us-docker.pkg.dev/my-project/maxtext/maxtext-runner:0.2.5"
    e = env(main)
    assert e["JAX_PLATFORMS"] == "proxy"
    assert e["JAX_BACKEND_TARGET"] == "grpc://$(PATHWAYS_HEAD):29000"
    assert e["XCLOUD_ENVIRONMENT"] == "GCP"
    # MaxText 0.2.5's pre-training checkpointer ignores it (NO_DISPATCHER): the example
    # turns persistence off.
    assert "ENABLE_PATHWAYS_PERSISTENCE" not in e
    assert e["PATHWAYS_HEAD"] == {
        "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/coordinator']"}}
    assert e["ETJ_JOB_NAME"] == "maxtext-article"
    # Relaxed where MaxText needs it (root, so that the progress sidecar runs as root and
    # reads its stacks), hardened everywhere else; resources of its own.
    assert main["securityContext"] == {**HARDENED, "runAsUser": 0, "runAsNonRoot": False,
                                       "readOnlyRootFilesystem": False}
    assert main["resources"] == {"requests": {"cpu": "16", "memory": "64Gi"},
                                 "limits": {"memory": "96Gi"}}
    (progress,) = [c for c in head_pod(js)["spec"]["initContainers"] if c["name"] == "progress"]
    assert progress["securityContext"]["runAsUser"] == 0  # SYS_PTRACE in effect: the stacks
    assert progress["securityContext"]["capabilities"]["add"] == ["SYS_PTRACE"]
    # The dataset bucket through Cloud Storage FUSE: the volume, its mount, GKE's annotation.
    template = head_pod(js)
    assert {"name": "glaive", "csi": {
        "driver": "gcsfuse.csi.storage.gke.io", "readOnly": True,
        "volumeAttributes": {"bucketName": "my-bucket",
                             "mountOptions": "implicit-dirs,only-dir=datasets/glaive-arrayrecord",
                             # a host-network pod: mounted as its ServiceAccount
                             "hostNetworkPodKSA": "true"},
    }} in template["spec"]["volumes"]
    assert {"name": "glaive", "mountPath": "/data/glaive", "readOnly": True} in main["volumeMounts"]
    assert template["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    # The Pathways servers are the article's, but for the scratch location.
    article = render_jobset(validate_job(
        yaml.safe_load((REPO / "examples" / "article.yaml").read_text())))
    servers = [[a.replace("/maxtext/", "/article/") for a in c["args"]]
               for c in head_pod(js)["spec"]["initContainers"] if c["name"] != "progress"]
    assert servers == [c["args"] for c in head_pod(article)["spec"]["initContainers"]]


def test_without_args_main_has_no_args_field():
    main = main_container(render_jobset(job({"command": ["python3", "train.py"]})))
    assert main["command"] == ["python3", "train.py"]
    assert "args" not in main


def test_bundled_trainer_defaults_fill_unset_fields():
    cmd = trainer_command(job({"steps": 7}))
    flags = dict(zip(cmd[2::2], cmd[3::2], strict=False))
    assert (flags["--config"], flags["--steps"], flags["--batch"], flags["--seed"],
            flags["--data"]) == ("tiny", "7", "8", "0", "synthetic")


def test_on_slow_slice_replace_reaches_the_bundled_trainer():
    """The trainer asks for a slow slice's replacement (SliceSlow) only when the spec says
    the operator will act on it: by default where the operator replaces slices; with
    onSlowSlice Report, or replaceSlices false, it reports only (no flag given)."""
    assert "--on-slow-slice" not in trainer_command(
        job({"steps": 7}, elastic={"onSlowSlice": "Report"}))
    assert "--on-slow-slice" not in trainer_command(
        job({"steps": 7}, recovery={"replaceSlices": False}))
    cmd = trainer_command(job({"steps": 7}))
    assert cmd[cmd.index("--on-slow-slice") + 1] == "Replace"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(cmd[2:]).on_slow_slice == "Replace"


def test_a_command_on_the_simulated_backend_runs_on_cpu():
    js = render_jobset(job({"command": ["python3", "-c", "print(1)"]}, backend="simulated"))
    main = main_container(js)
    assert main["command"] == ["python3", "-c", "print(1)"]
    assert env(main)["JAX_PLATFORMS"] == "cpu"


def test_security_context_overrides_field_by_field():
    main = main_container(render_jobset(job({
        "steps": 1, "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
    })))
    assert main["securityContext"] == {**HARDENED, "runAsUser": 1000, "runAsGroup": 1000}
    # Unset: exactly the hardened context.
    assert main_container(render_jobset(job({"steps": 1})))["securityContext"] == HARDENED


def test_no_gcsfuse_annotation_without_a_gcsfuse_volume():
    js = render_jobset(job({"steps": 1, "volumes": [{"name": "scratch", "emptyDir": {}}],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}))
    assert head_pod(js)["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    assert {"name": "scratch", "emptyDir": {}} in head_pod(js)["spec"]["volumes"]


def test_kueue_labels_reach_the_jobset_and_nothing_else_does():
    labels = {"kueue.x-k8s.io/queue-name": "tpu-queue",
              "kueue.x-k8s.io/priority-class": "high", "team": "ml"}
    objects = render(job({"steps": 1}, labels=labels))
    jobset = objects[-1]
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "tpu-queue"
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert "team" not in jobset["metadata"]["labels"]
    for obj in objects[:-1]:  # Kueue reads the JobSet only
        assert not any(k.startswith("kueue.x-k8s.io/") for k in obj["metadata"]["labels"])
    for rjob in jobset["spec"]["replicatedJobs"]:
        pod_labels = rjob["template"]["spec"]["template"]["metadata"]["labels"]
        assert not any(k.startswith("kueue.x-k8s.io/") for k in pod_labels)
    assert not any(k.startswith("kueue.x-k8s.io/")
                   for k in render_jobset(job({"steps": 1}))["metadata"]["labels"])


def test_priority_class_and_service_account_reach_every_pod():
    for backend in ("pathways", "simulated"):
        js = render_jobset(job({"steps": 1}, backend=backend, priorityClassName="tpu-high",
                               serviceAccountName="tpu-sa"))
        for pod_spec in pods(js):
            assert pod_spec["priorityClassName"] == "tpu-high"
            assert pod_spec["serviceAccountName"] == "tpu-sa"


@pytest.mark.parametrize("field", [{"privileged": True}, {"allowPrivilegeEscalation": True},
                                   {"capabilities": {"add": ["SYS_ADMIN"]}},
                                   {"seccompProfile": {"type": "Unconfined"}}])
def test_nothing_that_grants_privileges_can_be_asked_for(field: dict[str, Any]):
    with pytest.raises(ValueError, match=r"^spec\.trainer\.securityContext\.\w+: unknown field"):
        job({"steps": 1, "securityContext": field})
