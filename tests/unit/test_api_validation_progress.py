"""validate_job for the progress sidecar and for the checkpoint settings only some trainers
read: each refusal names the field and the fix, with the message the CRD's CEL rule gives
(tests/integration/test_admission.py sends the same jobs to the API server)."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from elastic_api import maxtext
from elastic_api.crd import build_crd
from elastic_api.validation import (
    CHECKPOINT_FIELD_TWICE,
    CHECKPOINT_FIELD_UNREAD,
    MAXTEXT_METRICS_FILE_ARG,
    PROGRESS_METRICS_FILE_PATH,
    PROGRESS_METRICS_FILE_REQUIRED,
    PROGRESS_NEEDS_COMMAND,
    validate_job,
)

MAXTEXT = ["python3", "-m", "maxtext.trainers.pre_train.train"]
PROGRESS = {"image": "registry/elastic-trainer:0.1.0"}


def job(trainer: dict[str, Any], checkpoint: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "elastic.pathways.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": "train"},
        "spec": {
            "tpu": {"type": "v5e", "topology": "4x4", "numSlices": 3},
            "checkpoint": {"directory": "gs://b/ckpt", **(checkpoint or {})},
            "trainer": {"image": "img:1", **copy.deepcopy(trainer)},
            "pathways": {"gcsScratch": "gs://b/scratch"},
        },
    }


def errors(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ValueError) as info:
        validate_job(obj)
    return str(info.value).splitlines()


def unread(field: str, key: str) -> str:
    return (CHECKPOINT_FIELD_UNREAD.replace("{field}", field).replace("{key}", key))


def twice(field: str, key: str) -> str:
    return (CHECKPOINT_FIELD_TWICE.replace("{field}", field).replace("{key}", key)
            .replace("{env}", maxtext.env_key(key)))


@pytest.mark.parametrize("trainer", [
    {"command": MAXTEXT, "progress": PROGRESS},
    {"command": ["python3", "-m", "MaxText.train"], "progress": PROGRESS},
    {"command": ["python3"], "args": ["-m", "maxtext.trainers.pre_train.train"],
     "progress": PROGRESS},
    {"command": MAXTEXT, "args": ["metrics_file=/tmp/m.jsonl"], "progress": PROGRESS},
    {"command": MAXTEXT, "args": ["metrics_file=/tmp/m.jsonl"],
     "progress": {**PROGRESS, "metricsFile": "/tmp/m.jsonl"}},
    {"command": ["python3", "train.py"], "progress": {**PROGRESS, "metricsFile": "/tmp/a/b"}},
    # metrics_file means nothing to a program that is not MaxText: not checked
    {"command": ["python3", "train.py"], "args": ["metrics_file=/elsewhere"],
     "progress": {**PROGRESS, "metricsFile": "/tmp/m"}},
])
def test_good_progress_specs_are_accepted(trainer: dict[str, Any]) -> None:
    validate_job(job(trainer))


def test_progress_is_for_a_command_only() -> None:
    assert errors(job({"steps": 10, "progress": PROGRESS})) == [PROGRESS_NEEDS_COMMAND]
    assert PROGRESS_NEEDS_COMMAND.startswith("spec.trainer.progress: ")


def test_a_program_other_than_maxtext_must_name_its_metrics_file() -> None:
    assert errors(job({"command": ["python3", "train.py"], "progress": PROGRESS})) == [
        PROGRESS_METRICS_FILE_REQUIRED]
    assert PROGRESS_METRICS_FILE_REQUIRED.startswith("spec.trainer.progress.metricsFile: ")


@pytest.mark.parametrize("path", ["/tmp", "/tmp/", "/var/m.jsonl", "tmp/m", "/tmp/../etc/x",
                                  "/tmp/./m", "/tmp/a/", "/tmpx/m", "/tmp//m", "m.jsonl",
                                  "/tmp/m\n"])
def test_the_metrics_file_lies_under_the_shared_tmp(path: str) -> None:
    obj = job({"command": MAXTEXT, "progress": {**PROGRESS, "metricsFile": path}})
    assert PROGRESS_METRICS_FILE_PATH in errors(obj)


@pytest.mark.parametrize("args", [["metrics_file=/data/m.jsonl"], ["metrics_file=m.jsonl"],
                                  ["metrics_file="], ["metrics_file=/tmp/../m"],
                                  ["metrics_file=/tmp/ok", "metrics_file=/elsewhere"]])
def test_maxtexts_metrics_file_arg_must_be_one_the_sidecar_reads(args: list[str]) -> None:
    assert errors(job({"command": MAXTEXT, "args": args, "progress": PROGRESS})) == [
        MAXTEXT_METRICS_FILE_ARG]


def test_maxtexts_metrics_file_arg_and_progress_metrics_file_must_agree() -> None:
    obj = job({"command": MAXTEXT, "args": ["metrics_file=/tmp/a"],
               "progress": {**PROGRESS, "metricsFile": "/tmp/b"}})
    assert errors(obj) == [MAXTEXT_METRICS_FILE_ARG]


def test_without_progress_maxtexts_metrics_file_is_the_users_business() -> None:
    validate_job(job({"command": MAXTEXT, "args": ["metrics_file=/data/m.jsonl"]}))


@pytest.mark.parametrize(("field", "value", "key"), [
    ("keep", 2, maxtext.KEEP_KEY), ("async", False, maxtext.ASYNC_KEY)])
def test_keep_and_async_are_refused_for_a_program_that_does_not_read_them(
        field: str, value: Any, key: str) -> None:
    message = unread(field, key)
    assert message.startswith(f"spec.checkpoint.{field}: ")
    assert errors(job({"command": ["python3", "train.py"]}, {field: value})) == [message]
    validate_job(job({"command": MAXTEXT}, {field: value}))  # MaxText reads them
    validate_job(job({"steps": 10}, {field: value}))  # and the bundled trainer


@pytest.mark.parametrize(("field", "value", "key"), [
    ("keep", 2, maxtext.KEEP_KEY), ("async", True, maxtext.ASYNC_KEY)])
def test_keep_and_async_may_not_come_twice_to_maxtext(field: str, value: Any, key: str) -> None:
    message = twice(field, key)
    by_arg = job({"command": MAXTEXT, "args": [f"{key}=4"]}, {field: value})
    by_env = job({"command": MAXTEXT, "env": [{"name": maxtext.env_key(key), "value": "4"}]},
                 {field: value})
    assert errors(by_arg) == [message] and errors(by_env) == [message]
    # Set in one place only: fine either way.
    validate_job(job({"command": MAXTEXT, "args": [f"{key}=4"]}))


def test_the_maxtext_rules_are_in_the_crd_with_the_same_messages() -> None:
    """The CEL side of each rule: its message is the Python one, word for word."""
    crd = build_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    rules = {r["message"] for r in spec.get("x-kubernetes-validations", [])}
    rules |= {r["message"] for r in spec["properties"]["trainer"]["x-kubernetes-validations"]}
    for message in (PROGRESS_NEEDS_COMMAND, PROGRESS_METRICS_FILE_REQUIRED,
                    PROGRESS_METRICS_FILE_PATH, MAXTEXT_METRICS_FILE_ARG,
                    unread("keep", maxtext.KEEP_KEY), unread("async", maxtext.ASYNC_KEY),
                    twice("keep", maxtext.KEEP_KEY), twice("async", maxtext.ASYNC_KEY)):
        assert message in rules, message


def test_runs_maxtext_in_python_and_cel_name_the_same_modules() -> None:
    cel = maxtext.cel_runs_maxtext("self")
    assert all(f"'{m}'" in cel for m in maxtext.TRAIN_MODULES)
    assert maxtext.runs_maxtext(["python3"], ["-m", "MaxText.train"])
    assert not maxtext.runs_maxtext(None, ["maxtext.trainers.pre_train.train"])
    assert not maxtext.runs_maxtext(["python3", "maxtext/trainers/pre_train/train.py"], [])


def test_the_checkpoint_rules_apply_at_creation_only() -> None:
    """Jobs stored before them carry the old CRD's defaults (keep 3, async true): the
    rules must never reject those on an update (test_admission shows it on the API
    server)."""
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r for r in spec["x-kubernetes-validations"]
             if r["message"].startswith(("spec.checkpoint.keep:", "spec.checkpoint.async:"))]
    assert len(rules) == 4
    for rule in rules:
        assert rule["optionalOldSelf"] is True
        assert rule["rule"].startswith("oldSelf.hasValue() || (")

