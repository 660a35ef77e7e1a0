"""The admission policies the chart ships (docs/threat-model.md, "Status writers" and
"The operator's reach"), as `helm template` renders them with the pinned helm."""
from __future__ import annotations

import argparse
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
    guarded = [re.match(r"object\.\?status\.\?(\w+) == oldObject\.\?status\.\?\1( |$)",
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


def _status_binding(*values: str) -> dict[str, Any]:
    return only(helm_template("etj", "etj-system", *values),
                "ValidatingAdmissionPolicyBinding", "etj-elastic-operator-status-writers")


def test_the_status_policy_binds_the_namespaces_the_release_serves() -> None:
    # Two releases over their own namespaces must not refuse each other's operator.
    assert "matchResources" not in _status_binding()["spec"]
    served = _status_binding("watchNamespaces={team-a,team-b}")["spec"]["matchResources"]
    assert served["namespaceSelector"] == {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "In",
        "values": ["team-a", "team-b"]}]}
    chosen = _status_binding("watchNamespaces={team-a}",
                             "statusPolicy.namespaceSelector.matchLabels.tier=train")
    assert chosen["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"tier": "train"}}


def _reach_policy(name: str, *values: str) -> dict[str, Any]:
    return only(helm_template("etj", "etj-system", *values), STATUS_POLICY,
                f"etj-elastic-operator-{name}")


def test_the_node_policy_names_the_keys_the_operator_writes() -> None:
    """The keys the quarantine writes (elastic_api/names.py) are the policy's own."""
    from elastic_api.names import (
        QUARANTINE_CAUSE_ANNOTATION,
        QUARANTINE_LABEL,
        QUARANTINED_AT_ANNOTATION,
    )

    policy = _reach_policy("node-patches")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["ownLabels"] == f"['{QUARANTINE_LABEL}']"
    assert variables["ownAnnotations"] == (
        f"['{QUARANTINED_AT_ANNOTATION}', '{QUARANTINE_CAUSE_ANNOTATION}']")
    assert policy["spec"]["matchConditions"][0]["expression"] == (
        'request.userInfo.username == "system:serviceaccount:etj-system:etj-elastic-operator"')


def test_without_node_patching_the_operator_holds_no_patch_on_nodes() -> None:
    docs = helm_template("etj", "etj-system", "nodePatching.enabled=false")
    node_rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]
                  if "nodes" in r.get("resources", [])]  # not a URL rule
    assert node_rules == [{"apiGroups": [""], "resources": ["nodes"],
                           "verbs": ["list", "watch"]}]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert "--no-quarantine-pools" in deployment["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert not [d for d in docs if d["metadata"]["name"].endswith("node-patches")]
    _reach_policy("trainer-rbac", "nodePatching.enabled=false")  # still there


def _operator_args(*values: str) -> list[str]:
    docs = helm_template("etj", "etj-system", *values)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_quarantine_policy_reaches_the_operator_and_parses() -> None:
    """values quarantine.* become the operator's flags (core/pools.py QuarantinePolicy):
    by default 2 jobs and no trust in a job's own report."""
    from elastic_operator.core.pools import QuarantinePolicy
    from elastic_operator.entry.operator_cli import add_arguments, replacement_settings

    def policy(*values: str) -> QuarantinePolicy:
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        return replacement_settings(parser.parse_args(_operator_args(*values))).quarantine

    assert "--quarantine-min-jobs=2" in _operator_args()
    assert policy() == QuarantinePolicy(min_jobs=2, trust_reports=False)
    assert policy("quarantine.minJobs=3", "quarantine.trustJobReports=true") == \
        QuarantinePolicy(min_jobs=3, trust_reports=True)


def test_a_first_status_written_by_the_trainer_may_hold_only_zero_counters() -> None:
    """The schema defaults status.counters when the trainer's report is the job's first
    status; the policy lets that through only with every counter of the model at 0."""
    from elastic_api.models.status import Counters

    (rule,) = [v["expression"] for v in _status_policy()["spec"]["validations"]
               if "counters" in v["expression"]]
    named = set(re.findall(r"object\.status\.counters\.\?(\w+)\.orValue\(0\)", rule))
    assert named == {f.alias for f in Counters.model_fields.values()}
    assert "!has(oldObject.status)" in rule and rule.endswith(".all(n, n == 0))")
