"""One contract, both sides fed the same input (issue 21): the operator and the trainer
read one checkpoint root alike (elastic_api.checkpoints), the trainer restores the step
the operator reports as latestCommittedStep, they read one hostile status alike
(elastic_api.status_parsing), and they draw the line around a Kueue eviction on the same
second (elastic_api.queueing.caused_by_eviction)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastic_api.checkpoints import COMMIT_MARKER, RootDecision, nested_root_hint
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJobStatus, TrainingReport
from elastic_devtools.localcluster.gcs import FakeGcsServer
from elastic_operator.checkpoints.listing import (
    MAX_IGNORED_REPORTED,
    scan_checkpoints_detailed,
)
from elastic_operator.core.parsing import parse_job
from elastic_operator.core.status import compute_status
from elastic_trainer.backends import SimulatedBackend
from elastic_trainer.checkpoint import Checkpointer
from elastic_trainer.compose import build_trainer
from elastic_trainer.configs import get_config
from elastic_trainer.data import SyntheticSource
from elastic_trainer.events import RunResult
from elastic_trainer.loop import LoopOptions, Trainer
from elastic_trainer.report import PriorRun, prior_state
from elastic_trainer.simulated_faults import FaultSchedule
from tests.builders import at, etj, healthy_pods, iso, observe, observed_jobset
from tests.kueue_builders import queued_job, workload

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ARABIC_60 = "\u0666\u0660"  # Arabic-Indic digits: int() reads 60


# --- checkpoint roots: both listers, one rule ---------------------------------------------


def operator_view(directory: str, **kw: Any) -> dict[str, Any]:
    summary = scan_checkpoints_detailed(directory, now=NOW, **kw)
    status = summary.status
    return {"committed": summary.committed_steps, "latest": status.latest_committed_step,
            "incomplete": status.incomplete_steps, "abandoned": status.abandoned_steps,
            "ignored": summary.ignored_entries, "error": status.error}


def operator_size(directory: str, **kw: Any) -> list[int] | None:
    status = scan_checkpoints_detailed(directory, now=NOW, **kw).status
    if status.latest_committed_bytes is None or status.latest_committed_files is None:
        return None
    return [status.latest_committed_bytes, status.latest_committed_files]


def trainer_view(decision: RootDecision, directory: str) -> dict[str, Any]:
    """The trainer's decision in the operator's terms (its hint is the status error)."""
    return {"committed": list(decision.committed), "latest": decision.latest_committed,
            "incomplete": list(decision.incomplete), "abandoned": list(decision.abandoned),
            "ignored": list(decision.ignored[:MAX_IGNORED_REPORTED]),
            "error": nested_root_hint(directory) if decision.nested_root else None}


def trainer_listing(root: Path) -> RootDecision:
    ckpt = Checkpointer(str(root), period=1, keep=5, async_save=False)
    try:
        return ckpt.listing()
    finally:
        ckpt.close()


def add_hostile_entries(root: Path, link_to: str) -> None:
    """The issue's five entries, and what else a shared root collects."""
    metadata = next(root.glob("*/_CHECKPOINT_METADATA")).read_bytes()
    (root / "20").mkdir()  # metadata, no marker: an older Orbax's, or a cut save
    (root / "20" / "_CHECKPOINT_METADATA").write_bytes(metadata)
    (root / "30").mkdir()  # empty: Orbax alone would list it as a step
    (root / "40.orbax-checkpoint-tmp-1712345678").mkdir()  # an older Orbax's tmp name
    (root / "40.orbax-checkpoint-tmp-1712345678" / "_CHECKPOINT_METADATA").write_bytes(metadata)
    (root / "50.partial_save.orbax-checkpoint-tmp").mkdir()
    (root / "3.orbax-checkpoint-tmp").mkdir()  # a killed save before a later commit
    (root / "3.orbax-checkpoint-tmp" / COMMIT_MARKER).write_text("written before the rename")
    for foreign in (ARABIC_60, "007"):  # shaped like committed steps, named like none
        (root / foreign).mkdir()
        (root / foreign / COMMIT_MARKER).write_text("ok")
    (root / "70").write_text("a file named like a step")
    (root / "80").symlink_to(root / link_to)  # a link to a committed step is no step


EXPECTED_HOSTILE = {
    "incomplete": [20, 30, 40, 50], "abandoned": [3],
    "ignored": sorted(["007", "70", "80", ARABIC_60]), "error": None,
}


def _pytree(step: int) -> dict[str, Any]:
    return {"w": jnp.full((4,), float(step), jnp.float32)}


def test_both_sides_read_a_hostile_local_root_alike(tmp_path: Path) -> None:
    writer = Checkpointer(str(tmp_path), period=1, keep=5, async_save=False)
    assert writer.save(0, _pytree(0)) and writer.save(10, _pytree(10))
    writer.close()
    add_hostile_entries(tmp_path, link_to="0")

    operator = operator_view(str(tmp_path))
    assert operator == {"committed": [0, 10], "latest": 10, **EXPECTED_HOSTILE}
    assert trainer_view(trainer_listing(tmp_path), str(tmp_path)) == operator

    # The trainer restores exactly that step, named to orbax: orbax's own listing would
    # pick 80 (the link, to step 0's data).
    with ocp.CheckpointManager(tmp_path) as manager:
        assert manager.latest_step() == 80
    ckpt = Checkpointer(str(tmp_path), period=1, keep=5, async_save=False)
    assert ckpt.latest_committed_step() == operator["latest"]
    restored = ckpt.restore(ckpt.latest_committed_step() or 0, _target())
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.full((4,), 10.0))
    # Settled, both still agree: the uncommitted steps are gone, the foreign names stay.
    assert ckpt.settle() == [3, 20, 30, 40, 50]
    ckpt.close()
    settled = operator_view(str(tmp_path))
    assert settled == {**operator, "incomplete": [], "abandoned": []}
    assert trainer_view(trainer_listing(tmp_path), str(tmp_path)) == settled


def _target() -> Any:
    import jax

    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                        _pytree(0))


def test_maxtexts_run_directory_is_named_by_both_sides(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "checkpoints" / "10").mkdir(parents=True)
    (tmp_path / "checkpoints" / "10" / COMMIT_MARKER).write_text("ok")
    (tmp_path / "config.yml").write_text("run_name: x")
    operator = operator_view(str(tmp_path))
    assert operator["latest"] is None
    assert f"did you mean {tmp_path}/checkpoints?" in (operator["error"] or "")
    with caplog.at_level(logging.WARNING, logger="elastic_trainer.checkpoint"):
        assert trainer_view(trainer_listing(tmp_path), str(tmp_path)) == operator
    assert f"did you mean {tmp_path}/checkpoints?" in caplog.text


# Every kind of entry a root can hold, under the names that matter.
layout_names = st.one_of(
    st.sampled_from(["0", "1", "7", "10", "007", "00", ARABIC_60, "\uff11", "checkpoints",
                     "10.orbax-checkpoint-tmp", "7.orbax-checkpoint-tmp-17",
                     "1.partial_save.orbax-checkpoint-tmp", "x.orbax-checkpoint-tmp",
                     "prefix_3", "commit_success.txt"]),
    st.from_regex(r"[0-9]{1,3}(\.orbax-checkpoint-tmp)?", fullmatch=True),
)
kinds = st.sampled_from(["committed", "uncommitted", "empty", "file", "link", "dangling"])


@settings(max_examples=25, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layout=st.lists(st.tuples(layout_names, kinds), max_size=8, unique_by=lambda t: t[0]))
def test_any_local_root_reads_alike(tmp_path_factory: pytest.TempPathFactory,
                                    layout: list[tuple[str, str]]) -> None:
    root = tmp_path_factory.mktemp("root")
    target = tmp_path_factory.mktemp("elsewhere")
    (target / COMMIT_MARKER).write_text("ok")
    for name, kind in layout:
        path = root / name
        if kind == "file":
            path.write_text("x")
        elif kind == "link":
            path.symlink_to(target)
        elif kind == "dangling":
            path.symlink_to(root / "missing")
        else:
            path.mkdir()
            if kind != "empty":
                (path / ("data" if kind == "uncommitted" else COMMIT_MARKER)).write_text("x")
    operator = operator_view(str(root))
    assert trainer_view(trainer_listing(root), str(root)) == operator
    assert operator["error"] is None or "did you mean" in operator["error"]


def _trainer(root: Path, steps: int) -> Trainer:
    cfg = get_config("tiny")
    opts = LoopOptions(steps=steps, batch=2, seed=0, max_retries=1, log_every=10**6)
    return build_trainer(cfg, opts, SimulatedBackend(1, 1, FaultSchedule([])),
                         SyntheticSource(0, 2, cfg.seq_len, cfg.vocab_size),
                         Checkpointer(str(root), period=5, keep=5, async_save=False))


def _run_trainer(root: Path, steps: int) -> RunResult:
    trainer = _trainer(root, steps)
    try:
        return trainer.run()
    finally:
        trainer.backend.close()


def test_the_trainer_reports_the_restore_of_the_size_the_operator_lists(tmp_path: Path) -> None:
    """status.checkpoint.latestCommittedBytes and status.training.lastRestore.bytes count
    one step alike (elastic_api.checkpoints.step_size): Orbax's files, a sparse file and
    a link the rule does not count."""
    assert _run_trainer(tmp_path, steps=10).final_step == 10
    with open(tmp_path / "10" / "sparse", "wb") as f:
        f.truncate(3 * 2**30)
    (tmp_path / "10" / "link").symlink_to(tmp_path / "10" / "sparse")
    listed = scan_checkpoints_detailed(str(tmp_path), now=NOW).status
    assert listed.latest_committed_bytes is not None
    assert listed.latest_committed_bytes > 3 * 2**30
    files = [p for p in (tmp_path / "10").rglob("*") if p.is_file() and not p.is_symlink()]
    assert listed.latest_committed_files == len(files)
    assert listed.latest_committed_bytes == sum(p.stat().st_size for p in files)
    trainer = _trainer(tmp_path, steps=12)
    try:
        result = trainer.run()
    finally:
        trainer.backend.close()
    assert result.started_from == (10, "checkpoint")
    restore = trainer.status.training_report().last_restore
    assert restore is not None
    assert (restore.source, restore.step, restore.bytes) == (
        "checkpoint", 10, listed.latest_committed_bytes)
    assert restore.gib_per_second == pytest.approx(
        restore.bytes / 2**30 / restore.seconds, rel=1e-3)


def test_the_trainer_resumes_from_the_step_the_operator_reports(tmp_path: Path) -> None:
    """`etj train`'s loop itself, restarted on a root that a crash and strangers left
    behind, resumes from status.checkpoint.latestCommittedStep."""
    first = _run_trainer(tmp_path, steps=10)
    assert first.final_step == 10 and first.failure is None
    add_hostile_entries(tmp_path, link_to="5")
    reported = operator_view(str(tmp_path))
    assert reported == {"committed": [5, 10], "latest": 10, **EXPECTED_HOSTILE}
    second = _run_trainer(tmp_path, steps=12)
    assert second.failure is None
    assert second.started_from == (reported["latest"], "checkpoint")


# gs://: the operator through google-cloud-storage, the trainer through etils.epath (gcsfs),
# in a fresh interpreter (gcsfs and jax keep process-wide state).
TRAINER_LISTING = """
import json, sys
from elastic_trainer.checkpoint import Checkpointer
for directory in sys.argv[1:]:
    ckpt = Checkpointer(directory, period=1, keep=5, async_save=False)
    d = ckpt.listing()
    size = ckpt.step_size(d.latest_committed) if d.latest_committed is not None else None
    print(json.dumps({"committed": d.committed, "incomplete": d.incomplete,
                      "abandoned": d.abandoned, "ignored": d.ignored,
                      "nested": d.nested_root,
                      "size": [size.bytes, size.files] if size is not None else None}))
    ckpt.close()
"""


def test_both_sides_read_a_hostile_gcs_root_alike(fake_gcs: FakeGcsServer) -> None:
    client = storage.Client(project="etj-test", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": fake_gcs.endpoint})
    bucket = client.create_bucket(f"etj-contract-{uuid.uuid4().hex[:10]}")
    objects = {
        "0/commit_success.txt": "ok", "0/_CHECKPOINT_METADATA": "{}",
        "10/commit_success.txt": "ok", "10/_CHECKPOINT_METADATA": "{}",
        "10/items/manifest.ocdbt": "x",
        "3/_CHECKPOINT_METADATA": "{}",  # written in place, never committed: abandoned
        "20/_CHECKPOINT_METADATA": "{}",  # in flight
        "30/": "",  # a folder placeholder: an empty "directory"
        "40.orbax-checkpoint-tmp-1712345678/x": "x",
        "50.partial_save.orbax-checkpoint-tmp/x": "x",
        f"{ARABIC_60}/commit_success.txt": "ok", "007/commit_success.txt": "ok",
        "70": "a file named like a step",
    }
    for name, data in objects.items():
        bucket.blob(f"run/{name}").upload_from_string(data)
    bucket.blob("maxtext-run/checkpoints/10/commit_success.txt").upload_from_string("ok")
    bucket.blob("maxtext-run/config.yml").upload_from_string("x")
    hostile, nested = f"gs://{bucket.name}/run", f"gs://{bucket.name}/maxtext-run"

    listed = subprocess.run([sys.executable, "-c", TRAINER_LISTING, hostile, nested],
                            env={**os.environ, **fake_gcs.env, "JAX_PLATFORMS": "cpu"},
                            capture_output=True, text=True, timeout=300, check=False)
    assert listed.returncode == 0, listed.stderr[-4000:]
    trainer = [json.loads(line) for line in listed.stdout.splitlines() if line.startswith("{")]
    operator = [operator_view(d, storage_client=client) for d in (hostile, nested)]

    assert operator[0] == {"committed": [0, 10], "latest": 10, "incomplete": [20, 30, 40, 50],
                           "abandoned": [3], "ignored": sorted(["007", "70", ARABIC_60]),
                           "error": None}
    assert operator[1]["error"] is not None
    assert f"did you mean {nested}/checkpoints?" in operator[1]["error"]
    for seen, theirs, directory in zip(operator, trainer, (hostile, nested), strict=True):
        assert theirs == {"committed": seen["committed"], "incomplete": seen["incomplete"],
                          "abandoned": seen["abandoned"], "ignored": seen["ignored"],
                          "nested": seen["error"] is not None,
                          "size": operator_size(directory, storage_client=client)}
    assert operator_size(hostile, storage_client=client) == [len("ok{}x"), 3]


# --- hostile statuses: one reader ----------------------------------------------------------


def operator_reads(status: Any) -> tuple[ElasticTrainingJobStatus, str | None]:
    body = etj("contract").uid("u1").generation(1).trainer(steps=100).obj()
    body["status"] = status
    parsed = parse_job(body)
    return parsed.previous, parsed.report_problem


def trainer_reads(status: Any, max_retries: int = 5) -> PriorRun:
    return prior_state(status, max_retries)


def as_stored(status: ElasticTrainingJobStatus) -> dict[str, Any]:
    return status.model_dump(by_alias=True, mode="json", exclude_none=True)


def assert_read_alike(status: Any) -> tuple[ElasticTrainingJobStatus, PriorRun]:
    """The trainer's reading of the raw status is its reading of what the operator read:
    no value the operator drops reaches the trainer, none it keeps is lost."""
    previous, _ = operator_reads(status)
    prior = trainer_reads(status)
    assert prior == trainer_reads(as_stored(previous))
    training = previous.training
    assert prior.step == (training.step if training is not None else 0)
    assert prior.checkpoint_ack == (training.checkpoint_ack if training is not None else None)
    assert prior.goodput == (training.goodput if training is not None else None)
    total = training.elastic_events_total if training is not None else 0
    assert prior.events == max(previous.counters.elastic_events, total, 0)
    return previous, prior


def report(**fields: Any) -> dict[str, Any]:
    return {"observedAt": "2026-11-29T11:59:00Z", "state": "Training", **fields}


GOOD_ACK = {"id": 2, "step": 120, "committedAt": "2026-11-29T11:58:00Z", "paused": False}


@pytest.mark.parametrize(("status", "step", "events", "ack"), [
    ({"training": report(step=130, checkpointAck=GOOD_ACK)}, 130, 0, 2),
    ({"training": report(step=True)}, 0, 0, None),  # a bool is no count
    ({"training": report(step="130")}, 0, 0, None),  # nor a string
    ({"training": report(step=2.0)}, 0, 0, None),  # nor a float
    ({"training": report(step=-5)}, 0, 0, None),  # counts are >= 0
    ({"training": report(step=2**70)}, 0, 0, None),  # nor beyond int64
    ({"training": report(checkpointAck={**GOOD_ACK, "id": True})}, 0, 0, None),
    ({"training": report(checkpointAck={**GOOD_ACK, "committedAt": "never"})}, 0, 0, None),
    ({"training": report(checkpointAck={**GOOD_ACK, "paused": "yes"})}, 0, 0, None),
    ({"training": report(goodput={"productiveSeconds": float("inf")})}, 0, 0, None),
    ({"training": report(goodput={"productiveSeconds": float("nan")})}, 0, 0, None),
    ({"training": report(elasticEventsTotal=3), "counters": {"elasticEvents": True}}, 0, 3,
     None),
    ({"training": report(elasticEventsTotal=3), "counters": {"elasticEvents": -9}}, 0, 3,
     None),
    ({"training": report(elasticEventsTotal=1), "counters": {"elasticEvents": 4,
                                                             "sliceFailures": "x"}}, 0, 4, None),
    ({"training": {"step": 130}}, 0, 0, None),  # no observedAt/state: no report at all
    ({"training": ["not", "a", "report"]}, 0, 0, None),
    ("not a status", 0, 0, None),
])
def test_both_sides_read_a_hostile_status_alike(status: Any, step: int, events: int,
                                                ack: int | None) -> None:
    _, prior = assert_read_alike(status)
    assert (prior.step, prior.events) == (step, events)
    assert (prior.checkpoint_ack.id if prior.checkpoint_ack else None) == ack


def test_a_naive_time_is_utc_on_both_sides() -> None:
    status = {"training": report(observedAt="2026-11-29T11:59:00", checkpointAck={
        **GOOD_ACK, "committedAt": "2026-11-29T11:58:00"})}
    previous, prior = assert_read_alike(status)
    assert previous.training is not None
    assert previous.training.observed_at == datetime(2026, 11, 29, 11, 59, tzinfo=UTC)
    assert prior.checkpoint_ack is not None
    assert prior.checkpoint_ack.committed_at == datetime(2026, 11, 29, 11, 58, tzinfo=UTC)


def test_what_the_operator_flags_the_trainer_does_not_take() -> None:
    previous, problem = operator_reads({"training": report(step=True, retriesRemaining="3")})
    assert problem is not None and "step" in problem and "retriesRemaining" in problem
    assert previous.training is not None and previous.training.retries_remaining is None
    prior = trainer_reads({"training": report(step=True, retriesRemaining="3")}, max_retries=5)
    assert (prior.step, prior.failures) == (0, 0)


HOSTILE_VALUES = st.sampled_from([
    True, False, None, -1, 0, 3, "5", 2.5, 2.0, 2**63, 10**400, float("nan"), float("inf"),
    "2026-11-29T11:00:00", "2026-11-29T11:00:00Z", "yesterday", [], [1, -1], {}, {"x": 1},
    "Training", "Detected",
])
PATHS = [
    ("counters", "elasticEvents"), ("counters", "sliceFailures"),
    ("admission", "evictedAt"), ("admission", "workloadPreemptions"),
    ("training", "observedAt"), ("training", "state"), ("training", "step"),
    ("training", "retriesRemaining"), ("training", "elasticEventsTotal"),
    ("training", "processStartedAt"),
    ("training", "elasticEvent", "id"), ("training", "elasticEvent", "detectedAt"),
    ("training", "elasticEvent", "slicesDown"), ("training", "elasticEvent", "phase"),
    ("training", "checkpointAck", "id"), ("training", "checkpointAck", "step"),
    ("training", "checkpointAck", "committedAt"), ("training", "checkpointAck", "paused"),
    ("training", "goodput", "productiveSeconds"),
    ("training", "goodput", "badputSeconds", "restore"),
]


def sound_status() -> dict[str, Any]:
    return {
        "counters": {"elasticEvents": 2, "sliceFailures": 1},
        "admission": {"evictedAt": "2026-11-29T11:50:00Z", "workloadPreemptions": 1},
        "training": report(step=130, retriesRemaining=3, elasticEventsTotal=2,
                           processStartedAt="2026-11-29T11:00:00.250000Z",
                           elasticEvent={"id": 2, "phase": "WaitingForSlices",
                                         "detectedAt": "2026-11-29T11:50:00.500000Z",
                                         "slicesDown": [1]},
                           checkpointAck=GOOD_ACK,
                           goodput={"productiveSeconds": 40.5,
                                    "badputSeconds": {"restore": 2.0}}),
    }


def _put(status: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = status
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(node.get(key, {}), dict) else {}
    node[path[-1]] = value


@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(st.sampled_from(PATHS), HOSTILE_VALUES), max_size=5))
def test_any_hostile_status_reads_alike(changes: list[tuple[tuple[str, ...], Any]]) -> None:
    status = sound_status()
    for path, value in changes:
        _put(status, path, value)
    _, prior = assert_read_alike(status)
    assert all(type(n) is int and n >= 0 for n in (prior.step, prior.events, prior.failures))


# --- a Kueue eviction: one tie-break on the second ---------------------------------------

EVICTED = at(100)  # Kubernetes times are whole seconds: the eviction is in [100 s, 101 s)
MAX_RETRIES = 5


def trainer_gives_the_retry_back(lost_at: datetime) -> bool:
    """A replacement trainer reads a slice loss of the earlier process, detected at
    `lost_at`, with Kueue's eviction at EVICTED in the status."""
    status = {"admission": {"evictedAt": iso(EVICTED)}, "training": report(
        retriesRemaining=MAX_RETRIES - 1, processStartedAt=iso(at(40)),
        elasticEvent={"id": 1, "phase": "WaitingForSlices", "detectedAt": iso(lost_at),
                      "slicesDown": [1]})}
    return trainer_reads(status, MAX_RETRIES).failures == 0


def _training(started: datetime, pid: int) -> TrainingReport:
    return TrainingReport.model_validate({
        "observedAt": iso(started), "state": "Training", "step": 10, "processId": pid,
        "hostName": "head", "processStartedAt": iso(started)})


def operator_takes_the_stop_for_kueues(started: datetime) -> bool:
    """The operator sees the trainer that started at `started` replaced after Kueue
    preempted the job at EVICTED: no TrainerRestarted when Kueue stopped it."""
    job = queued_job()
    jobset = replace(observed_jobset(job).build(), uid="article-js-uid")
    admitted = workload().admitted(at(30))
    prev = ElasticTrainingJobStatus(training=_training(started, 7))
    first, _ = compute_status(job, observe(healthy_pods(), jobset, workload=admitted.build()),
                              prev, started + timedelta(seconds=0.5))
    assert first.trainer_process is not None and first.trainer_process.process_id == 7
    later = first.model_copy(update={"training": _training(at(130), 8)})
    preempted = workload().admitted(at(30)).preempted(EVICTED).build()
    status, events = compute_status(job, observe(healthy_pods(), jobset, workload=preempted),
                                    later, at(131))
    assert status.trainer_process is not None and status.trainer_process.process_id == 8
    return not [e for e in events if e.reason == Reason.TRAINER_RESTARTED]


@pytest.mark.parametrize(("offset", "loss_is_kueues", "stop_is_kueues"), [
    (-0.001, False, True),  # before the eviction's second: a real loss; the trainer ran on
    (0.0, True, True),  # within the eviction's second: the eviction's, on both sides
    (0.4, True, True),
    (0.999, True, True),
    (1.0, True, False),  # after it: a loss the eviction caused; a trainer started later
])
def test_both_sides_give_the_evictions_second_to_the_eviction(
        offset: float, loss_is_kueues: bool, stop_is_kueues: bool) -> None:
    moment = EVICTED + timedelta(seconds=offset)
    assert trainer_gives_the_retry_back(moment) is loss_is_kueues
    assert operator_takes_the_stop_for_kueues(moment) is stop_is_kueues


@pytest.mark.parametrize(("failed", "restored", "lost"), [
    (10, 7, 3), (5, 5, 0),
    (5, 6, 0),  # a copy every step, of the step whose loss was not read yet: none lost
    (5, None, None),
])
def test_steps_lost_is_one_rule_for_the_trainers_event_and_the_operators_record(
        failed: int, restored: int | None, lost: int | None) -> None:
    """The trainer's event summary and the operator's recovery record count the steps an
    elastic event redid by one function (elastic_api.restores.steps_lost)."""
    from elastic_api import restores
    from elastic_operator.core import recovery
    from elastic_trainer.events import ElasticEvent

    event = ElasticEvent(id=1, kind="slice_down", error="", failed_step=failed,
                         slices_down=[0], detected_at=0.0, fault_at=None,
                         restored_from_step=restored)
    assert event.steps_lost == restores.steps_lost(failed, restored) == lost
    assert recovery.lost_steps is restores.steps_lost
