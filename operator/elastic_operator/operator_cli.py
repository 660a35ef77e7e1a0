"""`etj operator`: run the operator (kopf, standalone, no finalizers).

Heavy imports (kopf, kubernetes, prometheus-client) stay inside `run`.
"""
from __future__ import annotations

import argparse
import logging


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", default=[], metavar="NS",
        help="watch this namespace (repeatable; a glob like 'team-*' also needs RBAC to "
        "list and watch namespaces and CRDs)",
    )
    scope.add_argument(
        "--all-namespaces", "-A", action="store_true",
        help="watch every namespace (the default when no --namespace is given)",
    )
    parser.add_argument("--liveness-port", type=int, default=8080, metavar="P",
                        help="serve GET /healthz on this port (0: off; default 8080)")
    parser.add_argument("--metrics-port", type=int, default=9090, metavar="P",
                        help="serve Prometheus /metrics on this port (0: off; default 9090)")
    parser.add_argument("--listen-address", default="0.0.0.0", metavar="ADDR",
                        help="address the liveness and metrics endpoints bind (default "
                        "0.0.0.0, for the kubelet and Prometheus; 127.0.0.1 on a laptop)")
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    parser.add_argument("--resync-seconds", type=float, default=30.0, metavar="S",
                        help="reconcile every job at least this often (default 30)")
    parser.add_argument("--checkpoint-scan-seconds", type=float, default=30.0, metavar="S",
                        help="list a job's checkpoint directory at most this often (default 30)")
    replacement = parser.add_argument_group(
        "slice replacement (docs/operations.md, \"Slice replacement\")")
    replacement.add_argument(
        "--quarantine-pools", action=argparse.BooleanOptionalAction, default=True,
        help="label the nodes of a node pool a slice failed on so that replacements avoid "
        "it while a spare exists (needs nodes: patch; default on)")
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


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def run(args: argparse.Namespace) -> int:
    import kopf
    from prometheus_client import start_http_server

    from elastic_api.names import KUEUE_GROUP, KUEUE_VERSION, KUEUE_WORKLOAD_PLURAL
    from elastic_operator.app import ReplacementSettings, build_operator
    from elastic_operator.handlers import WatchScope, build_registry, configure_settings
    from elastic_operator.kube import Kube
    from elastic_operator.metrics import OperatorMetrics
    from elastic_operator.node_actions import NodeActionLimits

    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.FULL,
    )
    if not args.verbose:
        # kopf logs every handled watch event at INFO; pods and nodes make that a flood.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.listen_address)
    scope = WatchScope(clusterwide=not args.namespace, namespaces=list(args.namespace))
    replacement = ReplacementSettings(
        quarantine_pools=args.quarantine_pools,
        limits=NodeActionLimits(per_minute=args.node_actions_per_minute,
                                burst=max(1, args.node_action_burst),
                                cooldown_s=args.node_action_cooldown_seconds),
        release_after_s=args.quarantine_release_after_seconds,
        repeated_failures_quarantine_s=args.repeated_failures_quarantine_seconds)
    kube = Kube.from_environment()
    operator = build_operator(kube, OperatorMetrics(),
                              checkpoint_scan_interval_s=args.checkpoint_scan_seconds,
                              replacement=replacement)
    # Kueue's Workloads are watched where Kueue is installed (restart the operator after
    # installing it); its jobs are reconciled without the watch too, at each resync.
    kueue = kube.serves(f"{KUEUE_GROUP}/{KUEUE_VERSION}", KUEUE_WORKLOAD_PLURAL)
    logging.getLogger("elastic_operator").info(
        "Kueue's Workload API is %s", "served: watching Workloads" if kueue else "not served")
    registry = build_registry(operator, scope, args.resync_seconds, watch_workloads=kueue)
    settings = kopf.OperatorSettings()
    configure_settings(settings, scope)
    kopf.run(
        registry=registry,
        settings=settings,
        standalone=True,
        clusterwide=scope.clusterwide,
        namespaces=scope.namespaces,
        liveness_endpoint=(f"http://{args.listen_address}:{args.liveness_port}/healthz"
                           if args.liveness_port else None),
    )
    return 0
