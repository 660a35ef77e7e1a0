"""`etj progress`, the head's sidecar for a trainer that does not report itself: the process
identity it gives the operator (kept across its own restarts in the pod, new in a new pod),
the report it makes of a metrics line, and the command itself against a recording API
server, fed MaxText's real metrics lines with garbage in between."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from elastic_api.models import TrainingReport
from elastic_trainer.metrics_file import StepRecord
from elastic_trainer.progress_sidecar import load_identity, pod_identity, progress_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "maxtext-0.2.5"
REAL_LINES = (FIXTURES / "metrics-local.jsonl").read_text().splitlines(keepends=True)
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
UID = "3f1c2a8e-6b1d-4c55-9a0e-2d8f1e7b9c01"


def test_the_identity_is_kept_across_restarts_of_the_sidecar(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    first = load_identity(state, "job-head-0-0-abc", UID, NOW)
    again = load_identity(state, "job-head-0-0-abc", UID, NOW + timedelta(minutes=5))
    assert again == first
    assert first.host_name == "job-head-0-0-abc" and first.started_at == NOW
    assert 0 <= first.process_id < 2**53


def test_a_new_pod_is_a_new_process(tmp_path: Path) -> None:
    """A JobSet restart makes a new head pod (new name and uid, new emptyDir): the
    operator must see a later processStartedAt (TrainerRestarted)."""
    state = tmp_path / "state.json"
    old = load_identity(state, "job-head-0-0-abc", UID, NOW)
    new = load_identity(state, "job-head-0-0-xyz", "another-uid", NOW + timedelta(minutes=1))
    assert new.started_at > old.started_at and new.process_id != old.process_id


@pytest.mark.parametrize("content", ["", "{", "[]", '{"podUid": 1}',
                                     json.dumps({"podUid": UID, "hostName": "p",
                                                 "startedAt": "yesterday", "processId": 1}),
                                     json.dumps({"podUid": UID, "hostName": "p",
                                                 "startedAt": "2026-12-01T08:00:00",
                                                 "processId": 1})])
def test_a_bad_state_file_gives_a_new_identity(tmp_path: Path, content: str) -> None:
    state = tmp_path / "state.json"
    state.write_text(content)
    assert load_identity(state, "p", UID, NOW) == pod_identity("p", UID, NOW)
    assert json.loads(state.read_text())["podUid"] == UID


def test_an_unwritable_state_file_is_no_crash(tmp_path: Path) -> None:
    state = tmp_path / "missing-dir" / "state.json"
    assert load_identity(state, "p", UID, NOW) == pod_identity("p", UID, NOW)


def test_reports_validate_and_carry_the_identity() -> None:
    identity = pod_identity("p", UID, NOW)
    first = progress_report(identity, None, 30, NOW)
    assert (first.state, first.step, first.total_steps) == ("Initializing", 0, 30)
    report = progress_report(identity, StepRecord(12, 5.9, 0.25), 30, NOW)
    wire = TrainingReport.model_validate(report.model_dump(mode="json")).to_wire()
    assert wire == {
        "observedAt": "2026-12-01T09:00:00Z", "state": "Training", "step": 12, "loss": 5.9,
        "stepSeconds": 0.25, "totalSteps": 30, "attempt": 0, "elasticEventsTotal": 0,
        "processId": identity.process_id, "hostName": "p",
        "processStartedAt": "2026-12-01T09:00:00Z"}


def test_importing_it_needs_no_jax() -> None:
    heavy = ["jax", "orbax", "flax", "optax", "kopf", "elastic_operator", "kubernetes"]
    code = ("import sys\nimport elastic_trainer.progress_sidecar, elastic_trainer.progress_cli\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --- the command against a recording API server --------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]] = []
    paths: list[str] = []

    def do_PATCH(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        type(self).paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[tuple[type[_Recorder], Path]]:
    recorder = type("Recorder", (_Recorder,), {"bodies": [], "paths": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters: [{name: x, cluster: "
        f"{{server: 'http://127.0.0.1:{server.server_address[1]}'}}}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "users: [{name: x, user: {token: t}}]\n")
    yield recorder, kubeconfig
    server.shutdown()


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _training(recorder: type[_Recorder]) -> list[dict[str, Any]]:
    return [b["status"]["training"] for b in list(recorder.bodies)]


def test_the_sidecar_follows_maxtexts_file_into_status_training(
        api_server: tuple[type[_Recorder], Path], tmp_path: Path) -> None:
    recorder, kubeconfig = api_server
    metrics, state = tmp_path / "metrics.jsonl", tmp_path / "state.json"
    env = {"KUBECONFIG": str(kubeconfig), "ETJ_JOB_NAMESPACE": "team-a",
           "ETJ_JOB_NAME": "maxtext-cpu", "ETJ_POD_NAME": "maxtext-cpu-head-0-0-abc",
           "ETJ_POD_UID": UID, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # this checkout's code
    cmd = [sys.executable, "-m", "elastic_api.etj_cli", "progress", "--metrics-file", str(metrics),
           "--state-file", str(state), "--total-steps", "30", "--poll-interval", "0.05",
           "--report-interval", "0.1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        _wait(lambda: any(t["state"] == "Initializing" for t in _training(recorder)),
              "the Initializing report")
        with metrics.open("a") as f:
            for text in REAL_LINES[:10]:
                f.write(text)
                f.flush()
        _wait(lambda: any(t.get("step") == 9 for t in _training(recorder)), "step 9")
        with metrics.open("a") as f:
            f.write("garbage that is no metrics line\n")
            f.write(REAL_LINES[10][:30])  # a partial write...
            f.flush()
            f.write(REAL_LINES[10][30:])  # ...finished later
            f.writelines(REAL_LINES[11:])
        _wait(lambda: any(t.get("step") == 29 for t in _training(recorder)), "step 29")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    last = _training(recorder)[-1]
    final = json.loads(REAL_LINES[-1])
    assert (last["state"], last["step"], last["loss"], last["stepSeconds"], last["totalSteps"]) \
        == ("Training", 29, final["learning/loss"], final["perf/step_time_seconds"], 30)
    assert last["hostName"] == "maxtext-cpu-head-0-0-abc"
    assert {t["processStartedAt"] for t in _training(recorder)} == {last["processStartedAt"]}
    assert set(recorder.paths) == {"/apis/elastic.pathways.dev/v1alpha1/namespaces/team-a/"
                                   "elastictrainingjobs/maxtext-cpu/status"}
    steps = [t["step"] for t in _training(recorder) if t["state"] == "Training"]
    assert steps == sorted(steps)  # never back: every line read once, in order
    assert "skipped 1 line(s) that are not metrics lines (1 so far" in out
    assert "stopped at step 29 (1 line(s) skipped" in out
