"""Slice health from worker pods' readiness, against the real local control plane."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from elastic_devtools.localcluster.tcpproxy import TcpProxy, proxied_kubeconfig
from elastic_trainer.pods import PodReadiness

JOB = "demo"


def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _worker_pod(name: str, slice_index: int, job: str = JOB) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {
            "elastic.pathways.dev/job-name": job,
            "jobset.sigs.k8s.io/replicatedjob-name": "worker",
            "jobset.sigs.k8s.io/job-index": str(slice_index),
        }},
        # Never scheduled (no node matches), so no kubelet or kwok touches its status:
        # the test sets readiness itself through the status subresource.
        "spec": {"nodeSelector": {"etj.test/no-such-node": "true"},
                 "containers": [{"name": "agent", "image": "etj/slice-agent"}]},
    }


def _set_ready(core: client.CoreV1Api, namespace: str, name: str, ready: bool) -> None:
    core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}})


def _make_workers(core: client.CoreV1Api, namespace: str) -> None:
    for slice_index in (0, 1):
        for host in (0, 1):
            core.create_namespaced_pod(namespace,
                                       _worker_pod(f"w-{slice_index}-{host}", slice_index))
    # Another job's Ready pod must not count for ours.
    core.create_namespaced_pod(namespace, _worker_pod("other-1-0", 1, job="other"))
    _set_ready(core, namespace, "other-1-0", True)


def test_pod_readiness_marks_slices_up_and_down(cluster: Any, namespace: str,
                                                monkeypatch: Any) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    core = client.CoreV1Api(cluster.api_client())
    _make_workers(core, namespace)
    health = PodReadiness(namespace, JOB, total_slices=2, hosts_per_slice=2)
    health.start()
    try:
        assert set(health.down_slices()) == {0, 1}
        for name in ("w-0-0", "w-0-1", "w-1-0"):
            _set_ready(core, namespace, name, True)
        _wait(lambda: set(health.down_slices()) == {1}, 20, "slice 0 up, slice 1 down")
        _set_ready(core, namespace, "w-1-1", True)
        _wait(lambda: health.down_slices() == {}, 20, "both slices up")
        before = time.time()
        core.delete_namespaced_pod("w-0-1", namespace, grace_period_seconds=0)
        _wait(lambda: set(health.down_slices()) == {0}, 20, "slice 0 down")
        assert health.down_slices()[0] >= before - 1
    finally:
        health.close()


def _all_ready(core: client.CoreV1Api, namespace: str) -> None:
    _make_workers(core, namespace)
    for name in ("w-0-0", "w-0-1", "w-1-0", "w-1-1"):
        _set_ready(core, namespace, name, True)


def _flip_slice_1_through_the_watch(core: client.CoreV1Api, namespace: str,
                                    health: PodReadiness) -> int:
    """All up; a pod of slice 1 turns NotReady and back; both changes are seen through
    the watch, without listing again. Returns the list count."""
    _wait(lambda: health.down_slices() == {}, 20, "both slices up")
    lists = health.lists
    _set_ready(core, namespace, "w-1-0", False)
    _wait(lambda: list(health.down_slices()) == [1], 10, "slice 1 down")
    _set_ready(core, namespace, "w-1-0", True)
    _wait(lambda: health.down_slices() == {}, 10, "slice 1 up again")
    assert health.lists == lists
    return lists


def test_pod_readiness_sees_a_pod_turn_not_ready_through_its_watch(
        cluster: Any, namespace: str, monkeypatch: Any) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    core = client.CoreV1Api(cluster.api_client())
    _all_ready(core, namespace)
    health = PodReadiness(namespace, JOB, total_slices=2, hosts_per_slice=2)
    health.start()
    try:
        _flip_slice_1_through_the_watch(core, namespace, health)
    finally:
        health.close()


def test_pod_readiness_lists_again_after_its_connection_is_cut(
        cluster: Any, namespace: str, monkeypatch: Any, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="elastic_trainer.pods")
    server = urlsplit(cluster.server)
    with TcpProxy(server.hostname or "127.0.0.1", server.port or 443) as proxy:
        monkeypatch.setenv("KUBECONFIG", str(proxied_kubeconfig(
            cluster.kubeconfig, proxy, tmp_path / "kubeconfig")))
        core = client.CoreV1Api(cluster.api_client())  # the test's own calls go direct
        _all_ready(core, namespace)
        health = PodReadiness(namespace, JOB, total_slices=2, hosts_per_slice=2)
        health.start()
        try:
            # A change seen without a list: the watch is connected (through the proxy).
            lists = _flip_slice_1_through_the_watch(core, namespace, health)
            assert proxy.drop_connections() >= 1
            # What changes while the watch is down or coming back is not lost.
            _set_ready(core, namespace, "w-0-1", False)
            _wait(lambda: list(health.down_slices()) == [0], 20, "slice 0 down after the cut")
            _wait(lambda: health.lists > lists, 20, "a list after the cut")
            assert health.watching
            # ... and the new watch carries the next change.
            _wait(lambda: proxy.open_connections >= 1, 10, "a new watch connection")
            _set_ready(core, namespace, "w-0-1", True)
            _wait(lambda: health.down_slices() == {}, 20, "slice 0 up again")
        finally:
            health.close()
    broke = [r for r in caplog.records if "worker pods: watch failed" in r.getMessage()]
    assert [r.levelname for r in broke] == ["WARNING"], caplog.text


def test_trainer_follows_worker_pods(cluster: Any, namespace: str, tmp_path: Path,
                                     compilation_cache: Path) -> None:
    core = client.CoreV1Api(cluster.api_client())
    _make_workers(core, namespace)
    for name in ("w-0-0", "w-0-1", "w-1-0"):
        _set_ready(core, namespace, name, True)
    log_path, summary_path = tmp_path / "train.log", tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETJ_JOB_", "XLA_"))}
    env.update(KUBECONFIG=str(cluster.kubeconfig), ETJ_HOSTS_PER_SLICE="2")
    cmd = [sys.executable, "-m", "elastic_api.etj_cli", "train", "--config", "tiny",
           "--steps", "1500", "--simulate-slices", "2", "--slice-health", "pods",
           "--job", f"{namespace}/{JOB}", "--snapshot-period", "5",
           "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-period", "500",
           "--compilation-cache", str(compilation_cache), "--log-every", "100",
           "--elastic-timeout", "120", "--summary", str(summary_path)]
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        try:
            def logged(text: str) -> bool:
                assert proc.poll() is None or text in log_path.read_text(), \
                    log_path.read_text()[-3000:]
                return text in log_path.read_text()

            # Slice 1 has one Ready pod of two: pause and resume waits for it.
            _wait(lambda: logged("waiting for 2 healthy slice(s)"), 60, "the trainer waits")
            _set_ready(core, namespace, "w-1-1", True)
            _wait(lambda: logged("step 200/1500"), 90, "training to reach step 200")
            _set_ready(core, namespace, "w-1-0", False)
            _wait(lambda: logged("elastic event 1:"), 30, "the trainer to see slice 1 down")
            _set_ready(core, namespace, "w-1-0", True)
            assert proc.wait(timeout=120) == 0, log_path.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
    summary = json.loads(summary_path.read_text())
    [event] = summary["elastic_events"]
    assert event["slices_down"] == [1]
    assert event["restore_source"] == "snapshot"
    assert event["failed_step"] >= 200 and event["steps_lost"] < 5
    assert summary["final_step"] == 1500
