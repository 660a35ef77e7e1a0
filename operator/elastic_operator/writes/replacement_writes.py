"""Executes the slice-replacement actions of one reconcile (core/replacement.py plans
them; the status that records them is already written).

Each action that touches a node or its pods (a quarantine label or its release, a
force-delete) passes the node-action limiter first and posts an Event on the job when it
happens (a quarantine and a release also on the pool's first node, with who and why);
one that is throttled waits (the reconcile is woken when it may go) and posts a
NodeActionThrottled Event at most once per cooldown. Deleting a Job, lowering its
backoffLimit or ending it carries the Job's uid as a precondition, so a stale plan never
touches a newer Job.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, assert_never

from elastic_api.conditions import Reason
from elastic_api.names import (
    QUARANTINE_CAUSE_ANNOTATION,
    QUARANTINE_LABEL,
    QUARANTINED_AT_ANNOTATION,
)
from elastic_operator.client.kube import ApiError, Kube
from elastic_operator.core.plan import (
    DeleteWorkerJob,
    EndHeadJob,
    FailWorkerJob,
    ForceDeletePod,
    LowerBackoffLimit,
    QuarantinePool,
    ReleasePool,
    ReplacementAction,
    RestartTrainer,
)
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.writes.node_actions import NodeActionLimiter

logger = logging.getLogger("elastic_operator")


class ReplacementWrites:
    def __init__(self, kube: Kube, metrics: OperatorMetrics, limiter: NodeActionLimiter, *,
                 quarantine_pools: bool = True) -> None:
        self.kube = kube
        self.metrics = metrics
        self.limiter = limiter
        self.quarantine_pools = quarantine_pools

    def execute(self, raw: dict[str, Any], actions: tuple[ReplacementAction, ...],
                now: datetime) -> float | None:
        """Run the actions in order; the seconds until a throttled one may go (or None)."""
        events: list[StatusEvent] = []
        waits: list[float] = []
        namespace = raw.get("metadata", {}).get("namespace", "")
        for action in actions:
            match action:
                case QuarantinePool():
                    self._quarantine(action, now, events, waits)
                case ReleasePool():
                    self._release(action, now, events, waits)
                case DeleteWorkerJob():
                    if self.kube.delete_job(action.namespace, action.name, action.uid):
                        logger.info("%s/%s: deleted worker Job %s (slice %d, %s); JobSet "
                                    "recreates it", namespace, raw["metadata"]["name"],
                                    action.name, action.slice_index, action.reason)
                case ForceDeletePod():
                    self._force_delete(action, events, waits)
                case LowerBackoffLimit():
                    if self.kube.lower_job_backoff_limit(action.namespace, action.name,
                                                         action.uid):
                        logger.info("%s/%s: slice %d's restart budget is spent: Job %s "
                                    "backoffLimit set to 0", namespace,
                                    raw["metadata"]["name"], action.slice_index, action.name)
                case FailWorkerJob():
                    if self.kube.fail_job(action.namespace, action.name, action.uid):
                        logger.info("%s/%s: slice %d (%s) with its restart budget spent: Job "
                                    "%s ended (activeDeadlineSeconds 0)", namespace,
                                    raw["metadata"]["name"], action.slice_index, action.reason,
                                    action.name)
                case RestartTrainer():
                    self._restart_trainer(action, raw["metadata"]["name"])
                case EndHeadJob():
                    if self.kube.fail_job(action.namespace, action.name, action.uid):
                        logger.info("%s/%s: the JobSet restart budget is spent (%d restarts "
                                    "count, %d of the run's main's in place): head Job %s "
                                    "ended (activeDeadlineSeconds 0)", namespace,
                                    raw["metadata"]["name"], action.restarts,
                                    action.main_in_place, action.name)
                case _:
                    assert_never(action)
        for event in events:
            try:
                self.kube.post_event(raw, event, now)
            except ApiError as e:  # best effort, as every Event
                logger.warning("could not post event %s: %s", event.reason, e)
        return min(waits) if waits else None

    def _restart_trainer(self, action: RestartTrainer, job: str) -> None:
        """Let the head Job replace one more failed pod, then delete the head pod: the Job
        makes a new one (the head's restartPolicy is Never and its backoffLimit 0, so the
        deletion alone would fail the Job, and with it the JobSet). A Job changed meanwhile
        (another head Job: a JobSet restart) is left alone: the next reconcile plans
        again from what it sees."""
        head = self.kube.get_batch_job(action.namespace, action.head_job)
        if head is None:
            return
        uid = str(head.get("metadata", {}).get("uid") or "")
        if action.job_uid and uid != action.job_uid:
            return
        failed = int(head.get("status", {}).get("failed") or 0)
        limit = int(head.get("spec", {}).get("backoffLimit") or 0)
        if limit < failed + 1 and not self.kube.allow_job_failure(
                action.namespace, action.head_job, uid, failed, limit):
            return
        if self.kube.delete_pod(action.namespace, action.pod_name, action.pod_uid):
            logger.info("%s/%s: restarting the trainer stalled at step %s: deleted head pod "
                        "%s (Job %s backoffLimit %d)", action.namespace, job, action.step,
                        action.pod_name, action.head_job, max(limit, failed + 1))

    def _allowed(self, kind: str, node: str, what: str, events: list[StatusEvent],
                 waits: list[float]) -> bool:
        wait = self.limiter.acquire(kind, node)
        if wait <= 0:
            return True
        waits.append(wait)
        self.metrics.node_actions_throttled.inc()
        if self.limiter.should_warn(kind, node):
            events.append(StatusEvent(
                reason=Reason.NODE_ACTION_THROTTLED, type="Warning",
                message=f"{what} waits {wait:.0f} s (node-action rate limit or cooldown on "
                        f"node {node})"))
        return False

    def _quarantine(self, action: QuarantinePool, now: datetime, events: list[StatusEvent],
                    waits: list[float]) -> None:
        if not self.quarantine_pools or not action.nodes:
            return
        if not self._allowed("quarantine", action.pool, f"quarantining node pool {action.pool}",
                             events, waits):
            return
        stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._label(action.nodes, action.reason, {QUARANTINED_AT_ANNOTATION: stamp,
                                                  QUARANTINE_CAUSE_ANNOTATION:
                                                  action.cause.to_json()})
        self.metrics.pool_quarantines.labels(action.reason).inc()
        logger.info("quarantined node pool %s (%s, by %s): %d nodes labelled", action.pool,
                    action.reason, action.cause.describe(), len(action.nodes))
        event = StatusEvent(
            reason=Reason.POOL_QUARANTINED, type="Warning", slice_index=action.slice_index,
            message=f"node pool {action.pool} quarantined ({action.reason}, by "
                    f"{action.cause.describe()}): replacement slices avoid its "
                    f"{len(action.nodes)} nodes until the evidence ends")
        events.append(event)
        self._post_on_node(action.nodes, event, now)

    def _release(self, action: ReleasePool, now: datetime, events: list[StatusEvent],
                 waits: list[float]) -> None:
        if not self.quarantine_pools or not action.nodes:
            return
        if not self._allowed("release", action.pool, f"releasing node pool {action.pool}",
                             events, waits):
            return
        self._label(action.nodes, None, {QUARANTINED_AT_ANNOTATION: None,
                                         QUARANTINE_CAUSE_ANNOTATION: None})
        self.metrics.pool_releases.inc()
        logger.info("released node pool %s (quarantined for %s): %s", action.pool,
                    action.reason, action.why)
        event = StatusEvent(
            reason=Reason.POOL_RELEASED, slice_index=action.slice_index,
            message=f"node pool {action.pool} released (quarantined for {action.reason}): "
                    f"{action.why}")
        events.append(event)
        self._post_on_node(action.nodes, event, now)

    def _label(self, nodes: tuple[str, ...], value: str | None,
               annotations: dict[str, str | None]) -> None:
        for node in nodes:
            try:
                self.kube.label_node(node, {QUARANTINE_LABEL: value}, annotations)
            except ApiError as e:
                if e.status != 404:  # a node that is gone needs no label
                    raise

    def _post_on_node(self, nodes: tuple[str, ...], event: StatusEvent,
                      now: datetime) -> None:
        """The same Event on the pool's first node: `kubectl describe node` says who
        quarantined it and why."""
        ref = {"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": nodes[0], "namespace": "default"}}
        try:
            self.kube.post_event(ref, replace(event, slice_index=None), now)
        except ApiError as e:  # best effort, as every Event
            logger.warning("could not post event %s on node %s: %s", event.reason,
                           nodes[0], e)

    def _force_delete(self, action: ForceDeletePod, events: list[StatusEvent],
                      waits: list[float]) -> None:
        if not self._allowed("force-delete", action.node, f"force-deleting pod {action.name}",
                             events, waits):
            return
        if not self.kube.delete_pod_now(action.namespace, action.name, action.uid):
            return
        self.metrics.pods_force_deleted.inc()
        logger.info("%s: force-deleted pod %s of slice %d, stuck Terminating on node %s",
                    action.namespace, action.name, action.slice_index, action.node)
        events.append(StatusEvent(
            reason=Reason.STUCK_POD_FORCE_DELETED, type="Warning", slice_index=action.slice_index,
            message=f"pod {action.name} of slice {action.slice_index} was stuck Terminating on "
                    f"node {action.node}, which is not Ready: deleted with grace period 0"))
