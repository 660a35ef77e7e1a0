"""End-to-end runs of `etj train` on simulated slices (CPU), with injected faults."""
from __future__ import annotations

from tests.support.trainer_run import RunTrainer, TrainerRun


def _assert_ok(run: TrainerRun) -> None:
    assert run.returncode == 0, run.log[-4000:]
    assert run.summary["status"] == "Succeeded"
    assert run.summary["final_step"] == 40


def test_undisturbed_run_learns_and_records_every_step(undisturbed: TrainerRun) -> None:
    s = undisturbed.summary
    assert [step for step, _ in s["step_times"]] == list(range(1, 41))
    assert s["elastic_events"] == []
    losses = [loss for _, loss in s["losses"]]
    assert losses[-1] < losses[0] - 0.5, losses
    assert len(s["params_digest"]) == 64


def test_pause_resume_is_bitwise_equal_to_undisturbed(run_trainer: RunTrainer,
                                                       undisturbed: TrainerRun) -> None:
    run = run_trainer("--fail-at", "13:1", "--fail-at", "27:0", "--snapshot-period", "4")
    _assert_ok(run)
    events = run.events()
    assert [e["failed_step"] for e in events] == [12, 26]
    assert [e["slices_down"] for e in events] == [[1], [0]]
    for e in events:
        assert e["restore_source"] in ("snapshot", "checkpoint")
        assert e["steps_lost"] == e["failed_step"] - e["restored_from_step"] >= 0
        assert 0 <= e["detect_seconds"] < 5
        assert e["resume_seconds"] >= e["restore_seconds"] >= 0
    assert run.summary["params_digest"] == undisturbed.summary["params_digest"]
    assert run.summary["process_id"] != undisturbed.summary["process_id"]
    assert "elastic event 1: slice 1 down at step 12 (DATA_LOSS, detected after" in run.log
    # Every step completed once after the last event; steps redone after a restore are
    # recorded again, so the timeline shows the rewind.
    steps = [step for step, _ in run.summary["step_times"]]
    assert steps[-1] == 40 and len(steps) == 40 + sum(e["steps_lost"] for e in events)


def test_a_slice_lost_during_a_checkpoint_write_is_an_elastic_event(
        run_trainer: RunTrainer, undisturbed: TrainerRun) -> None:
    # Slice 1 goes down while the checkpoint of step 20 is being written (no snapshots:
    # the recovery is from a checkpoint).
    run = run_trainer("--fail-at", "20:1:checkpoint", "--snapshot-period", "0")
    _assert_ok(run)
    # Not a write failure to count and carry on from: the lost slice is an elastic event.
    assert run.summary["checkpoint_write_failures"] == 0
    [event] = run.events()
    assert event["slices_down"] == [1]
    # The checkpoint of step 20 never finalized, so recovery used the one of step 10.
    assert event["restored_from_step"] == 10
    assert event["restore_source"] == "checkpoint"
    assert run.summary["params_digest"] == undisturbed.summary["params_digest"]
    # Only finalized steps remain; step 20 was written again after the rewind.
    names = sorted(p.name for p in run.checkpoint_dir.iterdir() if p.name[0].isdigit())
    assert names == ["20", "30", "40"], names


def test_a_slice_lost_during_the_last_checkpoint_write_is_recovered_and_saved_again(
        run_trainer: RunTrainer, undisturbed: TrainerRun) -> None:
    # The last save is written after the last step: a slice lost then is still an elastic
    # event, and the run does not end Succeeded without its last checkpoint.
    run = run_trainer("--fail-at", "40:1:checkpoint")
    _assert_ok(run)
    [event] = run.events()
    assert event["slices_down"] == [1]
    assert run.summary["params_digest"] == undisturbed.summary["params_digest"]
    # Only finalized steps (a cut save leaves a "40.orbax-checkpoint-tmp-..." behind).
    names = sorted(p.name for p in run.checkpoint_dir.iterdir() if p.name[0].isdigit())
    assert names[-1] == "40", names


def test_failure_during_restore_and_two_failures_in_a_row(run_trainer: RunTrainer,
                                                          undisturbed: TrainerRun) -> None:
    run = run_trainer("--fail-at", "15:1", "--fail-at", "15:0:restore",
                      "--fail-at", "18:1", "--fail-at", "19:0")
    _assert_ok(run)
    events = run.events()
    assert len(events) == 4, events
    # Event 2 hit during the restore of event 1: it never resumed on its own.
    assert events[0]["resume_seconds"] is None
    assert run.summary["params_digest"] == undisturbed.summary["params_digest"]


def test_one_slice_lost_restores_from_the_surviving_snapshot_replica(
        run_trainer: RunTrainer, undisturbed: TrainerRun) -> None:
    run = run_trainer("--snapshot-period", "5", "--fail-at", "23:1")
    _assert_ok(run)
    [event] = run.events()
    # The step-20 snapshot's replica on slice 0 survived slice 1: at most a period lost.
    assert (event["restore_source"], event["restored_from_step"]) == ("snapshot", 20)
    assert event["steps_lost"] == 2 <= 5
    assert run.summary["params_digest"] == undisturbed.summary["params_digest"]


def test_a_snapshot_every_step_loses_only_the_step_in_flight(
        run_trainer: RunTrainer, undisturbed: TrainerRun) -> None:
    # Slice 1 goes while step 23 runs: step 22's copy, made as step 23 started, is
    # restored from slice 0's replica, and only step 23 is done again.
    run = run_trainer("--snapshot-period", "1", "--fail-at", "23:1")
    _assert_ok(run)
    [event] = run.events()
    assert (event["failed_step"], event["restore_source"], event["restored_from_step"]) == (
        22, "snapshot", 22)
    assert event["steps_lost"] == 0
    # Every step finished once: nothing done before the loss was done again.
    assert [step for step, _ in run.summary["step_times"]] == list(range(1, 41))
    assert run.summary["params_digest"] == undisturbed.summary["params_digest"]


def test_every_slice_lost_restores_the_committed_checkpoint(run_trainer: RunTrainer,
                                                            undisturbed: TrainerRun) -> None:
    # Both slices at once: every replica of the step-20 snapshot is gone with them. (The
    # checkpoint of step 20 is written synchronously here: an async write still running
    # when every slice goes down is lost too, and then step 10's is restored.)
    run = run_trainer("--snapshot-period", "5", "--fail-at", "23:0", "--fail-at", "23:1",
                      "--no-async-checkpoint")
    _assert_ok(run)
    [event] = run.events()
    assert event["slices_down"] == [0, 1]
    assert (event["restore_source"], event["restored_from_step"]) == ("checkpoint", 20)
    assert "no replica of the snapshot survived" in run.log
    assert run.summary["params_digest"] == undisturbed.summary["params_digest"]


def test_snapshots_lose_fewer_steps_than_checkpoints(run_trainer: RunTrainer) -> None:
    # Synchronous checkpoints: the one of step 10 is committed before the fault.
    without = run_trainer("--fail-at", "19:1", "--no-async-checkpoint",
                          "--snapshot-period", "0")
    with_snapshots = run_trainer("--fail-at", "19:1", "--snapshot-period", "2",
                                 "--no-async-checkpoint")
    _assert_ok(without)
    _assert_ok(with_snapshots)
    [a] = without.events()
    [b] = with_snapshots.events()
    assert (a["restore_source"], a["steps_lost"]) == ("checkpoint", 8)
    assert (b["restore_source"], b["steps_lost"]) == ("snapshot", 0)


def test_replica_resize_continues_on_fewer_slices_and_scales_up(run_trainer: RunTrainer
                                                                ) -> None:
    # Slice 1 is down from step 30 until the loop reaches step 80: steps 30-80 run on one
    # slice (2 micro-batches each), then the loop scales back up to two.
    run = run_trainer("--min-slices", "1", "--fail-at", "30-80:1", "--snapshot-period", "2",
                      steps=150, checkpoint_period=50)
    assert run.returncode == 0, run.log[-4000:]
    [down] = run.events()
    assert down["active_slices_after"] == 1
    assert (down["failed_step"], down["restored_from_step"], down["restore_source"]) == (
        29, 28, "snapshot")
    [up] = run.events("scale_up")
    assert (up["failed_step"], up["steps_lost"], up["active_slices_after"]) == (80, 0, 2)
    losses = dict((step, loss) for step, loss in run.summary["losses"])
    assert losses[150] < losses[80] < losses[29] < losses[1]
    assert run.summary["final_step"] == 150


def test_a_new_process_resumes_from_the_last_checkpoint(run_trainer: RunTrainer, tmp_path,
                                                        undisturbed: TrainerRun) -> None:
    ckpt = str(tmp_path / "ckpt")
    # No retries: the first slice loss ends this process (after the checkpoint of step 20).
    first = run_trainer("--checkpoint-dir", ckpt, "--fail-at", "25:1", "--max-retries", "0",
                        "--no-async-checkpoint")
    assert first.returncode == 2 and first.summary["final_step"] == 24
    second = run_trainer("--checkpoint-dir", ckpt)
    _assert_ok(second)
    assert second.summary["step_times"][0][0] == 21  # resumed after step 20
    assert second.summary["params_digest"] == undisturbed.summary["params_digest"]
    # The last step was checkpointed: a third start finds the run done.
    third = run_trainer("--checkpoint-dir", ckpt)
    _assert_ok(third)
    assert third.summary["step_times"] == []
    assert third.summary["params_digest"] == undisturbed.summary["params_digest"]


def test_exhausted_retries_fail_clearly(run_trainer: RunTrainer) -> None:
    run = run_trainer("--fail-at", "5:1", "--fail-at", "8:0", "--max-retries", "1")
    assert run.returncode == 2
    assert run.summary["status"] == "Failed"
    assert run.summary["reason"] == "ElasticRetriesExhausted"
    assert "ElasticRetriesExhausted: 2 elastic events, --max-retries is 1" in run.log


def test_timeout_waiting_for_slices_fails_clearly(run_trainer: RunTrainer) -> None:
    run = run_trainer("--fail-at", "5:1", "--fault-duration", "30", "--elastic-timeout", "0.5")
    assert run.returncode == 3
    assert run.summary["reason"] == "ElasticTimeout"
    assert "ElasticTimeout: waited 0.5s for 2 healthy slice(s)" in run.log


def test_unreachable_api_server_does_not_stop_training(run_trainer: RunTrainer, tmp_path
                                                       ) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "users: [{name: x, user: {token: t}}]\n"
    )
    run = run_trainer("--job", "default/demo", "--report-interval", "0.1", "--fail-at", "9:1",
                      env={"KUBECONFIG": str(kubeconfig)})
    _assert_ok(run)
    assert "status report to default/demo failed" in run.log


def test_prepared_text_data_trains_deterministically(run_trainer: RunTrainer, tmp_path
                                                     ) -> None:
    import subprocess
    import sys

    text = tmp_path / "corpus.txt"
    text.write_text("Elastic training survives a lost slice in the same process. " * 400)
    out = tmp_path / "bytes"
    prep = subprocess.run(
        [sys.executable, "-m", "elastic_api.etj_cli", "train", "--prepare-data", str(text),
         "--out", str(out)], capture_output=True, text=True, timeout=120, check=False)
    assert prep.returncode == 0, prep.stderr
    assert len(list(out.glob("*.array_record"))) == 2
    calm = run_trainer("--data", str(out), steps=20)
    hit = run_trainer("--data", str(out), "--fail-at", "12:0", "--snapshot-period", "5",
                      steps=20)
    assert calm.returncode == 0 and hit.returncode == 0, hit.log[-3000:]
    assert calm.summary["params_digest"] == hit.summary["params_digest"]
    losses = [loss for _, loss in calm.summary["losses"]]
    assert losses[-1] < losses[0]


def test_bad_input_is_a_clear_error(run_trainer: RunTrainer) -> None:
    too_long = run_trainer("--snapshot-period", "50")
    assert too_long.returncode == 2 and too_long.summary == {}
    assert ("--snapshot-period 50 is larger than the run (--steps 40): no snapshot would "
            "ever be taken") in too_long.log
    no_slice = run_trainer("--fail-at", "12:2")
    assert no_slice.returncode == 2
    assert "--fail-at '12:2': slice 2 does not exist (--simulate-slices 2 has slices 0..1)" \
        in no_slice.log


def test_a_checkpoint_directory_that_vanishes_mid_run_stops_training(
        run_trainer: RunTrainer, tmp_path) -> None:
    import shutil
    import threading

    ckpt = tmp_path / "ckpt"
    stop = threading.Event()

    def remove_after_the_first_commit() -> None:
        while not stop.is_set() and not (ckpt / "10").is_dir():
            stop.wait(0.01)
        while not stop.is_set() and ckpt.exists():  # orbax may be writing in it meanwhile
            shutil.rmtree(ckpt, ignore_errors=True)

    remover = threading.Thread(target=remove_after_the_first_commit, daemon=True)
    remover.start()
    try:  # paced: 400 steps take 20 s at least, the deletion comes within a few
        run = run_trainer("--checkpoint-dir", str(ckpt), "--min-step-seconds", "0.05",
                          steps=400)
    finally:
        stop.set()
    assert run.returncode == 1, run.log[-3000:]
    assert run.summary["reason"] == "TrainingError"
    assert f"--checkpoint-dir {ckpt} disappeared during the run" in run.summary["message"]


def test_pathways_backend_without_tpus_fails_clearly(run_trainer: RunTrainer) -> None:
    run = run_trainer("--backend", "pathways", env={"JAX_PLATFORMS": "cpu"})
    assert run.returncode == 1
    assert run.summary["reason"] == "TrainingError"
    assert "On CPU use --backend simulated" in run.summary["message"]
