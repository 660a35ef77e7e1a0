"""The kubelet of the chart's operator pods on the local control plane, where kwok plays
every other pod's (the upgrade test, tests/upgrade/test_upgrade.py, and its guard).

For each operator pod of the release that runs, an `etj operator` process of the release
its image names (the upgrade.Revision whose tag the image carries), with the pod's own
arguments and environment, the pod's name as its leader identity and a token of the
pod's ServiceAccount. When the pod is deleted: SIGTERM, SIGKILL after the pod's grace
period, then the pod removed, as a kubelet removes it once its container has exited. A
rolling update of the chart's Deployment so replaces the processes one at a time, each
new one started before an old one stops, and the Lease is handed over as on a cluster.

The pods carry DEAD_KUBELET_LABEL from their template (the chart's podLabels: see
upgrade.chart_values), which kwok leaves alone (render.adapt_kwok_stage): this loop plays
their kubelet from the start. A pod bound to a node gets its process and is made
Running; it is Ready as its readinessProbe says (GET /readyz on the process's own port,
probed every round), or, without a probe, once its process runs, as a kubelet does. So a
rolling update moves on only as fast as the new replicas' caches sync. A deleted pod
stays Terminating until its process has exited. (A pod kwok made Running before it was
labelled is taken over the same way.) A process that exits while its pod is not being
deleted is a crash: recorded in `crashes`, never restarted.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client

from elastic_devtools.background import BackgroundLoop
from elastic_devtools.localcluster.cluster_config import DEAD_KUBELET_LABEL
from elastic_devtools.localcluster.operator_process import OperatorProcess
from tests.service_accounts import token_kubeconfig
from tests.support.upgrade import Revision, Timeline

if TYPE_CHECKING:
    from elastic_devtools.localcluster import Cluster

# The ports the pod's network namespace would have to itself: the process gets free ones.
PER_POD_PORTS = ("--liveness-port", "--readiness-port", "--metrics-port")
DEFAULT_GRACE_SECONDS = 30


def downward_env(pod: Any, container: Any) -> dict[str, str]:
    """The container's environment as the kubelet gives it: values, and the downward
    API's fields of the pod (name, namespace, uid, labels and annotations, node)."""
    fields = {"metadata.name": pod.metadata.name, "metadata.namespace": pod.metadata.namespace,
              "metadata.uid": pod.metadata.uid, "spec.nodeName": pod.spec.node_name or "",
              "spec.serviceAccountName": pod.spec.service_account_name or ""}
    for kind, items in (("labels", pod.metadata.labels), ("annotations",
                                                          pod.metadata.annotations)):
        fields.update({f"metadata.{kind}['{k}']": v for k, v in (items or {}).items()})
    env = {}
    for var in container.env or []:
        ref = var.value_from.field_ref if var.value_from is not None else None
        if ref is not None:
            env[var.name] = fields.get(ref.field_path, "")
        elif var.value is not None:
            env[var.name] = var.value
    return env


def pod_args(container: Any) -> list[str]:
    """The container's arguments, but the ports that OperatorProcess picks free."""
    return [a for a in container.args or [] if not a.startswith(PER_POD_PORTS)]


@dataclass
class PodProcess:
    """One operator pod and the process that plays its container."""

    name: str
    uid: str
    revision: Revision
    proc: OperatorProcess
    grace: float
    probed: bool  # the pod has a readinessProbe: Ready only as /readyz says
    image: str
    stopping: threading.Thread | None = None
    crashed: bool = False
    ready: bool | None = None  # as last written in the pod's status (None: not yet)
    paused: bool = False  # frozen by the test (SIGSTOP): not probed meanwhile
    exited_at: float | None = None  # time.monotonic when its process had exited

    def readiness(self) -> bool:
        """What the kubelet would report: the probe's answer, else running."""
        return self.proc.ready() if self.probed else self.proc.running


@dataclass
class OperatorKubelet(BackgroundLoop):
    """Plays the kubelet for release `release`'s operator pods in `namespace`; `revisions`
    by image tag. `on_terminating(pod, leading)` runs as a pod's deletion is seen, before
    its SIGTERM (`leading`: the pod holds the Lease)."""

    THREAD_NAME = "operator-kubelet"
    cluster: Cluster
    namespace: str
    release: str
    revisions: dict[str, Revision]
    workdir: Path
    timeline: Timeline
    on_terminating: Callable[[str, bool], None] | None = None
    pods: dict[str, PodProcess] = field(default_factory=dict)  # by pod uid, all ever run
    crashes: list[str] = field(default_factory=list)
    holders: list[str] = field(default_factory=list)  # the Lease's holders, in turn
    errors: list[str] = field(default_factory=list)

    @property
    def selector(self) -> str:
        return (f"app.kubernetes.io/name=elastic-operator,"
                f"app.kubernetes.io/instance={self.release}")

    @property
    def holder(self) -> str | None:
        return self.holders[-1] if self.holders else None

    def _run(self) -> None:
        self.api = self.cluster.api_client()
        self.core = client.CoreV1Api(self.api)
        while not self._stop.wait(0.1):
            try:
                self.sync()
            except Exception as err:  # the API server busy: the next round tries again
                if not self.errors or self.errors[-1] != repr(err):
                    self.timeline.note(f"kubelet: {err!r}")
                self.errors.append(repr(err))

    def sync(self) -> None:
        """One round, level-based: start what runs without a process, stop what is being
        deleted, record crashes and the Lease's holder."""
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        for pod in pods:
            known = self.pods.get(pod.metadata.uid)
            if pod.metadata.deletion_timestamp is not None:
                self._terminate(pod, known)
            elif known is None and pod.spec.node_name and pod.status is not None \
                    and pod.status.phase in ("Pending", "Running"):
                self._start(pod)
            elif known is not None and known.stopping is None and not known.crashed \
                    and not known.paused:
                self._report_readiness(known)
        present = {p.metadata.uid for p in pods}
        for known in self.pods.values():
            if known.uid not in present and known.stopping is None:
                self.timeline.note(f"pod {known.name} is gone: its process stopped")
                self._stop_in_background(known, removed=True)
            elif known.stopping is None and not known.proc.running and not known.crashed:
                known.crashed = True
                self.crashes.append(f"{known.name} ({known.revision.label}) exited "
                                    f"{known.proc.proc.returncode if known.proc.proc else '?'}")
                self.timeline.note(f"CRASH: {self.crashes[-1]}; log {known.proc.log_path}")
        self._look_at_the_lease()

    def _start(self, pod: Any) -> None:
        name = pod.metadata.name
        (container,) = pod.spec.containers
        tag = container.image.rpartition(":")[2]
        revision = self.revisions.get(tag)
        if revision is None:
            raise AssertionError(f"pod {name} runs image {container.image}: no release "
                                 f"has tag {tag} (known: {sorted(self.revisions)})")
        self.core.patch_namespaced_pod(name, self.namespace,
                                       {"metadata": {"labels": {DEAD_KUBELET_LABEL: "true"}}})
        kubeconfig = token_kubeconfig(self.cluster, self.namespace,
                                      pod.spec.service_account_name,
                                      self.workdir / f"{name}.kubeconfig")
        probed = container.readiness_probe is not None
        # A release whose chart says how /metrics is served knows --metrics-insecure
        # (metrics() reads plain HTTP); an older one serves plain HTTP anyway.
        knows = any(a.startswith(("--metrics-secure", "--metrics-insecure"))
                    for a in container.args or [])
        proc = OperatorProcess(kubeconfig, self.workdir / f"{name}.log", args=pod_args(container),
                               env={**downward_env(pod, container), **revision.env()},
                               command=(*revision.etj(), "operator"), cwd=revision.tree,
                               new_session=True, identity=name, readiness=probed,
                               insecure_metrics=knows)
        proc.spawn()
        grace = pod.spec.termination_grace_period_seconds or DEFAULT_GRACE_SECONDS
        known = PodProcess(name, pod.metadata.uid, revision, proc, grace, probed,
                           container.image)
        self.pods[pod.metadata.uid] = known
        self.timeline.note(f"pod {name} runs: the {revision.label} operator started "
                           f"(pid {proc.pid}, log {proc.log_path.name}"
                           f"{', Ready as its /readyz says' if probed else ''})")
        self._report_readiness(known)

    def _report_readiness(self, known: PodProcess) -> None:
        """The pod Running, its Ready condition as the probe says, written on a change."""
        ready = known.readiness()
        if ready == known.ready:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = "True" if ready else "False"
        self.core.patch_namespaced_pod_status(known.name, self.namespace, {"status": {
            "phase": "Running",
            "conditions": [{"type": kind, "status": status, "lastTransitionTime": now}
                           for kind in ("Ready", "ContainersReady")]
            + [{"type": "Initialized", "status": "True"}],
            "containerStatuses": [{
                "name": "operator", "ready": ready, "started": True, "restartCount": 0,
                "image": known.image, "imageID": "",
                "state": {"running": {"startedAt": now}}}]}})
        if known.ready is not None or ready:
            self.timeline.note(f"pod {known.name} {'Ready' if ready else 'not Ready'}")
        known.ready = ready

    def _terminate(self, pod: Any, known: PodProcess | None) -> None:
        if known is None:
            # Never started here (deleted before it ran): kwok's, unless labelled.
            if DEAD_KUBELET_LABEL in (pod.metadata.labels or {}):
                self._remove(pod.metadata.name, pod.metadata.uid)
            return
        if known.stopping is not None:
            return
        leading = self.holder == known.name
        self.timeline.note(f"pod {known.name} deleted{' (it leads)' if leading else ''}: "
                           "SIGTERM to its process")
        try:
            if self.on_terminating is not None:
                self.on_terminating(known.name, leading)
        finally:
            self._stop_in_background(known, removed=False)

    def _stop_in_background(self, known: PodProcess, removed: bool) -> None:
        def stop() -> None:
            known.proc.stop(timeout=known.grace)
            known.exited_at = time.monotonic()
            code = known.proc.proc.returncode if known.proc.proc else None
            if not removed:
                self._remove(known.name, known.uid)
            self.timeline.note(f"pod {known.name}: its process exited {code}; pod removed")

        known.stopping = threading.Thread(target=stop, name=f"stop-{known.name}", daemon=True)
        known.stopping.start()

    def _remove(self, name: str, uid: str) -> None:
        with contextlib.suppress(client.ApiException):  # gone already
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0,
                                            body=client.V1DeleteOptions(
                                                grace_period_seconds=0,
                                                preconditions=client.V1Preconditions(uid=uid)))

    def _look_at_the_lease(self) -> None:
        try:
            lease = client.CoordinationV1Api(self.api).read_namespaced_lease(
                self.release, self.namespace)
        except client.ApiException as err:
            if err.status == 404:  # no leader yet
                return
            raise
        holder = lease.spec.holder_identity if lease.spec is not None else None
        if holder and holder != self.holder:
            self.timeline.note(f"Lease {self.release}: {self.holder or 'nobody'} -> {holder}")
            self.holders.append(holder)

    def serving(self, revision: Revision, replicas: int,
                replaced: frozenset[str] = frozenset()) -> bool:
        """Rolled out: `replicas` pods, all of `revision` and none of the pod uids
        `replaced` (a restart of the same revision), each with its process running,
        every older one stopped, and one of them holding the Lease."""
        pods = list(self.pods.values())  # the loop's thread adds to it
        live = [p for p in pods if p.stopping is None and not p.crashed]
        stopped = all(not p.stopping.is_alive() for p in pods if p.stopping is not None)
        return (len(live) == replicas and stopped
                and all(p.revision == revision and p.proc.running and p.uid not in replaced
                        for p in live)
                and self.holder in {p.name for p in live})

    def stop(self) -> None:
        """The loop, then every process still running (SIGTERM)."""
        super().stop()
        for known in list(self.pods.values()):
            known.proc.stop(timeout=known.grace)
        if hasattr(self, "api"):
            self.api.close()
