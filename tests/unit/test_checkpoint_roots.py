"""The bound on what the operator lists with its own identity (checkpoints/roots.py): a
checkpoint root only under a prefix allowed for the job's namespace, on path boundaries,
links resolved; any other is refused before any I/O, the error naming the field; and the
job then says so where a user looks first (condition CheckpointRootAllowed, one Warning
Event)."""
from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import CheckpointStatus, ElasticTrainingJobStatus
from elastic_operator.checkpoints.roots import CheckpointRoots, covers
from elastic_operator.checkpoints.scanner import CheckpointScanner
from elastic_operator.core.status import compute_status
from elastic_operator.entry.operator_cli import add_arguments
from tests.builders import T0, article_job, at, observe
from tests.support.clock import FakeClock
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
        "checkpointRoots) and grants the operator's own ServiceAccount (Workload Identity) "
        "the listing")


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

    return CheckpointScanner(scan=scan, executor=Synchronous(), clock=FakeClock(T0),
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
    assert refused.reason == Reason.CHECKPOINT_ROOT_NOT_ALLOWED
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
    assert refused.reason == Reason.CHECKPOINT_ROOT_NOT_ALLOWED
    real = looked(scanner(roots, listed), "team-b", str(allowed))
    assert listed == [str(allowed)] and real is not None and real.error is None


def test_a_path_no_filesystem_can_take_is_left_to_the_scan() -> None:
    """A NUL byte (admitted by the schema) makes resolving the path fail: the scan, which
    never raises, reports it; the scanner does not crash on it."""
    listed: list[str] = []
    found = looked(scanner(CheckpointRoots.default(), listed), "any", "/tmp/a\x00b")
    assert listed == ["/tmp/a\x00b"] and found is not None


# --- the job says so: condition CheckpointRootAllowed, one Warning Event --------------------


def refusal(directory: str = "gs://team-a/run1") -> CheckpointStatus:
    refused = looked(scanner(ROOTS, []), "team-b", directory)
    assert refused is not None
    return refused


def root_allowed(status: ElasticTrainingJobStatus) -> tuple[str, str, str]:
    (c,) = [c for c in status.conditions if c.type == ConditionType.CHECKPOINT_ROOT_ALLOWED]
    return c.status, c.reason, c.message


def warnings(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.message for e in events if e.reason == Reason.CHECKPOINT_ROOT_NOT_ALLOWED
            and e.type == "Warning"]


def test_a_refused_root_is_a_false_condition_and_one_warning_naming_the_flag() -> None:
    job = article_job()
    first, _ = compute_status(job, observe(), None, T0)
    assert root_allowed(first)[:2] == ("Unknown", Reason.NOT_LISTED_YET)
    refused, events = compute_status(job, observe(checkpoint=refusal()), first, at(1))
    state, reason, message = root_allowed(refused)
    assert (state, reason) == ("False", Reason.CHECKPOINT_ROOT_NOT_ALLOWED)
    assert refused.checkpoint is not None and refused.checkpoint.error in message
    (warned,) = warnings(events)
    assert "--checkpoint-roots" in warned and "chart value checkpointRoots" in warned
    # Level-based, told once: no new scan, the same refusal scanned again, or a restarted
    # operator reading the stored status back: still False, no second Event.
    stored = ElasticTrainingJobStatus.model_validate(refused.model_dump(by_alias=True,
                                                                        mode="json"))
    for observed, previous in ((observe(), refused),
                               (observe(checkpoint=refusal()), refused),
                               (observe(), stored)):
        again, events = compute_status(job, observed, previous, at(2))
        assert root_allowed(again)[:2] == ("False", Reason.CHECKPOINT_ROOT_NOT_ALLOWED)
        assert warnings(events) == []
    # The admin allows the root: the next scan lists it, and the condition turns True.
    listed = CheckpointStatus(directory="gs://team-a/run1", latest_committed_step=7,
                              observed_at=at(3))
    allowed, events = compute_status(job, observe(checkpoint=listed), refused, at(3))
    assert root_allowed(allowed)[:2] == ("True", Reason.ROOT_ALLOWED)
    assert warnings(events) == []


def test_another_listing_error_leaves_the_root_allowed() -> None:
    """A directory not written yet (or a 403, a hiccup) is status.checkpoint.error's to
    say: no false alarm on every new job."""
    job = article_job()
    missing = CheckpointStatus(directory="/data/x", observed_at=T0,
                               error="/data/x does not exist on the operator's filesystem")
    status, events = compute_status(job, observe(checkpoint=missing), None, T0)
    assert root_allowed(status)[:2] == ("True", Reason.ROOT_ALLOWED)
    assert warnings(events) == []
