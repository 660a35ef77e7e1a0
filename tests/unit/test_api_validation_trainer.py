"""validate_job for any trainer and for Kueue's labels: the bundled trainer's fields against
a command, empty commands, trainer volumes, queue and priority-class names."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from elastic_api.models import BUNDLED_TRAINER_FIELDS
from elastic_api.validation import (
    BUNDLED_FIELD,
    COMMAND_EMPTY,
    STEPS_REQUIRED,
    VOLUME_MOUNT,
    VOLUME_NAME,
    VOLUME_SOURCE,
    validate_job,
)

VALUES = {"model": "tiny", "steps": 10, "batch": 8, "seed": 0, "data": "synthetic"}


def job(trainer: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "elastic.pathways.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": "train", "labels": labels or {}},
        "spec": {
            "tpu": {"type": "v5e", "topology": "4x4", "numSlices": 3},
            "checkpoint": {"directory": "gs://b/ckpt"},
            "trainer": {"image": "img:1", **copy.deepcopy(trainer)},
            "pathways": {"gcsScratch": "gs://b/scratch"},
        },
    }


def errors(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ValueError) as info:
        validate_job(obj)
    return str(info.value).splitlines()


def test_the_bundled_trainer_needs_steps():
    assert errors(job({})) == [STEPS_REQUIRED]
    assert STEPS_REQUIRED.startswith("spec.trainer.steps: ")


def test_a_command_needs_no_steps():
    parsed = validate_job(job({"command": ["python3", "train.py"], "args": ["steps=5"]}))
    assert parsed.spec.trainer.command == ["python3", "train.py"]


@pytest.mark.parametrize("field", BUNDLED_TRAINER_FIELDS)
def test_a_bundled_trainer_field_with_a_command_is_refused_by_name(field: str):
    message = BUNDLED_FIELD.format(field=field)
    assert message.startswith(f"spec.trainer.{field}: ")
    assert errors(job({"command": ["python3"], field: VALUES[field]})) == [message]


def test_every_bundled_field_with_a_command_is_named():
    assert errors(job({"command": ["python3"], **VALUES})) == [
        BUNDLED_FIELD.format(field=f) for f in BUNDLED_TRAINER_FIELDS]


@pytest.mark.parametrize("command", [[], [""], ["python3", ""], ["", "-m", "x"]])
def test_an_empty_command_or_an_empty_string_in_it_is_refused(command: list[str]):
    assert errors(job({"command": command})) == [COMMAND_EMPTY]
    assert COMMAND_EMPTY.startswith("spec.trainer.command: ")


def test_empty_args_are_legal_arguments():
    validate_job(job({"command": ["python3", "-c", "import sys"], "args": ["", "x"]}))


GCSFUSE = {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"bucketName": "b"}}


@pytest.mark.parametrize("volume", [
    {"name": "v"},
    {"name": "v", "csi": GCSFUSE, "emptyDir": {}},
    {"name": "v", "persistentVolumeClaim": {"claimName": "c"}, "emptyDir": {}},
])
def test_a_volume_needs_exactly_one_source(volume: dict[str, Any]):
    assert errors(job({"steps": 1, "volumes": [volume]})) == [VOLUME_SOURCE]


@pytest.mark.parametrize("names", [["shared-tmp"], ["Data"], ["a.b"], ["a", "a"], [""]])
def test_volume_names_are_unique_dns_labels_other_than_shared_tmp(names: list[str]):
    volumes = [{"name": n, "emptyDir": {}} for n in names]
    assert errors(job({"steps": 1, "volumes": volumes})) == [VOLUME_NAME]


@pytest.mark.parametrize("mount", [
    {"name": "missing", "mountPath": "/data"},
    {"name": "data", "mountPath": "/tmp"},
    {"name": "data", "mountPath": "/tmp/"},
])
def test_a_mount_names_a_trainer_volume_and_not_tmp(mount: dict[str, Any]):
    trainer = {"steps": 1, "volumes": [{"name": "data", "emptyDir": {}}],
               "volumeMounts": [mount]}
    assert errors(job(trainer)) == [VOLUME_MOUNT]
    assert errors(job({"steps": 1, "volumeMounts": [mount]})) == [VOLUME_MOUNT]


def test_volumes_of_every_source_are_accepted():
    trainer = {"steps": 1, "volumes": [
        {"name": "data", "csi": {**GCSFUSE, "readOnly": True}},
        {"name": "claim", "persistentVolumeClaim": {"claimName": "c", "readOnly": True}},
        {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    ], "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True},
                        {"name": "cache", "mountPath": "/tmp/cache"}]}
    assert len(validate_job(job(trainer)).spec.trainer.volumes) == 3


QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"


@pytest.mark.parametrize("value", ["tpu-queue", "team.a", "q" * 63, "0"])
def test_queue_and_priority_names_kueue_takes_are_accepted(value: str):
    validate_job(job({"steps": 1}, labels={QUEUE: value, PRIORITY: value}))


@pytest.mark.parametrize(("label", "what"), [(QUEUE, "LocalQueue"),
                                             (PRIORITY, "WorkloadPriorityClass")])
@pytest.mark.parametrize("value", ["Team_A", "", "q" * 64, "a b", "-a", "a.", "line\nbreak"])
def test_a_queue_or_priority_name_kueue_refuses_is_named(label: str, what: str, value: str):
    (line,) = errors(job({"steps": 1}, labels={label: value}))
    assert line.startswith(f"metadata.labels[{label}]: ")
    assert f"is not a valid {what} name" in line
    assert "\n" not in line


def test_other_labels_are_not_checked():
    validate_job(job({"steps": 1}, labels={"team": "ML_Platform"}))


@pytest.mark.parametrize("source", [{"hostPath": {"path": "/"}}, {"secret": {"secretName": "s"}},
                                    {"configMap": {"name": "c"}}])
def test_sources_beyond_csi_pvc_and_emptydir_are_not_offered(source: dict[str, Any]):
    (line,) = errors(job({"steps": 1, "volumes": [{"name": "v", **source}]}))
    assert line.startswith(f"spec.trainer.volumes[0].{next(iter(source))}: unknown field")
