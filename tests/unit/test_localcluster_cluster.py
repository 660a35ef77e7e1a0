"""Parts of cluster.py that need no binaries."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from elastic_devtools import localcluster as lc
from elastic_devtools.localcluster.cluster import free_ports


def test_default_dir_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ETJ_CLUSTER_DIR", raising=False)
    monkeypatch.setenv("ETJ_CACHE_DIR", str(tmp_path / "cache"))
    assert lc.default_dir() == tmp_path / "cache" / "cluster"
    assert lc.ClusterConfig().dir == tmp_path / "cache" / "cluster"
    monkeypatch.setenv("ETJ_CLUSTER_DIR", str(tmp_path / "mine"))
    assert lc.default_dir() == tmp_path / "mine"


def test_free_ports_are_distinct() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(1024 < p < 65536 for p in ports)


def test_handle_paths(tmp_path: Path) -> None:
    handle = lc.Cluster(tmp_path)
    assert handle.kubeconfig == tmp_path / "kubeconfig"
    assert handle.logs_dir == tmp_path / "logs"
    (tmp_path / "cluster.json").write_text(json.dumps({"server": "https://127.0.0.1:1"}))
    assert handle.server == "https://127.0.0.1:1"


def test_status_of_an_empty_dir(tmp_path: Path) -> None:
    st = lc.status(tmp_path)
    assert not st.running and not st.any_alive and st.rss_total == 0
    assert [c.name for c in st.components] == list(lc.COMPONENTS)
    assert lc.down(tmp_path / "never-created") == 0


def test_kueue_is_optional_for_a_running_cluster(tmp_path: Path) -> None:
    from elastic_devtools.localcluster.cluster import ClusterStatus, ComponentStatus

    def status(kueue_pid: int | None, kueue_alive: bool) -> ClusterStatus:
        parts = [ComponentStatus(name, 1, True, 0) for name in lc.COMPONENTS
                 if name != "kueue-controller"]
        parts.append(ComponentStatus("kueue-controller", kueue_pid, kueue_alive, 0))
        return ClusterStatus(tmp_path, tuple(parts), True, "https://127.0.0.1:1")

    assert "kueue-controller" in lc.COMPONENTS
    assert status(None, False).running  # never started: not needed
    assert status(7, True).running
    assert not status(7, False).running  # started, then died: the cluster is not whole
