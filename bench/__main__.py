"""`python -m bench [--quick] [--only NAME[,NAME]] [--jobs N] [--before REV]
[--scale-sizes SIZES] [--load LOAD] [--load-control-plane] [--operator-nice N]
[--operator-request CPU|none]`

Runs the benchmarks, writes one JSON file per benchmark and a merged summary.json under
bench/results/ (gitignored), and, for a full (non-quick) run, regenerates the table in
docs/benchmarks.md from the merged summary (a benchmark not run this time keeps its
previous figures, with their own date).

`detection_before` runs the detection benchmark again with another revision's operator
(`--before REV`, e.g. main: its api/ and operator/ folders, from `git archive`), on a
cluster of its own started the same way: the before/after of a change. It runs only when
`--before` is given.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import node
from bench.common import REPO, RESULTS_DIR, git_revision, machine, now_iso, write_json
from elastic_api.catalog import all_shapes, slice_shape

NAMES = ("detection", "detection_before", "scale", "recovery", "overhead", "defaults",
         "restore", "replacement", "hang", "goodput", "goodput_check", "healthy")
# Not in a run without --only: goodput_check replays more than an hour at real speed,
# healthy runs an hour.
ONLY_WHEN_ASKED = ("detection_before", "goodput_check", "healthy")
DOCS = REPO / "docs" / "benchmarks.md"
QUICK_JOBS = 2
DEFAULT_JOBS = 100
# One job of 64 slices of 16 and of 64 hosts, packed on CPU nodes: with exclusive
# placement (one fake TPU node per host) a 1,025-node cluster could not keep its nodes
# Ready on the 2-core machine (docs/benchmarks.md); pass 64x16:pathways to try.
DEFAULT_SCALE_SIZES = "64x16:simulated,64x64:simulated"
QUICK_SCALE_SIZES = "3x2:simulated"
# scale: the machine's load average the failures run at (bench/load.py burns CPU up to it
# beside the run, and the result says the load it measured).
DEFAULT_SCALE_LOAD = 10.0
TOPOLOGY_OF_HOSTS = {2: "2x4", 4: "4x4", 8: "4x8", 16: "8x8", 32: "8x16", 64: "16x16"}
# Host counts no v5e slice has: the catalog's first shape of that many (the "4x1536").
OTHER_HOSTS = {s.vms: (s.family.type, s.topology) for s in reversed(all_shapes())}


def parse_sizes(text: str) -> list[tuple[int, str, str, str]]:
    """'64x16:pathways,4xv5p-16x16x24:simulated' -> [(slices, TPU type, topology,
    backend), ...]: HOSTS names a v5e slice of that many hosts, or else the catalog's first
    shape of that many (1536: v5p 16x16x24); TYPE-TOPOLOGY any shape of the catalog."""
    sizes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        dims, _, backend = item.partition(":")
        slices, _, of = dims.partition("x")
        tpu_type, _, topology = of.partition("-")
        if of.isdigit() and int(of) in TOPOLOGY_OF_HOSTS:
            tpu_type, topology = "v5e", TOPOLOGY_OF_HOSTS[int(of)]
        elif of.isdigit() and int(of) in OTHER_HOSTS:
            tpu_type, topology = OTHER_HOSTS[int(of)]
        elif not topology:
            tpu_type = ""  # neither HOSTS nor TYPE-TOPOLOGY
        if not slices.isdigit() or not tpu_type:
            raise ValueError(f"--scale-sizes: {item!r} is not SLICESxHOSTS[:BACKEND] (HOSTS "
                             f"a v5e slice's {sorted(TOPOLOGY_OF_HOSTS)} or another catalog "
                             "shape's) or "
                             "SLICESxTYPE-TOPOLOGY[:BACKEND] (4xv5p-16x16x24)")
        try:
            slice_shape(tpu_type, topology)
        except ValueError as err:
            raise ValueError(f"--scale-sizes: {item!r}: {err}") from None
        if backend not in ("", "pathways", "simulated"):
            raise ValueError(f"--scale-sizes: backend {backend!r}: pathways or simulated")
        sizes.append((int(slices), tpu_type, topology, backend or "pathways"))
    return sizes


def source_of(revision: str, into: Path) -> Path:
    """The api/ and operator/ folders of `revision` (git archive), unpacked in `into`."""
    archive = subprocess.run(["git", "archive", "--format=tar", revision, "api", "operator"],
                             cwd=REPO, capture_output=True, check=True, timeout=120)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True,
                   timeout=120)
    return into


def run_scale(sizes: list[tuple[int, str, str, str]], quick: bool,
              load: float = 0.0, load_control_plane: bool = False,
              operator_nice: int = 0, operator_request_m: int | None = None,
              node_model_unavailable: str | None = None) -> dict[str, Any]:
    """One job per size, on a cluster of its own; a size that does not fit is reported,
    and listed in "failed" (the run fails: a refused or stuck size is no result).
    `node_model_unavailable`: why the default node model could not run, kept with each
    size's result."""
    from bench import detection

    results: list[dict[str, Any]] = []
    for slices, tpu_type, topology, backend in sizes:
        shape = detection.Shape(1, slices, topology, backend, tpu_type)
        try:
            results.append(detection.run(1, quick=quick, shape=shape, max_events=slices,
                                         load=load, load_control_plane=load_control_plane,
                                         operator_nice=operator_nice,
                                         operator_request_m=operator_request_m))
        except Exception as err:
            traceback.print_exc()
            results.append({"shape": shape.label, "error": f"{type(err).__name__}: {err}"})
        results[-1]["node_model_unavailable"] = node_model_unavailable
    return {"sizes": results, "failed": [r["shape"] for r in results if "error" in r]}


def operator_placement(request_m: int | None, nice: int, load: float
                       ) -> tuple[int | None, str | None]:
    """The CPU request to model the operator's node with (None: the nice model), and why
    the default could not have it. Under load the default is the node model with the
    chart's request, as GKE runs the operator; without load, or with `--operator-nice`
    (the nice model asked for), or where the machine cannot (not root, no cgroup v1, one
    CPU: said, not silent), the operator runs among the burners at its nice."""
    if request_m is not None:
        return (request_m or None), None  # NO_NODE_MODEL (0): none
    if load <= 0 or nice:
        return None, None
    why = node.unavailable()
    if why:
        print(f"scale: the operator's node is not modelled ({why}); the operator runs "
              f"among the burners at nice {nice}", file=sys.stderr, flush=True)
        return None, why
    return node.chart_request_m(), None


def _runner(name: str, args: argparse.Namespace) -> Callable[[], dict[str, Any]]:
    jobs = args.jobs or (QUICK_JOBS if args.quick else DEFAULT_JOBS)
    backend = "pathways" if args.placement == "exclusive" else "simulated"
    if name == "detection":
        from bench import detection

        shape = detection.Shape(jobs, 4, "4x4", backend)
        return lambda: detection.run(jobs, quick=args.quick, shape=shape)
    if name == "detection_before":
        from bench import detection

        def before() -> dict[str, Any]:
            with tempfile.TemporaryDirectory(prefix="etj-bench-before-") as tmp:
                source = source_of(args.before, Path(tmp))
                result = detection.run(jobs, quick=args.quick, operator_source=source,
                                       shape=detection.Shape(jobs, 4, "4x4", backend))
            result["operator_revision"] = args.before
            return result

        return before
    if name == "scale":
        sizes = parse_sizes(args.scale_sizes or (QUICK_SCALE_SIZES if args.quick
                                                 else DEFAULT_SCALE_SIZES))
        load = args.load if args.load is not None else (0.0 if args.quick
                                                        else DEFAULT_SCALE_LOAD)
        request_m, why = operator_placement(args.operator_request, args.operator_nice, load)
        return lambda: run_scale(sizes, args.quick, load, args.load_control_plane,
                                 args.operator_nice, request_m, why)
    if name == "replacement":
        from bench import replacement

        return lambda: replacement.run(args.quick)
    if name == "hang":
        from bench import hang

        return lambda: hang.run(args.quick)
    if name == "goodput":
        from bench import goodput

        if args.reuse_costs:
            saved = result_path(args.results_dir, "goodput", args.quick)
            return lambda: goodput.remodel(json.loads(saved.read_text()))
        return lambda: goodput.run(args.quick)
    if name == "goodput_check":
        from bench import goodput_check

        costs = result_path(args.results_dir, "goodput", args.quick)
        if args.reuse_costs:
            saved = result_path(args.results_dir, "goodput_check", args.quick)
            return lambda: goodput_check.remodel(json.loads(saved.read_text()), costs)
        return lambda: goodput_check.run(args.quick, costs)
    if name == "healthy":
        from bench import healthy

        load = args.load if args.load is not None else healthy.DEFAULT_LOAD
        return lambda: healthy.run(args.quick, load)
    from bench import trainer

    fn = {"recovery": trainer.recovery, "overhead": trainer.overhead,
          "defaults": trainer.defaults, "restore": trainer.restore}[name]
    return lambda: fn(args.quick)


NO_NODE_MODEL = 0  # --operator-request none


def _cpu(text: str) -> int:
    if text.strip().lower() == "none":
        return NO_NODE_MODEL
    try:
        return node.parse_millicores(text)
    except ValueError as err:  # argparse prints this one's message, not a ValueError's
        raise argparse.ArgumentTypeError(str(err)) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes (N=2 jobs, a few steps): checks the benchmarks still run")
    p.add_argument("--only", default=None, metavar="NAME[,NAME]",
                   help=f"run only these: {', '.join(NAMES)}")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help=f"detection: number of jobs (default {DEFAULT_JOBS}; "
                        f"{QUICK_JOBS} with --quick)")
    p.add_argument("--placement", choices=("exclusive", "packed"), default="exclusive",
                   help="detection: each slice on its own fake TPU node pool (exclusive, "
                        "JobSet's webhooks enforce it; one node per host) or every pod "
                        "packed on a few CPU nodes (the simulated backend)")
    p.add_argument("--before", default=None, metavar="REV",
                   help="also run detection_before: detection with REV's operator")
    p.add_argument("--scale-sizes", default=None, metavar="SIZES",
                   help=f"scale: one job per SLICESxHOSTS[:BACKEND] (v5e) or "
                        f"SLICESxTYPE-TOPOLOGY[:BACKEND] (any catalog shape: "
                        f"4xv5p-16x16x24:simulated) (default {DEFAULT_SCALE_SIZES}; "
                        f"{QUICK_SCALE_SIZES} with --quick); a size that cannot run fails "
                        "the run")
    p.add_argument("--load", type=float, default=None, metavar="LOAD",
                   help=f"scale, healthy: keep the machine's 1-minute load average at LOAD "
                        f"during the failures (scale) or the hour (healthy) with "
                        f"bench/load.py's CPU burners (default {DEFAULT_SCALE_LOAD:g}; "
                        f"scale: 0 with --quick; 0: none)")
    p.add_argument("--load-control-plane", action="store_true",
                   help="scale: load the cluster's control plane and kwok as well (the whole "
                        "machine at LOAD); by default they run ahead of the burners, as on "
                        "GKE they run off the operator's node")
    p.add_argument("--operator-nice", type=int, default=0, metavar="N",
                   help="scale: run the operator's session and threads at nice N against "
                        "the burners' 0 (default 0: it weighs as much as one burner; -5: "
                        "about three; docs/benchmarks.md): how detection under load "
                        "depends on the CPU share the kernel gives the operator")
    p.add_argument("--operator-request", type=_cpu, default=None,
                   metavar="CPU|none",
                   help="scale: model the operator's node with cgroups (bench/node.py; "
                        "root, cgroup v1): CPU 0 is the node, the operator weighted by "
                        "this CPU request against the burners, whose requests fill the "
                        "rest; the control plane, kwok, JobSet's controller and the "
                        "benchmark run on the other CPUs (default under load: the chart's "
                        "request where the machine allows, else as none; none: the "
                        "operator among the burners at --operator-nice)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                   help="where the JSON results go (default bench/results)")
    p.add_argument("--docs", type=Path, default=DOCS,
                   help="the page whose table is regenerated (full runs only)")
    p.add_argument("--no-docs", action="store_true", help="do not touch the docs page")
    p.add_argument("--reuse-costs", action="store_true",
                   help="goodput: model the months again from the costs the last run "
                        "measured (its JSON file); goodput_check: predict the last replay "
                        "again; after a change to the model alone")
    p.add_argument("--docs-only", action="store_true",
                   help="run nothing: rebuild the summary from the per-benchmark JSON files "
                        "and regenerate the table")
    args = p.parse_args(argv)
    default = tuple(n for n in NAMES if n not in ONLY_WHEN_ASKED
                    or (n == "detection_before" and args.before))
    names = default if args.only is None else tuple(n.strip() for n in args.only.split(","))
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        p.error(f"--only: unknown benchmark {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    if args.load is not None and args.load < 0:
        p.error("--load must be >= 0")
    if args.jobs is not None and args.jobs < 1:
        p.error("--jobs must be >= 1")
    if "detection_before" in names and not args.before:
        p.error("detection_before needs --before REV (the revision to compare with)")
    if args.scale_sizes is not None:
        try:
            parse_sizes(args.scale_sizes)
        except ValueError as err:
            p.error(str(err))
    args.names = names
    return args


def result_path(results_dir: Path, name: str, quick: bool) -> Path:
    """Where a benchmark's latest entry (or the summary) is kept: a quick run's apart."""
    return results_dir / f"{name}{'-quick' if quick else ''}.json"


def _load_summary(results_dir: Path, quick: bool) -> dict[str, Any]:
    """The latest entry of every benchmark, from its own JSON file."""
    summary: dict[str, Any] = {"benchmarks": {}}
    for name in NAMES:
        path = result_path(results_dir, name, quick)
        if path.exists():
            summary["benchmarks"][name] = json.loads(path.read_text())
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    summary_path = result_path(args.results_dir, "summary", args.quick)
    if args.docs_only:
        args.names = ()
    failed = []
    done: dict[str, Any] = {}
    for name in args.names:
        print(f"== bench {name}{' (quick)' if args.quick else ''}", file=sys.stderr, flush=True)
        started, t0 = now_iso(), time.monotonic()
        try:
            result = _runner(name, args)()
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        entry = {"name": name, "quick": args.quick, "measured_at": started,
                 "seconds": round(time.monotonic() - t0, 1), "machine": machine(),
                 "result": result}
        write_json(result_path(args.results_dir, name, args.quick), entry)
        done[name] = entry
        if result.get("failed"):  # written, for what it says; still a failed run
            print(f"== bench {name}: failed: {result['failed']}", file=sys.stderr, flush=True)
            failed.append(name)
        print(f"== bench {name}: done in {entry['seconds']}s", file=sys.stderr, flush=True)
    # Read the others' files only now: another run may have updated them meanwhile.
    summary = _load_summary(args.results_dir, args.quick)
    summary["benchmarks"].update(done)
    summary.update({"quick": args.quick, "updated_at": now_iso(), "machine": machine(),
                    "revision": git_revision()})
    write_json(summary_path, summary)
    if not args.quick and not args.no_docs:
        from bench.report import update_docs

        update_docs(args.docs, summary)
        print(f"table regenerated in {args.docs}", file=sys.stderr)
    print(json.dumps({"summary": str(summary_path), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
