"""A crash of the training program keeps the slices: main restarts in its pod. Pure.

The head pod's `main` carries a container restart rule (render.main_restart_rules,
Kubernetes KEP-5307): on a crash the kubelet runs it again in the same pod, beside the
same pathways-rm and pathways-proxy, and every worker pod stays as it is; the new process
resumes from the newest copy of the state (docs/trainer.md, "A crash of main"). Before,
the crash failed the head pod, the head Job and, through JobSet's failurePolicy, the whole
JobSet: every slice's pods recreated.

The budget stays the JobSet's (spec.maxRestarts, per window or over the run,
elastic_api.budgets), as when each crash cost a JobSet restart: core/budget_tracking.py charges
each of main's restarts in place to it, once, when first seen. Once spent, the operator
ends the head Job (`budgets.plan_end_head`: activeDeadlineSeconds 0), and the JobSet's
failure-policy rule for that Job's DeadlineExceeded fails the JobSet, so the job fails as
a JobSet out of restarts does.

A stalled trainer (spec.elastic.onStall Recover, core/progressing.py) restarts in place too:
status.progress.restart asks `etj train` to exit (it reads its job's status, and
recognizes itself by its processStartedAt), and its pod restarts main. A trainer that has
not exited within EXIT_GRACE_SECONDS (frozen, or no longer reading) falls back to the
head pod's deletion, said once in the status and a TrainerRestarting Event.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from elastic_api.models import ElasticTrainingJobSpec, TrainerRestart
from elastic_api.names import HEAD_REPLICATED_JOB
from elastic_operator.model.objects import ObservedPod


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


# How long a trainer asked to exit has before its head pod is deleted instead.
EXIT_GRACE_SECONDS = 30.0


def asks_in_place(spec: ElasticTrainingJobSpec, head: ObservedPod | None) -> bool:
    """A stalled trainer can be restarted in its pod: its main restarts there, and it is
    `etj train`, which reads the request (a program of the user's does not)."""
    return head is not None and head.main_restarts_in_place and spec.trainer.command is None


def main_restarted_since(restart: TrainerRestart, head: ObservedPod | None) -> bool:
    """main restarted after the request: its restartCount rose, or another head pod runs."""
    if head is None or head.uid != restart.pod_uid:
        return True
    count = head.main.restart_count if head.main is not None else 0
    return restart.main_restarts is not None and count > restart.main_restarts


def exit_overdue(restart: TrainerRestart, head: ObservedPod | None, now: datetime) -> bool:
    """An in-place restart the trainer has not made within the grace: fall back."""
    return restart.in_place and now >= restart.requested_at + timedelta(
        seconds=EXIT_GRACE_SECONDS) and not main_restarted_since(restart, head)


def exit_due_in(restart: TrainerRestart | None, now: datetime) -> float | None:
    """Seconds until an in-place restart's grace ends (None: none waits)."""
    if restart is None or not restart.in_place:
        return None
    end = restart.requested_at + timedelta(seconds=EXIT_GRACE_SECONDS)
    return max(0.0, (end - now).total_seconds())
