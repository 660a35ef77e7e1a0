"""The `etj operator` subprocess harness, driven against a stand-in operator (a tiny HTTP
server on the ports it is given), so no cluster is needed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_process import (
    OPERATOR_COMMAND,
    TEST_ARGS,
    OperatorProcess,
    replicas,
)
from elastic_devtools.localcluster.promtext import parse_metrics

# Serves /healthz and /metrics on the ports it is given, as `etj operator` does; with
# --exit-at-once it dies before serving; with --child it leaves a grandchild in its group.
FAKE_OPERATOR = textwrap.dedent("""
    import http.server, os, subprocess, sys
    args = sys.argv[1:]
    print("fake operator", os.getpid(), args, os.environ["KUBECONFIG"],
          os.environ.get("ETJ_EXTRA"), flush=True)
    if "--exit-at-once" in args:
        sys.exit(3)
    if "--child" in args:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("child", child.pid, flush=True)
    port = lambda flag: int(args[args.index(flag) + 1])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = {"/healthz": b"{}", "/metrics": b"# HELP x\\nreconciles_total 7.0\\n"}
            self.send_response(200 if self.path in body else 404)
            self.end_headers()
            self.wfile.write(body.get(self.path, b""))
        def log_message(self, *a):
            pass

    import threading
    metrics = http.server.HTTPServer(("127.0.0.1", port("--metrics-port")), Handler)
    threading.Thread(target=metrics.serve_forever, daemon=True).start()
    http.server.HTTPServer(("127.0.0.1", port("--liveness-port")), Handler).serve_forever()
""")


@pytest.fixture
def fake(tmp_path: Path) -> tuple[str, ...]:
    script = tmp_path / "fake_operator.py"
    script.write_text(FAKE_OPERATOR)
    return (sys.executable, str(script))


def _pid_alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_parse_metrics_skips_comments_and_keeps_labels() -> None:
    text = ("# HELP etj_x a counter\n# TYPE etj_x counter\n"
            'etj_x{namespace="a b"} 3.0\netj_y 1e-3\n\n')
    assert parse_metrics(text) == {'etj_x{namespace="a b"}': 3.0, "etj_y": 0.001}


def test_defaults_run_etj_operator_at_test_speed(tmp_path: Path) -> None:
    proc = OperatorProcess(tmp_path / "kubeconfig", tmp_path / "operator.log")
    argv = proc.argv()
    assert argv[:4] == [sys.executable, "-m", "elastic_api.etj_cli", "operator"]
    assert tuple(argv[:len(OPERATOR_COMMAND) + len(TEST_ARGS)]) == OPERATOR_COMMAND + TEST_ARGS
    assert argv[-11:] == ["--liveness-port", str(proc.liveness_port),
                          "--metrics-port", str(proc.metrics_port),
                          "--metrics-insecure",  # metrics() reads plain HTTP
                          "--readiness-port", str(proc.readiness_port),
                          "--listen-address", "127.0.0.1",  # not every interface
                          "--leader-identity", proc.identity]
    assert len({proc.liveness_port, proc.metrics_port, proc.readiness_port}) == 3
    # An older release's operator has no --readiness-port: none is passed.
    older = OperatorProcess(tmp_path / "k", tmp_path / "l", readiness=False)
    assert older.readiness_port is None and "--readiness-port" not in older.argv()
    # The operator's own default (HTTPS), or an older release's without the flag.
    assert "--metrics-insecure" not in OperatorProcess(
        tmp_path / "k", tmp_path / "l", insecure_metrics=False).argv()
    assert not proc.running


def test_replicas_have_their_own_identity_ports_logs_and_clock(tmp_path: Path) -> None:
    procs = replicas(2, tmp_path / "kubeconfig", tmp_path, skews=(0, 3600))
    assert len({p.identity for p in procs}) == 2
    assert len({p.liveness_port for p in procs} | {p.metrics_port for p in procs}) == 4
    assert [p.log_path.name for p in procs] == ["operator-0.log", "operator-1.log"]
    assert procs[0].argv()[:4] == [*OPERATOR_COMMAND]
    assert procs[1].argv()[:6] == [sys.executable, "-m",
                                   "elastic_devtools.localcluster.skewed_clock", "3600",
                                   "--", "operator"]
    with pytest.raises(ValueError, match="skew_seconds"):
        OperatorProcess(tmp_path / "k", tmp_path / "l", command=("x",), skew_seconds=5)


def test_the_skewed_clock_moves_wall_time_only() -> None:
    code = ("import time, datetime as d; from elastic_devtools.localcluster import skewed_clock;"
            "m0, t0 = time.monotonic(), time.time(); skewed_clock.install(3600);"
            "from datetime import datetime, UTC;"
            "print(round(time.time() - t0), round(time.monotonic() - m0),"
            " round(datetime.now(UTC).timestamp() - t0), round(d.datetime.now().timestamp() - t0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert out == ["3600", "0", "3600", "3600"]


def test_start_kill_restart_stop(tmp_path: Path, fake: tuple[str, ...]) -> None:
    log = tmp_path / "logs" / "operator.log"
    proc = OperatorProcess(tmp_path / "kubeconfig", log, args=("--namespace", "ns"),
                           env={"ETJ_EXTRA": "yes"}, command=fake)
    proc.start(timeout=30)
    try:
        assert proc.running and proc.healthy()
        assert proc.metrics() == {"reconciles_total": 7.0}
        first = proc.pid
        line = log.read_text().splitlines()[0]
        assert f"fake operator {first} ['--namespace', 'ns', '--liveness-port'" in line
        assert line.endswith(f"{tmp_path / 'kubeconfig'} yes")
        with pytest.raises(RuntimeError, match="already running"):
            proc.start()

        proc.kill()
        assert proc.proc is not None and proc.proc.returncode == -signal.SIGKILL
        assert not proc.running
        with pytest.raises(RuntimeError, match="exited with -9"):
            proc.healthy()

        proc.start(timeout=30)  # the same ports, the log appended to
        assert proc.running and proc.pid != first
        assert [ln.split()[2] for ln in log.read_text().splitlines()] == [str(first),
                                                                          str(proc.pid)]
        second = proc.pid
        proc.restart(timeout=30)
        assert proc.pid not in (first, second) and proc.healthy()
    finally:
        proc.stop()
    assert proc.proc is not None and proc.proc.returncode == -signal.SIGTERM
    proc.stop()  # stopped already: nothing to do


def test_an_operator_that_exits_fails_start_at_once_naming_its_log(
        tmp_path: Path, fake: tuple[str, ...]) -> None:
    log = tmp_path / "operator.log"
    proc = OperatorProcess(tmp_path / "kubeconfig", log, args=("--exit-at-once",), command=fake)
    with pytest.raises(RuntimeError, match=f"exited with 3; see {log}"):
        proc.start(timeout=600)  # raised by the first look, not after the timeout


def test_new_session_stops_the_whole_process_group(tmp_path: Path,
                                                   fake: tuple[str, ...]) -> None:
    log = tmp_path / "operator.log"
    proc = OperatorProcess(tmp_path / "kubeconfig", log, args=("--child",), command=fake,
                           new_session=True)
    proc.start(timeout=30)
    try:
        assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
        child = int(wait_for(lambda: [ln for ln in log.read_text().splitlines()
                                      if ln.startswith("child ")], 30, "the child's pid")[0]
                    .split()[1])
        assert _pid_alive(child)
    finally:
        proc.stop()
    # The grandchild got the SIGTERM too.
    wait_for(lambda: not _pid_alive(child), 30, "the operator's child to exit")
