"""status.training reporting: the payload is a TrainingReport; writes are rate-limited merge
patches on the status subresource; an unreachable API server never blocks training."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from builders import etj

from elastic_api.budgets import JOBSET_RESTARTS, mean_seconds_between
from elastic_api.models import TrainingReport
from elastic_trainer.backends import SimulatedBackend
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.compose import build_trainer
from elastic_trainer.configs import get_config
from elastic_trainer.data import SyntheticSource
from elastic_trainer.events import ElasticEvent
from elastic_trainer.loop import LoopOptions
from elastic_trainer.report import (
    StatusReporter,
    hosts_of,
    job_from_args,
    prior_run,
    status_patch,
)
from elastic_trainer.simulated_faults import FaultSchedule


def _wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.01)


class _Recorder(BaseHTTPRequestHandler):
    requests: list[tuple[str, str, str, dict[str, Any]]] = []

    def do_PATCH(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(
            (self.command, self.path, self.headers["Content-Type"], body))
        payload = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        f"clusters: [{{name: x, cluster: {{server: '{server}'}}}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "users: [{name: x, user: {token: t}}]\n"
    )
    return path


@pytest.fixture
def api_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Recorder]]:
    recorder = type("Recorder", (_Recorder,), {"requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(
        tmp_path / "kubeconfig", f"http://127.0.0.1:{server.server_address[1]}")))
    yield recorder
    server.shutdown()


def _report(step: int, state: str = "Training") -> TrainingReport:
    return TrainingReport(observed_at=datetime.now(UTC), state=state, step=step)  # type: ignore[arg-type]


def test_trainer_report_validates_against_the_model(tmp_path: Path) -> None:
    cfg = get_config("tiny")
    backend = SimulatedBackend(1, 1, FaultSchedule([]))
    trainer = build_trainer(cfg, LoopOptions(steps=10, batch=2, seed=0, max_retries=3),
                            backend, SyntheticSource(0, 2, cfg.seq_len, cfg.vocab_size),
                            Checkpointer(str(tmp_path), period=5, keep=1))
    status = trainer.status
    status.add_event(ElasticEvent(
        id=1, kind="slice_down", error="DATA_LOSS: slice 0 is down", failed_step=7,
        slices_down=[0], detected_at=time.time(), fault_at=None, phase="Restoring",
        restored_from_step=5, restore_source="snapshot"))
    trainer.loss_limit.used = 1
    report = status.training_report()
    wire = status_patch(report)["status"]["training"]
    parsed = TrainingReport.model_validate(wire)
    assert parsed == report
    assert wire["retriesRemaining"] == 2 and wire["totalSteps"] == 10
    assert wire["elasticEvent"]["phase"] == "Restoring"
    assert wire["elasticEvent"]["restoredFromStep"] == 5
    assert wire["processId"] > 0 and wire["processStartedAt"]
    # Unset fields go out as null so that a merge patch removes them.
    assert "loss" in wire and wire["loss"] is None


def test_reporter_writes_rate_limited_merge_patches(api_server: type[_Recorder]) -> None:
    reporter = StatusReporter("team-a", "demo", interval=60)
    reporter.update(_report(1), urgent=True)
    _wait_for(lambda: len(api_server.requests) == 1)
    for step in range(2, 50):
        reporter.update(_report(step))  # progress within the interval: held back
    time.sleep(0.3)
    assert len(api_server.requests) == 1
    reporter.update(_report(50, state="Recovering"), urgent=True)  # an event: at once
    _wait_for(lambda: len(api_server.requests) == 2)
    reporter.close()
    method, path, content_type, body = api_server.requests[-1]
    assert method == "PATCH"
    assert path == ("/apis/elastic.pathways.dev/v1alpha1/namespaces/team-a/"
                    "elastictrainingjobs/demo/status")
    assert content_type == "application/merge-patch+json"
    assert TrainingReport.model_validate(body["status"]["training"]).step == 50
    assert reporter.failed == 0


def test_close_flushes_the_newest_report(api_server: type[_Recorder]) -> None:
    reporter = StatusReporter("ns", "job", interval=60)
    reporter.update(_report(1), urgent=True)
    _wait_for(lambda: len(api_server.requests) == 1)
    reporter.update(_report(7))
    reporter.close()
    assert api_server.requests[-1][3]["status"]["training"]["step"] == 7


def test_unreachable_api_server_never_blocks(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")))
    reporter = StatusReporter("ns", "job", interval=0.01, request_timeout=0.5)
    start = time.monotonic()
    for step in range(1000):
        reporter.update(_report(step), urgent=step % 100 == 0)
    assert time.monotonic() - start < 1.0  # update() only hands the report over
    deadline = time.monotonic() + 10
    while reporter.failed < 2:  # every new report is tried again, and fails again
        assert time.monotonic() < deadline
        reporter.update(_report(1000), urgent=True)
        time.sleep(0.01)
    closing = time.monotonic()
    reporter.close(timeout=5)
    assert time.monotonic() - closing < 6


def test_job_from_args_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ETJ_JOB_NAMESPACE", raising=False)
    monkeypatch.delenv("ETJ_JOB_NAME", raising=False)
    assert job_from_args(None) is None
    assert job_from_args("ns/name") == ("ns", "name")
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        job_from_args("just-a-name")
    monkeypatch.setenv("ETJ_JOB_NAMESPACE", "team")
    monkeypatch.setenv("ETJ_JOB_NAME", "run-1")
    assert job_from_args(None) == ("team", "run-1")


def test_metrics_are_served(tmp_path: Path) -> None:
    import socket
    import urllib.request

    from elastic_trainer.report import Metrics

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics = Metrics(port)
    metrics.on_step(12, 2.5, 0.25, 2)
    metrics.on_event()
    metrics.on_resumed(3.5, 4)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "etj_trainer_step 12.0" in body
    assert "etj_trainer_loss 2.5" in body
    assert "etj_trainer_elastic_events_total 1.0" in body
    assert "etj_trainer_recovery_seconds 3.5" in body
    assert "etj_trainer_steps_lost_total 4.0" in body
    assert not Metrics(None).enabled


def _stored(**fields: Any) -> dict[str, Any]:
    """status.training as a trainer writes it (observedAt and state always come along;
    a report without them is ignored as a whole, by the operator and the trainer)."""
    return {"observedAt": "2026-11-30T09:00:00Z", "state": "Training", **fields}


def test_a_replacement_process_counts_on_from_the_jobs_status() -> None:
    status = {"counters": {"elasticEvents": 4},
              "training": _stored(elasticEventsTotal=3, retriesRemaining=7)}
    assert prior_run(status, max_retries=10) == (4, 3)
    # The trainer's own report may be ahead of the operator's counter.
    assert prior_run({"counters": {"elasticEvents": 2},
                      "training": _stored(elasticEventsTotal=5)}, 10) == (5, 0)
    # A spent budget stays spent: the next failure ends the run.
    assert prior_run({"training": _stored(retriesRemaining=0)}, 10) == (0, 10)
    assert prior_run(None, 10) == prior_run({}, 10) == (0, 0)
    # A report without its required fields is no report (the operator ignores it too).
    assert prior_run({"training": {"retriesRemaining": 0}}, 10) == (0, 0)


def test_a_slice_loss_seen_after_kueue_evicted_the_job_gives_its_retry_back() -> None:
    def status(detected: Any, evicted: Any, slices: Any = (1,)) -> dict[str, Any]:
        return {"training": _stored(retriesRemaining=7, elasticEvent={
                    "id": 3, "phase": "WaitingForSlices", "detectedAt": detected,
                    "slicesDown": list(slices)}),
                "admission": {"evictedAt": evicted}}
    # Preempted at 10:00:00; the workers went, the trainer saw it 2 s later.
    assert prior_run(status("2026-11-30T10:00:02Z", "2026-11-30T10:00:00Z"), 10) == (0, 2)
    # A slice lost before the eviction was a real failure: it stays spent.
    assert prior_run(status("2026-11-30T09:59:58Z", "2026-11-30T10:00:00Z"), 10) == (0, 3)
    # No eviction, a scale-up (no slice down), or an unreadable time: nothing given back.
    assert prior_run(status("2026-11-30T10:00:02Z", None), 10) == (0, 3)
    assert prior_run(status("2026-11-30T10:00:02Z", "2026-11-30T10:00:00Z", ()), 10) == (0, 3)
    assert prior_run(status("yesterday", "2026-11-30T10:00:00Z"), 10) == (0, 3)
    # A time without a zone is read as UTC, as the operator reads it.
    assert prior_run(status("2026-11-30T10:00:02", "2026-11-30T10:00:00Z"), 10) == (0, 2)
    # Kubernetes times are whole seconds: a loss seen within the eviction's second is
    # the eviction's (elastic_api.queueing.caused_by_eviction).
    assert prior_run(status("2026-11-30T10:00:00.400Z", "2026-11-30T10:00:00Z"), 10) == (0, 2)
    # An eviction from before the earlier process started did not stop it.
    earlier = status("2026-11-30T10:00:02Z", "2026-11-30T09:00:00Z")
    earlier["training"]["processStartedAt"] = "2026-11-30T09:30:00Z"
    assert prior_run(earlier, 10) == (0, 3)
    # Nothing used, nothing to give back.
    untouched = status("2026-11-30T10:00:02Z", "2026-11-30T10:00:00Z")
    untouched["training"]["retriesRemaining"] = 10
    assert prior_run(untouched, 10) == (0, 0)


@pytest.mark.parametrize("garbage", [None, -1, True, "5", 2.5, [3], {"x": 1}])
def test_prior_run_ignores_hostile_values(garbage: Any) -> None:
    status = {"counters": {"elasticEvents": garbage, "sliceFailures": 2},
              "training": _stored(elasticEventsTotal=garbage, retriesRemaining=garbage)}
    assert prior_run(status, 10) == (0, 0)
    # One bad counter drops only itself.
    status["counters"]["elasticEvents"] = 3
    assert prior_run(status, 10) == (3, 0)
    # More remaining than the budget (a report from before a spec change): nothing used.
    assert prior_run({"training": _stored(retriesRemaining=99)}, 10) == (0, 0)


def test_event_ids_and_budget_go_on_from_an_earlier_process(tmp_path: Path) -> None:
    cfg = get_config("tiny")
    opts = LoopOptions(steps=10, batch=2, seed=0, max_retries=5, prior_events=4,
                       prior_failures=3)
    trainer = build_trainer(cfg, opts, SimulatedBackend(1, 1, FaultSchedule([])),
                            SyntheticSource(0, 2, cfg.seq_len, cfg.vocab_size),
                            Checkpointer(str(tmp_path), period=5, keep=1))
    report = trainer.status.training_report()
    assert report.elastic_events_total == 4 and report.retries_remaining == 2
    assert trainer.status.next_event_id() == 5


HEAVY = ("jax", "jaxlib", "numpy", "orbax", "optax", "kubernetes", "prometheus_client",
         "elastic_operator", "elastic_devtools")


def test_the_reporter_is_importable_without_anything_heavy() -> None:
    """A trainer that is not ours (MaxText) imports the reporter alone: no jax, no
    orbax, no operator; the Kubernetes client only when the first write goes out."""
    import subprocess
    import sys

    code = ("import sys\nfrom elastic_trainer.report import StatusReporter, job_from_args\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _documented_example() -> str:
    doc = (Path(__file__).parents[2] / "docs" / "status-contract.md").read_text()
    section = doc.split("## Reporting from a trainer that is not ours", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_documented_third_party_example_reports(api_server: type[_Recorder],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    monkeypatch.setenv("ETJ_JOB_NAMESPACE", "team-a")
    monkeypatch.setenv("ETJ_JOB_NAME", "maxtext-run")
    subprocess.run([sys.executable, "-c", _documented_example()], timeout=120, check=True)
    reports = [TrainingReport.model_validate(body["status"]["training"])
               for _, path, _, body in api_server.requests
               if path.endswith("/namespaces/team-a/elastictrainingjobs/maxtext-run/status")]
    # The loop is instant here, so reports not yet sent were replaced by newer ones; the
    # last one always goes out, at close().
    assert len(reports) == len(api_server.requests) >= 1
    assert (reports[-1].state, reports[-1].step, reports[-1].total_steps) == (
        "Succeeded", 100, 100)
    assert {r.process_id for r in reports} == {reports[0].process_id}


def test_a_replacement_process_reads_the_goodput_step_and_ack_it_left() -> None:
    from elastic_trainer.report import prior_state

    status = {"counters": {"elasticEvents": 1}, "training": _stored(
        elasticEventsTotal=1, retriesRemaining=9, step=130,
        goodput={"productiveSeconds": 40.5, "badputSeconds": {"restore": 2.0},
                 "medianStepSeconds": 0.3},
        checkpointAck={"id": 2, "step": 120, "committedAt": "2026-11-30T12:00:00Z",
                       "paused": True})}
    prior = prior_state(status, max_retries=10)
    assert (prior.events, prior.failures, prior.step) == (1, 1, 130)
    assert prior.goodput is not None and prior.goodput.productive_seconds == 40.5
    assert prior.goodput.badput_seconds.restore == 2.0
    assert prior.checkpoint_ack is not None
    assert (prior.checkpoint_ack.id, prior.checkpoint_ack.step) == (2, 120)
    # Untrusted: what does not parse is left out, the rest is kept.
    hostile = {"training": _stored(step="130", goodput={"productiveSeconds": "40"},
                                   checkpointAck={"id": True, "step": 1, "committedAt": "x"})}
    assert prior_state(hostile, 10) == prior_state(None, 10) == prior_state({}, 10)
    bad_time = {"training": _stored(checkpointAck={"id": 1, "step": 1, "committedAt": "never"})}
    assert prior_state(bad_time, 10).checkpoint_ack is None


def test_the_jobs_hosts_come_from_its_spec_and_set_the_checkpoint_prior(tmp_path: Path
                                                                        ) -> None:
    """What read_prior_run takes from the job as the API server returns it: 16 v5e 16x16
    slices of 64 hosts. The checkpoint cadence's prior is the crashes' MTBF for them; a
    trainer without its job (or with a spec that does not parse) has none."""
    job = etj().tpu("v5e", "16x16", 16).build().model_dump(by_alias=True, mode="json")
    assert hosts_of(job) == 1024
    assert hosts_of({**job, "status": {"fieldOfANewerOperator": 1}}) == 1024
    assert hosts_of({"spec": {"tpu": "nonsense"}}) is None and hosts_of(None) is None
    cfg = get_config("tiny")

    def trainer(hosts: int | None) -> Any:
        return build_trainer(cfg, LoopOptions(steps=10, batch=8, seed=0, job_hosts=hosts),
                             SimulatedBackend(2, 2, FaultSchedule([])),
                             SyntheticSource(0, 8, cfg.seq_len, cfg.vocab_size),
                             Checkpointer(str(tmp_path / "ckpt"), period=None, keep=2))
    cadences = trainer(1024).copies.cadences
    assert cadences.checkpoint.prior_mtbf == mean_seconds_between(JOBSET_RESTARTS, 1024)
    assert cadences.snapshot.prior_mtbf is None  # a slice loss restores the snapshot
    assert trainer(None).copies.cadences.checkpoint.prior_mtbf is None
