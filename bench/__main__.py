"""`python -m bench [--quick] [--only NAME[,NAME]] [--jobs N]`

Runs the benchmarks, writes one JSON file per benchmark and a merged summary.json under
bench/results/ (gitignored), and, for a full (non-quick) run, regenerates the table in
docs/benchmarks.md from the merged summary (a benchmark not run this time keeps its
previous figures, with their own date).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import REPO, RESULTS_DIR, git_revision, machine, now_iso, write_json

NAMES = ("detection", "recovery", "overhead", "restore", "replacement")
DOCS = REPO / "docs" / "benchmarks.md"
QUICK_JOBS = 2
DEFAULT_JOBS = 100


def _runner(name: str, args: argparse.Namespace) -> Callable[[], dict[str, Any]]:
    if name == "detection":
        from bench import detection

        jobs = args.jobs or (QUICK_JOBS if args.quick else DEFAULT_JOBS)
        return lambda: detection.run(jobs, quick=args.quick)
    if name == "replacement":
        from bench import replacement

        return lambda: replacement.run(args.quick)
    from bench import trainer

    fn = {"recovery": trainer.recovery, "overhead": trainer.overhead,
          "restore": trainer.restore}[name]
    return lambda: fn(args.quick)


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
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                   help="where the JSON results go (default bench/results)")
    p.add_argument("--docs", type=Path, default=DOCS,
                   help="the page whose table is regenerated (full runs only)")
    p.add_argument("--no-docs", action="store_true", help="do not touch the docs page")
    p.add_argument("--docs-only", action="store_true",
                   help="run nothing: rebuild the summary from the per-benchmark JSON files "
                        "and regenerate the table")
    args = p.parse_args(argv)
    names = NAMES if args.only is None else tuple(n.strip() for n in args.only.split(","))
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        p.error(f"--only: unknown benchmark {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    if args.jobs is not None and args.jobs < 1:
        p.error("--jobs must be >= 1")
    args.names = names
    return args


def _load_summary(results_dir: Path, suffix: str) -> dict[str, Any]:
    """The latest entry of every benchmark, from its own JSON file."""
    summary: dict[str, Any] = {"benchmarks": {}}
    for name in NAMES:
        path = results_dir / f"{name}{suffix}.json"
        if path.exists():
            summary["benchmarks"][name] = json.loads(path.read_text())
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    suffix = "-quick" if args.quick else ""
    summary_path = args.results_dir / f"summary{suffix}.json"
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
        write_json(args.results_dir / f"{name}{suffix}.json", entry)
        done[name] = entry
        print(f"== bench {name}: done in {entry['seconds']}s", file=sys.stderr, flush=True)
    # Read the others' files only now: another run may have updated them meanwhile.
    summary = _load_summary(args.results_dir, suffix)
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
