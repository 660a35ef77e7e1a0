"""`etj operator`: run the operator (kopf runs the process; replicas elect a leader on a
Lease, docs/operations.md).

Heavy imports (kopf, kubernetes, prometheus-client) stay inside `run`.
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from elastic_operator.app import ReplacementSettings
    from elastic_operator.client.kube import Kube

# Where a pod finds its own namespace.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LEASE_NAME = "elastic-training-operator"


def default_lease_namespace() -> str:
    """POD_NAMESPACE (the chart sets it), else the pod's own namespace, else default."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def default_identity() -> str:
    """POD_NAME (unique among the replicas; a restarted container keeps it and takes its
    Lease back at once), else host name plus a random suffix."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", default=[], metavar="NS",
        help="serve this namespace (repeatable; a glob like 'team-*' watches every "
        "namespace and keeps those that match: it needs the RBAC of --all-namespaces)",
    )
    scope.add_argument(
        "--all-namespaces", "-A", action="store_true",
        help="serve every namespace (the default when no --namespace is given)",
    )
    _add_endpoint_arguments(parser)
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    parser.add_argument("--resync-seconds", type=float, default=30.0, metavar="S",
                        help="reconcile every job at least this often (default 30)")
    parser.add_argument("--checkpoint-scan-seconds", type=float, default=30.0, metavar="S",
                        help="list a job's checkpoint directory at most this often (default 30)")
    parser.add_argument("--checkpoint-roots", action="append", default=[],
                        metavar="NS=PREFIX[,PREFIX...]",
                        help="list a job's checkpoint directory only under these prefixes "
                        "(gs://BUCKET[/PATH] or an absolute path) for namespace NS ('*': "
                        "every namespace); repeatable. Default: local paths only, no gs:// "
                        "(docs/threat-model.md)")
    parser.add_argument("--watch-timeout-seconds", type=int, default=30, metavar="S",
                        help="the watches (jobs, pods, JobSets, nodes, Workloads) are renewed "
                        "this often; one silent for 5 s longer is stalled and its cache is "
                        "listed again (default 30)")
    election = parser.add_argument_group("leader election (a Lease; docs/operations.md)")
    election.add_argument("--leader-elect", action=argparse.BooleanOptionalAction,
                          default=True, help="elect a leader among the replicas; only the "
                          "leader reconciles (default: on)")
    election.add_argument("--leader-election-namespace", default=None, metavar="NS",
                          help="namespace of the Lease (default: $POD_NAMESPACE, else the "
                          "pod's namespace, else default)")
    election.add_argument("--leader-election-name", default=LEASE_NAME, metavar="NAME",
                          help=f"name of the Lease (default {LEASE_NAME})")
    election.add_argument("--leader-identity", default=None, metavar="ID",
                          help="this replica's name in the Lease (default: $POD_NAME, else "
                          "host name and a random suffix)")
    election.add_argument("--lease-duration-seconds", type=int, default=10, metavar="S",
                          help="a standby takes over a Lease not renewed for this long "
                          "(default 10)")
    election.add_argument("--renew-deadline-seconds", type=float, default=7.0, metavar="S",
                          help="the leader stops leading when it could not renew for this "
                          "long (default 7)")
    election.add_argument("--retry-period-seconds", type=float, default=1.0, metavar="S",
                          help="renew, or look at the Lease, this often (default 1)")
    _add_replacement_arguments(parser)
    _add_kueue_arguments(parser)


def _add_replacement_arguments(parser: argparse.ArgumentParser) -> None:
    replacement = parser.add_argument_group(
        "slice replacement (docs/operations.md, \"Slice replacement\")")
    replacement.add_argument(
        "--quarantine-pools", action=argparse.BooleanOptionalAction, default=True,
        help="label the nodes of a node pool a slice failed on so that replacements avoid "
        "it while a spare exists (needs nodes: patch; default on)")
    replacement.add_argument(
        "--quarantine-min-jobs", type=_at_least_one, default=2, metavar="N",
        help="without evidence against its nodes, a node pool is quarantined only when "
        "slices of at least N different jobs failed there, whatever a job's "
        "recovery.quarantineAfterFailures asks: one tenant's own failures never "
        "quarantine a pool other teams use (default 2; 1: the job decides)")
    replacement.add_argument(
        "--quarantine-on-job-report", action=argparse.BooleanOptionalAction, default=False,
        help="a job's own report of a hardware failure (its trainer's, or an exit code or "
        "reason its spec.recovery names) quarantines the pool by itself; off, it counts as "
        "the job's own failure (--quarantine-min-jobs) (default off)")
    replacement.add_argument(
        "--node-actions-per-minute", type=_positive, default=30.0, metavar="N",
        help="rate of force-deletes and pool quarantines, all jobs together (default 30)")
    replacement.add_argument(
        "--node-action-burst", type=int, default=10, metavar="N",
        help="how many of those may happen at once (default 10)")
    replacement.add_argument(
        "--node-action-cooldown-seconds", type=_non_negative, default=60.0, metavar="S",
        help="the same node (or pool) is not acted on again within this time (default 60)")
    replacement.add_argument(
        "--quarantine-release-after-seconds", type=_non_negative, default=600.0, metavar="S",
        help="a quarantined pool is released once all its nodes were Ready this long "
        "(default 600)")
    replacement.add_argument(
        "--repeated-failures-quarantine-seconds", type=_non_negative, default=3600.0,
        metavar="S", help="a pool quarantined for repeated slice failures (its nodes look "
        "healthy) stays quarantined at least this long (default 3600)")


def _add_endpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """The probes' and Prometheus' endpoints."""
    parser.add_argument("--liveness-port", type=int, default=8080, metavar="P",
                        help="serve GET /healthz on this port (0: off; default 8080)")
    parser.add_argument("--readiness-port", type=int, default=8081, metavar="P",
                        help="serve GET /readyz on this port: 200 once this replica could "
                        "lead (its caches synced), 503 before and while it stops (0: off; "
                        "default 8081)")
    parser.add_argument("--metrics-port", type=int, default=9090, metavar="P",
                        help="serve Prometheus /metrics on this port (0: off; default 9090)")
    parser.add_argument("--listen-address", default="0.0.0.0", metavar="ADDR",
                        help="address the liveness, readiness and metrics endpoints bind "
                        "(default 0.0.0.0, for the kubelet and Prometheus; 127.0.0.1 on a "
                        "laptop)")
    _add_metrics_security_arguments(parser)


def _add_metrics_security_arguments(parser: argparse.ArgumentParser) -> None:
    """/metrics names every job: HTTPS and a reader's token by default (docs/metrics.md)."""
    secure = parser.add_argument_group("/metrics' security (docs/metrics.md)")
    secure.add_argument("--metrics-secure", dest="metrics_secure", action="store_true",
                        default=True, help="serve /metrics over HTTPS, only to a bearer "
                        "token whose user may get the URL /metrics (TokenReview, then "
                        "SubjectAccessReview; the chart's <release>-metrics-reader "
                        "ClusterRole grants it; default)")
    secure.add_argument("--metrics-insecure", dest="metrics_secure", action="store_false",
                        help="serve /metrics over plain HTTP to anyone (local runs, tests)")
    secure.add_argument("--metrics-cert-file", default=None, metavar="PATH",
                        help="the HTTPS certificate (PEM; with --metrics-key-file; default: "
                        "one made at start, signed by itself)")
    secure.add_argument("--metrics-key-file", default=None, metavar="PATH",
                        help="the HTTPS certificate's private key (PEM)")


def _add_kueue_arguments(parser: argparse.ArgumentParser) -> None:
    kueue = parser.add_argument_group(
        "Kueue's waitForPodsReady, as your Kueue Configuration sets it (docs/operations.md, "
        "\"With Kueue\"): the deadlines of condition EvictionPending")
    kueue.add_argument(
        "--kueue-pods-ready-timeout-seconds", type=_positive, default=1800.0, metavar="S",
        help="waitForPodsReady.timeout: Kueue evicts a job whose pods are not all Ready "
        "this long after its admission (default 1800, Kueue's)")
    kueue.add_argument(
        "--kueue-recovery-timeout-seconds", type=_positive, default=None, metavar="S",
        help="waitForPodsReady.recoveryTimeout: Kueue evicts a job whose pods are not all "
        "Ready again this long after one stopped being Ready (default: the timeout, as "
        "Kueue's)")


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def replacement_settings(args: argparse.Namespace) -> ReplacementSettings:
    from elastic_operator.app import ReplacementSettings
    from elastic_operator.core.eviction import PodsReadyTimeouts
    from elastic_operator.core.pools import QuarantinePolicy
    from elastic_operator.writes.node_actions import NodeActionLimits

    return ReplacementSettings(
        quarantine_pools=args.quarantine_pools,
        quarantine=QuarantinePolicy(min_jobs=args.quarantine_min_jobs,
                                    trust_reports=args.quarantine_on_job_report),
        limits=NodeActionLimits(per_minute=args.node_actions_per_minute,
                                burst=max(1, args.node_action_burst),
                                cooldown_s=args.node_action_cooldown_seconds),
        release_after_s=args.quarantine_release_after_seconds,
        repeated_failures_quarantine_s=args.repeated_failures_quarantine_seconds,
        pods_ready=PodsReadyTimeouts(args.kueue_pods_ready_timeout_seconds,
                                     args.kueue_recovery_timeout_seconds))


def check_api_versions(kube: Kube, now: datetime | None = None) -> bool:
    """At start: log which JobSet and Kueue API versions the cluster serves; where one is
    missing or too old, log why and post a Warning Event on the operator's pod (POD_NAME)
    and return False: the operator must not start (core/api_support.py decides)."""
    from elastic_operator.client.kube import ApiError
    from elastic_operator.core.api_support import judge_apis, served_versions
    from elastic_operator.core.status_events import StatusEvent

    log = logging.getLogger("elastic_operator")
    verdict = judge_apis(served_versions(kube.api_groups()))
    if verdict.ok:
        log.info("%s", verdict.message)
        return True
    log.error("%s", verdict.message)
    print(f"etj operator: {verdict.message}", file=sys.stderr)
    pod = os.environ.get("POD_NAME")
    if pod:
        me = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": pod, "namespace": default_lease_namespace()}}
        try:
            kube.post_event(me, StatusEvent(verdict.reason, verdict.message, "Warning"),
                            now or datetime.now(UTC))
        except (ApiError, OSError) as e:  # the log line says it all the same
            log.warning("could not post the %s Event on pod %s: %s", verdict.reason, pod, e)
    return False


def serve_metrics(args: argparse.Namespace, kube: Kube) -> bool:
    """/metrics over HTTPS to the readers RBAC allows (entry/metrics_server.py), or with
    --metrics-insecure over plain HTTP to anyone (prometheus_client's server); False,
    said on stderr, if it cannot be served (a port in use, a bad certificate or key)."""
    try:
        _serve_metrics(args, kube)
    except (ValueError, OSError) as e:
        print(f"etj operator: /metrics: {e}", file=sys.stderr)
        return False
    return True


def _serve_metrics(args: argparse.Namespace, kube: Kube) -> None:
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest, start_http_server

    from elastic_operator.entry.metrics_auth import MetricsAuthorizer
    from elastic_operator.entry.metrics_server import SecureMetricsServer
    from elastic_operator.entry.metrics_tls import server_context

    if not args.metrics_secure:
        start_http_server(args.metrics_port, addr=args.listen_address)
        return
    context = server_context(args.metrics_cert_file, args.metrics_key_file)
    SecureMetricsServer(args.listen_address, args.metrics_port, context,
                        MetricsAuthorizer(kube),
                        lambda: (generate_latest(REGISTRY), CONTENT_TYPE_LATEST)).start()


def run(args: argparse.Namespace) -> int:
    import kopf

    from elastic_api.names import KUEUE_GROUP, KUEUE_VERSION, KUEUE_WORKLOAD_PLURAL
    from elastic_operator.app import build_operator
    from elastic_operator.client.kube import Kube
    from elastic_operator.entry.handlers import build_registry, configure_settings
    from elastic_operator.metrics.metrics import OperatorMetrics
    from elastic_operator.queue.election import ElectionConfig
    from elastic_operator.watch.caches import WatchScope

    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.FULL,
    )
    if not args.verbose:
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    scope = WatchScope(clusterwide=not args.namespace, namespaces=list(args.namespace))
    try:
        election = ElectionConfig(
            namespace=args.leader_election_namespace or default_lease_namespace(),
            name=args.leader_election_name,
            identity=args.leader_identity or default_identity(),
            lease_duration_s=args.lease_duration_seconds,
            renew_deadline_s=args.renew_deadline_seconds,
            retry_period_s=args.retry_period_seconds) if args.leader_elect else None
    except ValueError as e:
        print(f"etj operator: {e}", file=sys.stderr)
        return 2
    replacement = replacement_settings(args)
    from elastic_operator.checkpoints.roots import CheckpointRoots
    try:
        roots = CheckpointRoots.parse(args.checkpoint_roots)
    except ValueError as e:
        print(f"etj operator: {e}", file=sys.stderr)
        return 2
    kube = Kube.from_environment()
    if not check_api_versions(kube):
        return 1
    if args.metrics_port and not serve_metrics(args, kube):
        return 2
    # Kueue's Workloads are watched where Kueue is installed (restart the operator after
    # installing it); its jobs are reconciled without the watch too, at each resync.
    kueue = kube.serves(f"{KUEUE_GROUP}/{KUEUE_VERSION}", KUEUE_WORKLOAD_PLURAL)
    logging.getLogger("elastic_operator").info(
        "Kueue's Workload API is %s", "served: watching Workloads" if kueue else "not served")
    # The watches get their own client (connection pool, one connection each): a long
    # watch never holds a connection that a reconcile or a Lease renewal waits for.
    # Per namespace jobs, pods, JobSets, worker Jobs (and Workloads); the nodes; our CRD.
    watches = len(scope.list_namespaces) * (5 if kueue else 4) + 2
    watch_kube = Kube.from_environment(pool_maxsize=watches + 2)
    metrics = OperatorMetrics()
    for client in (kube, watch_kube):
        metrics.count_requests(client.client.api)
    if election is None:  # no election: this replica always leads (etj_leader says so)
        metrics.leader.labels(args.leader_identity or default_identity()).set(1)
    operator = build_operator(kube, metrics, scope=scope, watch_kube=watch_kube,
                              election=election, watch_workloads=kueue,
                              watch_timeout_s=args.watch_timeout_seconds,
                              resync_interval_s=args.resync_seconds,
                              checkpoint_scan_interval_s=args.checkpoint_scan_seconds,
                              replacement=replacement, checkpoint_roots=roots)
    if args.readiness_port:
        from elastic_operator.entry.readiness import ReadinessServer, readiness
        ReadinessServer(args.listen_address, args.readiness_port,
                        lambda: readiness(operator)).start()
    registry = build_registry(operator)
    settings = kopf.OperatorSettings()
    configure_settings(settings)
    # kopf watches nothing (the scope is the informers'): cluster-wide costs it nothing.
    kopf.run(
        registry=registry,
        settings=settings,
        standalone=True,
        clusterwide=True,
        liveness_endpoint=(f"http://{args.listen_address}:{args.liveness_port}/healthz"
                           if args.liveness_port else None),
    )
    return 0
