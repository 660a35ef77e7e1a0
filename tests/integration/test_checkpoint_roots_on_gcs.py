"""The operator lists a job's checkpoint root only under the roots its configuration
allows for the job's namespace (`etj operator --checkpoint-roots`), on the local control
plane with a real GCS API (fake-gcs-server): the same bucket is listed for the team it
was given to and refused, unlisted, for another (no confused deputy)."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from kubernetes import client

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.gcs import FakeGcsServer
from elastic_devtools.localcluster.operator_process import TEST_ARGS, OperatorProcess
from elastic_operator.checkpoints.listing import COMMIT_MARKER
from tests.support.article_job import condition, delete_jobs_and_wait_for_pods, events, submit
from tests.support.waiting import wait_status

pytestmark = pytest.mark.cluster


@pytest.fixture
def bucket(fake_gcs: FakeGcsServer) -> str:
    """A bucket with one committed step (100) under ckpt/."""
    gcs = storage.Client(project="etj-test", credentials=AnonymousCredentials(),
                         client_options={"api_endpoint": fake_gcs.endpoint})
    created = gcs.create_bucket(f"etj-roots-{uuid.uuid4().hex[:12]}")
    for name in ("ckpt/100/_CHECKPOINT_METADATA", f"ckpt/100/{COMMIT_MARKER}"):
        created.blob(name).upload_from_string("x")
    return created.name


@pytest.fixture
def operator(cluster: Cluster, api: client.ApiClient, fake_gcs: FakeGcsServer,
             namespace: str, bucket: str) -> Iterator[OperatorProcess]:
    """The operator, allowed gs://<bucket> for `namespace` only."""
    with OperatorProcess(Path(cluster.kubeconfig), Path(cluster.logs_dir) / "roots.log",
                         args=(*TEST_ARGS, "--checkpoint-roots",
                               f"{namespace}=gs://{bucket}"),
                         env=fake_gcs.env) as proc:
        yield proc


def test_a_root_is_listed_for_the_namespace_it_is_allowed_to_and_refused_for_another(
        api: client.ApiClient, namespace: str, another_namespace: str, bucket: str,
        operator: OperatorProcess) -> None:
    directory = f"gs://{bucket}/ckpt"
    try:
        for ns in (namespace, another_namespace):
            submit(api, ns, suspend=True, checkpoint={"directory": directory})
        st = wait_status(api, namespace, lambda s: (s.get("checkpoint") or {}).get(
            "latestCommittedStep") == 100, "the allowed team's step 100", timeout=60)
        assert st["checkpoint"].get("error") is None
        assert condition(st, C.CHECKPOINT_ROOT_ALLOWED)["status"] == "True"
        st = wait_status(api, another_namespace, lambda s: (s.get("checkpoint") or {}).get(
            "error"), "the other team's refusal", timeout=60)
        error = st["checkpoint"]["error"]
        assert error.startswith(f"spec.checkpoint.directory: {directory} is not under a "
                                "checkpoint root the operator may list for namespace "
                                f"{another_namespace} (allowed: none)"), error
        assert "--checkpoint-roots" in error
        # Refused, never listed: nothing of the bucket is published.
        assert "latestCommittedStep" not in st["checkpoint"]
        assert not st["checkpoint"].get("incompleteSteps")
        # Said where a user looks first: a condition, and one Warning Event naming the
        # flag and the chart value (once: tests/unit/test_checkpoint_root_condition.py).
        assert st["checkpoint"]["reason"] == Reason.CHECKPOINT_ROOT_NOT_ALLOWED
        refused = condition(st, C.CHECKPOINT_ROOT_ALLOWED)
        assert (refused["status"], refused["reason"]) == (
            "False", Reason.CHECKPOINT_ROOT_NOT_ALLOWED), refused
        assert error in refused["message"]
        warned = wait_for(lambda: events(api, another_namespace,
                                         Reason.CHECKPOINT_ROOT_NOT_ALLOWED), 30,
                          "the CheckpointRootNotAllowed Event")
        assert len(warned) == 1 and "--checkpoint-roots" in warned[0] and \
            "checkpointRoots" in warned[0], warned
    finally:
        for ns in (namespace, another_namespace):
            delete_jobs_and_wait_for_pods(api, ns)
