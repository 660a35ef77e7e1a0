"""What the API server accepts decides how main is rendered (issue 81 item 1): container
restart rules (KEP-5307) are refused before 1.34, dropped by 1.34 with its alpha gate
off, kept from 1.35. On a server that lacks them the head is rendered as before they
existed (a crash of main restarts the JobSet) and MainRestartsInPlace says so, once."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_api.conditions import ConditionType, Reason
from elastic_api.validation import validate_job
from elastic_operator.core.server_features import (
    DryRun,
    dry_run_outcome,
    judge,
    minor_of,
    needs_dry_run,
)
from elastic_operator.core.status import compute_status
from elastic_operator.model.server import NEWEST, ServerFeatures
from elastic_operator.render import render, render_jobset
from elastic_operator.watch.server_probe import PROBE_CONTAINER, probe_job
from tests.builders import article_job, at, observe

REPO = Path(__file__).resolve().parents[2]
OLD = judge({"gitVersion": "v1.32.2"}, None)


def version(git: str) -> dict[str, str]:
    return {"gitVersion": git}


@pytest.mark.parametrize(("info", "minor"), [
    (version("v1.32.2"), (1, 32)), (version("v1.33.5-gke.1080000"), (1, 33)),
    ({"major": "1", "minor": "34+"}, (1, 34)), ({}, None), (version("nonsense"), None)])
def test_the_minor_is_read_from_gitversion_or_the_fields(info: dict[str, str],
                                                         minor: tuple[int, int] | None):
    assert minor_of(info) == minor


@pytest.mark.parametrize("git", ["v1.30.0", "v1.32.2", "v1.33.5-gke.1080000"])
def test_before_1_34_the_version_alone_says_no(git: str):
    assert not needs_dry_run(version(git))
    features = judge(version(git), None)
    assert not features.restart_rules
    assert "may not be set for non-init containers" in features.detail
    assert git in features.detail


@pytest.mark.parametrize("git", ["v1.35.0", "v1.37.2", "v1.40.1-gke.1"])
def test_from_1_35_the_version_alone_says_yes(git: str):
    assert not needs_dry_run(version(git))
    assert judge(version(git), None).restart_rules


def test_on_1_34_the_dry_run_decides():
    info = version("v1.34.1")
    assert needs_dry_run(info) and needs_dry_run({})
    assert judge(info, DryRun("kept")).restart_rules
    dropped = judge(info, DryRun("dropped"))
    assert not dropped.restart_rules and "ContainerRestartRules" in dropped.detail
    refused = judge(info, DryRun("refused", "spec.template.spec.containers[0].restartPolicy"))
    assert not refused.restart_rules and "containers[0].restartPolicy" in refused.detail
    # Nothing can tell (no permission, no answer): the head every server accepts.
    failed = judge(info, DryRun("failed", "HTTP 403 Forbidden"))
    assert not failed.restart_rules and "403" in failed.detail
    assert not judge({}, DryRun("failed", "timeout")).restart_rules


def test_a_1_35_server_with_the_gate_turned_off_is_believed():
    assert not judge(version("v1.36.0"), DryRun("dropped")).restart_rules


def test_the_dry_run_is_read_from_the_job_as_stored():
    sent = probe_job()
    assert dry_run_outcome(sent, PROBE_CONTAINER) == DryRun("kept")
    stripped = copy.deepcopy(sent)
    for container in stripped["spec"]["template"]["spec"]["containers"]:
        container.pop("restartPolicy")
        container.pop("restartPolicyRules")
    assert dry_run_outcome(stripped, PROBE_CONTAINER) == DryRun("dropped")


def example(name: str) -> Any:
    return validate_job(yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text()))


def main_of(jobset: dict[str, Any]) -> dict[str, Any]:
    head = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return next(c for c in head["containers"] if c["name"] == "main")


def test_the_newest_server_is_the_default_rendering():
    job = example("maxtext")
    assert render(job) == render(job, NEWEST) == render(job, judge(version("v1.37.2"), None))


@pytest.mark.parametrize("name", ["maxtext", "v5p", "simulated", "demo"])
def test_an_old_server_gets_the_head_without_the_rule_and_nothing_else_changes(name: str):
    """The one difference: main's two fields, and the FailJobSet rule that only main's
    restarts in place needed (without them JobSet counts every restart itself)."""
    job = example(name)
    newest, old = render_jobset(job), render_jobset(job, OLD)
    main = main_of(newest)
    assert main.pop("restartPolicy") == "Never" and main.pop("restartPolicyRules")
    assert "restartPolicy" not in main_of(old) and "restartPolicyRules" not in main_of(old)
    windowed = "rules" in old["spec"]["failurePolicy"]
    if not windowed:
        newest["spec"]["failurePolicy"].pop("rules")
    assert newest == old
    head = old["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert head["backoffLimit"] == 0  # a crash of main fails the head Job: JobSet restarts
    assert head["template"]["spec"]["restartPolicy"] == "Never"


def condition(status: Any) -> Any:
    return next((c for c in status.conditions
                 if c.type == ConditionType.MAIN_RESTARTS_IN_PLACE), None)


def test_the_condition_says_which_recovery_and_the_event_comes_once():
    job = article_job(max_restarts=2)
    status, events = compute_status(job, observe(server=OLD), None, at(0))
    said = condition(status)
    assert said.status == "False" and said.reason == Reason.RESTART_RULES_UNSUPPORTED
    assert "restarts the whole JobSet" in said.message and "1.35" in said.message
    assert "v1.32.2" in said.message
    warned = [e for e in events if e.reason == Reason.RESTART_RULES_UNSUPPORTED]
    assert len(warned) == 1 and warned[0].type == "Warning"
    again, events = compute_status(job, observe(server=OLD), status, at(30))
    assert condition(again) == said
    assert not [e for e in events if e.reason == Reason.RESTART_RULES_UNSUPPORTED]
    # The control plane upgraded: True, and no Warning.
    upgraded = judge(version("v1.35.0"), None)
    now, events = compute_status(job, observe(server=upgraded), again, at(60))
    assert condition(now).status == "True"
    assert condition(now).reason == Reason.CONTAINER_RESTART_RULES
    assert not [e for e in events if e.reason == Reason.RESTART_RULES_UNSUPPORTED]


def test_no_condition_on_a_job_that_does_not_ask_for_restarts_in_place():
    status, _ = compute_status(article_job(max_restarts=0), observe(server=OLD), None, at(0))
    assert condition(status) is None


def test_the_server_features_default_is_the_newest():
    assert ServerFeatures().restart_rules and NEWEST.restart_rules
