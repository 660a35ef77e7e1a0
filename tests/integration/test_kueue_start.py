"""Kueue's start on the local control plane survives a port taken between the pick and
Kueue's bind: in `make test`'s parallel workers another process can take it (a fresh
clone's run failed so: `bind: address already in use`). Started again on new ports, as
the control plane's own components are."""
from __future__ import annotations

import socket

import pytest

from elastic_devtools import localcluster as lc
from elastic_devtools.localcluster import cluster as cluster_module
from elastic_devtools.localcluster.cluster import Cluster

pytestmark = pytest.mark.cluster


def test_kueue_starts_again_on_new_ports_when_one_is_taken(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    if lc.kueue_settings(cluster) is not None:
        lc.stop_kueue(cluster)  # a fresh start is what is tested
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    picks: list[list[int]] = []
    real = cluster_module.free_ports

    def first_pick_taken(count: int) -> list[int]:
        ports = real(count)
        if not picks:  # Kueue's first pick: its webhook port is someone else's
            ports[0] = taken.getsockname()[1]
        picks.append(ports)
        return ports

    monkeypatch.setattr(cluster_module, "free_ports", first_pick_taken)
    said: list[str] = []
    try:
        assert lc.start_kueue(cluster, progress=said.append, die_with_parent=True)
        assert any("a port was taken during Kueue's start" in line for line in said), said
        assert len(picks) == 2 and lc.kueue_settings(cluster) is not None
    finally:
        taken.close()
        lc.stop_kueue(cluster)
