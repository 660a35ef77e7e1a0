"""The bound on what the operator lists with its own identity (checkpoint_roots.py): a
checkpoint root only under a prefix allowed for the job's namespace, on path boundaries,
links resolved; any other is refused before any I/O, the error naming the field."""
from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from elastic_api.models import CheckpointStatus
from elastic_operator.checkpoint_roots import CheckpointRoots, covers
from elastic_operator.operator_cli import add_arguments
from elastic_operator.scanner import CheckpointScanner
from tests.builders import T0
from tests.support.executors import Synchronous

ROOTS = CheckpointRoots.parse(["team-a=gs://team-a,gs://shared/team-a", "*=/data/common",
                               "team-b=/data/team-b"])


@pytest.mark.parametrize(("namespace", "directory", "allowed"), [
    ("team-a", "gs://team-a", True),
    ("team-a", "gs://team-a/run1/checkpoints", True),
    ("team-a", "gs://team-ab/run1", False),  # another bucket, not a sub-path
    ("team-a", "gs://shared/team-a/ckpt", True),
    ("team-a", "gs://shared/team-abc/ckpt", False),
    ("team-a", "gs://shared/team-b/ckpt", False),
    ("team-a", "gs://shared", False),
    ("team-b", "gs://team-a/run1", False),  # the same root, another namespace
    ("team-b", "/data/team-b/ckpt", True),
    ("team-b", "/data/team-b/../team-c", False),  # `..` is resolved before matching
    ("team-a", "/data/team-b/ckpt", False),
    ("team-c", "/data/common/x", True),  # `*`: every namespace
    ("team-c", "/data/commonplace", False),
])
def test_a_root_is_allowed_only_under_a_prefix_of_its_namespace(
        namespace: str, directory: str, allowed: bool) -> None:
    assert (ROOTS.refusal(namespace, directory) is None) is allowed


def test_the_refusal_names_the_field_the_namespace_and_the_fix() -> None:
    message = ROOTS.refusal("team-b", "gs://team-a/run1")
    assert message == (
        "spec.checkpoint.directory: gs://team-a/run1 is not under a checkpoint root the "
        "operator may list for namespace team-b (allowed: /data/common, /data/team-b); not "
        "listed, so that no job learns of storage it was not given. An operator admin "
        "allows roots per namespace with `etj operator --checkpoint-roots` (chart value "
        "checkpointRoots)")


def test_by_default_local_paths_are_listed_and_no_bucket_is() -> None:
    default = CheckpointRoots.parse([])
    assert default.refusal("any", "/tmp/ckpt") is None
    assert "(allowed: /)" in (default.refusal("any", "gs://bucket/ckpt") or "")
    # Given rules replace the default; `*=` alone allows nothing.
    nothing = CheckpointRoots.parse(["*="])
    assert nothing.refusal("any", "/tmp/ckpt") is not None
    # What no rule can judge is left to the scan's own error.
    assert default.refusal("any", "relative/path") is None


@pytest.mark.parametrize("bad", ["gs://team-a", "=gs://x", "team-a=relative/path",
                                 "team-a=gs://Bad_Bucket", "team-a=s3://x"])
def test_a_bad_rule_is_refused_at_start_naming_it(bad: str) -> None:
    with pytest.raises(ValueError, match="--checkpoint-roots"):
        CheckpointRoots.parse([bad])


def test_the_flag_is_repeatable() -> None:
    import argparse
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--checkpoint-roots", "a=gs://bkt", "--checkpoint-roots",
                              "b=/y"])
    assert CheckpointRoots.parse(args.checkpoint_roots).allowed_for("b") == ["/y"]


def test_gcs_prefixes_match_what_the_listing_lists() -> None:
    assert covers("gs://bkt/x", "gs://bkt/x/")
    assert covers("gs://bkt/x/", "gs://bkt/x/y")
    assert not covers("gs://bkt/x", "gs://bkt/x-y")
    assert not covers("gs://bkt/x", "gs://Bad_Bucket/x")
    assert not covers("/data", "gs://data/x") and not covers("gs://data", "/data")


# --- the scanner applies it ------------------------------------------------------------------


def scanner(roots: CheckpointRoots, listed: list[str]) -> CheckpointScanner:
    def scan(directory: str, now: datetime) -> CheckpointStatus:
        listed.append(directory)
        return CheckpointStatus(directory=directory, latest_committed_step=7, observed_at=now)

    return CheckpointScanner(scan=scan, executor=Synchronous(), clock=lambda: T0,
                             roots=roots)


def looked(s: CheckpointScanner, namespace: str, directory: str) -> CheckpointStatus | None:
    """What a reconcile finds after a scan ran (the first look starts it)."""
    assert s.latest((namespace, "job"), directory) is None
    return s.latest((namespace, "job"), directory)


def test_a_refused_root_is_never_listed_and_its_status_says_why() -> None:
    listed: list[str] = []
    refused = looked(scanner(ROOTS, listed), "team-b", "gs://team-a/run1")
    assert listed == []
    assert refused is not None and refused.latest_committed_step is None
    assert (refused.error or "").startswith("spec.checkpoint.directory: gs://team-a/run1 is "
                                            "not under a checkpoint root")
    found = looked(scanner(ROOTS, listed), "team-a", "gs://team-a/run1")
    assert listed == ["gs://team-a/run1"]
    assert found is not None and found.latest_committed_step == 7


def test_a_link_out_of_an_allowed_root_is_refused(tmp_path: Path) -> None:
    allowed, other = tmp_path / "team-b", tmp_path / "team-c"
    (other / "ckpt").mkdir(parents=True)
    allowed.mkdir()
    os.symlink(other / "ckpt", allowed / "ckpt")
    roots = CheckpointRoots.parse([f"team-b={allowed}"])
    listed: list[str] = []
    refused = looked(scanner(roots, listed), "team-b", str(allowed / "ckpt"))
    assert listed == []
    assert refused is not None
    assert f"{allowed / 'ckpt'} is {other / 'ckpt'}, which is not under" in (refused.error or "")
    real = looked(scanner(roots, listed), "team-b", str(allowed))
    assert listed == [str(allowed)] and real is not None and real.error is None


def test_a_path_no_filesystem_can_take_is_left_to_the_scan() -> None:
    """A NUL byte (admitted by the schema) makes resolving the path fail: the scan, which
    never raises, reports it; the scanner does not crash on it."""
    listed: list[str] = []
    found = looked(scanner(CheckpointRoots.default(), listed), "any", "/tmp/a\x00b")
    assert listed == ["/tmp/a\x00b"] and found is not None
