"""Rendering the progress sidecar and what MaxText gets from the spec: the sidecar in the
head pod (our trainer image, the shared /tmp, the pod's identity), MaxText's metrics_file
(set by the renderer unless the args name one), checkpoint.keep and checkpoint.async as
MaxText's flags, and nothing of it for a job that does not ask."""
from __future__ import annotations

from typing import Any

import pytest

from elastic_api.models import ElasticTrainingJob
from elastic_api.validation import validate_job
from elastic_operator.render import render, render_jobset

MAXTEXT = ["python3", "-m", "maxtext.trainers.pre_train.train"]
PROGRESS = {"image": "registry/elastic-trainer:0.1.0"}


def job(trainer: dict[str, Any], backend: str = "pathways", **spec: Any) -> ElasticTrainingJob:
    body: dict[str, Any] = {
        "backend": backend,
        "tpu": {"type": "v5e", "topology": "4x4", "numSlices": 2},
        "checkpoint": {"directory": "gs://b/run/checkpoints"},
        "trainer": {"image": "maxtext-runner:1", **trainer},
        "pathways": {"gcsScratch": "gs://b/scratch"},
        **spec,
    }
    return validate_job({"apiVersion": "elastic.pathways.dev/v1alpha1",
                         "kind": "ElasticTrainingJob",
                         "metadata": {"name": "mt", "namespace": "ml"}, "spec": body})


def head(j: ElasticTrainingJob) -> dict[str, Any]:
    rjob = render_jobset(j)["spec"]["replicatedJobs"][0]
    assert rjob["name"] == "pathways-head"
    pod: dict[str, Any] = rjob["template"]["spec"]["template"]["spec"]
    return pod


def container(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        if c["name"] == name:
            return dict(c)
    return None


def main_args(j: ElasticTrainingJob) -> list[str]:
    main = container(head(j), "main")
    assert main is not None
    return list(main.get("args", []))


def test_maxtext_with_progress_gets_a_sidecar_and_its_metrics_file() -> None:
    j = job({"command": MAXTEXT, "args": ["run_name=r", "steps=300"], "progress": PROGRESS})
    pod = head(j)
    assert main_args(j) == ["run_name=r", "steps=300", "metrics_file=/tmp/etj-metrics.jsonl"]
    names = [c["name"] for c in pod["initContainers"]]
    assert names == ["pathways-rm", "pathways-proxy", "progress"]  # a native sidecar, last
    side = container(pod, "progress")
    assert side is not None
    assert side["image"] == "registry/elastic-trainer:0.1.0"
    assert side["restartPolicy"] == "Always"
    assert side["command"] == ["etj", "progress", "--metrics-file", "/tmp/etj-metrics.jsonl",
                               "--format", "maxtext", "--state-file", "/tmp/.etj-progress.json",
                               "--total-steps", "300",
                               "--checkpoint-directory", j.spec.checkpoint.directory]
    assert side["volumeMounts"] == [{"name": "shared-tmp", "mountPath": "/tmp"}]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in side["env"]}
    assert env == {
        "ETJ_JOB_NAME": "mt",
        "ETJ_JOB_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "ETJ_POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "ETJ_POD_UID": {"fieldRef": {"fieldPath": "metadata.uid"}},
    }
    assert side["securityContext"]["runAsNonRoot"] is True
    assert side["securityContext"]["readOnlyRootFilesystem"] is True
    assert side["resources"]["limits"] == {"memory": "256Mi"}


def test_the_users_metrics_file_is_followed_not_replaced() -> None:
    j = job({"command": MAXTEXT, "args": ["metrics_file=/tmp/run/m.jsonl", "steps=-1"],
             "progress": PROGRESS})
    assert main_args(j) == ["metrics_file=/tmp/run/m.jsonl", "steps=-1"]
    side = container(head(j), "progress")
    assert side is not None and side["command"][3] == "/tmp/run/m.jsonl"
    assert "--total-steps" not in side["command"]  # steps=-1: MaxText takes them elsewhere


def test_progress_metrics_file_is_passed_to_maxtext() -> None:
    j = job({"command": MAXTEXT, "progress": {**PROGRESS, "metricsFile": "/tmp/x.jsonl"}})
    assert main_args(j) == ["metrics_file=/tmp/x.jsonl"]


def test_any_other_program_is_followed_where_it_writes_and_gets_no_flags() -> None:
    j = job({"command": ["python3", "train.py"], "args": ["--steps", "9"],
             "progress": {**PROGRESS, "metricsFile": "/tmp/metrics.jsonl"}})
    assert main_args(j) == ["--steps", "9"]
    side = container(head(j), "progress")
    assert side is not None and side["command"][3] == "/tmp/metrics.jsonl"
    assert "--total-steps" not in side["command"]


def test_the_older_maxtext_module_is_maxtext_too() -> None:
    j = job({"command": ["python3", "-m", "MaxText.train", "src/MaxText/configs/base.yml"],
             "progress": PROGRESS})
    assert main_args(j) == ["metrics_file=/tmp/etj-metrics.jsonl"]


def test_simulated_backend_has_the_sidecar_as_its_only_init_container() -> None:
    j = job({"command": MAXTEXT, "progress": PROGRESS}, backend="simulated")
    assert [c["name"] for c in head(j)["initContainers"]] == ["progress"]


@pytest.mark.parametrize("trainer", [{"command": MAXTEXT}, {"command": ["python3", "t.py"]}])
def test_without_progress_there_is_no_sidecar_and_no_metrics_file(trainer: dict[str, Any]) -> None:
    pod = head(job(trainer))
    assert container(pod, "progress") is None
    assert main_args(job(trainer)) == []


@pytest.mark.parametrize(("checkpoint", "flags"), [
    ({"keep": 2}, ["max_num_checkpoints_to_keep=2"]),
    ({"async": False}, ["async_checkpointing=False"]),
    ({"keep": 5, "async": True}, ["max_num_checkpoints_to_keep=5", "async_checkpointing=True"]),
    ({}, []),  # unset: MaxText's own defaults (every checkpoint kept, async saves)
])
def test_checkpoint_keep_and_async_become_maxtexts_flags(checkpoint: dict[str, Any],
                                                          flags: list[str]) -> None:
    j = job({"command": MAXTEXT, "args": ["steps=10"]},
            checkpoint={"directory": "gs://b/c", **checkpoint})
    assert main_args(j) == ["steps=10", *flags]


def test_the_bundled_trainer_keeps_its_defaults_for_unset_keep_and_async() -> None:
    j = job({"steps": 10})
    main = container(head(j), "main")
    assert main is not None
    command = main["command"]
    assert command[command.index("--checkpoint-keep") + 1] == "3"
    assert "--no-async-checkpoint" not in command
    j = job({"steps": 10}, checkpoint={"directory": "gs://b/c", "keep": 7, "async": False})
    main = container(head(j), "main")
    assert main is not None
    assert main["command"][main["command"].index("--checkpoint-keep") + 1] == "7"
    assert "--no-async-checkpoint" in main["command"]


def test_the_sidecar_needs_no_more_rbac_than_the_trainer() -> None:
    with_progress = render(job({"command": MAXTEXT, "progress": PROGRESS}))[0]
    without = render(job({"command": MAXTEXT}))[0]
    assert with_progress["kind"] == "Role" and with_progress["rules"] == without["rules"]


def test_the_sidecar_shares_the_pods_processes_and_may_read_the_trainers_stacks() -> None:
    """Only a head pod with the sidecar shares its process namespace; only the sidecar
    gets SYS_PTRACE (py-spy reads the trainer's memory); main stays as hardened."""
    pod = head(job({"command": MAXTEXT, "progress": PROGRESS}))
    assert pod["shareProcessNamespace"] is True
    side, main = container(pod, "progress"), container(pod, "main")
    assert side is not None and main is not None
    assert side["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert side["securityContext"]["allowPrivilegeEscalation"] is False
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    for name in ("pathways-rm", "pathways-proxy"):
        c = container(pod, name)
        assert c is not None and "SYS_PTRACE" not in str(c.get("securityContext"))
    assert "shareProcessNamespace" not in head(job({"command": MAXTEXT}))


@pytest.mark.parametrize(("context", "user"), [
    ({"runAsUser": 1000, "runAsGroup": 1000}, {"runAsUser": 1000, "runAsGroup": 1000,
                                               "runAsNonRoot": True}),
    ({"runAsNonRoot": False, "runAsUser": 0}, {"runAsUser": 0, "runAsNonRoot": False}),
    ({"readOnlyRootFilesystem": False}, {"runAsNonRoot": True}),
])
def test_the_sidecar_runs_as_mains_user(context: dict[str, Any], user: dict[str, Any]) -> None:
    """The same user may read the trainer's memory; a root trainer needs a root sidecar
    (a non-root container never has its added capabilities in effect)."""
    side = container(head(job({"command": MAXTEXT, "progress": PROGRESS,
                               "securityContext": context})), "progress")
    assert side is not None
    got = {k: v for k, v in side["securityContext"].items()
           if k in ("runAsUser", "runAsGroup", "runAsNonRoot")}
    assert got == user
    assert side["securityContext"]["readOnlyRootFilesystem"] is True
