"""`etj cluster up|down|kubeconfig|status`: the local control plane for dev and tests."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _tpu_pool(text: str) -> object:
    from elastic_devtools.localcluster.cluster_config import parse_tpu_pool

    try:
        return parse_tpu_pool(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    dir_help = ("state directory (default: $ETJ_CACHE_DIR/cluster-NAME with --name, else "
                "$ETJ_CLUSTER_DIR or $ETJ_CACHE_DIR/cluster)")
    name_help = "a named cluster, one of several side by side (e.g. manager, worker-1)"

    up = sub.add_parser("up", help="start the cluster (no-op if it runs) and wait until ready")
    up.add_argument("--dir", type=Path, default=None, help=dir_help)
    up.add_argument("--name", default=None, help=name_help)
    up.add_argument(
        "--tpu-pools", type=_tpu_pool, action="append", default=None, metavar="TYPE:TOPOLOGY[:N]",
        help="N node pools (one per slice) of fake TPU nodes, repeatable; default v5e:4x4:4 "
        "(the article's 3 slices and one hot spare)",
    )
    up.add_argument("--cpu-nodes", type=int, default=None,
                    help="nodes in the cpu-np pool (default 4)")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    up.add_argument("--kueue", action="store_true",
                    help="also run Kueue (quota and admission for JobSets); added to a "
                    "running cluster that lacks it")
    up.add_argument("--multikueue", action="store_true",
                    help="run Kueue as a MultiKueue manager (implies --kueue) that "
                    "dispatches ElasticTrainingJobs to worker clusters; its origin is the "
                    "cluster's --name (default: manager)")

    down = sub.add_parser("down", help="stop every process of the cluster")
    down.add_argument("--dir", type=Path, default=None, help=dir_help)
    down.add_argument("--name", default=None, help=name_help)

    kc = sub.add_parser("kubeconfig", help="print the path of the admin kubeconfig")
    kc.add_argument("--dir", type=Path, default=None, help=dir_help)
    kc.add_argument("--name", default=None, help=name_help)

    st = sub.add_parser("status", help="show components, pids and memory")
    st.add_argument("--dir", type=Path, default=None, help=dir_help)
    st.add_argument("--name", default=None, help=name_help)


def run(args: argparse.Namespace) -> int:
    from elastic_devtools import localcluster as lc

    directory: Path = (args.dir or lc.default_dir(args.name)).absolute()
    if args.cluster_command == "up":
        config = lc.ClusterConfig(
            dir=directory,
            tpu_pools=tuple(args.tpu_pools) if args.tpu_pools else lc.DEFAULT_TPU_POOLS,
            cpu_nodes=args.cpu_nodes if args.cpu_nodes is not None else lc.DEFAULT_CPU_NODES,
            timeout=args.timeout,
            kueue=args.kueue,
            multikueue_origin=(args.name or "manager") if args.multikueue else None,
        )
        try:
            cluster = lc.up(config)
        except (lc.MissingBinaryError, lc.ClusterStartError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        return 0
    if args.cluster_command == "down":
        if lc.down(directory) == 0:
            print(f"no cluster running in {directory}", file=sys.stderr)
        return 0
    if args.cluster_command == "kubeconfig":
        path = directory / "kubeconfig"
        if not path.exists():
            print(f"error: no kubeconfig in {directory}; run `etj cluster up` first",
                  file=sys.stderr)
            return 1
        print(path)
        return 0
    if args.cluster_command == "status":
        st = lc.status(directory)
        print(f"dir: {st.dir}")
        print(f"server: {st.server or '-'}  apiserver ready: {st.apiserver_ready}")
        for c in st.components:
            state = "running" if c.alive else "stopped"
            rss = c.rss_bytes / 2**20
            print(f"  {c.name:<24} {state:<8} pid {c.pid or '-':<8} rss {rss:7.1f} MiB")
        print(f"total rss: {st.rss_total / 2**20:.1f} MiB")
        return 0 if st.running else 3
    raise AssertionError(args.cluster_command)
