"""summarize(): which Orbax steps are committed, from the names under a checkpoint root;
and the local-path edge of scan_checkpoints on hand-made layouts."""
from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_api.models import CheckpointStatus, RestoreReport, TrainingReport
from elastic_operator.checkpoints.listing import (
    COMMIT_MARKER,
    MAX_IGNORED_REPORTED,
    CheckpointScanError,
    RootEntry,
    parse_gcs_url,
    scan_checkpoints,
    scan_checkpoints_detailed,
    summarize,
    summarize_entries,
)
from elastic_operator.core.checkpoint_status import checkpoint_status, keep_last_known

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GCS = "gs://bucket/run1/checkpoints"
LOCAL = "/ckpt/run1"


def step(name: str | int, marker: bool = True) -> RootEntry:
    return RootEntry(name=str(name), is_dir=True, has_commit_marker=marker)


def file(name: str) -> RootEntry:
    return RootEntry(name=name, is_dir=False)


# --- summarize ------------------------------------------------------------------------


def test_committed_steps_latest_is_the_highest_number_not_the_last_listed() -> None:
    # Listing order is lexicographic on GCS: "1000" < "200" < "300".
    status = summarize([step(1000), step(200), step(300)], GCS, NOW)
    assert status.latest_committed_step == 1000
    assert status.incomplete_steps == []
    assert status.directory == GCS
    assert status.observed_at == NOW
    assert status.error is None


def test_gcs_newest_step_without_marker_is_incomplete_not_latest() -> None:
    status = summarize([step(100), step(200), step(300, marker=False)], GCS, NOW)
    assert status.latest_committed_step == 200
    assert status.incomplete_steps == [300]


def test_an_older_step_without_marker_is_abandoned_and_does_not_hide_newer() -> None:
    status = summarize([step(100), step(200, marker=False), step(300)], GCS, NOW)
    assert status.latest_committed_step == 300
    # Saves only go forward: nothing will finish step 200 now that 300 is committed.
    assert status.incomplete_steps == []
    assert status.abandoned_steps == [200]


def test_gcs_only_incomplete_steps_means_no_committed_step() -> None:
    status = summarize([step(5, marker=False), step(10, marker=False)], GCS, NOW)
    assert status.latest_committed_step is None
    assert status.incomplete_steps == [5, 10]


def test_a_local_step_dir_is_committed_by_its_marker_only() -> None:
    # Orbax 0.12.8 writes the marker before the rename: a renamed step always has it. A
    # step directory without it (empty, or an older Orbax's "legacy" step, which Orbax
    # itself reads only with allow_legacy_atomic_rename) is nothing the trainer restores.
    status = summarize([step(100, marker=False), step(200, marker=True)], LOCAL, NOW)
    assert status.latest_committed_step == 200
    assert status.abandoned_steps == [100]
    status = summarize([step(100), step(200, marker=False)], LOCAL, NOW)
    assert (status.latest_committed_step, status.incomplete_steps) == (100, [200])


@pytest.mark.parametrize(
    "tmp_name",
    [
        "300.orbax-checkpoint-tmp",  # Orbax 0.12
        "300.orbax-checkpoint-tmp-1732873200123",  # older Orbax: with a timestamp
        "300.partial_save.orbax-checkpoint-tmp",  # partial save
    ],
)
def test_tmp_dir_is_an_incomplete_step(tmp_name: str) -> None:
    status = summarize([step(100), step(200), step(tmp_name)], LOCAL, NOW)
    assert status.latest_committed_step == 200
    assert status.incomplete_steps == [300]


def test_tmp_dir_of_a_committed_step_is_a_leftover_not_an_incomplete_step() -> None:
    status = summarize([step(200), step("200.orbax-checkpoint-tmp-17")], LOCAL, NOW)
    assert status.latest_committed_step == 200
    assert status.incomplete_steps == []
    assert status.abandoned_steps == [200]  # the directory stays for good: say so


def test_a_tmp_dir_older_than_the_newest_committed_step_is_abandoned() -> None:
    """A save killed before the rename leaves its tmp directory; Orbax removes it only
    when the same step is saved again, so once a later step commits it stays for good."""
    status = summarize([step(100), step("150.orbax-checkpoint-tmp"), step(200),
                        step("300.orbax-checkpoint-tmp")], LOCAL, NOW)
    assert status.latest_committed_step == 200
    assert status.incomplete_steps == [300]  # may still be in flight
    assert status.abandoned_steps == [150]


def test_foreign_files_and_names_are_ignored_and_reported() -> None:
    listing = [
        step(100),
        file("README.md"),
        file("200"),  # a file, not a step directory
        step("metadata"),
        step("prefix_300"),  # step_prefix naming is not what the trainer writes
        step("12abc"),
        step("-5"),
        step("1e3"),
        step("\u0661\u0662"),  # Arabic-Indic digits: int() would accept them
        step("400\n"),
        file("500.orbax-checkpoint-tmp"),  # a file, not a tmp directory
    ]
    summary = summarize_entries(listing, GCS, NOW)
    assert summary.status.latest_committed_step == 100
    assert summary.status.incomplete_steps == []
    assert summary.committed_steps == [100]
    assert set(summary.ignored_entries) == {e.name for e in listing[1:]}


def test_ignored_names_are_capped() -> None:
    listing = [file(f"junk-{i:03d}") for i in range(MAX_IGNORED_REPORTED + 5)]
    summary = summarize_entries(listing, GCS, NOW)
    assert summary.ignored_entries == [f"junk-{i:03d}" for i in range(MAX_IGNORED_REPORTED)]


def test_empty_root() -> None:
    summary = summarize_entries([], GCS, NOW)
    assert summary.status == CheckpointStatus(directory=GCS, observed_at=NOW)
    assert summary.status.latest_committed_step is None
    assert summary.committed_steps == []
    assert summary.ignored_entries == []


def test_zero_padded_names_are_no_steps() -> None:
    # Orbax's default name format reads `0|[1-9]\d*`: its manager would open `100/` to
    # restore step 100, never `00000100/`. Step 0 is a step (MaxText saves it at start).
    summary = summarize_entries([step("00000100"), step("007"), step("0"),
                                 step("00000200", marker=False)], GCS, NOW)
    assert summary.committed_steps == [0]
    assert summary.status.incomplete_steps == []
    assert summary.ignored_entries == ["00000100", "00000200", "007"]


def test_wire_form_is_camel_case() -> None:
    wire = summarize([step(7), step(9, marker=False)], GCS, NOW).to_wire()
    assert wire == {
        "directory": GCS,
        "latestCommittedStep": 7,
        "incompleteSteps": [9],
        "abandonedSteps": [],
        "observedAt": "2026-11-29T12:00:00Z",
    }


def test_maxtexts_run_directory_instead_of_its_checkpoint_root_is_named() -> None:
    status = summarize([step("checkpoints", marker=False), file("config.yml")], GCS, NOW)
    assert status.latest_committed_step is None
    assert status.error is not None and f"did you mean {GCS}/checkpoints?" in status.error
    # Beside a step it is just a foreign name.
    assert summarize([step("checkpoints"), step(5)], GCS, NOW).error is None


names = st.one_of(
    st.integers(min_value=0, max_value=10**9).map(str),
    st.integers(min_value=0, max_value=10**9).map(lambda n: f"{n}.orbax-checkpoint-tmp"),
    st.text(min_size=1, max_size=20),
)
entries = st.builds(RootEntry, name=names, is_dir=st.booleans(), has_commit_marker=st.booleans())


@given(st.lists(entries, max_size=30), st.sampled_from([GCS, LOCAL]))
def test_summary_invariants(listing: list[RootEntry], directory: str) -> None:
    summary = summarize_entries(listing, directory, NOW)
    status = summary.status
    committed = {
        int(e.name) for e in listing
        if e.is_dir and e.name.isascii() and e.name.isdigit() and str(int(e.name)) == e.name
        and e.has_commit_marker
    }
    latest = max(committed) if committed else None
    assert status.latest_committed_step == latest
    assert set(summary.committed_steps) == committed
    assert not set(status.incomplete_steps) & committed
    assert status.incomplete_steps == sorted(set(status.incomplete_steps))
    assert status.abandoned_steps == sorted(set(status.abandoned_steps))
    assert all(latest is None or s > latest for s in status.incomplete_steps)
    assert all(latest is not None and s <= latest for s in status.abandoned_steps)
    assert status.error is None
    assert len(summary.ignored_entries) <= MAX_IGNORED_REPORTED


# --- URLs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("gs://my-bucket", "my-bucket", ""),
        ("gs://my-bucket/", "my-bucket", ""),
        ("gs://my-bucket/a/b", "my-bucket", "a/b/"),
        ("gs://my-bucket/a/b/", "my-bucket", "a/b/"),
        ("gs://my.bucket_1/x", "my.bucket_1", "x/"),
    ],
)
def test_parse_gcs_url(url: str, bucket: str, prefix: str) -> None:
    assert parse_gcs_url(url) == (bucket, prefix)


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("gs://", "no bucket name"),
        ("gs:///path", "no bucket name"),
        ("gs://Bad_Bucket/x", "not a valid GCS bucket name"),
        ("gs://ab/x", "not a valid GCS bucket name"),
    ],
)
def test_invalid_gcs_urls_are_errors_without_touching_the_network(url: str, fragment: str) -> None:
    with pytest.raises(CheckpointScanError, match=fragment):
        parse_gcs_url(url)
    # storage_client=object(): any call on it would raise, so none is made.
    status = scan_checkpoints(url, now=NOW, storage_client=object())
    assert status.error is not None and fragment in status.error
    assert status.directory == url and status.observed_at == NOW
    assert status.latest_committed_step is None


@pytest.mark.parametrize(
    ("directory", "fragment"),
    [
        ("s3://bucket/ckpt", "scheme 's3://' is not supported"),
        ("relative/ckpt", "neither a gs:// URL nor an absolute path"),
    ],
)
def test_unsupported_locations_are_errors(directory: str, fragment: str) -> None:
    status = scan_checkpoints(directory, now=NOW)
    assert status.error is not None and fragment in status.error


# --- local paths ----------------------------------------------------------------------


def make_step(root: Path, name: str, marker: bool) -> None:
    (root / name / "default").mkdir(parents=True)
    (root / name / "default" / "manifest.ocdbt").write_bytes(b"data")
    if marker:
        (root / name / COMMIT_MARKER).write_text("Checkpoint commit was successful")


def test_scan_local_layout(tmp_path: Path) -> None:
    make_step(tmp_path, "100", marker=True)
    make_step(tmp_path, "200", marker=False)  # no marker: not loadable, whoever wrote it
    make_step(tmp_path, "300.orbax-checkpoint-tmp", marker=False)
    make_step(tmp_path, "50.orbax-checkpoint-tmp", marker=True)  # killed before the rename
    (tmp_path / "notes.txt").write_text("foreign")
    (tmp_path / "400").write_text("a file named like a step")
    (tmp_path / "500").symlink_to(tmp_path / "100")  # a link is never a step
    summary = scan_checkpoints_detailed(str(tmp_path), now=NOW)
    assert summary.status.error is None
    assert summary.status.latest_committed_step == 100
    assert summary.status.incomplete_steps == [200, 300]
    assert summary.status.abandoned_steps == [50]
    assert summary.committed_steps == [100]
    assert summary.ignored_entries == ["400", "500", "notes.txt"]


def test_scan_local_empty_dir(tmp_path: Path) -> None:
    status = scan_checkpoints(str(tmp_path), now=NOW)
    assert status == CheckpointStatus(directory=str(tmp_path), observed_at=NOW)


def test_scan_local_missing_dir_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    status = scan_checkpoints(str(missing), now=NOW)
    assert status.error is not None
    assert f"{missing} does not exist" in status.error
    assert status.latest_committed_step is None


def test_scan_local_file_instead_of_dir_is_an_error(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    target.write_text("not a directory")
    status = scan_checkpoints(str(target), now=NOW)
    assert status.error == f"{target} is not a directory"


# --- keep_last_known ------------------------------------------------------------------

LATER = datetime(2026, 11, 29, 12, 5, tzinfo=UTC)


def test_failed_scan_keeps_the_last_known_steps_of_the_same_directory() -> None:
    previous = summarize([step(100), step(200, marker=False)], GCS, NOW)
    failed = CheckpointStatus(directory=GCS, observed_at=LATER, error="cannot list: timeout")
    merged = keep_last_known(previous, failed)
    assert merged.latest_committed_step == 100
    assert merged.incomplete_steps == [200]
    assert merged.error == "cannot list: timeout"
    assert merged.observed_at == LATER


def test_good_scan_or_new_directory_replaces_everything() -> None:
    previous = summarize([step(100)], GCS, NOW)
    good = summarize([], GCS, LATER)  # checkpoints deleted: the step may go back to none
    assert keep_last_known(previous, good) == good
    moved = CheckpointStatus(directory="gs://bucket/other", observed_at=LATER, error="x")
    assert keep_last_known(previous, moved) == moved
    assert keep_last_known(None, moved) == moved


# --- the newest committed step's size -------------------------------------------------------


def test_the_newest_committed_steps_size_comes_from_its_listing(tmp_path: Path) -> None:
    """Lengths as listed (a sparse file counts whole), nested files counted, links and
    older or uncommitted steps not."""
    for step_name, size in (("100", 5), ("200", 2**40), ("300.orbax-checkpoint-tmp", 7)):
        items = tmp_path / step_name / "items" / "ocdbt"
        items.mkdir(parents=True)
        with open(items / "d", "wb") as f:
            f.truncate(size)
    (tmp_path / "100" / COMMIT_MARKER).write_text("ok")
    (tmp_path / "200" / COMMIT_MARKER).write_text("ok")
    (tmp_path / "200" / "link").symlink_to(tmp_path / "100" / "items")
    status = scan_checkpoints(str(tmp_path), now=NOW)
    assert status.latest_committed_step == 200
    assert status.latest_committed_bytes == 2**40 + 2
    assert status.latest_committed_files == 2


def test_no_committed_step_no_size(tmp_path: Path) -> None:
    (tmp_path / "300.orbax-checkpoint-tmp").mkdir()
    status = scan_checkpoints(str(tmp_path), now=NOW)
    assert status.latest_committed_bytes is None and status.latest_committed_files is None


def test_a_failed_scan_keeps_the_last_size_with_the_last_step() -> None:
    previous = CheckpointStatus(directory=LOCAL, latest_committed_step=200,
                                latest_committed_bytes=10, latest_committed_files=2,
                                observed_at=NOW)
    failed = CheckpointStatus(directory=LOCAL, observed_at=NOW, error="gone")
    merged = keep_last_known(previous, failed)
    assert (merged.latest_committed_bytes, merged.latest_committed_files) == (10, 2)


def restore(seconds: float, at_minute: int) -> RestoreReport:
    return RestoreReport(source="checkpoint", step=100, bytes=2**30, seconds=seconds,
                         gib_per_second=1 / seconds,
                         restored_at=datetime(2026, 11, 29, 12, at_minute, tzinfo=UTC))


def test_the_trainers_last_restore_is_carried_across_scans_and_processes() -> None:
    scanned = CheckpointStatus(directory=LOCAL, latest_committed_step=100, observed_at=NOW)
    first = restore(2.0, 1)
    report = TrainingReport(observed_at=NOW, state="Training", last_restore=first)
    status = checkpoint_status(None, scanned, report)
    assert status is not None and status.last_restore == first
    # A later scan finding the same steps changes nothing (no write).
    again = scanned.model_copy(update={"observed_at": NOW.replace(minute=5)})
    assert checkpoint_status(status, again, report) is status
    # A new process that has not restored yet reports none: the last one stays.
    fresh = TrainingReport(observed_at=NOW, state="Initializing")
    assert checkpoint_status(status, None, fresh) is status
    # A new restore replaces it. (One older by its process's clock never reaches here:
    # elastic_api.forward holds the newer one, tests/unit/test_api_forward.py.)
    newer = restore(1.0, 9)
    status = checkpoint_status(status, None, report.model_copy(update={"last_restore": newer}))
    assert status is not None and status.last_restore == newer


def test_a_restore_reported_before_any_scan_makes_a_checkpoint_status() -> None:
    report = TrainingReport(observed_at=NOW, state="Training", last_restore=restore(2.0, 1))
    status = checkpoint_status(None, None, report)
    assert status is not None and status.directory is None
    assert status.last_restore == report.last_restore
