"""`etj maxtext e2e`: real MaxText 0.2.5 on CPU, run as the head pod's `main` would run it.

Two runs of the test jobs in tests/fixtures/maxtext-0.2.5/ (MaxText's trainer, the progress
sidecar's metrics file, a checkpoint every 10 steps, 3 kept, saved synchronously):
checkpoints on the head's /tmp, then on gs:// through fake-gcs-server. Each run is checked
against what the operator and the sidecar read from it: the checkpoint scan (committed
steps, newest = steps-1), and the metrics follower (one train step per line, nothing
skipped). `--record DIR` writes what MaxText wrote (metrics lines, checkpoint trees, the
command line) as fixtures for the unit tests.

Then the scenarios on the local control plane (scenario_run.py): MaxText in a job's
`main` with the progress sidecar, a worker slice failed mid-run, a hung save; an
evaluation of minutes and a stopped MaxText (scenario_phases.py).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from elastic_api import maxtext
from elastic_api.models import ElasticTrainingJob
from elastic_api.validation import validate_job
from elastic_devtools.maxtext.env import MaxTextEnv
from elastic_devtools.maxtext.runner import (
    CPU_ENV,
    POD_TMP,
    RunResult,
    cpu_process,
    main_process,
    run,
)

FIXTURES = Path("tests/fixtures/maxtext-0.2.5")
LOCAL_JOB, GCS_JOB = "job-local.yaml", "job-gcs.yaml"
EXAMPLES = Path("examples")


def maxtext_examples(examples: Path = EXAMPLES) -> list[Path]:
    """The examples whose `main` runs MaxText's trainer (maxtext.yaml, v5p-largest.yaml)."""
    return [p for p in sorted(examples.glob("*.yaml"))
            if maxtext.runs_maxtext(load_job(p).spec.trainer.command,
                                    load_job(p).spec.trainer.args)]
# Parses argv as MaxText's trainer does (pyconfig.initialize, base.yml) and prints the keys
# asked for: every flag of the example accepted, and the renderer's ones as intended.
_PARSE = (
    "import json, sys\n"
    "from maxtext.configs import pyconfig\n"
    "config = pyconfig.initialize(['maxtext.trainers.pre_train.train', *json.loads(sys.argv[1])])\n"
    "print('ETJ-CONFIG ' + json.dumps({k: getattr(config, k) for k in json.loads(sys.argv[2])}))\n"
)


class E2EFailure(AssertionError):
    """A check of the end-to-end run failed; the message says which and what was seen."""


def log(message: str) -> None:
    print(f"[maxtext-e2e {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def load_job(path: Path) -> ElasticTrainingJob:
    return validate_job(yaml.safe_load(path.read_text()))


@dataclass
class Outcome:
    job: ElasticTrainingJob
    result: RunResult
    metrics_file: Path  # on the host
    committed: list[int]
    latest: int | None
    tree: list[str]


def _host_path(pod_tmp: Path, path_in_pod: str) -> Path:
    if not path_in_pod.startswith(POD_TMP + "/"):
        raise E2EFailure(f"{path_in_pod} is not under the head's {POD_TMP}")
    return pod_tmp / path_in_pod[len(POD_TMP) + 1:]


def _expected_steps(job: ElasticTrainingJob) -> tuple[int, list[int]]:
    """(MaxText's last step, the committed steps it keeps) for the job's args."""
    args = job.spec.trainer.args
    steps = int(maxtext.flag_value(args, "steps") or 0)
    period = int(maxtext.flag_value(args, "checkpoint_period") or 0)
    # Step 0 is saved at start, then every period, and the last step (steps - 1) at the end.
    saved = sorted({0, *range(period, steps, period), steps - 1})
    keep = job.spec.checkpoint.keep
    return steps - 1, saved[-keep:] if keep else saved


def check_metrics(path: Path, last_step: int) -> None:
    from elastic_trainer.metrics_file import MetricsFollower

    follower = MetricsFollower(path)
    records = follower.poll()
    follower.close()
    steps = [r.step for r in records]
    if steps != list(range(last_step + 1)) or follower.skipped:
        raise E2EFailure(f"{path}: the follower read steps {steps} ({follower.skipped} "
                         f"line(s) skipped: {follower.last_problem}), not 0..{last_step}")
    if any(r.loss is None or r.step_seconds is None for r in records):
        raise E2EFailure(f"{path}: a train line without a finite loss or step time")
    log(f"    metrics: {len(records)} train lines, steps 0..{last_step}, loss "
        f"{records[0].loss:.3f} -> {records[-1].loss:.3f}; nothing skipped")


def check_checkpoints(job: ElasticTrainingJob, directory: str) -> tuple[list[int], int | None]:
    from elastic_operator.checkpoints.listing import scan_checkpoints_detailed

    summary = scan_checkpoints_detailed(directory, now=datetime.now(UTC))
    last, kept = _expected_steps(job)
    status = summary.status
    committed = summary.committed_steps
    if status.error or status.latest_committed_step != last or committed != kept:
        raise E2EFailure(f"{directory}: the operator's scan found committed {committed}"
                         f", latest {status.latest_committed_step}, error {status.error!r}; "
                         f"MaxText should have kept {kept}, the newest {last}")
    log(f"    checkpoints: committed {summary.committed_steps} (latestCommittedStep "
        f"{status.latest_committed_step} = steps-1; keep {job.spec.checkpoint.keep} as "
        f"{maxtext.KEEP_KEY}), incomplete {status.incomplete_steps}")
    return summary.committed_steps, status.latest_committed_step


def run_job(env: MaxTextEnv, job: ElasticTrainingJob, work: Path, name: str,
            extra_env: dict[str, str] | None = None) -> tuple[RunResult, Path]:
    process = cpu_process(main_process(job), extra_env=extra_env)
    log(f"{name}: {' '.join(process.argv[:4])} ... ({len(process.argv) - 4} flags; "
        f"env {', '.join(sorted(process.env))})")
    result = run(env, process, work / name / "pod-tmp", work / name / "main.log")
    if result.returncode != 0:
        raise E2EFailure(f"{name}: MaxText exited {result.returncode} after "
                         f"{result.seconds:.0f}s; log {result.log}:\n{result.log_tail()}")
    log(f"    MaxText finished in {result.seconds:.0f}s (log {result.log})")
    path = maxtext.metrics_file(job.spec.trainer)
    if path is None:
        raise E2EFailure(f"{name}: the job has no progress sidecar (spec.trainer.progress)")
    return result, _host_path(result.pod_tmp, path)


def local_tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) + ("/" if p.is_dir() else "")
                  for p in root.rglob("*"))


def run_local(env: MaxTextEnv, fixtures: Path, work: Path) -> Outcome:
    job = load_job(fixtures / LOCAL_JOB)
    result, metrics = run_job(env, job, work, "local")
    last, _ = _expected_steps(job)
    check_metrics(metrics, last)
    host_dir = _host_path(result.pod_tmp, job.spec.checkpoint.directory)
    committed, latest = check_checkpoints(job, str(host_dir))
    return Outcome(job, result, metrics, committed, latest, local_tree(host_dir))


def gcs_tree(directory: str) -> list[str]:
    from elastic_operator.checkpoints.listing import (
        parse_gcs_url,
        storage_client_from_env,
    )

    bucket, prefix = parse_gcs_url(directory)
    client = storage_client_from_env()
    return sorted(b.name[len(prefix):] for b in client.list_blobs(bucket, prefix=prefix))


def run_gcs(env: MaxTextEnv, fixtures: Path, work: Path) -> Outcome:
    from elastic_devtools.localcluster.gcs import client_environ, create_bucket, start_fake_gcs

    job = load_job(fixtures / GCS_JOB)
    directory = job.spec.checkpoint.directory
    bucket = directory.removeprefix("gs://").split("/", 1)[0]
    with start_fake_gcs(log_dir=work / "gcs") as server:
        create_bucket(server.endpoint, bucket)
        log(f"gcs: fake-gcs-server at {server.endpoint}, bucket {bucket}")
        result, metrics = run_job(env, job, work, "gcs", extra_env=server.env)
        check_metrics(metrics, _expected_steps(job)[0])
        with client_environ(server.env):
            committed, latest = check_checkpoints(job, directory)
            tree = gcs_tree(directory)
    return Outcome(job, result, metrics, committed, latest, tree)


def record(outcomes: dict[str, Outcome], out: Path) -> None:
    """What MaxText wrote, as fixtures: its metrics lines, the checkpoint trees (names
    only: sizes and times change from run to run), its command line."""
    out.mkdir(parents=True, exist_ok=True)
    for name, o in outcomes.items():
        shutil.copyfile(o.metrics_file, out / f"metrics-{name}.jsonl")
        (out / f"checkpoints-{name}.txt").write_text("\n".join(o.tree) + "\n")
        (out / f"command-{name}.txt").write_text("\n".join(o.result.argv) + "\n")
    log(f"recorded fixtures in {out}")


def check_example(env: MaxTextEnv, example: Path, work: Path) -> None:
    """Every argument the renderer gives MaxText for the example is accepted by MaxText's
    own parser, and the renderer's flags mean what the spec says."""
    job = load_job(example)
    args = main_process(job).argv[3:]  # after python3 -m <module>
    expected = {maxtext.METRICS_FILE_KEY: maxtext.metrics_file(job.spec.trainer),
                maxtext.KEEP_KEY: job.spec.checkpoint.keep,
                # Unset: MaxText's own default, which the spec's default names.
                maxtext.ASYNC_KEY: job.spec.checkpoint.async_or_default}
    argv = ["python3", "-c", _PARSE, json.dumps(args), json.dumps(sorted(expected))]
    log_path = work / f"example-parse-{example.stem}.log"
    with log_path.open("wb") as out:
        code = subprocess.call(env.command(argv, CPU_ENV, {POD_TMP: work}), stdout=out,
                               stderr=subprocess.STDOUT, timeout=300)
    text = log_path.read_text(errors="replace")
    found = [line for line in text.splitlines() if line.startswith("ETJ-CONFIG ")]
    if code != 0 or not found:
        raise E2EFailure(f"MaxText's parser refused the args of {example} (exit {code}); "
                         f"log {log_path}:\n" + "\n".join(text.splitlines()[-20:]))
    parsed = json.loads(found[-1].removeprefix("ETJ-CONFIG "))
    if parsed != expected:
        raise E2EFailure(f"{example}: MaxText read {parsed}, the spec says {expected}")
    log(f"example: MaxText {env.version}'s parser takes all {len(args)} args of {example} "
        f"({', '.join(f'{k}={v}' for k, v in parsed.items())})")


def run_e2e(fixtures: Path, work: Path | None, record_to: Path | None, gcs: bool,
            cluster: bool = True, runs: bool = True, scenarios: list[str] | None = None,
            sidecar_only: bool = False) -> int:
    from elastic_devtools.maxtext.scenario_run import SCENARIO_NAMES, run_scenarios

    env = MaxTextEnv.locate()
    work = work or Path(tempfile.mkdtemp(prefix="maxtext-e2e-"))
    log(f"MaxText {env.version} in {env.rootfs}{env.venv}; work {work}")
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    outcomes: dict[str, Outcome] = {}
    if runs:
        for example in maxtext_examples():
            check_example(env, example, work)
        outcomes["local"] = run_local(env, fixtures, work)
        if gcs:
            outcomes["gcs"] = run_gcs(env, fixtures, work)
    if record_to is not None:
        record(outcomes, record_to)
    done = run_scenarios(env, fixtures, work, gcs, tuple(scenarios or SCENARIO_NAMES),
                         sidecar_only) if cluster else []
    log("passed: " + "; ".join(
        [f"{n} in {o.result.seconds:.0f}s, latestCommittedStep {o.latest}"
         for n, o in outcomes.items()]
        + [f"scenario {r.name} in {r.figures['scenario wall time']}" for r in done])
        + f" (all in {time.monotonic() - started:.0f}s)")
    return 0
