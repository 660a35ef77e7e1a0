"""The restore report's one rule (elastic_api.restores) and the progress sidecar's measure
of a MaxText restore, fed MaxText 0.2.5's own lines recorded in a real `make e2e-maxtext`
(tests/fixtures/maxtext-0.2.5/metrics-resumed.jsonl: the last line of the first process,
step 48, then the first two of the process that restored step 25; main-restore.log: that
process's log lines of the restore)."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from elastic_api.checkpoints import GIB, step_size
from elastic_api.restores import (
    PROGRESS_SIDECAR,
    TRAINER,
    gib_per_second,
    restore_report,
    restored_step,
    sidecar_restore,
)
from elastic_devtools.localcluster.gcs import FakeGcsServer
from elastic_devtools.maxtext.scenario import orbax_restore
from elastic_operator.checkpoints.listing import list_gcs_step
from elastic_trainer.metrics_file import StepRecord, parse_maxtext_record
from elastic_trainer.progress_sidecar import RestoreWatch, pod_identity, progress_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "maxtext-0.2.5"
T0 = datetime(2026, 12, 2, 1, 47, 48, tzinfo=UTC)


def recorded() -> list[StepRecord]:
    lines = (FIXTURES / "metrics-resumed.jsonl").read_text().splitlines()
    records = [parse_maxtext_record(line) for line in lines]
    assert all(isinstance(r, StepRecord) for r in records)
    return [r for r in records if isinstance(r, StepRecord)]


def test_the_speed_is_bytes_over_gib_over_seconds_and_unknown_without_either() -> None:
    assert gib_per_second(3 * GIB, 2.0) == 1.5
    assert gib_per_second(None, 2.0) is None
    assert gib_per_second(GIB, 0.0) is None
    report = restore_report(source="checkpoint", step=7, nbytes=GIB, seconds=0.123456789,
                            restored_at=T0, measured_by=TRAINER)
    # The speed of the seconds as written, so the status's two figures agree.
    assert (report.seconds, report.gib_per_second) == (0.1235, 1 / 0.1235)


def test_maxtexts_first_line_after_its_restore_names_the_step_before_it() -> None:
    before, first, _ = recorded()
    assert (before.step, first.step) == (48, 26)  # the new process appended from 26
    said, orbax = orbax_restore((FIXTURES / "main-restore.log").read_text())
    assert said == 25 == restored_step(first.step) == (orbax or {}).get("step")
    assert restored_step(0) is None  # a run from scratch restored nothing


def test_the_sidecars_seconds_run_from_the_start_to_the_first_step_less_its_time() -> None:
    first = recorded()[1]
    assert first.step_seconds == pytest.approx(0.592037)
    report = sidecar_restore(started_at=T0, first_step=first.step,
                             first_step_seconds=first.step_seconds,
                             seen_at=T0 + timedelta(seconds=40), nbytes=1_358_012)
    assert report is not None
    assert (report.step, report.bytes, report.measured_by) == (25, 1_358_012, PROGRESS_SIDECAR)
    assert report.seconds == pytest.approx(40 - 0.592037, abs=1e-4)
    assert report.gib_per_second == pytest.approx(1_358_012 / GIB / (40 - 0.592037))
    _, orbax = orbax_restore((FIXTURES / "main-restore.log").read_text())
    assert orbax is not None and report.seconds >= orbax["checkpoint_manager_duration_secs"]
    assert sidecar_restore(started_at=T0, first_step=0, first_step_seconds=1.0,
                           seen_at=T0, nbytes=None) is None


def step_dir(root: Path, step: int, sizes: list[int]) -> None:
    (root / str(step) / "items").mkdir(parents=True)
    for i, size in enumerate(sizes):
        (root / str(step) / "items" / f"f{i}").write_bytes(b"x" * size)


def test_the_sidecar_measures_a_new_process_once_with_the_steps_listed_bytes(
        tmp_path: Path) -> None:
    step_dir(tmp_path, 25, [1000, 24])
    identity = pod_identity("head-0", "uid-2", T0)
    watch = RestoreWatch(identity, fresh=True, directory=str(tmp_path))
    assert watch.see([], T0 + timedelta(seconds=1)) is None  # MaxText not stepping yet
    first = recorded()[1]
    report = watch.see([first], T0 + timedelta(seconds=30))
    assert report is not None and (report.step, report.bytes) == (25, 1024)
    assert watch.see([recorded()[2]], T0 + timedelta(seconds=31)) == report  # kept, once
    training = progress_report(identity, first, 400, T0 + timedelta(seconds=31), report)
    assert training.last_restore == report


@pytest.mark.parametrize("case", ["sidecar restarted in its pod", "lines there at start"])
def test_the_sidecar_measures_nothing_it_did_not_see_start(case: str, tmp_path: Path) -> None:
    identity = pod_identity("head-0", "uid-2", T0)
    first = recorded()[1]
    if case == "sidecar restarted in its pod":  # the kept identity: its start is not now
        watch = RestoreWatch(identity, fresh=False, directory=str(tmp_path))
        watch.see([], T0 + timedelta(seconds=100))
    else:  # the file held train lines at the first read: not this process's first
        watch = RestoreWatch(identity, fresh=True, directory=str(tmp_path))
        watch.see([recorded()[0]], T0 + timedelta(seconds=1))
    assert watch.see([first], T0 + timedelta(seconds=101)) is None


def test_a_directory_that_cannot_be_listed_gives_no_bytes_and_no_speed(
        tmp_path: Path) -> None:
    watch = RestoreWatch(pod_identity("head-0", "uid-2", T0), fresh=True,
                         directory=str(tmp_path / "absent"))
    watch.see([], T0)
    report = watch.see([recorded()[1]], T0 + timedelta(seconds=20))
    assert report is not None and (report.bytes, report.gib_per_second) == (None, None)


# The sidecar lists gs:// with gcsfs, the operator with google-cloud-storage: in a fresh
# interpreter (gcsfs keeps process-wide state), against the same objects.
SIDECAR_SIZE = """
import sys
from elastic_trainer.progress_sidecar import restored_bytes
print("BYTES", restored_bytes(sys.argv[1], int(sys.argv[2])))
"""


def test_the_sidecar_sizes_a_gcs_step_as_the_operators_listing(fake_gcs: FakeGcsServer) -> None:
    client = storage.Client(project="etj-test", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": fake_gcs.endpoint})
    bucket = client.create_bucket(f"etj-restores-{uuid.uuid4().hex[:10]}")
    for name, data in {"25/commit_success.txt": "ok", "25/items/d/0": "x" * 1000,
                       "25/items/manifest.ocdbt": "y" * 24, "25/empty/": "",
                       "250/items/0": "not this step"}.items():
        bucket.blob(f"ckpt/{name}").upload_from_string(data)
    directory = f"gs://{bucket.name}/ckpt"
    listed = step_size(list_gcs_step(directory, 25, client)).bytes
    run = subprocess.run([sys.executable, "-c", SIDECAR_SIZE, directory, "25"],
                         env={**os.environ, **fake_gcs.env}, capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"BYTES {listed}" in run.stdout.splitlines() and listed == 1026
