"""`kubectl etj`: status, timeline, why and goodput of one ElasticTrainingJob.

kubectl runs `kubectl-etj` from PATH with every argument after `etj` (kubectl refuses
flags before a plugin's name), so the plugin parses kubectl's flags itself: -n, --context,
--kubeconfig, -o json and -w, before or after the command."""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from elastic_kubectl.job import Job, read_job
from elastic_kubectl.reader import PluginError, Reader, connect, default_namespace
from elastic_kubectl.text import parse_since, printable

COMMANDS = {
    "status": "one row per slice (state, pool, hosts, restarts, last failure, downtime), "
              "then counters and cadences",
    "timeline": "the job's history: failures, replacements, recoveries, evictions, stalls, "
                "checkpoints (--png: as a picture)",
    "why": "what the job is waiting on, since when, and what you can do",
    "goodput": "where the job's wall time went, by cause",
}
CLEAR = "\x1b[H\x1b[2J"
PNG_EVERY_S = 10  # a watch redraws the picture at most this often (and once at its end)


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", default=argparse.SUPPRESS,
                        help="the job's namespace (default: the context's, as kubectl)")
    common.add_argument("--context", default=argparse.SUPPRESS,
                        help="the kubeconfig context to use")
    common.add_argument("--kubeconfig", default=argparse.SUPPRESS,
                        help="path to the kubeconfig file (default: $KUBECONFIG, "
                             "~/.kube/config)")
    common.add_argument("-o", "--output", choices=["json"], default=argparse.SUPPRESS,
                        help="json: the same facts, for a program")
    common.add_argument("-w", "--watch", action="store_true", default=argparse.SUPPRESS,
                        help="follow the job: show it again whenever it changes (Ctrl-C ends)")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="kubectl etj", parents=[common],
        description="What an ElasticTrainingJob is doing, from its status and Events.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in COMMANDS.items():
        p = sub.add_parser(name, parents=[common], help=text, description=text)
        p.add_argument("job", metavar="JOB", help="the ElasticTrainingJob's name")
        if name == "timeline":
            p.add_argument("--png", metavar="FILE",
                           help="also draw the timeline into FILE (with -w: redrawn as it goes)")
            p.add_argument("--since", metavar="DURATION", type=_since,
                           help="only the last DURATION (30s, 5m, 1h, 2h30m; default: "
                                "since the job's creation)")
    return parser


def _since(text: str) -> timedelta:
    try:
        return parse_since(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


@dataclass
class Session:
    """What one command shows, and what a watch has gathered so far."""

    command: str
    reader: Reader
    args: argparse.Namespace
    obj: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] | None = None
    samples: dict[str, tuple[float, float]] = field(default_factory=dict)
    drawn_at: float | None = None  # when a watch last drew the picture (monotonic)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def refresh(self, obj: dict[str, Any] | None) -> None:
        """A new version of the job (None: a quiet round; the Events may have come)."""
        if obj is not None:
            self.obj = obj
            report = read_job(obj).status.training
            if report is not None:  # the trainer's step at each report: the step line
                self.samples[report.observed_at.isoformat()] = (
                    report.step, report.observed_at.timestamp())
            if self.command == "why":
                self.nodes = self.reader.nodes()
        if self.command == "timeline":
            self.events = self.reader.events(self.obj)

    def job(self) -> Job:
        job = read_job(self.obj)
        access = [a for a in (self.reader.access.events if self.command == "timeline"
                              else None, self.reader.access.nodes) if a]
        return replace(job, notes=[*job.notes, *access])


def views() -> dict[str, Callable[[Session, datetime], tuple[list[str], dict[str, Any]]]]:
    from elastic_kubectl import goodput_view, status_view, timeline_view, why_view

    def status(s: Session, now: datetime) -> tuple[list[str], dict[str, Any]]:
        job = s.job()
        return status_view.render_status(job, now), status_view.status_json(job, now)

    def timeline(s: Session, now: datetime) -> tuple[list[str], dict[str, Any]]:
        job = s.job()
        return (timeline_view.render_timeline(job, s.events, now, s.args.since),
                timeline_view.timeline_json(job, s.events, now, s.args.since))

    def why(s: Session, now: datetime) -> tuple[list[str], dict[str, Any]]:
        job = s.job()
        found = why_view.findings(job, s.nodes, now)
        return why_view.render_why(job, found, now), {
            "name": job.name, "namespace": job.namespace, "phase": job.status.phase,
            "waitingOn": [f.to_json() for f in found], "notes": job.notes}

    def goodput(s: Session, now: datetime) -> tuple[list[str], dict[str, Any]]:
        job = s.job()
        return goodput_view.render_goodput(job, now), goodput_view.goodput_json(job, now)

    return {"status": status, "timeline": timeline, "why": why, "goodput": goodput}


def draw(session: Session, now: datetime) -> None:
    try:
        from elastic_kubectl.picture import draw_job
        from elastic_kubectl.timeline_view import window
    except ImportError as e:  # pragma: no cover - the CLI extra brings matplotlib
        raise PluginError("--png needs matplotlib: pip install "
                          "'elastic-training-operator[cli]'") from e
    job = session.job()
    try:
        draw_job(job, session.events, now, session.args.png,
                 window(job, now, session.args.since), list(session.samples.values()))
    except ModuleNotFoundError as e:
        raise PluginError(f"--png needs {e.name}: pip install "
                          "'elastic-training-operator[cli]'") from e


def show(session: Session, out: Any, last: str | None) -> str:
    """Print the view if it changed; the text printed."""
    now = session.clock()
    lines, data = views()[session.command](session, now)
    if getattr(session.args, "output", None) == "json":
        text = json.dumps(data, indent=None if session.args.watch else 2, sort_keys=True)
    else:  # JSON escapes control characters itself
        text = "\n".join(printable(line) for line in lines)
    if text != last:
        if session.args.watch and out.isatty() and session.args.output != "json":
            out.write(CLEAR)
        elif session.args.watch and last is not None and session.args.output != "json":
            out.write("\n")
        out.write(text + "\n")
        out.flush()
    if getattr(session.args, "png", None) and (
            session.drawn_at is None or time.monotonic() - session.drawn_at >= PNG_EVERY_S):
        draw(session, now)
        session.drawn_at = time.monotonic()
    return text


def run(args: argparse.Namespace, out: Any = None,
        clock: Callable[[], datetime] | None = None) -> int:
    out = out or sys.stdout
    for key, default in (("namespace", None), ("context", None), ("kubeconfig", None),
                         ("output", None), ("watch", False)):
        if not hasattr(args, key):
            setattr(args, key, default)
    namespace = args.namespace or default_namespace(args.kubeconfig, args.context)
    reader = Reader(connect(args.kubeconfig, args.context), namespace)
    session = Session(args.command, reader, args)
    if clock is not None:
        session.clock = clock
    session.refresh(reader.job(args.job))
    last = show(session, out, None)
    if getattr(args, "png", None) and not args.watch:
        print(f"wrote {args.png}", file=sys.stderr)
    if not args.watch:
        return 0
    try:
        for obj in reader.watch_job(session.obj):
            session.refresh(obj)
            last = show(session, out, last)
    except KeyboardInterrupt:
        pass
    if getattr(args, "png", None):
        draw(session, session.clock())
        print(f"wrote {args.png}", file=sys.stderr)
    return 0


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends a watch as Ctrl-C does: the picture drawn last


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(args)
    except PluginError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
