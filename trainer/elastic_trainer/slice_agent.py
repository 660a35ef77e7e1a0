"""`etj slice-agent`: stands in for the Pathways worker on simulated worker pods.

It idles, logs a heartbeat now and then, and exits 128 + the signal on SIGTERM (or
SIGINT), so the pod's readiness is what the simulated trainer watches. Never 0: a worker
pod stopped from outside (deleted, evicted) has not finished, and a 0 would complete its
Job, so that the slice would never come back.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from elastic_trainer.stop_signals import StopSignals


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--heartbeat", type=float, default=60.0,
                        help="seconds between heartbeat log lines")


def run(args: argparse.Namespace) -> int:
    stop = StopSignals()
    ident = (f"slice {os.environ.get('MEGASCALE_SLICE_ID', '?')} host "
             f"{os.environ.get('JOB_COMPLETION_INDEX', '?')}")
    print(f"slice-agent: {ident} up (pid {os.getpid()})", flush=True)
    started = time.monotonic()
    while not stop.wait(args.heartbeat):
        print(f"slice-agent: {ident} alive for {time.monotonic() - started:.0f}s", flush=True)
    signum = stop.received or signal.SIGTERM
    code = 128 + signum
    print(f"slice-agent: {ident} got {signal.Signals(signum).name}, exiting {code}", flush=True)
    sys.stdout.flush()
    return code
