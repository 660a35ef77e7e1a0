"""The admission policies the chart ships (docs/threat-model.md, "Status writers" and
"The operator's reach"), as `helm template` renders them with the pinned helm."""
from __future__ import annotations

import re
from typing import Any

from elastic_api.models import ElasticTrainingJobStatus
from tests.support.chart import helm_template, only

STATUS_POLICY = "ValidatingAdmissionPolicy"


def _status_policy(*values: str) -> dict[str, Any]:
    docs = helm_template("etj", "etj-system", *values)
    return only(docs, STATUS_POLICY, "etj-elastic-operator-status-writers")


def test_every_status_field_but_training_is_the_operators() -> None:
    """The policy names each field of the status model but `training`: a field added to
    the model and not to the chart's list would be open to the trainer."""
    policy = _status_policy()
    guarded = [re.fullmatch(r"object\.\?status\.\?(\w+) == oldObject\.\?status\.\?\1",
                            v["expression"]) for v in policy["spec"]["validations"]]
    assert all(guarded), [v["expression"] for v in policy["spec"]["validations"]]
    fields = {f.alias for f in ElasticTrainingJobStatus.model_fields.values()}
    assert {m.group(1) for m in guarded if m} == fields - {"training"}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == [
        "elastictrainingjobs/status"]


def test_only_the_operators_service_account_and_named_writers_are_exempt() -> None:
    condition = _status_policy()["spec"]["matchConditions"][0]["expression"]
    assert condition == ('!(request.userInfo.username in '
                         '["system:serviceaccount:etj-system:etj-elastic-operator"])')
    condition = _status_policy("serviceAccount.name=op", "statusPolicy.extraWriters={a,b}")[
        "spec"]["matchConditions"][0]["expression"]
    assert condition == ('!(request.userInfo.username in '
                         '["system:serviceaccount:etj-system:op", "a", "b"])')


def test_the_status_policy_can_be_left_out() -> None:
    docs = helm_template("etj", "etj-system", "statusPolicy.enabled=false")
    assert not [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")
                and d["metadata"]["name"].endswith("status-writers")]
