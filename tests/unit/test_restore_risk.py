"""RestoreAtRisk: the rule (elastic_api/restore_risk.py) over specs of each trainer and
checkpoint sizes, the condition and its one Warning Event in compute_status, and the
MaxText snapshot field refused at admission."""
from __future__ import annotations

from typing import Any

import pytest

from elastic_api.checkpoints import GIB
from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import CheckpointStatus, ElasticTrainingJob, ElasticTrainingJobSpec
from elastic_api.restore_risk import (
    BUNDLED_PARAMETERS,
    BYTES_PER_PARAMETER_WITH_ADAM,
    MAXTEXT_PARAMETERS,
    assess,
    estimated_checkpoint_bytes,
    gib,
    quantity_bytes,
)
from elastic_api.validation import SNAPSHOT_MAXTEXT, validate_job
from elastic_operator.core.status import compute_status
from elastic_trainer.configs import CONFIGS
from tests.builders import at, etj, observe

MAXTEXT = ["python3", "-m", "maxtext.trainers.pre_train.train"]
BIG = 150 * GIB


def job(*, persistence: bool = True, trainer: dict[str, Any] | None = None,
        proxy_memory: str | None = None, backend: str = "pathways") -> ElasticTrainingJob:
    wrapper = etj().uid("uid-1").generation(1).spec(
        checkpoint={"directory": "/ckpt/run", "persistence": persistence}, backend=backend)
    if trainer is not None:
        wrapper = wrapper.without("trainer").spec(trainer={"image": "img:1", **trainer})
    if proxy_memory is not None:
        wrapper = wrapper.spec(pathways={"proxy": {"resources": {"limits": {
            "memory": proxy_memory}}}})
    return wrapper.build()


def spec(**kwargs: Any) -> ElasticTrainingJobSpec:
    return job(**kwargs).spec


# --- the rule ---------------------------------------------------------------------------


def test_150_gib_through_the_controller_is_at_risk_naming_the_size_the_limit_and_the_fix():
    risk = assess(spec(persistence=False), BIG, step=4000)
    assert (risk.status, risk.reason) == ("True", Reason.PROXY_MEMORY)
    assert "150 GiB" in risk.message and "100G" in risk.message
    assert "step 4000" in risk.message
    assert "spec.checkpoint.persistence: true" in risk.message


def test_the_bundled_trainer_with_persistence_restores_on_the_hosts():
    risk = assess(spec(persistence=True), BIG, step=4000)
    assert (risk.status, risk.reason) == ("False", Reason.HOSTS_RESTORE)


@pytest.mark.parametrize("persistence", [True, False])
def test_maxtext_0_2_5_goes_through_the_controller_whatever_persistence_says(persistence: bool):
    risk = assess(spec(persistence=persistence, trainer={"command": MAXTEXT}), BIG, step=9)
    assert (risk.status, risk.reason) == ("True", Reason.PROXY_MEMORY)
    assert "MaxText 0.2.5" in risk.message
    assert "colocated_python_checkpointing=True" in risk.message
    assert "persistence: true" not in risk.message


@pytest.mark.parametrize("trainer", [
    {"command": MAXTEXT, "args": ["colocated_python_checkpointing=True",
                                  "enable_single_controller=True"]},
    {"command": MAXTEXT, "env": [{"name": "M_COLOCATED_PYTHON_CHECKPOINTING",
                                  "value": "true"}]},
])
def test_maxtext_with_colocated_python_checkpointing_restores_on_the_hosts(
        trainer: dict[str, Any]):
    risk = assess(spec(persistence=False, trainer=trainer), BIG, step=9)
    assert (risk.status, risk.reason) == ("False", Reason.HOSTS_RESTORE)


def test_the_last_colocated_flag_in_args_wins():
    trainer = {"command": MAXTEXT, "args": ["colocated_python_checkpointing=True",
                                            "colocated_python_checkpointing=False"]}
    assert assess(spec(trainer=trainer), BIG).status == "True"


def test_a_larger_proxy_limit_holds_the_checkpoint():
    risk = assess(spec(persistence=False, proxy_memory="400Gi"), BIG, step=1)
    assert (risk.status, risk.reason) == ("False", Reason.WITHIN_PROXY_MEMORY)
    assert "400Gi" in risk.message


def test_the_safe_share_is_half_the_limit():
    limit = quantity_bytes("100G")
    assert assess(spec(persistence=False), limit // 2, step=1).status == "False"
    assert assess(spec(persistence=False), limit // 2 + 1, step=1).status == "True"


def test_no_proxy_without_pathways():
    risk = assess(job(backend="simulated").spec, BIG, step=1)
    assert (risk.status, risk.reason) == ("False", Reason.NO_PROXY)


@pytest.mark.parametrize(("model", "status"), [("qwen3-8b", "True"), ("llama3.1-70b", "True"),
                                               ("qwen3-4b", "False"), ("qwen3-0.6b", "False")])
def test_before_any_checkpoint_a_known_maxtext_model_is_estimated_with_adam(model: str,
                                                                            status: str):
    s = spec(trainer={"command": MAXTEXT, "args": [f"model_name={model}"]})
    assert estimated_checkpoint_bytes(s) == MAXTEXT_PARAMETERS[model] * 12
    risk = assess(s, None)
    assert risk.status == status
    assert "no checkpoint listed yet" in risk.message


def test_an_unknown_model_and_no_checkpoint_is_unknown():
    risk = assess(spec(trainer={"command": ["python3", "train.py"]}, persistence=False), None)
    assert (risk.status, risk.reason) == ("Unknown", Reason.SIZE_UNKNOWN)


def test_the_listed_size_wins_over_the_estimate():
    s = spec(trainer={"command": MAXTEXT, "args": ["model_name=llama3.1-70b"]})
    assert assess(s, GIB, step=3).status == "False"


def test_the_bundled_models_parameter_counts_are_the_trainers():
    assert {name: c.param_count() for name, c in CONFIGS.items()} == BUNDLED_PARAMETERS
    assert BYTES_PER_PARAMETER_WITH_ADAM == 12


@pytest.mark.parametrize(("n", "shown"), [(150 * GIB, "150 GiB"), (int(1.85 * GIB), "1.85 GiB"),
                                         (1358012, "1.3 MiB"), (512, "512 bytes")])
def test_sizes_in_messages(n: int, shown: str):
    assert gib(n) == shown


@pytest.mark.parametrize(("text", "expected"), [
    ("100G", 100 * 10**9), ("96Gi", 96 * 2**30), ("1e3", 1000), ("500m", 1), ("12", 12),
    ("1.5Ki", 1536)])
def test_quantities_in_bytes(text: str, expected: int):
    assert quantity_bytes(text) == expected


def test_a_bad_quantity_is_an_error():
    with pytest.raises(ValueError):
        quantity_bytes("lots")


# --- the condition and its Event in compute_status ------------------------------------------


def scanned(size: int | None, step: int = 4000) -> CheckpointStatus:
    return CheckpointStatus(directory="/ckpt/run", latest_committed_step=step,
                            latest_committed_bytes=size, latest_committed_files=3,
                            observed_at=at(1))


def risk_condition(status: Any) -> Any:
    return next(c for c in status.conditions if c.type == ConditionType.RESTORE_AT_RISK)


def test_one_scan_of_a_large_checkpoint_sets_the_condition_and_one_warning():
    j = job(persistence=False)
    first = compute_status(j, observe(checkpoint=scanned(BIG)), None, at(2))
    cond = risk_condition(first.status)
    assert (cond.status, cond.reason) == ("True", Reason.PROXY_MEMORY)
    warnings = [e for e in first.events if e.reason == Reason.RESTORE_AT_RISK]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    assert "150 GiB" in warnings[0].message
    # The checkpoint grows: still at risk, no second Event.
    second = compute_status(j, observe(checkpoint=scanned(BIG + 10 * GIB, 5000)),
                            first.status, at(3))
    assert risk_condition(second.status).status == "True"
    assert "160 GiB" in risk_condition(second.status).message
    assert not [e for e in second.events if e.reason == Reason.RESTORE_AT_RISK]


def test_a_small_checkpoint_is_not_at_risk_and_warns_nothing():
    result = compute_status(job(persistence=False), observe(checkpoint=scanned(GIB)), None,
                            at(2))
    assert risk_condition(result.status).reason == Reason.WITHIN_PROXY_MEMORY
    assert not [e for e in result.events if e.reason == Reason.RESTORE_AT_RISK]


# --- admission: MaxText has no snapshot to turn on ---------------------------------------


def manifest(snapshot: dict[str, Any], trainer: dict[str, Any]) -> dict[str, Any]:
    obj = etj(namespace=None).without("trainer").spec(trainer={"image": "i:1", **trainer},
                                                      snapshot=snapshot).obj()
    return obj


def test_a_snapshot_period_for_maxtext_is_refused_with_the_reason():
    with pytest.raises(ValueError) as info:
        validate_job(manifest({"periodSteps": 10}, {"command": MAXTEXT}))
    assert SNAPSHOT_MAXTEXT in str(info.value).splitlines()
    assert "elastic_backup_kind" in SNAPSHOT_MAXTEXT


@pytest.mark.parametrize(("snapshot", "trainer"), [
    ({"periodSteps": 0}, {"command": MAXTEXT}),
    ({}, {"command": MAXTEXT}),
    ({"periodSteps": 10}, {"steps": 100}),
])
def test_no_snapshot_for_maxtext_or_a_snapshot_for_the_bundled_trainer_is_accepted(
        snapshot: dict[str, Any], trainer: dict[str, Any]):
    validate_job(manifest(snapshot, trainer))
