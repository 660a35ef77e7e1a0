"""`etj demo`: the article's experiment on the local control plane (see demo/run.py)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", type=Path, default=Path.cwd(),
                        help="repository root holding examples/demo.yaml (default: .)")
    parser.add_argument("--out", type=Path, default=Path("demo-output"),
                        help="where summary.json, timeline.png and the logs go")
    parser.add_argument("--keep-cluster", action="store_true",
                        help="leave the local control plane running afterwards")
    parser.add_argument("--step-seconds", type=float, default=0.1,
                        help="pace training to at least this many seconds per step, so a "
                             "person can follow it (the article's steps took ~0.16s)")


def run(args: argparse.Namespace) -> int:
    from elastic_devtools.demo.run import run_demo

    return run_demo(args.repo, args.out, args.keep_cluster, args.step_seconds)
