"""`etj operator` as a child process, for the tests, the demo and the benchmarks.

The operator runs exactly as deployed (`python -m elastic_api.etj_cli operator ...`), so
a caller can stop it, SIGKILL it and start it again. It always gets a free liveness port
(`start()` returns once /healthz answers: a standby answers too), a free metrics port
(`metrics()`, plain HTTP unless `insecure_metrics=False`) and, unless `readiness=False`
(an older release's operator, which has no such flag), a free readiness port
(`ready()`: GET /readyz, 200 once it could lead).
Each OperatorProcess has its own leader identity, kept across its restarts (as a pod's
name is across container restarts), so a restarted operator takes its Lease back at
once; `replicas()` makes several that elect one leader, and `skew_seconds` runs one with
its wall clock off. `pause` / `resume` freeze and wake it (SIGSTOP / SIGCONT).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from elastic_devtools.localcluster.cluster import free_ports
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.operator_settings import TEST, OperatorSettings
from elastic_devtools.localcluster.promtext import parse_metrics

# `etj operator` with the interpreter running us (the venv's), whatever `etj` is on PATH.
OPERATOR_COMMAND = (sys.executable, "-m", "elastic_api.etj_cli", "operator")
# make test's operator (operator_settings.py, the one definition of every tool's flags):
# every namespace, resync and checkpoint scan every 5 s (30 s by default), a quarantined
# node pool released 5 s after its nodes are Ready again (600 s by default).
TEST_ARGS = TEST.args()


class OperatorProcess:
    """One `etj operator` child process with its own log file (appended to on restarts).

    `args` are the operator's flags other than the two ports: an OperatorSettings (a
    tool's row of operator_settings.SETTINGS; default TEST) or the flags themselves.
    `command` runs `etj operator` given those flags; a wrapper such as the benchmarks'
    request counter replaces it. `env` is added to this process's environment (with
    KUBECONFIG). `new_session` puts the child in its own process group, signalled as a
    whole, so a Ctrl-C in the terminal reaches only the parent, which stops it in order.
    `readiness`: pass a free `--readiness-port` (False for an operator without the flag).
    `insecure_metrics`: serve /metrics over plain HTTP to anyone (`--metrics-insecure`,
    last: it wins over `args`), as `metrics()` reads it; False for the operator's own
    default (HTTPS and a reader's token, tests/integration/test_metrics_auth.py) or an
    operator without the flag.
    """

    def __init__(self, kubeconfig: Path | str, log_path: Path, *,
                 args: Sequence[str] | OperatorSettings = TEST,
                 env: Mapping[str, str] | None = None,
                 command: Sequence[str] = OPERATOR_COMMAND, cwd: Path | None = None,
                 new_session: bool = False, identity: str | None = None,
                 skew_seconds: float = 0.0, readiness: bool = True,
                 insecure_metrics: bool = True) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.log_path = log_path
        self.args = args.args() if isinstance(args, OperatorSettings) else tuple(args)
        self.env = dict(env or {})
        self.command = tuple(command)
        if skew_seconds:
            if self.command != OPERATOR_COMMAND:
                raise ValueError("skew_seconds runs `etj operator` itself: no other command")
            self.command = (sys.executable, "-m", "elastic_devtools.localcluster.skewed_clock",
                            str(skew_seconds), "--", "operator")
        self.cwd = cwd
        self.new_session = new_session
        self.identity = identity or f"operator-{uuid.uuid4().hex[:8]}"
        self.liveness_port, self.metrics_port, readiness_port = free_ports(3)
        self.readiness_port = readiness_port if readiness else None
        self.insecure_metrics = insecure_metrics
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        # Local runs: the endpoints bind the loopback only, not every interface.
        readiness = ["--readiness-port", str(self.readiness_port)] \
            if self.readiness_port is not None else []
        insecure = ["--metrics-insecure"] if self.insecure_metrics else []
        return [*self.command, *self.args, "--liveness-port", str(self.liveness_port),
                "--metrics-port", str(self.metrics_port), *insecure, *readiness,
                "--listen-address", "127.0.0.1", "--leader-identity", self.identity]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the operator was never started")
        return self.proc.pid

    def spawn(self) -> None:
        """Start the process without waiting for it to be healthy."""
        if self.running:
            raise RuntimeError(f"the operator is already running (pid {self.pid})")
        env = {**os.environ, **self.env, "KUBECONFIG": str(self.kubeconfig)}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv(), env=env, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=self.new_session)

    # A deadline, not a wait: the process answers as soon as it is up (about 5 s of
    # imports on a quiet machine), but on a 2-core machine running four test workers it
    # took over 60 s (make test-compat, test_replacement's restarted operator).
    START_TIMEOUT = 150.0

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> None:
        wait_for(self.healthy, timeout, f"operator liveness (log: {self.log_path})",
                 interval=0.5)

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start it and wait until its liveness endpoint answers."""
        self.spawn()
        self.wait_healthy(timeout)

    def healthy(self) -> bool:
        """/healthz answers 200; raises if the process has exited."""
        if self.proc is None:
            raise RuntimeError("the operator was never started")
        if self.proc.poll() is not None:
            raise RuntimeError(f"operator exited with {self.proc.returncode}; "
                               f"see {self.log_path}")
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def ready(self) -> bool:
        """GET /readyz answers 200: it could lead now (its caches synced). False while it
        is starting, stopping, or not running; an operator without the endpoint
        (readiness=False) is ready once /healthz answers, as a pod without a
        readinessProbe is."""
        if not self.running:
            return False
        if self.readiness_port is None:
            return self.healthy()
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.readiness_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:  # 503 (HTTPError is an OSError), or not answering yet
            return False

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when a node dies or the OOM killer strikes."""
        if self.proc is None:
            raise RuntimeError("the operator was never started")
        self._signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (kopf shuts down cleanly), SIGKILL after `timeout` seconds."""
        if not self.running:
            return
        assert self.proc is not None
        self._signal(signal.SIGCONT)  # a paused process would not act on SIGTERM
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: frozen, its connections open, as a process starved of CPU or a VM
        paused; `resume` (SIGCONT) wakes it where it stopped."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def __enter__(self) -> OperatorProcess:
        """`with OperatorProcess(...) as proc:` starts it and stops it on the way out,
        whatever the block raised (the tests' fixtures)."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def restart(self, timeout: float = 60) -> None:
        self.stop()
        self.start(timeout)

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as r:
            return parse_metrics(r.read().decode())

    def health(self) -> dict[str, Any]:
        """What /healthz says (the probes' results: leadership, caches)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz",
                                    timeout=5) as r:
            data: dict[str, Any] = json.loads(r.read().decode())
            return data

    def leading(self) -> bool:
        """This replica says it leads (metric etj_leader); False if it is not running."""
        if not self.running:
            return False
        try:
            return self.metrics().get(f'etj_leader{{identity="{self.identity}"}}') == 1
        except OSError:
            return False

    def _signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            return
        # Gone between the poll and the signal: nothing left to signal.
        with contextlib.suppress(ProcessLookupError):
            if self.new_session:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)


def replicas(count: int, kubeconfig: Path | str, logs_dir: Path, *,
             args: Sequence[str] | OperatorSettings = TEST, skews: Sequence[float] = ()
             ) -> list[OperatorProcess]:
    """`count` operators that elect one leader (logs operator-<i>.log in `logs_dir`;
    `skews[i]`: replica i's clock skew in seconds). Not started."""
    return [OperatorProcess(kubeconfig, logs_dir / f"operator-{i}.log", args=args,
                            identity=f"replica-{i}-{uuid.uuid4().hex[:6]}",
                            skew_seconds=skews[i] if i < len(skews) else 0.0)
            for i in range(count)]
