"""Orbax checkpoints on gs:// (a real GCS API: fake-gcs-server), through an elastic event.

Needs the fake-gcs-server binary from hack/build-control-plane.sh; without it this fails
(never skips) with the build command in the message.
"""
from __future__ import annotations

import uuid

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from elastic_devtools.localcluster.gcs import FakeGcsServer
from tests.support.trainer_run import RunTrainer, TrainerRun


def test_checkpoints_on_gcs_survive_a_slice_lost_during_a_write(fake_gcs: FakeGcsServer,
                                                   run_trainer: RunTrainer,
                                                   undisturbed: TrainerRun) -> None:
    client = storage.Client(project="etj-test", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": fake_gcs.endpoint})
    bucket = client.create_bucket(f"etj-trainer-{uuid.uuid4().hex[:10]}")
    run = run_trainer("--checkpoint-dir", f"gs://{bucket.name}/run",
                      "--fail-at", "20:1:checkpoint", "--snapshot-period", "0",
                      env=fake_gcs.env)
    assert run.returncode == 0, run.log[-4000:]
    [event] = run.events()
    # The slice lost during the write of step 20 is an elastic event (not a write failure
    # to count): the save of step 30 never starts before the failed one is settled, so
    # recovery always finds step 10 as the newest committed checkpoint.
    assert event["slices_down"] == [1]
    assert (event["restore_source"], event["restored_from_step"]) == ("checkpoint", 10)
    assert run.summary["checkpoint_write_failures"] == 0
    assert run.summary["params_digest"] == undisturbed.summary["params_digest"]
    names = {blob.name for blob in client.list_blobs(bucket.name, prefix="run/")}
    committed = sorted(int(n.split("/")[1]) for n in names
                       if n.endswith("/commit_success.txt") and n.count("/") == 2)
    assert committed == [20, 30, 40]
    # The failed write of step 20 left nothing behind: every object of step 20 belongs to
    # the second, committed write (no leftovers from the first).
    assert not any(n.startswith("run/20.") for n in names)
