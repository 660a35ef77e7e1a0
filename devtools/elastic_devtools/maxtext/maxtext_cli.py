"""`etj maxtext run|e2e`: real MaxText on CPU as a job's head pod runs it (dev only).

Needs the environment of hack/maxtext-env.sh (MaxText 0.2.5 on Python 3.13 in a Debian
root, cached) and root (the root is entered with unshare -m and chroot).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="maxtext_command", required=True, metavar="ACTION")
    run = sub.add_parser("run", help="run a job's main on CPU (JAX_PLATFORMS=cpu, tiny model)")
    run.add_argument("-f", "--filename", type=Path, required=True, help="the job's manifest")
    run.add_argument("--work", type=Path, required=True,
                     help="directory for the pod's /tmp (WORK/pod-tmp) and the log")
    run.add_argument("--full-model", action="store_true",
                     help="leave the model as the job's args have it (no tiny flags)")
    e2e = sub.add_parser("e2e", help="make e2e-maxtext: local and gs:// runs, checked")
    e2e.add_argument("--fixtures", type=Path, default=None,
                     help="the test jobs (default tests/fixtures/maxtext-0.2.5)")
    e2e.add_argument("--work", type=Path, default=None, help="work directory (default: a temp)")
    e2e.add_argument("--record", type=Path, default=None,
                     help="write what MaxText wrote there, as test fixtures")
    e2e.add_argument("--no-gcs", action="store_true", help="skip the gs:// runs")
    e2e.add_argument("--no-cluster", action="store_true",
                     help="skip the scenarios on the local control plane")
    e2e.add_argument("--no-runs", action="store_true",
                     help="skip the plain runs (the example's args, local and gs://)")
    e2e.add_argument("--scenarios", nargs="+", default=None, metavar="NAME",
                     help="the scenarios to run: local, gcs, evaluation, sidecar-restart "
                     "(default: all)")
    e2e.add_argument("--sidecar-only", action="store_true",
                     help="of the phases, check what the progress sidecar reports, not "
                     "Progressing (for an operator whose stall rule does not read them)")


def run(args: argparse.Namespace) -> int:
    from elastic_devtools.maxtext import e2e, runner
    from elastic_devtools.maxtext.env import MaxTextEnv, MaxTextEnvMissing, require_root
    from elastic_devtools.maxtext.scenario import ScenarioFailure

    try:
        require_root()
        if args.maxtext_command == "e2e":
            return e2e.run_e2e(args.fixtures or e2e.FIXTURES, args.work, args.record,
                               gcs=not args.no_gcs, cluster=not args.no_cluster,
                               runs=not args.no_runs, scenarios=args.scenarios,
                               sidecar_only=args.sidecar_only)
        env = MaxTextEnv.locate()
        process = runner.cpu_process(runner.main_process(e2e.load_job(args.filename)),
                                     tiny=not args.full_model)
        result = runner.run(env, process, args.work / "pod-tmp", args.work / "main.log")
        print(f"exit {result.returncode} after {result.seconds:.0f}s; the pod's /tmp: "
              f"{result.pod_tmp}; log: {result.log}")
        return result.returncode
    except (MaxTextEnvMissing, e2e.E2EFailure, ScenarioFailure, TimeoutError,
            ValueError) as err:
        print(f"etj maxtext: {err}", file=sys.stderr)
        return 1
