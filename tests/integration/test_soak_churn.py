"""The job-churn soak (issue 61, item 4: memory and state stay flat for a week), on the
local control plane: short jobs (one v5e 4x4 slice each, LANES at a time) created,
brought to Ready, every other one through a slice failure, and deleted, again and again;
the operator's RSS and the entries of each of its per-job stores
(etj_job_memory_entries{store}) sampled throughout (tests/support/churn.py judges them).

`make test` runs the cheap guard: GUARD_JOBS jobs, then every store back at its baseline
once they are gone. `make soak-churn` (ETJ_CHURN_SECONDS, default an hour) churns for
that long and fails if a store grows with the jobs ever created rather than with the jobs
alive (the fitted growth over the second half); its summary (RSS slope, each store's
largest and last size) is written where ETJ_CHURN_SUMMARY says, for docs/benchmarks.md.
"""
from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_api.names import GROUP, PLURAL, VERSION, job_pods_selector, worker_pods_selector
from elastic_devtools.background import BackgroundLoop
from elastic_devtools.localcluster import Cluster, faults
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import OperatorProcess
from tests.builders import etj
from tests.support.churn import Sample, growing_stores, not_back, summary

pytestmark = pytest.mark.cluster

CHURN_SECONDS = float(os.environ.get("ETJ_CHURN_SECONDS") or 0)
GUARD_JOBS = 24
# Three one-slice jobs at a time on the four v5e 4x4 pools: one pool stays free for the
# replacement of a failed slice.
LANES = 3
SAMPLE_S = 10.0 if CHURN_SECONDS else 2.0
STEP_TIMEOUT = 120.0


@pytest.fixture
def api(crd_api: client.ApiClient) -> client.ApiClient:
    return crd_api


@pytest.fixture
def operator(cluster: Cluster, crd_api: client.ApiClient, tmp_path: Path
             ) -> Iterator[OperatorProcess]:
    with OperatorProcess(Path(cluster.kubeconfig), tmp_path / "operator.log") as proc:
        wait_for(lambda: proc.health()["caches"]["synced"], 60, "the caches synced")
        yield proc


def manifest(name: str) -> dict[str, Any]:
    return (etj(name, namespace=None).backend("pathways").max_restarts(0).tpu("v5e", "4x4", 1)
            .spec(elastic={"maxSliceRestarts": 5},
                  checkpoint={"directory": f"/tmp/etj-churn/{name}"},
                  pathways={"gcsScratch": "gs://test-bucket/scratch"})
            .trainer("trainer:test", 1000).obj())


class Churn:
    """The lanes' jobs: how many were created and which exist now."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        self.api, self.namespace = api, namespace
        self.names = itertools.count()
        self.lock = threading.Lock()
        self.created, self.alive = 0, 0

    def status(self, name: str) -> dict[str, Any]:
        job = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                       PLURAL, name)
        return dict(job.get("status") or {})

    def one_job(self, lane: int, fail: bool) -> None:
        """Create a job, see it Ready (a slice failure counted, if `fail`), delete it and
        see its pods gone."""
        name = f"churn-{lane}-{next(self.names)}"
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                    manifest(name))
        with self.lock:
            self.created, self.alive = self.created + 1, self.alive + 1
        wait_for(lambda: self.status(name).get("slicesReady") == 1, STEP_TIMEOUT,
                 f"{name} Ready")
        if fail:
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector=worker_pods_selector(name, 0)).items
            faults.fail_pod(self.api, self.namespace, pods[0].metadata.name)
            wait_for(lambda: self.status(name).get("counters", {}).get("sliceFailures"),
                     STEP_TIMEOUT, f"{name}'s slice failure counted")
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                    name)
        wait_for(lambda: not self.core.list_namespaced_pod(
            self.namespace, label_selector=job_pods_selector(name)).items,
            STEP_TIMEOUT, f"{name}'s pods gone")
        with self.lock:
            self.alive -= 1

    def lane(self, lane: int, until: float, jobs: int, errors: list[BaseException]) -> None:
        try:
            for i in itertools.count():
                if (jobs and i >= jobs) or (until and time.monotonic() >= until):
                    return
                self.one_job(lane, fail=i % 2 == 1)
        except BaseException as e:  # reported by the test's thread
            errors.append(e)


class Sampler(BackgroundLoop):
    THREAD_NAME = "churn-sampler"

    def __init__(self, op: OperatorProcess, churn: Churn) -> None:
        self.op, self.churn, self.started = op, churn, time.monotonic()
        self.samples: list[Sample] = []

    def sample(self) -> Sample:
        metrics = self.op.metrics()
        prefix = 'etj_job_memory_entries{store="'
        entries = {k[len(prefix):-2]: int(v) for k, v in metrics.items()
                   if k.startswith(prefix)}
        with self.churn.lock:
            created, alive = self.churn.created, self.churn.alive
        return Sample(time.monotonic() - self.started, created, alive,
                      rss_bytes(self.op.pid), entries)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.samples.append(self.sample())


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.mark.timeout(int(CHURN_SECONDS) + 900 if CHURN_SECONDS else 900)
def test_what_the_operator_keeps_per_job_follows_the_jobs_alive(
        api: client.ApiClient, namespace: str, operator: OperatorProcess) -> None:
    churn = Churn(api, namespace)
    sampler = Sampler(operator, churn)
    baseline = sampler.sample()
    errors: list[BaseException] = []
    until = time.monotonic() + CHURN_SECONDS if CHURN_SECONDS else 0.0
    per_lane = 0 if CHURN_SECONDS else GUARD_JOBS // LANES
    lanes = [threading.Thread(target=churn.lane, args=(i, until, per_lane, errors),
                              name=f"churn-lane-{i}") for i in range(LANES)]
    with sampler:
        for lane in lanes:
            lane.start()
        for lane in lanes:
            lane.join()
    if errors:
        raise errors[0]
    samples = [baseline, *sampler.samples]
    # The allocator's arenas, as the operator ran with them (it inherits this
    # environment): bounded or not, a question of the RSS slope (docs/benchmarks.md).
    report = {**summary(samples, LANES),
              "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX") or "glibc default"}
    print(f"\njob churn: {json.dumps(report, indent=1)}")
    if path := os.environ.get("ETJ_CHURN_SUMMARY"):
        Path(path).write_text(json.dumps({"summary": report, "samples": [
            s.__dict__ for s in samples]}, indent=1))
    # Every job gone: every store back where it started (a deletion forgets a job
    # everywhere; a resync sweeps what a late write left).
    wait_for(lambda: not not_back(baseline, sampler.sample()), 60,
             f"every per-job store back at its baseline {baseline.entries}")
    if CHURN_SECONDS:
        grown = growing_stores(samples, LANES)
        assert not grown, f"stores that grow with the jobs ever created: {grown}"
    else:
        assert churn.created == GUARD_JOBS
        # While the jobs lived, every store held at most the jobs alive (and those whose
        # pods were still going): never an entry per job ever created.
        assert max(max(s.entries.values(), default=0) for s in samples) <= 2 * LANES, \
            report["stores"]
