"""A real local Kubernetes control plane for tests and the demo (no Docker needed):
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (fake GKE nodes) and
the JobSet controller, and on demand Kueue, all as local processes. See
`etj cluster --help`."""
from __future__ import annotations

from elastic_devtools.localcluster.cluster import (
    COMPONENTS,
    Cluster,
    ClusterConfig,
    ClusterStartError,
    ClusterStatus,
    default_dir,
    down,
    kueue_settings,
    start_kueue,
    status,
    stop_kueue,
    up,
)
from elastic_devtools.localcluster.cluster_config import (
    DEFAULT_CPU_NODES,
    DEFAULT_TPU_POOLS,
    TpuPoolSpec,
    parse_tpu_pool,
)
from elastic_devtools.localcluster.kueue import KueueSettings
from elastic_devtools.localcluster.versions import BUILD_HINT, Binaries, MissingBinaryError

__all__ = [
    "BUILD_HINT",
    "COMPONENTS",
    "DEFAULT_CPU_NODES",
    "DEFAULT_TPU_POOLS",
    "Binaries",
    "Cluster",
    "ClusterConfig",
    "ClusterStartError",
    "ClusterStatus",
    "KueueSettings",
    "MissingBinaryError",
    "TpuPoolSpec",
    "default_dir",
    "down",
    "kueue_settings",
    "parse_tpu_pool",
    "start_kueue",
    "status",
    "stop_kueue",
    "up",
]
