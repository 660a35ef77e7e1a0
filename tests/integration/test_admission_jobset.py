"""Every rendered example goes through the real API server and the real JobSet webhooks
(server-side dry run) and is accepted, unchanged where the webhook would default."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from elastic_api import GROUP, PLURAL
from elastic_api.validation import validate_job
from elastic_devtools.localcluster.faults import wait_for
from elastic_operator.render import render

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.stem for p in (REPO / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def api(cluster: Any) -> Iterator[client.ApiClient]:
    api_client = cluster.api_client()
    yield api_client
    api_client.close()


def rendered(example: str, namespace: str) -> list[dict[str, Any]]:
    obj = yaml.safe_load((REPO / "examples" / f"{example}.yaml").read_text())
    obj["metadata"]["namespace"] = namespace
    # A MultiKueue example renders its Workload here; its worker cluster renders the copy
    # MultiKueue makes there, without managedBy: that is the JobSet to check.
    obj["spec"].pop("managedBy", None)
    return render(validate_job(obj))


def dry_run_jobset(api: client.ApiClient, namespace: str, jobset: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", jobset, dry_run="All")
    return result


@pytest.mark.parametrize("example", EXAMPLES)
def test_rendered_jobset_passes_the_jobset_webhooks(api: client.ApiClient, namespace: str,
                                                     example: str):
    objects = rendered(example, namespace)
    jobset = objects[-1]
    accepted = dry_run_jobset(api, namespace, jobset)
    # Nothing the mutating webhook defaults was left for it to fill in.
    for key in ("coordinator", "network", "successPolicy", "failurePolicy", "startupPolicy",
                "suspend"):
        assert accepted["spec"][key] == jobset["spec"][key], key
    for ours, theirs in zip(jobset["spec"]["replicatedJobs"], accepted["spec"]["replicatedJobs"],
                            strict=True):
        assert theirs["template"]["spec"]["completionMode"] == "Indexed"
        assert (theirs["template"]["spec"]["template"]["spec"]["restartPolicy"]
                == ours["template"]["spec"]["template"]["spec"]["restartPolicy"])
        assert theirs.get("dependsOn") == ours.get("dependsOn")


@pytest.mark.parametrize("example", EXAMPLES)
def test_rendered_rbac_is_accepted(api: client.ApiClient, namespace: str, example: str):
    for obj in rendered(example, namespace)[:-1]:
        utils.create_from_dict(api, obj, namespace=namespace, dry_run="All")


def test_the_webhook_is_really_consulted(api: client.ApiClient, namespace: str):
    jobset = rendered("article", namespace)[-1]
    jobset["spec"]["replicatedJobs"].reverse()  # dependsOn on the first replicatedJob
    with pytest.raises(ApiException) as info:
        dry_run_jobset(api, namespace, jobset)
    message = json.loads(info.value.body or "{}").get("message", "")
    assert "DependsOn can't be set for the first ReplicatedJob" in message


def _allowed(api: client.ApiClient, namespace: str, user: str, verb: str, resource: str,
             name: str | None = None, subresource: str | None = None, group: str = GROUP) -> bool:
    attributes: dict[str, Any] = {"namespace": namespace, "verb": verb, "group": group,
                                  "resource": resource}
    if name is not None:
        attributes["name"] = name
    if subresource is not None:
        attributes["subresource"] = subresource
    review = client.AuthorizationV1Api(api).create_subject_access_review({
        "spec": {"user": user, "groups": ["system:serviceaccounts",
                                           f"system:serviceaccounts:{namespace}"],
                 "resourceAttributes": attributes}})
    return bool(review.status.allowed)


@pytest.mark.parametrize("example", ["article", "simulated"])
def test_trainer_rbac_grants_exactly_its_own_job(api: client.ApiClient, namespace: str,
                                                 example: str):
    objects = rendered(example, namespace)
    for obj in objects[:-1]:
        utils.create_from_dict(api, obj, namespace=namespace)
    job = objects[-1]["metadata"]["name"]
    (binding,) = [o for o in objects if o["kind"] == "RoleBinding"]
    assert binding["subjects"][0]["name"] == "default"  # the pods' own account
    user = f"system:serviceaccount:{namespace}:default"
    reads_pods = example == "simulated"  # the simulated slice agents' health check

    def granted() -> bool:
        return (_allowed(api, namespace, user, "get", PLURAL, job)
                and _allowed(api, namespace, user, "patch", PLURAL, job, "status")
                and (not reads_pods or _allowed(api, namespace, user, "list", "pods",
                                                group="")))

    # The RBAC authorizer learns of a new RoleBinding from its informer: ask until every
    # grant shows (a deadline, not one look), then the denials mean something.
    wait_for(granted, 30, f"the RBAC authorizer to grant {user} its own job")
    assert not _allowed(api, namespace, user, "patch", PLURAL, "someone-else", "status")
    assert not _allowed(api, namespace, user, "patch", PLURAL, job)  # the spec is not its own
    assert not _allowed(api, namespace, user, "delete", PLURAL, job)
    assert _allowed(api, namespace, user, "list", "pods", group="") == reads_pods
