"""ImageDrift: a replaced slice whose workers pulled another build of the server image
than the resource manager and the other slices run (its tag moved in the registry) is
reported, with the fix; one build again ends it (docs/design/pathways-images.md)."""
from __future__ import annotations

import dataclasses

from elastic_api.conditions import ConditionType, Reason
from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import ObservedPod, pod_from_dict
from tests.builders import (
    article_job,
    at,
    head_pod,
    healthy_pods,
    main_running,
    observe,
)

SERVER = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server"
OLD, NEW = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def running(pod: ObservedPod, container: str, digest: str) -> ObservedPod:
    return dataclasses.replace(pod, images=((container, f"{SERVER}@{digest}"),))


def pods(new_slice: int | None = None) -> list[ObservedPod]:
    head = running(head_pod(main=main_running()), "pathways-rm", OLD)
    workers = [running(p, "pathways-worker", NEW if p.slice_index == new_slice else OLD)
               for p in healthy_pods()]
    return [head, *workers]


def drift(status: object) -> object:
    return next((c for c in status.conditions  # type: ignore[attr-defined]
                 if c.type == ConditionType.IMAGE_DRIFT), None)


def test_one_build_everywhere_says_nothing():
    result = compute_status(article_job(), observe(pods(None)), None, at(1))
    assert drift(result.status) is None
    assert not [e for e in result.events if e.reason == Reason.IMAGE_DRIFT]


def test_a_replaced_slice_on_another_build_is_reported_once_with_the_fix():
    job = article_job()
    first = compute_status(job, observe(pods(2)), None, at(1))
    cond = drift(first.status)
    assert (cond.status, cond.reason) == ("True", Reason.DIGESTS_DIFFER)
    assert f"the resource manager and slices 0, 1 on {OLD}" in cond.message
    assert f"slice 2 on {NEW}" in cond.message
    assert "spec.pathways.images.server pinned by digest" in cond.message
    (warning,) = [e for e in first.events if e.reason == Reason.IMAGE_DRIFT]
    assert warning.type == "Warning" and warning.message == cond.message
    again = compute_status(job, observe(pods(2)), first.status, at(2))
    assert drift(again.status).status == "True"
    assert not [e for e in again.events if e.reason == Reason.IMAGE_DRIFT]
    # The drifted slice replaced again, onto the first build: over, and said so.
    over = compute_status(job, observe(pods(None)), again.status, at(3))
    assert (drift(over.status).status, drift(over.status).reason) == (
        "False", Reason.SAME_DIGESTS)


def test_pods_being_deleted_and_the_simulated_backend_do_not_count():
    job = article_job()
    leaving = [dataclasses.replace(p, deletion_timestamp=at(0)) if p.slice_index == 2 else p
               for p in pods(2)]
    assert drift(compute_status(job, observe(leaving), None, at(1)).status) is None
    simulated = job.model_copy(deep=True)
    simulated.spec.backend = "simulated"
    assert drift(compute_status(simulated, observe(pods(2)), None, at(1)).status) is None


def test_the_image_ids_are_read_from_the_pods_statuses():
    pod = pod_from_dict({
        "metadata": {"name": "w", "labels": {}},
        "status": {"phase": "Running",
                   "initContainerStatuses": [{"name": "colocated-python-sidecar",
                                              "imageID": f"sidecar@{NEW}"}],
                   "containerStatuses": [{"name": "pathways-worker",
                                          "imageID": f"{SERVER}@{OLD}"},
                                         {"name": "not-started", "imageID": ""}]}})
    assert pod.images == (("colocated-python-sidecar", f"sidecar@{NEW}"),
                          ("pathways-worker", f"{SERVER}@{OLD}"))
