"""A Job the API server refuses to create from our JobSet is named in the job's status
(issue 81 item 1): a ValidatingAdmissionPolicy refuses the JobSet's second worker Job,
JobSet can only post JobCreationFailed on the JobSet, and the operator's dry run of the
missing Job makes JobsCreated False, naming the Job, the field and the server's words,
with one Warning Event; once the policy's binding is gone and JobSet creates the Job,
JobsCreated is True again."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.kube import KubeClient
from elastic_devtools.localcluster.faults import wait_for
from tests.support.article_job import (
    JOB,
    JOBSETS,
    condition,
    events,
    get_jobset,
    submit,
)
from tests.support.waiting import wait_status

# One operator for the module's tests (integration/conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("running_operator")]

TIMEOUT = 120
REFUSED = f"{JOB}-worker-1"  # the JobSet's second worker Job
WORDS = "refused by test_refused_job's policy"
POLICY = "etj-test-refused-job"


def policy() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": ["batch"], "apiVersions": ["v1"],
                     "operations": ["CREATE"], "resources": ["jobs"]}]},
                 "validations": [{"expression": f"object.metadata.name != '{REFUSED}'",
                                  "message": WORDS, "fieldPath": "metadata.name",
                                  "reason": "Invalid"}]}}


def binding(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": POLICY},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": ns}}}}}


def refusal(api: client.ApiClient, ns: str) -> dict[str, Any] | None:
    """The API server's Status refusing the Job now (a dry run), None if it accepts it."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": REFUSED},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}
    try:
        client.BatchV1Api(api).create_namespaced_job(ns, job, dry_run="All")
    except ApiException as e:
        body: dict[str, Any] = json.loads(e.body)
        return body if WORDS in body.get("message", "") else None
    return None


def said_of(status: dict[str, Any]) -> str:
    """How the condition names the Job, the field (where the server names one: a
    ValidatingAdmissionPolicy's cause carries none, its `fieldPath` notwithstanding) and
    the server's words."""
    field = next((c["field"] for c in (status.get("details") or {}).get("causes") or []
                  if c.get("field")), "")
    return f"Job {REFUSED}: {f'field {field}: ' if field else ''}{status['message']}"


@pytest.fixture
def refusing(api: client.ApiClient, ns: str) -> Iterator[client.AdmissionregistrationV1Api]:
    admission = client.AdmissionregistrationV1Api(api)
    # Raw: the typed client's model lacks `fieldPath`, the field the refusal names.
    KubeClient(api).create("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
                           policy())
    admission.create_validating_admission_policy_binding(binding(ns))
    # The policy reaches the API server's admission by a watch: in force before the job.
    wait_for(lambda: refusal(api, ns), 30, "the policy in force")
    yield admission
    try:
        admission.delete_validating_admission_policy_binding(POLICY)
    except ApiException as e:
        if e.status != 404:
            raise
    admission.delete_validating_admission_policy(POLICY)


def test_a_refused_job_is_named_at_once_and_cleared_once_created(
        api: client.ApiClient, ns: str, refusing: client.AdmissionregistrationV1Api) -> None:
    submit(api, ns)
    st = wait_status(api, ns, lambda s: condition(s, C.JOBS_CREATED).get("status") == "False",
                     "JobsCreated False", TIMEOUT)
    said = condition(st, C.JOBS_CREATED)
    assert said["reason"] == Reason.JOB_REFUSED
    server = refusal(api, ns)
    assert server is not None and server["code"] == 422
    assert said_of(server) in said["message"], (server, said)
    assert WORDS in said["message"] and POLICY in said["message"], said
    warned = wait_for(lambda: events(api, ns, Reason.JOB_REFUSED), 30,
                      "the JobRefused Event")
    assert warned == [said["message"]]
    # The others were created: only the refused one is named.
    assert f"{JOB}-worker-0" not in said["message"]
    refusing.delete_validating_admission_policy_binding(POLICY)
    wait_for(lambda: refusal(api, ns) is None, 30, "the policy out of force")
    # JobSet retries with a growing backoff; a change of the JobSet makes it try at once.
    assert get_jobset(api, ns) is not None
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        *JOBSETS[:2], ns, JOBSETS[2], JOB, {"metadata": {"annotations": {"test/poke": "1"}}})
    st = wait_status(api, ns, lambda s: condition(s, C.JOBS_CREATED).get("status") == "True",
                     "JobsCreated True again", TIMEOUT)
    assert condition(st, C.JOBS_CREATED)["reason"] == Reason.ALL_JOBS_CREATED
    assert client.BatchV1Api(api).read_namespaced_job(REFUSED, ns).metadata.name == REFUSED
    assert events(api, ns, Reason.JOB_REFUSED) == warned  # said once
