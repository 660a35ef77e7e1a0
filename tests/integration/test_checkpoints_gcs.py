"""scan_checkpoints against a real GCS API server (fake-gcs-server), with objects laid out
the way Orbax writes them on gs:// (CommitFileTemporaryPath: `<step>/...` written in place,
`<step>/commit_success.txt` last).

Needs the fake-gcs-server binary from hack/build-control-plane.sh; without it these tests
fail (they never skip) with the build command in the message.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from elastic_devtools.localcluster.gcs import FakeGcsServer, free_port, start_fake_gcs
from elastic_operator.checkpoints.listing import (
    COMMIT_MARKER,
    scan_checkpoints,
    scan_checkpoints_detailed,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PREEMPTED = 17

# Runs in a fresh interpreter (jax, tensorstore and gcsfs keep process-wide state). "save":
# Orbax saves steps 1 and 2, then dies while committing step 3, after all its data and the
# item's marker are written but before the step's commit_success.txt: a preemption at the
# worst moment. "steps": print the steps Orbax itself considers committed.
ORBAX_SCRIPT = """
import json, os, sys
import jax.numpy as jnp
import orbax.checkpoint as ocp
from orbax.checkpoint._src.path import atomicity

directory, action, preempted_exit_code = sys.argv[1], sys.argv[2], int(sys.argv[3])
if action == "steps":
    print(json.dumps(sorted(ocp.CheckpointManager(directory).all_steps())))
    sys.exit(0)
manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(max_to_keep=5))
for step in (1, 2):
    manager.save(step, args=ocp.args.StandardSave({"w": jnp.full((8, 8), float(step))}))
manager.wait_until_finished()
print(json.dumps(sorted(manager.all_steps())), flush=True)

commit = atomicity.CommitFileTemporaryPath.finalize
async def preempted_before_commit(self):
    if self.get_final().name.isdigit():  # the step's marker (items are named, e.g. default)
        os._exit(preempted_exit_code)
    await commit(self)
atomicity.CommitFileTemporaryPath.finalize = preempted_before_commit
manager.save(3, args=ocp.args.StandardSave({"w": jnp.full((8, 8), 3.0)}))
manager.wait_until_finished()
sys.exit("step 3 was committed: the preemption point was never reached")
"""


class RecordingSession(requests.Session):
    """A real HTTP session that also records (method, path, query) of each request."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
        method = method.decode() if isinstance(method, bytes) else method
        self.calls.append((method, str(url)))
        return super().request(method, url, *args, **kwargs)


def client_for(server: FakeGcsServer, session: requests.Session | None = None) -> storage.Client:
    return storage.Client(
        project="etj-test", credentials=AnonymousCredentials(),
        client_options={"api_endpoint": server.endpoint}, _http=session,
    )


@pytest.fixture
def client(fake_gcs: FakeGcsServer) -> storage.Client:
    return client_for(fake_gcs)


@pytest.fixture
def bucket(client: storage.Client) -> storage.Bucket:
    return client.create_bucket(f"etj-ckpt-{uuid.uuid4().hex[:12]}")


def write_orbax_step(bucket: storage.Bucket, root: str, step: int, *, committed: bool) -> None:
    """The objects an Orbax save of one pytree item leaves on GCS (marker last)."""
    base = f"{root}/{step}"
    for name, data in [
        ("_CHECKPOINT_METADATA", b'{"item_handlers": {}}'),
        ("default/_METADATA", b"{}"),
        ("default/_sharding", b"{}"),
        ("default/manifest.ocdbt", b"\x00" * 64),
        ("default/ocdbt.process_0/manifest.ocdbt", b"\x00" * 64),
        ("default/d/0123456789abcdef", b"\x01" * 256),
        ("default/commit_success.txt", b"ok"),
    ]:
        bucket.blob(f"{base}/{name}").upload_from_string(data)
    if committed:
        bucket.blob(f"{base}/{COMMIT_MARKER}").upload_from_string(
            f"Checkpoint commit was successful to gs://{bucket.name}/{base}",
        )


def test_committed_incomplete_and_foreign_entries(
    bucket: storage.Bucket, client: storage.Client,
) -> None:
    root = "run1/checkpoints"
    write_orbax_step(bucket, root, 100, committed=True)
    write_orbax_step(bucket, root, 150, committed=False)  # an older save that never finished
    write_orbax_step(bucket, root, 200, committed=True)
    write_orbax_step(bucket, root, 300, committed=False)  # the save in progress
    bucket.blob(f"{root}/README.md").upload_from_string("foreign file")
    bucket.blob(f"{root}/metadata/info.json").upload_from_string("{}")
    bucket.blob(f"{root}/prefix_400/{COMMIT_MARKER}").upload_from_string("other naming")
    bucket.blob("run1/other/500/commit_success.txt").upload_from_string("outside the root")

    directory = f"gs://{bucket.name}/{root}"
    summary = scan_checkpoints_detailed(directory, now=NOW, storage_client=client)

    assert summary.status.error is None
    assert summary.status.directory == directory
    assert summary.status.observed_at == NOW
    assert summary.status.latest_committed_step == 200
    assert summary.status.incomplete_steps == [300]
    assert summary.status.abandoned_steps == [150]  # older than 200: nothing finishes it
    assert summary.committed_steps == [100, 200]
    assert summary.ignored_entries == ["README.md", "metadata", "prefix_400"]

    # The in-progress save commits: its marker is the last object Orbax writes.
    bucket.blob(f"{root}/300/{COMMIT_MARKER}").upload_from_string("ok")
    status = scan_checkpoints(directory, now=NOW, storage_client=client)
    assert status.latest_committed_step == 300
    assert status.incomplete_steps == []
    assert status.abandoned_steps == [150]


def test_scan_is_one_list_call_plus_one_metadata_get_per_step_and_one_list_to_size(
    fake_gcs: FakeGcsServer, bucket: storage.Bucket,
) -> None:
    for step in (10, 20, 30):
        write_orbax_step(bucket, "ckpt", step, committed=step != 30)
    bucket.blob("ckpt/notes.txt").upload_from_string("x")
    session = RecordingSession()
    status = scan_checkpoints(
        f"gs://{bucket.name}/ckpt", now=NOW, storage_client=client_for(fake_gcs, session),
    )
    assert status.latest_committed_step == 20 and status.incomplete_steps == [30]
    # The newest committed step's objects as listed: the seven of write_orbax_step and
    # its marker.
    marker = len(f"Checkpoint commit was successful to gs://{bucket.name}/ckpt/20")
    assert status.latest_committed_files == 8
    assert status.latest_committed_bytes == 21 + 2 + 2 + 64 + 64 + 256 + 2 + marker
    lists = [url for _, url in session.calls if url.split("?")[0].endswith("/o")]
    gets = [url for _, url in session.calls if "/o/" in url]
    assert len(lists) == 2 and "delimiter=%2F" in lists[0]
    assert "delimiter" not in lists[1] and "prefix=ckpt%2F20%2F" in lists[1]
    assert len(gets) == 3
    assert all("commit_success.txt" in url for url in gets)
    assert not any("alt=media" in url for _, url in session.calls), "no object is downloaded"
    # Anything else is google-cloud-storage's own bucket-metadata cache (one GET of the
    # bucket, in a background thread, cached per client), not object traffic.
    others = [url for _, url in session.calls if url not in lists and url not in gets]
    assert all(url.split("?")[0].endswith(f"/b/{bucket.name}") for url in others), others
    # A committed step is never written again: the next scan does not list it again.
    again = RecordingSession()
    status = scan_checkpoints(
        f"gs://{bucket.name}/ckpt", now=NOW, storage_client=client_for(fake_gcs, again),
    )
    assert status.latest_committed_bytes == 21 + 2 + 2 + 64 + 64 + 256 + 2 + marker
    assert len([url for _, url in again.calls if url.split("?")[0].endswith("/o")]) == 1


def test_bucket_root_and_empty_prefix(bucket: storage.Bucket, client: storage.Client) -> None:
    for name in ("7/_CHECKPOINT_METADATA", f"7/{COMMIT_MARKER}"):
        bucket.blob(name).upload_from_string("x")
    status = scan_checkpoints(f"gs://{bucket.name}", now=NOW, storage_client=client)
    assert status.error is None and status.latest_committed_step == 7

    empty = scan_checkpoints(f"gs://{bucket.name}/not/written/yet", now=NOW, storage_client=client)
    assert empty.error is None
    assert empty.latest_committed_step is None and empty.incomplete_steps == []


def test_missing_bucket_is_an_error_not_an_exception(client: storage.Client) -> None:
    name = f"etj-missing-{uuid.uuid4().hex[:12]}"
    status = scan_checkpoints(f"gs://{name}/ckpt", now=NOW, storage_client=client)
    assert status.error is not None
    assert f"bucket '{name}' does not exist" in status.error
    assert status.latest_committed_step is None
    assert status.directory == f"gs://{name}/ckpt" and status.observed_at == NOW


def test_default_client_honours_storage_emulator_host(
    fake_gcs: FakeGcsServer, bucket: storage.Bucket, monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_orbax_step(bucket, "ckpt", 42, committed=True)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.endpoint)
    # No Google credentials exist on this machine: the emulator path must not look for any.
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    status = scan_checkpoints(f"gs://{bucket.name}/ckpt", now=NOW)
    assert status.error is None and status.latest_committed_step == 42


def test_unreachable_server_is_an_error_within_the_timeout() -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client = storage.Client(
        project="etj-test", credentials=AnonymousCredentials(),
        client_options={"api_endpoint": closed},
    )
    started = time.monotonic()
    status = scan_checkpoints("gs://etj-any/ckpt", now=NOW, storage_client=client, timeout_s=2)
    elapsed = time.monotonic() - started
    assert status.error is not None and status.error.startswith("cannot list gs://etj-any/ckpt")
    assert elapsed < 15, f"scan took {elapsed:.1f}s with timeout_s=2"


def run_orbax(
    server: FakeGcsServer, directory: str, action: str,
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **server.env, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-c", ORBAX_SCRIPT, directory, action, str(PREEMPTED)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )


def test_real_orbax_save_to_gcs_and_a_preempted_commit(
    fake_gcs: FakeGcsServer, bucket: storage.Bucket, client: storage.Client,
) -> None:
    directory = f"gs://{bucket.name}/run1/checkpoints"
    saved = run_orbax(fake_gcs, directory, "save")
    assert saved.returncode == PREEMPTED, (
        f"Orbax save to {directory} exited {saved.returncode}, expected {PREEMPTED}:\n"
        f"{saved.stdout}\n{saved.stderr[-4000:]}"
    )
    assert saved.stdout.splitlines()[0] == "[1, 2]"

    names = {blob.name for blob in client.list_blobs(bucket, prefix="run1/checkpoints/")}
    assert "run1/checkpoints/2/commit_success.txt" in names
    # Step 3's data (and its item's own marker) is there; the step's marker is not.
    assert "run1/checkpoints/3/default/commit_success.txt" in names
    assert "run1/checkpoints/3/commit_success.txt" not in names

    summary = scan_checkpoints_detailed(directory, now=NOW, storage_client=client)
    assert summary.status.error is None
    assert summary.committed_steps == [1, 2]
    assert summary.status.latest_committed_step == 2
    assert summary.status.incomplete_steps == [3]
    assert summary.ignored_entries == []

    # Orbax, reading the same bucket, agrees on what is committed.
    listed = run_orbax(fake_gcs, directory, "steps")
    assert listed.returncode == 0, listed.stderr[-4000:]
    assert listed.stdout.strip().splitlines()[-1] == "[1, 2]"


def test_start_answers_and_stop_frees_the_port(tmp_path: Path) -> None:
    # A second server of its own (the module's fixture stays up for the other tests).
    with start_fake_gcs(log_dir=tmp_path) as server:
        assert server.running()
        with urllib.request.urlopen(f"{server.endpoint}/storage/v1/b", timeout=5) as response:
            assert response.status == 200
        client_for(server).create_bucket("etj-lifecycle")
        assert [b.name for b in client_for(server).list_buckets()] == ["etj-lifecycle"]
    assert not server.running()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{server.endpoint}/storage/v1/b", timeout=5)
