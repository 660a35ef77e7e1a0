"""Fluent builders for the objects the operator's tests need, in the spirit of JobSet's
pkg/util/testing/wrappers.go: start from a sane default, change only what the test is
about, then take the result.

Two families:
- wire objects, as the API server stores them (dicts): `EtjWrapper`, `JobSetWrapper`,
  `PodWrapper`, `NodeWrapper`; each setter returns the wrapper, `.obj()` a deep copy;
- the operator's observed values (elastic_operator.model.objects): `WorkerPod`, `HeadPod`,
  `ObservedJobSetBuilder`, `nodes_for`; each setter returns a new builder, `.build()`
  the frozen value.

The defaults are the article's job: v5e 4x4 (4 hosts per slice) x 3 slices.
"""
from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Self

from elastic_api.models import ElasticTrainingJob, TrainingReport
from elastic_api.names import (
    API_VERSION,
    APPLIED_SPEC_ANNOTATION,
    COMPLETION_INDEX_LABEL,
    HEAD_REPLICATED_JOB,
    JOB_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOBSET_API_VERSION,
    KIND,
    REPLICATED_JOB_LABEL,
    WORKER_REPLICATED_JOB,
)
from elastic_operator.core.ownership import applied_spec
from elastic_operator.model.objects import (
    Observed,
    ObservedContainer,
    ObservedJob,
    ObservedJobSet,
    ObservedNode,
    ObservedPod,
    ObservedPool,
    ReplicatedJobStatus,
)

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
HOSTS = 4  # hosts (TPU VMs) per slice of v5e 4x4
SLICES = 3
ACCELERATOR = "tpu-v5-lite-podslice"  # v5e's GKE accelerator label


def worker_job_uid(slice_index: int, gen: int = 0) -> str:
    """The uid of a slice's worker Job: generation 0, then one per recreation."""
    return f"article-worker-{slice_index}-job{gen}"


def at(seconds: float) -> datetime:
    """T0 plus some seconds."""
    return T0 + timedelta(seconds=seconds)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`changes` merged into `base` key by key (nested objects merged, the rest replaced)."""
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


# --- wire objects ------------------------------------------------------------------------


class EtjWrapper:
    """An ElasticTrainingJob manifest."""

    def __init__(self, name: str = "article", namespace: str | None = "ns") -> None:
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        self._obj: dict[str, Any] = {
            "apiVersion": API_VERSION, "kind": KIND, "metadata": metadata,
            "spec": {
                "tpu": {"type": "v5e", "topology": "4x4", "numSlices": SLICES},
                "checkpoint": {"directory": "gs://b/ckpt"},
                "trainer": {"image": "trainer:1", "steps": 1000},
                "pathways": {"gcsScratch": "gs://b/scratch"},
            },
        }

    def uid(self, uid: str) -> Self:
        self._obj["metadata"]["uid"] = uid
        return self

    def generation(self, generation: int) -> Self:
        self._obj["metadata"]["generation"] = generation
        return self

    def tpu(self, type_: str = "v5e", topology: str = "4x4", num_slices: int = SLICES) -> Self:
        self._obj["spec"]["tpu"] = {"type": type_, "topology": topology,
                                    "numSlices": num_slices}
        return self

    def num_slices(self, n: int) -> Self:
        self._obj["spec"]["tpu"]["numSlices"] = n
        return self

    def backend(self, backend: str) -> Self:
        self._obj["spec"]["backend"] = backend
        return self

    def max_restarts(self, n: int) -> Self:
        self._obj["spec"]["maxRestarts"] = n
        return self

    def suspend(self, suspend: bool = True) -> Self:
        self._obj["spec"]["suspend"] = suspend
        return self

    def checkpoint_dir(self, directory: str) -> Self:
        self._obj["spec"]["checkpoint"] = {"directory": directory}
        return self

    def trainer(self, image: str = "trainer:1", steps: int = 1000, **more: Any) -> Self:
        self._obj["spec"]["trainer"] = {"image": image, "steps": steps, **more}
        return self

    def spec(self, **fields: Any) -> Self:
        """Set spec fields by their wire names (objects are merged into the default)."""
        _merge(self._obj["spec"], fields)
        return self

    def without(self, *fields: str) -> Self:
        """Leave these spec fields out (e.g. "pathways" for backend simulated)."""
        for name in fields:
            self._obj["spec"].pop(name, None)
        return self

    def status(self, status: dict[str, Any]) -> Self:
        self._obj["status"] = copy.deepcopy(status)
        return self

    def training(self, report: Any) -> Self:
        """status.training as the trainer wrote it (anything: tests feed it garbage)."""
        self._obj.setdefault("status", {})["training"] = copy.deepcopy(report)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def build(self) -> ElasticTrainingJob:
        return ElasticTrainingJob.model_validate(
            {k: v for k, v in self.obj().items() if k != "status"})


def etj(name: str = "article", namespace: str | None = "ns") -> EtjWrapper:
    return EtjWrapper(name, namespace)


def article_job(num_slices: int = SLICES, *, suspend: bool = False, generation: int = 1,
                max_restarts: int = 0, uid: str = "uid-1") -> ElasticTrainingJob:
    """The article's job, as the status tests see it (a uid, a generation)."""
    return (etj().uid(uid).generation(generation).num_slices(num_slices)
            .max_restarts(max_restarts).suspend(suspend).build())


class JobSetWrapper:
    """A JobSet as the API server returns it (rendered by the operator, then run)."""

    def __init__(self, name: str = "article", namespace: str = "ns") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": JOBSET_API_VERSION, "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "uid": f"{name}-js-uid"},
            "spec": {"suspend": False, "replicatedJobs": [
                {"name": HEAD_REPLICATED_JOB, "replicas": 1,
                 "template": {"spec": {"parallelism": 1, "completions": 1}}},
                {"name": WORKER_REPLICATED_JOB, "replicas": SLICES,
                 "template": {"spec": {"parallelism": HOSTS, "completions": HOSTS}}},
            ]},
            "status": {},
        }

    def suspend(self, suspend: bool = True) -> Self:
        self._obj["spec"]["suspend"] = suspend
        return self

    def workers(self, slices: int, hosts: int) -> Self:
        worker = self._obj["spec"]["replicatedJobs"][1]
        worker["replicas"] = slices
        worker["template"]["spec"].update(parallelism=hosts, completions=hosts)
        return self

    def owner(self, uid: str, *, controller: bool = True) -> Self:
        self._obj["metadata"]["ownerReferences"] = [
            {"apiVersion": API_VERSION, "kind": KIND, "name": self._obj["metadata"]["name"],
             "uid": uid, "controller": controller}]
        return self

    def applied_spec(self, spec: str) -> Self:
        self._obj["metadata"].setdefault("annotations", {})[APPLIED_SPEC_ANNOTATION] = spec
        return self

    def restarts(self, n: int) -> Self:
        self._obj["status"]["restarts"] = n
        return self

    def terminal(self, state: str, message: str | None = None) -> Self:
        """Completed or Failed, with the condition the JobSet controller sets."""
        self._obj["status"]["terminalState"] = state
        cond: dict[str, Any] = {"type": state, "status": "True"}
        if message is not None:
            cond["message"] = message
        self._obj["status"].setdefault("conditions", []).append(cond)
        return self

    def replicated_job_status(self, name: str, **counts: int) -> Self:
        self._obj["status"].setdefault("replicatedJobsStatus", []).append(
            {"name": name, **counts})
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


class PodWrapper:
    """A pod of a job's JobSet, as the API server returns it."""

    def __init__(self, name: str, namespace: str = "ns", job: str = "article") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"{name}-uid",
                         "creationTimestamp": iso(T0), "labels": {JOB_NAME_LABEL: job}},
            "spec": {},
            "status": {"phase": "Pending"},
        }

    @classmethod
    def worker(cls, slice_index: int, host: int, *, job: str = "article",
               namespace: str = "ns") -> PodWrapper:
        pod = cls(f"{job}-worker-{slice_index}-{host}", namespace, job)
        return pod.labels({REPLICATED_JOB_LABEL: WORKER_REPLICATED_JOB,
                           JOB_INDEX_LABEL: str(slice_index),
                           COMPLETION_INDEX_LABEL: str(host)})

    def labels(self, labels: dict[str, str]) -> Self:
        self._obj["metadata"]["labels"].update(labels)
        return self

    def created(self, t: datetime) -> Self:
        self._obj["metadata"]["creationTimestamp"] = iso(t)
        return self

    def on_node(self, node: str) -> Self:
        self._obj["spec"]["nodeName"] = node
        return self

    def running(self, *, ready: bool = True, since: datetime = T0) -> Self:
        self._obj["status"].update(phase="Running", conditions=[
            {"type": "Ready", "status": "True" if ready else "False",
             "lastTransitionTime": iso(since)}])
        return self

    def failed(self, at_: datetime, *, exit_code: int = 1,
               reason: str = "containerFailed", container: str = "main") -> Self:
        """A container terminated with exit_code: the pod failed (restartPolicy Never)."""
        self._obj["status"].update(phase="Failed", conditions=[
            {"type": "Ready", "status": "False", "lastTransitionTime": iso(at_)}])
        self._obj["status"].setdefault("containerStatuses", []).append(
            {"name": container, "state": {"terminated": {
                "exitCode": exit_code, "reason": reason, "finishedAt": iso(at_)}}})
        return self

    def container_exited(self, name: str, exit_code: int, finished: datetime) -> Self:
        self._obj["status"].setdefault("containerStatuses", []).append(
            {"name": name, "state": {"terminated": {"exitCode": exit_code,
                                                    "finishedAt": iso(finished)}}})
        return self

    def deleting(self, deletion_timestamp: datetime, grace_seconds: int = 30) -> Self:
        self._obj["metadata"]["deletionTimestamp"] = iso(deletion_timestamp)
        self._obj["metadata"]["deletionGracePeriodSeconds"] = grace_seconds
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


class NodeWrapper:
    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                                     "metadata": {"name": name}, "status": {}}

    def ready(self, ready: bool = True, *, since: datetime = T0,
              reason: str | None = None) -> Self:
        cond: dict[str, Any] = {"type": "Ready", "status": "True" if ready else "False",
                                "lastTransitionTime": iso(since)}
        if reason is not None:
            cond["reason"] = reason
        self._obj["status"]["conditions"] = [cond]
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


# --- observed values ---------------------------------------------------------------------


class WorkerPod:
    """An ObservedPod of a worker: Running and Ready on node tpu-<slice>-<host>, created
    at T0 (gen 0), Ready 2 s later."""

    def __init__(self, slice_index: int, host: int, pod: ObservedPod | None = None) -> None:
        self.slice_index, self.host = slice_index, host
        self._pod = pod or ObservedPod(
            name=f"article-worker-{slice_index}-{host}-g0", replicated_job=WORKER_REPLICATED_JOB,
            slice_index=slice_index, host_index=host, phase="Running", ready=True,
            created_at=T0, node_name=f"tpu-{slice_index}-{host}",
            ready_transition_time=T0 + timedelta(seconds=2),
            uid=f"article-worker-{slice_index}-{host}-g0-uid",
            job_uid=worker_job_uid(slice_index))

    def _with(self, **changes: Any) -> Self:
        return type(self)(self.slice_index, self.host, replace(self._pod, **changes))

    def named(self, name: str) -> Self:
        return self._with(name=name)

    def created(self, created: datetime) -> Self:
        """The same pod, created at `created` (Ready 2 s later): e.g. once a queue
        admitted the job."""
        return self._with(created_at=created, ready_transition_time=created + timedelta(seconds=2))

    def replacement(self, created: datetime, gen: int = 1) -> Self:
        """A newer pod for the same host (the Job controller's replacement)."""
        name = f"article-worker-{self.slice_index}-{self.host}-g{gen}"
        return self._with(name=name, uid=f"{name}-uid", created_at=created,
                          ready_transition_time=created + timedelta(seconds=2))

    def recreated(self, created: datetime, gen: int = 1, node: str | None = None) -> Self:
        """A pod of the slice's recreated worker Job (generation `gen`), on `node`."""
        return self.replacement(created, gen)._with(
            job_uid=worker_job_uid(self.slice_index, gen),
            node_name=node or self._pod.node_name)

    def on_node(self, node: str | None) -> Self:
        return self._with(node_name=node)

    def pending(self) -> Self:
        return self._with(phase="Pending", ready=False)

    def not_ready(self, since: datetime | None = None) -> Self:
        return self._with(ready=False, ready_transition_time=since or
                          self._pod.ready_transition_time)

    def failed(self, at_: datetime, *, exit_code: int = 1,
               reason: str = "containerFailed") -> Self:
        return self._with(phase="Failed", ready=False, terminated_at=at_,
                          terminated_reason=reason, terminated_exit_code=exit_code)

    def container_exited(self, at_: datetime, *, exit_code: int = 1,
                         reason: str = "Error") -> Self:
        """Its container exited and the kubelet is restarting it in the same pod
        (restartPolicy OnFailure): Running, not Ready, the exit shown, restarting."""
        return self._with(ready=False, ready_transition_time=at_, terminated_at=at_,
                          terminated_reason=reason, terminated_exit_code=exit_code,
                          restarting=True)

    def restarted_in_place(self, at_: datetime, times: int = 1) -> Self:
        """The same pod (uid, node) Ready again at `at_`, its containers restarted `times`
        times in place (restartCount)."""
        return self._with(ready=True, ready_transition_time=at_, terminated_at=None,
                          terminated_reason=None, terminated_exit_code=None,
                          restarting=False, restarts=self._pod.restarts + times)

    def evicted(self, message: str) -> Self:
        return self._with(phase="Failed", ready=False, status_reason="Evicted",
                          status_message=message)

    def deleting(self, deletion_timestamp: datetime, grace_seconds: int = 30) -> Self:
        return self._with(deletion_timestamp=deletion_timestamp,
                          deletion_grace_seconds=grace_seconds)

    def disrupted(self, reason: str) -> Self:
        """The pod's DisruptionTarget condition is True for `reason` (who ended it)."""
        return self._with(disruption=reason)

    def failed_by_kueue(self) -> Self:
        """Failed by Kueue's TAS node controller (condition TerminatedByKueue): pending,
        ungated onto the unhealthy node Kueue assigned it, never scheduled."""
        return self._with(phase="Failed", ready=False, node_name=None,
                          terminated_by_kueue=True)

    def failed_with_status(self, reason: str) -> Self:
        """Failed with a pod status reason (the kubelet's admission, a node shutdown)."""
        return self._with(phase="Failed", ready=False, status_reason=reason)

    def build(self) -> ObservedPod:
        return self._pod


def head_pod(*, failed: bool = False, main: ObservedContainer | None = None,
             created: datetime | None = None, name: str = "article-pathways-head-0-0",
             deleting: datetime | None = None) -> ObservedPod:
    """The head pod; `main`: its main container's state (main_running, main_exited)."""
    return ObservedPod(name=name, replicated_job=HEAD_REPLICATED_JOB,
                       slice_index=0, host_index=0, phase="Failed" if failed else "Running",
                       ready=not failed, main=main, created_at=created,
                       deletion_timestamp=deleting)


def main_running(since: datetime = T0) -> ObservedContainer:
    """The head's main container, running since `since` (state.running.startedAt)."""
    return ObservedContainer(state="running", started_at=since)


def main_exited() -> ObservedContainer:
    """The head's main container, terminated (its process died)."""
    return ObservedContainer(state="terminated")


def foreign_job(*, progress: bool = False, num_slices: int = SLICES) -> ElasticTrainingJob:
    """The article's job running a program of its own in main (spec.trainer.command, as
    MaxText): it reports no elastic events; `progress`: with the progress sidecar."""
    trainer: dict[str, Any] = {"image": "maxtext-runner:1",
                               "command": ["python3", "-m", "maxtext.trainers.pre_train.train"],
                               "args": ["run_name=r", "steps=1000"]}
    if progress:
        trainer["progress"] = {"image": "trainer:1"}
    return (etj().uid("uid-1").generation(1).num_slices(num_slices).max_restarts(0)
            .without("trainer").spec(trainer=trainer).build())


def healthy_pods(num_slices: int = SLICES, hosts: int = HOSTS, *,
                 created: datetime = T0) -> list[ObservedPod]:
    """Every host of every slice Ready, the pods created at `created`."""
    return [WorkerPod(i, h).created(created).build() for i in range(num_slices)
            for h in range(hosts)]


def tpu_node(name: str, pool: str | None = None, *, ready: bool = True,
             since: datetime = T0, status: str | None = None, **more: Any) -> ObservedNode:
    """A v5e 4x4 node of `pool` (default: tpu-<slice> from tpu-<slice>-<host>)."""
    pool = pool or name.rsplit("-", 1)[0]
    return ObservedNode(name, ready, ready_transition_time=since,
                        ready_status=status or ("True" if ready else "False"),  # type: ignore[arg-type]
                        pool=pool, accelerator=ACCELERATOR, topology="4x4", **more)


def nodes_for(num_slices: int = SLICES, hosts: int = HOSTS, *,
              not_ready: dict[str, datetime] | None = None,
              spares: int = 0) -> dict[str, ObservedNode]:
    """The nodes of healthy_pods() (node tpu-<slice>-<host> in pool tpu-<slice>), and
    those of `spares` more pools; all Ready but those in not_ready (name -> since)."""
    out = {f"tpu-{i}-{h}": tpu_node(f"tpu-{i}-{h}")
           for i in range(num_slices + spares) for h in range(hosts)}
    for name, since in (not_ready or {}).items():
        out[name] = tpu_node(name, ready=False, since=since)
    return out


def pools_of(nodes: dict[str, ObservedNode], *, busy: tuple[str, ...] = ()) -> tuple[
        ObservedPool, ...]:
    """The node pools of these nodes (`busy`: used by another job)."""
    by_pool: dict[str, list[ObservedNode]] = {}
    for node in nodes.values():
        by_pool.setdefault(node.pool or node.name, []).append(node)
    return tuple(ObservedPool(name, tuple(sorted(ns, key=lambda n: n.name)), name in busy)
                 for name, ns in sorted(by_pool.items()))


def worker_job(slice_index: int, gen: int = 0, *, deleting: bool = False,
               backoff_limit: int = HOSTS * 5, finished: str | None = None,
               active_deadline_seconds: int | None = None) -> ObservedJob:
    return ObservedJob(name=f"article-worker-{slice_index}",
                       uid=worker_job_uid(slice_index, gen), slice_index=slice_index,
                       deleting=deleting, backoff_limit=backoff_limit, finished=finished,
                       active_deadline_seconds=active_deadline_seconds)


class ObservedJobSetBuilder:
    """The JobSet the operator rendered for `job`, running, owned by it."""

    def __init__(self, job: ElasticTrainingJob | None = None,
                 jobset: ObservedJobSet | None = None) -> None:
        job = job or article_job()
        self._jobset = jobset or ObservedJobSet(
            name=job.metadata.name, suspended=False, restarts=0, terminal_state=None,
            worker_hosts_per_slice=HOSTS, owner_uid=job.metadata.uid,
            applied_spec=applied_spec(job))

    def _with(self, **changes: Any) -> Self:
        return type(self)(jobset=replace(self._jobset, **changes))

    def suspended(self, suspended: bool = True) -> Self:
        return self._with(suspended=suspended)

    def restarts(self, n: int) -> Self:
        return self._with(restarts=n)

    def terminal(self, state: str, message: str | None = None) -> Self:
        return self._with(terminal_state=state, failed_message=message)

    def head_failed(self, jobs: int = 1) -> Self:
        return self._with(replicated_jobs=(ReplicatedJobStatus(HEAD_REPLICATED_JOB,
                                                               failed=jobs),))

    def owned_by(self, uid: str | None) -> Self:
        return self._with(owner_uid=uid)

    def applied(self, job: ElasticTrainingJob) -> Self:
        return self._with(applied_spec=applied_spec(job))

    def build(self) -> ObservedJobSet:
        return self._jobset


def observed_jobset(job: ElasticTrainingJob | None = None) -> ObservedJobSetBuilder:
    return ObservedJobSetBuilder(job)


def observe(pods: list[ObservedPod] | None = None, jobset: ObservedJobSet | None = None,
            nodes: dict[str, ObservedNode] | None = None, **more: Any) -> Observed:
    """What a reconcile saw: by default the article's job, healthy and running."""
    return Observed(jobset=jobset if jobset is not None else observed_jobset().build(),
                    pods=tuple(pods if pods is not None else healthy_pods()),
                    nodes=nodes if nodes is not None else nodes_for(), **more)


def report(**fields: Any) -> TrainingReport:
    """A trainer report (wire names), e.g. report(observedAt=iso(at(5)), state="Training")."""
    return TrainingReport.model_validate(fields)


def activity(phase: str, since: float, *, last: float | None = None,
             frame: str | None = None, source: str = "Sampled",
             **more: Any) -> dict[str, Any]:
    """status.training.activity (wire names): `phase` since at(since), its newest sign
    of life at at(last), e.g. activity("Evaluation", 100, last=150)."""
    out: dict[str, Any] = {"phase": phase, "since": iso(at(since)), "source": source, **more}
    if last is not None:
        out["lastActivityAt"] = iso(at(last))
    if frame is not None:
        out["frame"] = frame
    return out


def phase_record(phase: str, longest: float, *, count: int = 1) -> dict[str, Any]:
    """One entry of status.training.phases (wire names): `phase` took `longest` s."""
    return {"phase": phase, "count": count, "lastSeconds": longest, "longestSeconds": longest}
