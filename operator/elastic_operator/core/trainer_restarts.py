"""A crash of the training program keeps the slices: main restarts in its pod. Pure.

The head pod's `main` carries a container restart rule (render.main_restart_rules,
Kubernetes KEP-5307): on a crash the kubelet runs it again in the same pod, beside the
same pathways-rm and pathways-proxy, and every worker pod stays as it is; the new process
resumes from the newest copy of the state (docs/trainer.md, "A crash of main"). Before,
the crash failed the head pod, the head Job and, through JobSet's failurePolicy, the whole
JobSet: every slice's pods recreated.

The budget stays spec.maxRestarts, as when each crash cost a JobSet restart: main's
restarts in place (its restartCount in the head pod) and the JobSet's own restarts
together. Once they exceed it the operator ends the head Job (`plan_end_head`:
activeDeadlineSeconds 0), and the JobSet's failure-policy rule for that Job's
DeadlineExceeded fails the JobSet, so the job fails as a JobSet out of restarts does.
"""
from __future__ import annotations

from collections.abc import Sequence

from elastic_api.models import ElasticTrainingJobSpec
from elastic_api.names import HEAD_REPLICATED_JOB, child_job_name
from elastic_operator.core.plan import EndHeadJob
from elastic_operator.observed import ObservedJobSet, ObservedPod


def live_head(pods: Sequence[ObservedPod]) -> ObservedPod | None:
    """The head pod that runs now (not ended, not going), if any."""
    live = [p for p in pods if p.replicated_job == HEAD_REPLICATED_JOB and not p.terminating
            and p.phase in ("Pending", "Running")]
    return max(live, key=lambda p: (p.created_at is not None, p.created_at, p.name),
               default=None)


def in_place_restarts(pods: Sequence[ObservedPod]) -> int:
    """How often main restarted in the running head pod (0: none, or no such pod)."""
    head = live_head(pods)
    return head.main.restart_count if head is not None and head.main is not None else 0


def spent(spec: ElasticTrainingJobSpec, in_place: int, jobset_restarts: int) -> bool:
    """main's restarts in place and the JobSet's own exceed spec.maxRestarts."""
    return in_place > 0 and in_place + jobset_restarts > spec.max_restarts


def plan_end_head(namespace: str, spec: ElasticTrainingJobSpec, jobset: ObservedJobSet,
                  pods: Sequence[ObservedPod]) -> EndHeadJob | None:
    """The head Job to end, once main's restarts in place spent the budget. Level-based:
    planned while the head pod runs (its Job ending takes it down)."""
    head = live_head(pods)
    restarts = in_place_restarts(pods)
    if head is None or not head.job_uid or not spent(spec, restarts, jobset.restarts):
        return None
    return EndHeadJob(namespace, child_job_name(jobset.name, HEAD_REPLICATED_JOB, 0),
                      head.job_uid, restarts, jobset.restarts)
