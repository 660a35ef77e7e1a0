"""The operator's start-up check of the JobSet and Kueue API versions the cluster serves
(core/api_support.py), and its one call at start (operator_cli.check_api_versions)."""
from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from elastic_operator.core.api_support import REFUSED_REASON, judge_apis, served_versions
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.entry.operator_cli import check_api_versions


def group(name: str, *versions: str) -> dict[str, Any]:
    """One entry of an APIGroupList, as GET /apis answers it."""
    return {"name": name, "versions": [{"groupVersion": f"{name}/{v}", "version": v}
                                       for v in versions],
            "preferredVersion": {"groupVersion": f"{name}/{versions[0]}",
                                 "version": versions[0]}}


def discovery(*groups: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [group("apps", "v1"), group("batch", "v1"), *groups]}


JOBSET = group("jobset.x-k8s.io", "v1alpha2")
KUEUE = group("kueue.x-k8s.io", "v1beta2", "v1beta1")


def test_served_versions_reads_the_api_group_list() -> None:
    served = served_versions(discovery(JOBSET, KUEUE))
    assert served["jobset.x-k8s.io"] == ("v1alpha2",)
    assert served["kueue.x-k8s.io"] == ("v1beta2", "v1beta1")
    assert served_versions({}) == {}
    assert served_versions({"groups": [{"versions": []}, "junk"]}) == {}


def test_jobset_and_kueue_at_our_versions_start_and_say_what_was_found() -> None:
    verdict = judge_apis(served_versions(discovery(JOBSET, KUEUE)))
    assert verdict.ok
    assert "JobSet: jobset.x-k8s.io v1alpha2" in verdict.message
    assert "Kueue: kueue.x-k8s.io v1beta2, v1beta1" in verdict.message
    assert "using jobset.x-k8s.io/v1alpha2, kueue.x-k8s.io/v1beta2" in verdict.message


def test_without_kueue_the_operator_starts() -> None:
    verdict = judge_apis(served_versions(discovery(JOBSET)))
    assert verdict.ok and "Kueue: not installed" in verdict.message


def test_without_jobset_it_refuses_naming_what_to_install() -> None:
    verdict = judge_apis(served_versions(discovery(KUEUE)))
    assert not verdict.ok and verdict.reason == REFUSED_REASON
    assert "JobSet is not installed" in verdict.message
    assert "no jobset.x-k8s.io API" in verdict.message and "v0.12.0" in verdict.message


@pytest.mark.parametrize(("served", "named", "needed"), [
    (group("jobset.x-k8s.io", "v1alpha1"), "JobSet serves jobset.x-k8s.io v1alpha1",
     "jobset.x-k8s.io/v1alpha2"),
    (group("kueue.x-k8s.io", "v1beta1"), "Kueue serves kueue.x-k8s.io v1beta1",
     "kueue.x-k8s.io/v1beta2"),
])
def test_an_api_too_old_is_refused_naming_the_version_found_and_the_one_needed(
        served: dict[str, Any], named: str, needed: str) -> None:
    others = [g for g in (JOBSET, KUEUE) if g["name"] != served["name"]]
    verdict = judge_apis(served_versions(discovery(served, *others)))
    assert not verdict.ok and verdict.reason == REFUSED_REASON
    assert named in verdict.message and f"not {needed}" in verdict.message
    assert "then restart the operator" in verdict.message


class FakeKube:
    """Answers discovery with a given document and records the Events posted."""

    def __init__(self, groups: dict[str, Any]) -> None:
        self.groups = groups
        self.events: list[tuple[dict[str, Any], StatusEvent]] = []

    def api_groups(self) -> dict[str, Any]:
        return self.groups

    def post_event(self, obj: dict[str, Any], event: StatusEvent, now: datetime) -> bool:
        self.events.append((obj, event))
        return True


def test_at_start_a_refusal_is_logged_and_posted_on_the_operator_pod(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("POD_NAME", "elastic-operator-abc")
    monkeypatch.setenv("POD_NAMESPACE", "elastic-operator-system")
    kube = FakeKube(discovery(JOBSET, group("kueue.x-k8s.io", "v1beta1")))
    with caplog.at_level(logging.INFO, logger="elastic_operator"):
        assert check_api_versions(kube, datetime(2026, 12, 1, tzinfo=UTC)) is False  # type: ignore[arg-type]
    assert any(r.levelno == logging.ERROR and "kueue.x-k8s.io v1beta1" in r.getMessage()
               for r in caplog.records)
    [(obj, event)] = kube.events
    assert obj["kind"] == "Pod" and obj["metadata"] == {
        "name": "elastic-operator-abc", "namespace": "elastic-operator-system"}
    assert event.type == "Warning" and event.reason == REFUSED_REASON
    assert "kueue.x-k8s.io v1beta1" in event.message


def test_at_start_supported_versions_are_logged_and_nothing_is_posted(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("POD_NAME", "elastic-operator-abc")
    kube = FakeKube(discovery(JOBSET, KUEUE))
    with caplog.at_level(logging.INFO, logger="elastic_operator"):
        assert check_api_versions(kube) is True  # type: ignore[arg-type]
    assert any("API versions found: JobSet: jobset.x-k8s.io v1alpha2" in r.getMessage()
               for r in caplog.records)
    assert kube.events == []
