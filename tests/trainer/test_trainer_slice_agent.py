"""`etj slice-agent`: idles, logs, exits 143 (never 0) on SIGTERM."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


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


def test_a_sigterm_at_any_moment_of_its_loop_ends_the_agent(tmp_path: Path) -> None:
    """A handler that sets a threading.Event can deadlock when the signal comes while the
    loop holds the Event's lock (a make test run: SIGTERM, then nothing for 30 s; in a
    process signalled 20 times a second it hangs within seconds). A loop that hardly
    waits spends much of its time at such moments; each agent must still exit 143."""
    for attempt in range(8):
        out = tmp_path / f"agent-{attempt}.log"
        with out.open("w") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "elastic_api.etj_cli", "slice-agent",
                 "--heartbeat", "0.0002"], stdout=sink, stderr=subprocess.STDOUT,
                env={"MEGASCALE_SLICE_ID": "1", "JOB_COMPLETION_INDEX": "0",
                     "PATH": "/usr/bin"})
        try:
            deadline = time.monotonic() + 60
            while out.read_text().count("alive") < 50:  # well into its loop
                assert time.monotonic() < deadline and proc.poll() is None, out.read_text()
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 143, attempt
        finally:
            if proc.poll() is None:
                proc.kill()
        assert "got SIGTERM, exiting 143" in out.read_text()


def test_a_stop_signal_sent_while_the_loop_works_is_kept_for_its_next_wait() -> None:
    """StopSignals blocks the signals and takes them in its wait: one sent between two
    waits is pending, not lost, and ends the next wait at once. In a process of its own:
    the block would outlive the test in pytest's."""
    code = ("import os, signal, time\n"
            "from elastic_trainer.stop_signals import StopSignals\n"
            "stop = StopSignals()\n"
            "os.kill(os.getpid(), signal.SIGTERM)  # while 'working'\n"
            "start = time.monotonic()\n"
            "assert stop.wait(30) and stop.received == signal.SIGTERM\n"
            "assert time.monotonic() - start < 5\n"
            "assert stop.wait(30)  # stays stopped\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
