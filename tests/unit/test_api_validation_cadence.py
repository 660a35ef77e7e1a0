"""The cadence fields: no period given (the trainer chooses) differs from any number, an
explicit period wins, and a bad budget or a snapshot period longer than the run is refused
naming the field (the same message as the API server's CEL rule: test_admission.py)."""
from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from elastic_api.models import DEFAULT_OVERHEAD_BUDGET_PERCENT
from elastic_api.validation import (
    CHECKPOINT_PERIOD_RUN,
    OVERHEAD_BUDGET,
    SNAPSHOT_PERIOD_RUN,
    validate_job,
)
from elastic_operator.render import trainer_command


def job(**spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "elastic.pathways.dev/v1alpha1", "kind": "ElasticTrainingJob",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "tpu": {"type": "v5e", "topology": "4x4", "numSlices": 3},
            "checkpoint": {"directory": "gs://b/ckpt"},
            "trainer": {"image": "trainer:1", "steps": 100},
            "pathways": {"gcsScratch": "gs://b/scratch"},
        },
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(obj["spec"].get(key), dict):
            obj["spec"][key] = {**obj["spec"][key], **copy.deepcopy(value)}
        else:
            obj["spec"][key] = copy.deepcopy(value)
    return obj


def problems(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ValueError) as info:
        validate_job(obj)
    return str(info.value).splitlines()


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_no_period_given_is_chosen_by_the_trainer_within_the_default_budget():
    spec = validate_job(job()).spec
    assert spec.checkpoint.period_steps is None and spec.snapshot.period_steps is None
    assert spec.overhead_budget_percent == DEFAULT_OVERHEAD_BUDGET_PERCENT == 2.0
    cmd = trainer_command(validate_job(job()))
    assert (flag(cmd, "--checkpoint-period"), flag(cmd, "--snapshot-period"),
            flag(cmd, "--overhead-budget-percent")) == ("auto", "auto", "2.0")


def test_an_explicit_period_wins_and_a_job_that_set_100_keeps_it():
    cmd = trainer_command(validate_job(job(checkpoint={"periodSteps": 100},
                                           snapshot={"periodSteps": 0})))
    assert (flag(cmd, "--checkpoint-period"), flag(cmd, "--snapshot-period")) == ("100", "0")
    # A checkpoint period longer than a new job's run is refused (no checkpoint would ever
    # be saved); the CEL rule applies at creation only, so a job stored while 100 was the
    # default, with fewer steps, stays writable (tests/integration/test_admission.py).
    assert CHECKPOINT_PERIOD_RUN in problems(job(checkpoint={"periodSteps": 100},
                                                 trainer={"steps": 50}))
    validate_job(job(checkpoint={"periodSteps": 50}, trainer={"steps": 50}))


@pytest.mark.parametrize("budget", [0, -1, 50.0001, 51, 1e9])
def test_a_budget_outside_0_50_is_refused_naming_the_field(budget: float):
    assert OVERHEAD_BUDGET in problems(job(overheadBudgetPercent=budget))
    assert OVERHEAD_BUDGET.startswith("spec.overheadBudgetPercent: ")


@pytest.mark.parametrize("budget", [0.001, 0.5, 2, 2.5, 50])
def test_a_budget_within_0_50_is_accepted(budget: float):
    assert validate_job(job(overheadBudgetPercent=budget)).spec.overhead_budget_percent == \
        float(budget)


@pytest.mark.parametrize("budget", [True, "2", None, math.nan, math.inf])
def test_a_budget_that_is_no_number_is_refused_as_the_api_server_would(budget: Any):
    assert any(p.startswith("spec.overheadBudgetPercent: ")
               for p in problems(job(overheadBudgetPercent=budget)))


def test_a_snapshot_period_longer_than_the_run_is_refused_naming_the_field():
    assert SNAPSHOT_PERIOD_RUN in problems(job(snapshot={"periodSteps": 101}))
    assert SNAPSHOT_PERIOD_RUN.startswith("spec.snapshot.periodSteps: ")
    validate_job(job(snapshot={"periodSteps": 100}))  # the whole run: allowed
    # Your own program (no steps): the bundled trainer's bound does not apply.
    validate_job(job(snapshot={"periodSteps": 500},
                     trainer={"image": "t:1", "steps": None, "command": ["python3"]}))


@pytest.mark.parametrize(("field", "value"), [
    ("snapshot", {"periodSteps": -1}), ("checkpoint", {"periodSteps": 0}),
    ("snapshot", {"periodSteps": 2.5}), ("checkpoint", {"periodSteps": "100"}),
])
def test_bad_periods_are_refused_naming_the_field(field: str, value: dict[str, Any]):
    assert any(p.startswith(f"spec.{field}.periodSteps: ") for p in problems(job(**{field: value})))
