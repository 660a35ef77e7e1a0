"""ImageDrift: a Pathways container running another build than its peers, and its Warning
Event, posted once each time the condition turns True.

A replaced slice's pods name the image as the JobSet's template does, and a node that has
not pulled it resolves the name in the registry then (elastic_api/images.py): under a tag
that moved since, its workers run a newer server than the resource manager and the other
slices. Nothing can pin the running JobSet's template to a digest (it is immutable), so the
operator says so, from the image IDs the kubelets report, and names the fix: recreate the
job with the image pinned by digest. The server image is the resource manager's and every
worker's; the colocated Python sidecar's is every worker's.
"""
from __future__ import annotations

from collections.abc import Iterable

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import Condition, ElasticTrainingJobSpec
from elastic_api.names import COLOCATED_PYTHON_CONTAINER, RM_CONTAINER, WORKER_CONTAINER
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.core.wording import fmt_slices
from elastic_operator.model.objects import Observed, ObservedPod

# (the image's spec field, who runs it on the head, who on the workers)
_IMAGES = (("spec.pathways.images.server", RM_CONTAINER, WORKER_CONTAINER),
           ("spec.pathways.colocatedPython.image", None, COLOCATED_PYTHON_CONTAINER))


def digest(image_id: str) -> str:
    """The digest of an image ID (`repo@sha256:...`, or `sha256:...` as some runtimes
    report it)."""
    return image_id.rpartition("@")[2]


def _runs(pod: ObservedPod, container: str) -> str | None:
    return next((digest(i) for c, i in pod.images if c == container), None)


def _live(pods: Iterable[ObservedPod]) -> list[ObservedPod]:
    return [p for p in pods if not p.terminating and p.phase in ("Pending", "Running")]


def _drift(observed: Observed, field: str, head: str | None, worker: str) -> str | None:
    """Who runs which digest of one image, in words, when they differ."""
    runners: dict[str, list[str]] = {}
    if head is not None:
        for pod in _live(observed.head_pods):
            if (d := _runs(pod, head)) is not None:
                runners.setdefault(d, []).append("the resource manager")
    slices: dict[str, set[int]] = {}
    for index, pods in observed.worker_pods_by_slice.items():
        for pod in _live(pods):
            if (d := _runs(pod, worker)) is not None:
                slices.setdefault(d, set()).add(index)
    for d, indexes in slices.items():
        runners.setdefault(d, []).append(fmt_slices(sorted(indexes)))
    if len(runners) < 2:
        return None
    who = "; ".join(f"{' and '.join(names)} on {d}" for d, names in sorted(runners.items()))
    return (f"{worker} runs {len(runners)} builds: {who}. The image's tag moved in the "
            f"registry since the first pods pulled it; recreate the job with {field} "
            "pinned by digest (<image>@sha256:...) to run one build (the job resumes from "
            "its newest committed checkpoint)")


def image_drift_condition(setter: ConditionSetter, spec: ElasticTrainingJobSpec,
                          observed: Observed, previous: Condition | None) -> Condition | None:
    """True while the Pathways containers of one image run different digests; False once
    they no longer do; absent on a job where it was never seen (or backend simulated)."""
    if spec.backend != "pathways":
        return None
    drift = [d for field, head, worker in _IMAGES
             if (d := _drift(observed, field, head, worker)) is not None]
    if drift:
        return setter.true(ConditionType.IMAGE_DRIFT, Reason.DIGESTS_DIFFER, " ".join(drift))
    if previous is None:
        return None
    return setter.false(ConditionType.IMAGE_DRIFT, Reason.SAME_DIGESTS,
                        "every Pathways container of one image runs one build")


def image_drift_events(previous: Condition | None, new: Condition | None) -> list[StatusEvent]:
    """A Warning Event when the condition turns True."""
    if new is None or new.status != "True" or (previous is not None
                                              and previous.status == "True"):
        return []
    return [StatusEvent(reason=Reason.IMAGE_DRIFT, message=new.message, type="Warning")]
