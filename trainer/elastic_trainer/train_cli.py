"""`etj train`: the elastic trainer's command line.

Light at import time (argparse only): jax is imported inside `run`, after XLA_FLAGS
carries the simulated device count (it must be set before jax is imported).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_api.names import (
    TRAINER_EXIT_RESTART_REQUESTED,
    TRAINER_EXIT_RETRIES_EXHAUSTED,
    TRAINER_EXIT_TIMEOUT,
)
from elastic_api.resize import SIMULATED_DEVICES_PER_SLICE
from elastic_api.stragglers import SLOW_SLICE_SECONDS

if TYPE_CHECKING:
    from elastic_trainer.checkpoint_requests import RequestView

DEFAULT_DEVICES_PER_SLICE = SIMULATED_DEVICES_PER_SLICE  # the spec's default minSlices uses it
# 2 and 3 end the run (main is not restarted in place on them); 1 is a crash.
EXIT_TRAINING_ERROR, EXIT_RETRIES_EXHAUSTED, EXIT_TIMEOUT = \
    1, TRAINER_EXIT_RETRIES_EXHAUSTED, TRAINER_EXIT_TIMEOUT
# As elastic_api.models' (not imported here: it pulls in pydantic; test_cli checks it).
DEFAULT_OVERHEAD_BUDGET_PERCENT, MAX_OVERHEAD_BUDGET_PERCENT = 2.0, 50.0
# As elastic_trainer.watchdog's (not imported here either: it is light, but keeps the
# flags' module free of the loop's; test_trainer_watchdog checks they agree).
WATCHDOG_FACTOR, WATCHDOG_FLOOR_SECONDS = 10.0, 5.0
STANDBY_ENV = "ETJ_STANDBY_SLICES"  # --standby-slices when the flag is not given


def period(text: str) -> int | None:
    """A period flag: a number of steps, or `auto` (None: the trainer chooses it)."""
    if text == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a number of steps nor auto") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--config", default="tiny", help="model config: tiny, small, qwen3-0.6b")
    a("--steps", type=int, help="training steps (required unless --prepare-data)")
    a("--batch", type=int, default=8, help="global batch (sequences per step)")
    a("--seed", type=int, default=0, help="seed for parameters and data")
    a("--learning-rate", type=float, default=None, help="peak learning rate (default: config)")
    a("--data", default="synthetic",
      help="`synthetic`, or a directory/glob of ArrayRecord shards (see --prepare-data)")
    a("--backend", choices=("simulated", "pathways"), default="simulated")
    _add_simulation_arguments(a)
    _add_copy_arguments(a)
    a("--min-slices", type=int, default=None,
      help="replica resize: train on at least M slices (unset = pause and resume)")
    a("--standby-slices", type=int, default=None, metavar="K",
      help="of the backend's slices, hold K out of the mesh, running and healthy, to take "
           "a lost slice's place at once (the mesh is the other slices; default: env "
           f"{STANDBY_ENV}, else 0)")
    a("--elastic-timeout", type=float, default=300.0, help="seconds to wait for slices")
    a("--max-retries", type=int, default=10,
      help="elastic events (slices lost) tolerated: over the run, or within any "
           "--retry-window-seconds (elastic_api.budgets)")
    a("--retry-window-seconds", type=int, default=0,
      help="the window --max-retries counts over (0: the whole run)")
    _add_reporting_arguments(a)
    a("--compilation-cache", default=None,
      help="persistent compilation cache dir (default: <checkpoint-dir>/compilation-cache "
           "for local checkpoints, else /tmp/etj-compilation-cache)")
    a("--no-executable-store", action="store_true",
      help="compile every mesh's step in the process (not kept in and loaded from "
           "<compilation-cache>/executables by mesh shape: executables.py)")
    _add_watchdog_arguments(a)
    _add_evaluation_arguments(a)
    a("--min-step-seconds", type=float, default=0.0,
      help="pace the loop: each step (and evaluation step) takes at least this long (demos "
           "on CPU, where a tiny step takes milliseconds)")
    a("--prepare-data", nargs="+", default=None, metavar="TEXT_FILE",
      help="instead of training: tokenize these text files (byte-level) into ArrayRecord "
           "shards under --out, then exit")
    a("--out", default=None, help="output directory for --prepare-data")
    a("--shards", type=int, default=2, help="number of shards for --prepare-data")


def _add_simulation_arguments(a: Any) -> None:
    a("--simulate-slices", type=int, default=2, help="simulated backend: number of slices")
    a("--devices-per-slice", type=int, default=DEFAULT_DEVICES_PER_SLICE,
      help="simulated backend: CPU devices per slice")
    a("--slice-health", choices=("schedule", "pods"), default="schedule",
      help="simulated backend: fault schedule (--fail-at) or the job's worker pods' readiness")
    a("--fail-at", action="append", default=[], metavar="STEP:SLICE",
      help="take SLICE down while STEP runs, back after --fault-duration (repeatable); "
           "STEP-BACK:SLICE: back when the loop reaches step BACK (replica resize); "
           "STEP:SLICE:checkpoint fails the checkpoint write of the first checkpoint step "
           ">= STEP, STEP:SLICE:restore the first restore after a failure at a step >= STEP; "
           "silent faults (the slice stays healthy, with either --slice-health): "
           "STEP:SLICE:hang (its part of STEP never finishes until it is replaced), "
           "STEP[-BACK]:SLICE:slow=FACTOR (its part takes FACTOR times the usual step from STEP, "
           "until step BACK or until it is replaced), STEP:SLICE:block=SECONDS (reading "
           "STEP's result waits SECONDS in the runtime, on SLICE's device: a device call "
           "that hangs where no slice can be told apart)")
    a("--fault-inbox", type=Path, default=None, metavar="DIR",
      help="simulated backend: a file *.fault in DIR (SLICE:hang, SLICE:slow=FACTOR, "
           "SLICE:block=SECONDS, SLICE:slow=off) fires at the next step and is deleted once "
           "read (the soak's)")
    a("--fault-duration", type=float, default=2.0, help="seconds a failed slice stays down")
    a("--simulate-checkpoint-write-seconds", type=float, default=0.0,
      help="simulated backend: the slices take this long to write their checkpoint shards "
           "(a real model's write lasts seconds; a slice lost meanwhile fails the save)")


def _add_copy_arguments(a: Any) -> None:
    a("--checkpoint-dir", help="Orbax checkpoint root: a path or gs://bucket/prefix")
    a("--checkpoint-period", type=period, default=None, metavar="N|auto",
      help="save every N steps; auto (default): chosen from what a save costs, within "
           "--overhead-budget-percent")
    a("--checkpoint-keep", type=int, default=3, help="committed checkpoints to keep")
    a("--no-async-checkpoint", action="store_true", help="write checkpoints synchronously")
    a("--snapshot-period", type=period, default=None, metavar="N|auto",
      help="keep an in-memory snapshot every N steps (0 = off); auto (default): chosen "
           "from what a snapshot costs, within --overhead-budget-percent")
    a("--overhead-budget-percent", type=float, default=DEFAULT_OVERHEAD_BUDGET_PERCENT,
      help="with auto periods: the share of step time (percent) the copies the trainer "
           "schedules may cost together, half each when both periods are auto "
           "(default %(default)s)")


def _add_reporting_arguments(a: Any) -> None:
    a("--job", default=None, metavar="NS/NAME",
      help="report to this ElasticTrainingJob's status (else env ETJ_JOB_NAMESPACE/NAME)")
    a("--report-interval", type=float, default=5.0, help="seconds between progress reports")
    a("--request-poll-interval", type=float, default=1.0,
      help="seconds between reads of the job for the operator's checkpoint requests")
    a("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")
    a("--log-every", type=int, default=10, help="log a progress line every N steps")
    a("--summary", default=None, help="write a JSON summary of the run here")


def _add_watchdog_arguments(a: Any) -> None:
    a("--watchdog-factor", type=float, default=WATCHDOG_FACTOR,
      help="watchdog: a step may take this many times the 99th percentile of the recent "
           "steps of its mesh (default %(default)s); every other phase is held to "
           "elastic_api.phases' deadline, as the operator holds it")
    a("--watchdog-floor-seconds", type=float, default=WATCHDOG_FLOOR_SECONDS,
      help="watchdog: no step's deadline is shorter (default %(default)s)")
    # Before issue 60 the first compile's, save's and restore's deadline; each phase's
    # first deadline is elastic_api.phases' now: accepted, so older commands still run.
    a("--watchdog-long-floor-seconds", type=float, default=None, help=argparse.SUPPRESS)
    a("--no-watchdog", action="store_true", help="no watchdog (no stall is reported)")
    a("--on-slow-slice", choices=("Report", "Replace"), default="Report",
      help="a slice whose part of the steps is 1.2x the fastest slice's or more "
           "(elastic_api.stragglers): report it (status.training.sliceStepTimes; default) "
           "or also ask for its replacement once slow for --slow-slice-seconds")
    a("--slow-slice-seconds", type=float, default=SLOW_SLICE_SECONDS,
      help="how long a slice stays slow before it is asked to be replaced (default "
           "%(default)s)")


def _add_evaluation_arguments(a: Any) -> None:
    a("--eval-every", type=int, default=0, metavar="N",
      help="evaluate after every N-th train step: the mean loss of --eval-steps held-out "
           "synthetic batches, training untouched (default 0: never)")
    a("--eval-steps", type=int, default=10, metavar="M",
      help="batches (evaluation steps) per evaluation (default %(default)s)")


def _set_xla_device_count(count: int) -> None:
    flag = "--xla_force_host_platform_device_count"
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(flag)]
    os.environ["XLA_FLAGS"] = " ".join([*kept, f"{flag}={count}"])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # A log call that hides a JaxRuntimeError would hide a slice loss (pathwaysutils' advice).
    logging.raiseExceptions = True
    for noisy in ("jax._src", "orbax"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Orbax logs a failed background save with a traceback through absl; the checkpointer
    # logs one line for it instead.
    logging.getLogger("absl").setLevel(logging.CRITICAL)


def _prepare(args: argparse.Namespace) -> int:
    from elastic_trainer.data import prepare_dataset

    if not args.out:
        print("etj train --prepare-data needs --out DIR", file=sys.stderr)
        return 2
    paths = prepare_dataset(args.prepare_data, args.out, num_shards=args.shards)
    print(json.dumps({"shards": paths}))
    return 0


def _validate(args: argparse.Namespace) -> str | None:
    if args.steps is None or args.steps < 1:
        return "--steps N (>= 1) is required"
    if not args.checkpoint_dir:
        return "--checkpoint-dir is required (a path or gs://bucket/prefix)"
    if args.simulate_slices < 1 or args.devices_per_slice < 1:
        return "--simulate-slices and --devices-per-slice must be >= 1"
    if args.min_slices is not None and args.min_slices < 1:
        return "--min-slices must be >= 1"
    if args.simulate_checkpoint_write_seconds < 0:
        return "--simulate-checkpoint-write-seconds must be >= 0"
    if args.backend == "simulated" and args.min_slices is not None and \
            args.min_slices > args.simulate_slices:
        return f"--min-slices {args.min_slices} exceeds --simulate-slices {args.simulate_slices}"
    if args.max_retries < 0:
        return "--max-retries must be >= 0"
    if args.retry_window_seconds < 0:
        return "--retry-window-seconds must be >= 0 (0: over the whole run)"
    if args.request_poll_interval <= 0:
        return "--request-poll-interval must be > 0"
    if not args.watchdog_factor >= 1:  # also nan
        return f"--watchdog-factor {args.watchdog_factor} must be >= 1"
    if not args.watchdog_floor_seconds > 0:  # also nan
        return f"--watchdog-floor-seconds {args.watchdog_floor_seconds} must be more than 0"
    if args.eval_every < 0:
        return "--eval-every must be >= 0 (0: no evaluation)"
    if args.eval_steps < 1:
        return "--eval-steps must be >= 1"
    return _validate_cadence(args) or _validate_standby(args)


def standby_slices(args: argparse.Namespace) -> int:
    """--standby-slices, else env ETJ_STANDBY_SLICES, else 0 (ValueError: not a number)."""
    if args.standby_slices is not None:
        return int(args.standby_slices)
    return int(os.environ.get(STANDBY_ENV, "").strip() or 0)


def _validate_standby(args: argparse.Namespace) -> str | None:
    try:
        standby = standby_slices(args)
    except ValueError:
        return f"{STANDBY_ENV}={os.environ.get(STANDBY_ENV)!r} is not a number of slices"
    if standby < 0:
        return "--standby-slices must be >= 0"
    if args.backend != "simulated" or not standby:
        return None
    mesh = args.simulate_slices - standby
    if mesh < 1:
        return (f"--standby-slices {standby} leaves no slice of --simulate-slices "
                f"{args.simulate_slices} for the mesh")
    if args.min_slices is not None and args.min_slices > mesh:
        return (f"--min-slices {args.min_slices} exceeds the mesh's {mesh} slice(s) "
                f"(--simulate-slices {args.simulate_slices} less --standby-slices {standby})")
    return None


def _validate_cadence(args: argparse.Namespace) -> str | None:
    budget = args.overhead_budget_percent
    if not 0 < budget <= MAX_OVERHEAD_BUDGET_PERCENT:  # also nan
        return (f"--overhead-budget-percent {budget} must be more than 0 and at most "
                f"{MAX_OVERHEAD_BUDGET_PERCENT:g}")
    if args.checkpoint_period is not None and args.checkpoint_period < 1:
        return "--checkpoint-period must be >= 1, or auto"
    if args.snapshot_period is None:
        return None
    if args.snapshot_period < 0:
        return "--snapshot-period must be >= 0 (0 = off), or auto"
    if args.snapshot_period > args.steps:
        return (f"--snapshot-period {args.snapshot_period} is larger than the run "
                f"(--steps {args.steps}): no snapshot would ever be taken; use a period "
                f"<= {args.steps}, or 0 to turn snapshots off")
    return None


def preflight(args: argparse.Namespace) -> str | None:
    """What `etj train` refuses of its flags before it builds a backend, reserves anything
    or reads a byte: the flags' own checks, the model config, the form of --data (a URL;
    elastic_api.data_paths, which admission applies too). Run at start, so that a job the
    trainer would refuse fails at once; tests run it on every example's command."""
    from elastic_trainer.configs import get_config
    from elastic_trainer.data import check_data

    problem = _validate(args)
    if problem:
        return problem
    try:
        get_config(args.config)
        check_data(args.data)
    except ValueError as err:
        return str(err)
    return None


def _shown(period: int | None) -> str:
    return "auto" if period is None else "off" if period == 0 else str(period)


def _write_summary(path: str | None, summary: dict[str, Any]) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> int:
    _setup_logging()
    if args.prepare_data:
        return _prepare(args)
    problem = preflight(args)
    if problem:
        print(f"etj train: {problem}", file=sys.stderr)
        return 2
    if args.backend == "simulated":
        if "jax" in sys.modules:
            logging.getLogger(__name__).warning(
                "jax was imported before `etj train` set the device count")
        # One host device more where a step may block (--fail-at ...:block=, an inbox):
        # the device a blocked step keeps busy (backends.SimulatedBackend).
        blocks = args.fault_inbox is not None or any(":block=" in f for f in args.fail_at)
        _set_xla_device_count(args.simulate_slices * args.devices_per_slice + int(blocks))
    return _train(args)


def _compilation_cache_dir(args: argparse.Namespace) -> str:
    if args.compilation_cache:
        return str(args.compilation_cache)
    if "://" not in args.checkpoint_dir:
        return os.path.join(args.checkpoint_dir, "compilation-cache")
    return "/tmp/etj-compilation-cache"


def setup_compilation_cache(args: argparse.Namespace, backend_name: str) -> str:
    """JAX's persistent compilation cache on CPU. On Pathways it stays off:
    pathwaysutils.initialize() turns it off because the Pathways servers keep a
    compilation cache of their own, and a JAX-side cache of proxy executables would only
    duplicate it. Returns what the log says about it."""
    import jax

    if backend_name == "pathways":
        if args.compilation_cache:
            logging.getLogger(__name__).warning(
                "--compilation-cache is ignored with --backend pathways (Pathways caches "
                "compiled programs itself)")
        return "Pathways' own (JAX persistent cache off, as pathwaysutils.initialize() sets)"
    cache = _compilation_cache_dir(args)
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return cache


def _fail_early(args: argparse.Namespace, job: tuple[str, str] | None, message: str) -> int:
    """Before the loop exists: say why, in the log, the summary and the job's status."""
    import socket
    from datetime import UTC, datetime

    from elastic_api.models import TrainingReport
    from elastic_trainer.report import StatusReporter

    print(f"etj train: TrainingError: {message}", file=sys.stderr)
    if job is not None:
        reporter = StatusReporter(job[0], job[1], args.report_interval)
        reporter.update(TrainingReport(
            observed_at=datetime.now(UTC), state="Failed", reason="TrainingError",
            message=message, total_steps=args.steps, process_id=os.getpid(),
            host_name=socket.gethostname()), urgent=True)
        reporter.close()
    _write_summary(args.summary, {
        "params_digest": "", "final_step": 0, "final_loss": None, "process_id": os.getpid(),
        "step_times": [], "losses": [], "elastic_events": [], "status": "Failed",
        "reason": "TrainingError", "message": message, "exit_code": EXIT_TRAINING_ERROR,
    })
    return EXIT_TRAINING_ERROR


def _faults(args: argparse.Namespace) -> Any:
    """(faults that take a slice down, silent ones) from --fail-at, or an error message."""
    from elastic_trainer.simulated_faults import Fault, parse_fault

    try:
        parsed = [parse_fault(f, args.simulate_slices) for f in args.fail_at]
    except ValueError as err:
        return str(err)
    down = [f for f in parsed if isinstance(f, Fault)]
    return down, [f for f in parsed if not isinstance(f, Fault)]


def _simulated_health(args: argparse.Namespace, job: tuple[str, str] | None,
                      faults: list[Any]) -> Any:
    """The slice health source of the simulated backend, or an error message."""
    from elastic_trainer.pods import PodReadiness
    from elastic_trainer.simulated_faults import FaultSchedule

    if args.slice_health == "pods":
        if job is None:
            return "--slice-health pods needs --job NS/NAME (or ETJ_JOB_* env)"
        if faults:
            return ("--fail-at STEP:SLICE takes a slice down only with --slice-health "
                    "schedule (with pods, the pods say; silent faults, hang and slow, work "
                    "with both)")
        hosts = os.environ.get("ETJ_HOSTS_PER_SLICE")
        return PodReadiness(job[0], job[1], args.simulate_slices,
                            hosts_per_slice=int(hosts) if hosts else None)
    resize = args.min_slices is not None and args.min_slices < args.simulate_slices
    if any(f.back_at_step is not None for f in faults) and not resize:
        return ("--fail-at STEP-BACK:SLICE needs replica resize (--min-slices below "
                "--simulate-slices): pause and resume would wait forever for a slice that "
                "returns only when training goes on")
    return FaultSchedule(faults, args.fault_duration)


def _make_backend(args: argparse.Namespace, job: tuple[str, str] | None) -> Any:
    """The backend, or (exit code, message) when it cannot be made."""
    from elastic_trainer.backends import PathwaysBackend, SimulatedBackend

    if args.backend == "pathways":
        try:
            backend = PathwaysBackend()
        except Exception as err:
            return EXIT_TRAINING_ERROR, (
                f"--backend pathways needs TPU slices behind a Pathways proxy "
                f"(JAX_PLATFORMS=proxy, JAX_BACKEND_TARGET); got {type(err).__name__}: "
                f"{err}. On CPU use --backend simulated.")
        if standby_slices(args) >= backend.total_slices:
            return 2, (f"--standby-slices {standby_slices(args)} leaves no slice for the "
                       f"mesh: Pathways has {backend.total_slices}")
        return backend
    from elastic_trainer.simulated_faults import StepFaults

    faults = _faults(args)
    if isinstance(faults, str):
        return 2, faults
    health = _simulated_health(args, job, faults[0])
    if isinstance(health, str):
        return 2, health
    return SimulatedBackend(args.simulate_slices, args.devices_per_slice, health,
                            write_seconds=args.simulate_checkpoint_write_seconds,
                            step_faults=StepFaults(faults[1], args.fault_inbox,
                                                   args.simulate_slices))


def _exit_when_asked(started_at: float | None) -> Callable[[RequestView], None]:
    """Exit at once when the operator asks this process to (a stall, spec.elastic.onStall
    Recover): its pod restarts main in place (a hung training thread never returns, so
    the process ends from the reading thread)."""
    from elastic_trainer.checkpoint_requests import asked_to_exit

    def on_view(view: RequestView) -> None:
        if started_at is not None and asked_to_exit(view, started_at):
            logging.getLogger("elastic_trainer").warning(
                "the operator asks this trainer to restart (a stall): exiting %d, main "
                "restarts in its pod", TRAINER_EXIT_RESTART_REQUESTED)
            logging.shutdown()
            os._exit(TRAINER_EXIT_RESTART_REQUESTED)
    return on_view


def process_start_time() -> float:
    """When this process started (unix time): its age from /proc on Linux (so the
    goodput's `startup` includes the interpreter's start and the imports), else now."""
    import time

    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # starttime (field 22)
        # starttime counts from boot on CLOCK_BOOTTIME; read it next to the wall clock
        # (a file read between the two, descheduled on a loaded machine, would age it).
        uptime, now = time.clock_gettime(time.CLOCK_BOOTTIME), time.time()
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()
    age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    return now - min(max(age, 0.0), 3600.0)  # an age beyond an hour is not ours to trust


def _loop_options(args: argparse.Namespace, job: tuple[str, str] | None) -> Any:
    from elastic_trainer.evaluation import EvalOptions
    from elastic_trainer.loop import LoopOptions
    from elastic_trainer.report import PriorRun, read_prior_run
    from elastic_trainer.watchdog import WatchdogOptions

    window = args.retry_window_seconds or None
    prior = read_prior_run(*job, args.max_retries, window) if job else PriorRun()
    if prior.events or prior.failures or prior.goodput is not None:
        logging.getLogger("elastic_trainer").info(
            "an earlier trainer process of this job had %d elastic event(s), used %d of "
            "--max-retries %d and reported step %d: counting on from there", prior.events,
            prior.failures, args.max_retries, prior.step)
    if args.watchdog_long_floor_seconds is not None:
        logging.getLogger("elastic_trainer").warning(
            "--watchdog-long-floor-seconds is ignored: a first compile, save, restore or "
            "evaluation has the first deadline elastic_api.phases gives it (docs/trainer.md, "
            "\"Watchdog\")")
    return LoopOptions(
        steps=args.steps, batch=args.batch, seed=args.seed, min_slices=args.min_slices,
        standby_slices=standby_slices(args),
        elastic_timeout=args.elastic_timeout, max_retries=args.max_retries,
        retry_window_seconds=window, prior_retry_times=prior.retry_times,
        snapshot_period=args.snapshot_period, log_every=args.log_every,
        overhead_budget_percent=args.overhead_budget_percent,
        min_step_seconds=args.min_step_seconds, learning_rate=args.learning_rate,
        prior_events=prior.events, prior_failures=prior.failures,
        prior_goodput=prior.goodput, prior_step=prior.step, prior_ack=prior.checkpoint_ack,
        job_hosts=prior.hosts, process_started_at=process_start_time(),
        watchdog=WatchdogOptions(args.watchdog_factor, args.watchdog_floor_seconds,
                                 not args.no_watchdog),
        on_slow_slice=args.on_slow_slice, slow_slice_seconds=args.slow_slice_seconds,
        evaluation=EvalOptions(args.eval_every, args.eval_steps),
    )


def _run_trainer(trainer: Any, reporter: Any) -> tuple[Any, int]:
    """Run the loop: (RunResult, exit code); an unexpected error is a TrainingError."""
    from elastic_trainer.errors import ElasticTimeout

    log = logging.getLogger("elastic_trainer")
    try:
        result = trainer.run()
    except Exception as err:
        log.exception("TrainingError: %s", err)
        status = trainer.status
        status.progress.state = "Failed"
        if reporter is not None:
            reporter.update(status.training_report("TrainingError", str(err)), urgent=True)
        return status.result("", err, finished=False), EXIT_TRAINING_ERROR
    if result.failure is None:
        return result, 0
    return result, (EXIT_TIMEOUT if isinstance(result.failure, ElasticTimeout)
                    else EXIT_RETRIES_EXHAUSTED)


def _train(args: argparse.Namespace) -> int:
    from elastic_trainer.checkpoint import Checkpointer
    from elastic_trainer.checkpoint_requests import JobRequestWatcher
    from elastic_trainer.compose import build_trainer
    from elastic_trainer.configs import get_config
    from elastic_trainer.data import make_source
    from elastic_trainer.events import summary_dict
    from elastic_trainer.executables import STORE_DIRNAME, ExecutableStore
    from elastic_trainer.report import Metrics, StatusReporter, job_from_args

    log = logging.getLogger("elastic_trainer")
    cfg = get_config(args.config)
    job = job_from_args(args.job)
    made = _make_backend(args, job)
    if isinstance(made, tuple):
        code, message = made
        if code == EXIT_TRAINING_ERROR:
            return _fail_early(args, job, message)
        print(f"etj train: {message}", file=sys.stderr)
        return code
    backend = made
    cache = setup_compilation_cache(args, backend.name)
    checkpointer = Checkpointer(args.checkpoint_dir, args.checkpoint_period,
                                args.checkpoint_keep, async_save=not args.no_async_checkpoint)
    reporter = StatusReporter(job[0], job[1], args.report_interval) if job else None
    opts = _loop_options(args, job)
    # The operator's checkpoint requests (maintenance) and its request to restart in
    # place (a stall), read off the training thread.
    requests = JobRequestWatcher(job[0], job[1], args.request_poll_interval,
                                 on_view=_exit_when_asked(opts.process_started_at)) \
        if job else None
    data = make_source(args.data, args.seed, args.batch, cfg.seq_len, cfg.vocab_size)
    mesh = backend.total_slices - opts.standby_slices
    log.info("etj train: config %s (%.1fM params), %d steps, batch %d, backend %s, "
             "%d slice(s) x %d device(s), %d standing by, mode %s, compilation cache %s; "
             "snapshots every %s, checkpoints every %s step(s) (auto: within %g%% of step "
             "time each)", cfg.name, cfg.param_count() / 1e6, args.steps, args.batch,
             backend.name, mesh, backend.devices_per_slice, opts.standby_slices,
             "replica resize" if args.min_slices and args.min_slices < mesh
             else "pause and resume", cache, _shown(args.snapshot_period),
             _shown(args.checkpoint_period), args.overhead_budget_percent)
    executables = ExecutableStore(
        os.path.join(_compilation_cache_dir(args), STORE_DIRNAME),
        enabled=not args.no_executable_store)
    trainer = build_trainer(cfg, opts, backend, data, checkpointer, reporter,
                            Metrics(args.metrics_port), requests, executables=executables)
    try:
        result, code = _run_trainer(trainer, reporter)
    finally:
        backend.close()
        if requests is not None:
            requests.close()
        if reporter is not None:
            reporter.close()
    summary = summary_dict(result, {
        "config": cfg.name, "backend": backend.name, "total_slices": backend.total_slices,
        "devices_per_slice": backend.devices_per_slice, "min_slices": args.min_slices,
        "standby_slices": opts.standby_slices,
        "exit_code": code,
    })
    if code and summary["reason"] is None:
        summary["reason"] = "TrainingError"
    _write_summary(args.summary, summary)
    if code:
        print(f"etj train: {summary['reason']}: {summary['message']}", file=sys.stderr)
    if checkpointer.abandoned_steps:
        # An abandoned save's thread would keep the interpreter from exiting (orbax's
        # threads are not daemons): end the process without waiting for it.
        log.warning("exiting without waiting for the abandoned checkpoint save(s) of "
                    "step(s) %s", checkpointer.abandoned_steps)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
