"""Hostile checkpoint directories: foreign files, step-like names that are not steps, odd
Unicode digits, huge step numbers, files where directories go, unreadable or missing roots.
`summarize` and `scan_checkpoints` never raise; foreign names never become steps."""
from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastic_operator.checkpoints.listing import (
    COMMIT_MARKER,
    RootEntry,
    scan_checkpoints,
    scan_checkpoints_detailed,
    summarize,
)

ARABIC_100 = "\u0661\u0660\u0660"  # Arabic-Indic digits: int() parses them
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)

names = st.one_of(
    st.text(min_size=1, max_size=30),
    st.from_regex(r"[0-9]{1,25}", fullmatch=True),
    st.from_regex(r"[0-9]{1,6}\.orbax-checkpoint-tmp(-[0-9]{1,10})?", fullmatch=True),
    st.sampled_from(["\u0663", "\uff11\uff12", "00", "-1", "1e3", "10.5", " 10", "10 ",
                     "prefix_100",
                     "100.orbax-checkpoint-tmp-x", ".orbax-checkpoint-tmp", "commit_success.txt",
                     "9" * 400, "..", "."]),
)
entries = st.lists(st.builds(RootEntry, name=names, is_dir=st.booleans(),
                             has_commit_marker=st.booleans()), max_size=30)
directories = st.sampled_from(["gs://bucket/ckpt", "/abs/ckpt", "relative", "", "gs://"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(listing=entries, directory=directories)
def test_hostile_listing_never_raises_and_steps_are_real(listing: list[RootEntry],
                                                        directory: str) -> None:
    status = summarize(listing, directory, NOW)
    step_dirs = {int(e.name) for e in listing if e.is_dir and e.name.isascii()
                 and e.name.isdigit()}
    if status.latest_committed_step is not None:
        assert status.latest_committed_step in step_dirs
    for step in status.incomplete_steps:
        assert step >= 0
    # A file named like a step is never a committed step.
    files_only = {int(e.name) for e in listing if not e.is_dir and e.name.isascii()
                  and e.name.isdigit()} - step_dirs
    assert status.latest_committed_step not in files_only


# Every name is legal on Linux (no '/' or NUL); anything else is written as-is.
safe_names = st.one_of(
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
            min_size=1, max_size=40).filter(lambda n: n not in (".", "..")
                                             and len(n.encode()) <= 200),
    st.from_regex(r"[0-9]{1,25}", fullmatch=True),
    st.from_regex(r"[0-9]{1,4}\.orbax-checkpoint-tmp", fullmatch=True),
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layout=st.lists(st.tuples(safe_names, st.sampled_from(["file", "dir", "step", "link"])),
                       max_size=12, unique_by=lambda t: t[0]))
def test_hostile_directory_on_disk_never_raises(tmp_path_factory: pytest.TempPathFactory,
                                               layout: list[tuple[str, str]]) -> None:
    root = tmp_path_factory.mktemp("ckpt")
    for name, kind in layout:
        path = root / name
        if kind == "file":
            path.write_bytes(b"\xff\xfe not a checkpoint")
        elif kind == "dir":
            path.mkdir()
            (path / "foreign.bin").write_bytes(b"x")
        elif kind == "step":
            path.mkdir()
            (path / COMMIT_MARKER).write_text("ok")
        else:
            path.symlink_to(root / "does-not-exist")
    summary = scan_checkpoints_detailed(str(root), now=NOW)
    assert summary.status.error is None, summary.status.error
    committed = {int(n) for n, k in layout if k == "step" and n.isascii()
                 and n.isdigit() and str(int(n)) == n}
    assert set(summary.committed_steps) == committed


def test_hostile_roots_become_errors_not_exceptions(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir()
    unreadable.chmod(0)
    cases = {
        str(tmp_path / "missing"): "does not exist",
        str(a_file): "not a directory",
        "relative/path": "neither a gs:// URL nor an absolute path",
        "s3://bucket/x": "not supported",
        "gs://": "",
        "gs://UPPER_case!/x": "",
    }
    if os.geteuid() != 0:  # root reads anything
        cases[str(unreadable)] = "permission denied"
    try:
        for directory, words in cases.items():
            status = scan_checkpoints(directory, now=NOW)
            assert status.error, directory
            assert words in status.error, (directory, status.error)
            assert status.latest_committed_step is None and status.directory == directory
    finally:
        unreadable.chmod(0o700)


def test_hostile_foreign_files_beside_real_steps(tmp_path: Path) -> None:
    for step in (10, 20):
        (tmp_path / str(step)).mkdir()
        (tmp_path / str(step) / COMMIT_MARKER).write_text("ok")
    (tmp_path / "30.orbax-checkpoint-tmp").mkdir()
    (tmp_path / "40").write_text("a file named like a step")
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / ARABIC_100).mkdir()  # not a step, though int() would parse it
    summary = scan_checkpoints_detailed(str(tmp_path), now=NOW)
    assert summary.committed_steps == [10, 20]
    assert summary.status.latest_committed_step == 20
    assert summary.status.incomplete_steps == [30]
    assert {"40", "notes.txt", ARABIC_100} <= set(summary.ignored_entries)
