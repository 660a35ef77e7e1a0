"""What a tenant gets (issue 78, items 2 and 3), in the pure parts: the CRD's rule on a
toleration of every taint, the security context of every rendered container, and the
chart's two admission policies as rendered (their effect on a real API server:
tests/integration/test_hostile_tenant_placement.py)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from elastic_api.crd import build_crd
from elastic_api.names import (
    COLOCATED_PYTHON_CONTAINER,
    MAIN_CONTAINER,
    PROGRESS_CONTAINER,
    PROXY_CONTAINER,
    RM_CONTAINER,
    SLICE_AGENT_CONTAINER,
    WORKER_CONTAINER,
)
from elastic_api.validation import TOLERATION_EVERY_TAINT, validate_job
from elastic_operator.render import PROGRESS_CAPABILITY, render
from tests.builders import etj
from tests.support.chart import helm_template, only

COLOCATED = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways-colocated-python/sidecar:1"


def refusal(obj: dict[str, Any]) -> str:
    with pytest.raises(ValueError) as info:
        validate_job(obj)
    return str(info.value)


def test_a_toleration_of_every_taint_is_refused_naming_the_field() -> None:
    every = etj().spec(tolerations=[{"operator": "Exists"}]).obj()
    assert TOLERATION_EVERY_TAINT in refusal(every)
    assert TOLERATION_EVERY_TAINT.startswith("spec.tolerations: ")
    keyed = etj().spec(tolerations=[{"key": "team-a", "operator": "Exists"}]).obj()
    assert validate_job(keyed).spec.tolerations[0].key == "team-a"
    rules = [r for r in build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
             ["properties"]["spec"]["x-kubernetes-validations"]
             if r["message"] == TOLERATION_EVERY_TAINT]
    assert len(rules) == 1 and "t.key != ''" in rules[0]["rule"]


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    jobset = render(validate_job(obj))[-1]
    return [c for r in jobset["spec"]["replicatedJobs"]
            for key in ("initContainers", "containers")
            for c in r["template"]["spec"]["template"]["spec"].get(key, [])]


@pytest.mark.parametrize("backend", ["pathways", "simulated"])
def test_every_rendered_container_drops_every_capability_but_its_own(backend: str) -> None:
    pathways = {"gcsScratch": "gs://b/s"}
    if backend == "pathways":
        pathways["colocatedPython"] = {"image": COLOCATED}  # type: ignore[assignment]
    trainer = {"image": "trainer:1", "command": ["python", "t.py"],
               "progress": {"image": "trainer:1", "metricsFile": "/tmp/metrics.txt"}}
    obj = etj().without("trainer").spec(backend=backend, pathways=pathways, trainer=trainer).obj()
    rendered = containers(obj)
    names = {c["name"] for c in rendered}
    expected = {MAIN_CONTAINER, PROGRESS_CONTAINER} | (
        {RM_CONTAINER, PROXY_CONTAINER, WORKER_CONTAINER, COLOCATED_PYTHON_CONTAINER}
        if backend == "pathways" else {SLICE_AGENT_CONTAINER})
    assert expected <= names, names
    for container in rendered:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"]["drop"] == ["ALL"], container["name"]
        assert not context.get("privileged"), container["name"]
        added = context["capabilities"].get("add", [])
        assert added == ([PROGRESS_CAPABILITY] if container["name"] == PROGRESS_CONTAINER else [])


def policies(*values: str) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = helm_template("etj", "etj-system", *values)
    return (only(docs, "ValidatingAdmissionPolicy", "etj-elastic-operator-tenant-placement"),
            only(docs, "ValidatingAdmissionPolicy", "etj-elastic-operator-host-access"))


def variable(policy: dict[str, Any], name: str) -> Any:
    return json.loads(next(v["expression"] for v in policy["spec"]["variables"]
                           if v["name"] == name))


def test_the_allowance_is_the_chart_values_per_namespace() -> None:
    placement, _ = policies()
    assert variable(placement, "pools") == {"*": ["cpu-np"]}
    assert variable(placement, "tolerations") == {"*": []}
    assert "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/" in variable(placement, "images")["*"]
    placement, _ = policies("tenantPolicy.allowed.team-a.nodePools={team-a-cpu}",
                            "tenantPolicy.allowed.team-a.tolerationKeys={spot}")
    assert variable(placement, "pools") == {"*": ["cpu-np"], "team-a": ["team-a-cpu"]}
    assert variable(placement, "tolerations") == {"*": [], "team-a": ["spot"]}
    fields = " ".join(v["messageExpression"] for v in placement["spec"]["validations"])
    for field in ("spec.headNodePool", "spec.nodeSelector", "spec.tolerations",
                  "spec.pathways.images.server", "spec.pathways.images.proxy",
                  "spec.pathways.colocatedPython.image", "spec.trainer.progress.image"):
        assert f"'{field}:" in fields, field


def test_only_the_operator_and_the_controllers_may_ask_for_the_host() -> None:
    docs = helm_template("etj", "etj-system")
    account = only(docs, "ServiceAccount")["metadata"]["name"]
    _, host = policies()
    trusted = host["spec"]["matchConditions"][0]["expression"]
    assert f'"system:serviceaccount:etj-system:{account}"' in trusted
    assert "system:serviceaccount:jobset-system:jobset-controller-manager" in trusted
    assert "system:serviceaccount:kube-system:job-controller" in trusted
    kinds = {r["resources"][0]: r["operations"] for r in host["spec"]["matchConstraints"]
             ["resourceRules"]}
    assert kinds == {"jobsets": ["CREATE", "UPDATE"], "jobs": ["CREATE"], "pods": ["CREATE"]}


def _tenant_bindings(*values: str) -> dict[str, dict[str, Any]]:
    """The tenant policy's two bindings (not the status and reach policies:
    test_packaging_policies.py), by the policy they bind."""
    tenant = ("etj-elastic-operator-tenant-placement", "etj-elastic-operator-host-access")
    return {d["spec"]["policyName"].removeprefix("etj-elastic-operator-"): d["spec"]
            for d in helm_template("etj", "etj-system", *values)
            if d["kind"] == "ValidatingAdmissionPolicyBinding"
            and d["metadata"]["name"] in tenant}


def test_host_access_binds_only_labelled_namespaces_placement_every_served_one() -> None:
    """Host access judges every Pod of a namespace: only where labelled. Placement
    judges only ElasticTrainingJobs: by default wherever the operator serves them (every
    namespace; the release's watchNamespaces by name), with no label."""
    bindings = _tenant_bindings()
    assert set(bindings) == {"tenant-placement", "host-access"}
    assert {b["validationActions"][0] for b in bindings.values()} == {"Deny"}
    assert bindings["host-access"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"elastic.pathways.dev/tenant-policy": "enforced"}}
    assert "matchResources" not in bindings["tenant-placement"]  # every namespace
    served = _tenant_bindings("watchNamespaces={team-a,team-b}")
    assert served["tenant-placement"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                              "values": ["team-a", "team-b"]}]}
    assert served["host-access"] == bindings["host-access"]
    own = _tenant_bindings("tenantPolicy.placementNamespaceSelector.matchLabels.team=a",
                           "watchNamespaces={team-a}")
    assert own["tenant-placement"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"team": "a"}}


def test_the_tenant_policies_can_be_left_out() -> None:
    assert _tenant_bindings("tenantPolicy.enabled=false") == {}
    off = helm_template("etj", "etj-system", "tenantPolicy.enabled=false")
    assert not [d for d in off if d["kind"] == "ValidatingAdmissionPolicy"
                and d["metadata"]["name"].endswith(("-tenant-placement", "-host-access"))]
