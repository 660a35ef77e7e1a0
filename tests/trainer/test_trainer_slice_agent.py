"""`etj slice-agent`: idles, logs, exits 143 (never 0) on SIGTERM."""
from __future__ import annotations

import signal
import subprocess
import sys
import time


def test_slice_agent_exits_143_on_sigterm() -> None:
    # Found on kind: a deleted worker pod whose agent exited 0 completed its Job, and the
    # slice never came back.
    proc = subprocess.Popen(
        [sys.executable, "-m", "elastic_api.etj_cli", "slice-agent", "--heartbeat", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={"MEGASCALE_SLICE_ID": "1", "JOB_COMPLETION_INDEX": "0", "PATH": "/usr/bin"},
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        lines = []
        while not any("alive" in line for line in lines):  # up, then a heartbeat
            assert time.monotonic() < deadline, lines
            lines.append(proc.stdout.readline())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        rest = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "slice-agent: slice 1 host 0 up" in lines[0]
    assert "got SIGTERM, exiting 143" in rest
