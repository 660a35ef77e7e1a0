"""The operator against a CRD that is not its own (issue 61): the verdict on the served
schema (core/schema.py), the refused pass that writes SchemaCurrent alone and posts one
Warning Event (schema_guard.py), the condition on every status written otherwise, and the
watch of the CRD that says it (schema_watch.py: log, metrics, a resync on each change)."""
from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from elastic_api.conditions import ConditionType, Reason
from elastic_api.crd import build_crd
from elastic_api.models import Condition
from elastic_api.names import CRD_NAME, SCHEMA_HASH_ANNOTATION, SCHEMA_REVISION_ANNOTATION
from elastic_api.schema_revisions import REVISIONS
from elastic_operator.client.kube import Kube
from elastic_operator.core.schema import (
    CURRENT,
    NEWER,
    OLDER,
    OUTDATED,
    UNKNOWN,
    SchemaVerdict,
    judge,
    refusal_event,
    with_schema_condition,
)
from elastic_operator.metrics.metrics import OperatorMetrics
from elastic_operator.watch.schema_watch import SchemaWatch
from tests.builders import T0, at
from tests.support.stand_in_kube import StandInKube, api_error, condition, reconciler, the_job

ROOT = Path(__file__).resolve().parents[2]
# The CRD of commit a59b14a, the last before status.slices[].counted existed.
OLD_CRD = ROOT / "tests" / "fixtures" / "crds" / "elastictrainingjobs-a59b14a.yaml"
OWN = len(REVISIONS)


def old_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(OLD_CRD.read_text())
    return crd


def revised(revision: int | None, extra_status_field: str | None = None) -> dict[str, Any]:
    """The operator's own CRD, saying another revision (None: none at all)."""
    crd = build_crd()
    annotations = crd["metadata"]["annotations"]
    if revision is None:
        crd["metadata"].pop("annotations")
    else:
        annotations[SCHEMA_REVISION_ANNOTATION] = str(revision)
        annotations[SCHEMA_HASH_ANNOTATION] = "sha256:another"
    if extra_status_field:
        status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
            "status"]
        status["properties"][extra_status_field] = {"type": "string"}
    return crd


# --- the verdict --------------------------------------------------------------------------


def test_the_operators_own_crd_is_current() -> None:
    verdict = judge(build_crd())
    assert (verdict.state, verdict.served_revision, verdict.own_revision) == (CURRENT, OWN, OWN)
    assert not verdict.refuses and verdict.missing == ()


def test_the_crd_from_before_counted_is_outdated_and_says_what_it_lacks() -> None:
    verdict = judge(old_crd())
    assert verdict.state == OUTDATED and verdict.refuses
    assert verdict.served_revision == 0  # no annotation: from before revisions
    assert "status.slices[].counted" in verdict.missing
    assert "status.slices[].counted.jobUid" not in verdict.missing  # the top-most only
    assert "status.slices[].counted" in verdict.message
    assert "kubectl apply --server-side -f crds/elastictrainingjobs.yaml" in verdict.message
    assert "helm upgrade" in verdict.message


def test_an_older_crd_that_stores_every_status_field_is_served() -> None:
    """A change of a description or of the spec alone is a new revision too: an older
    CRD that differs so costs no status field, and the job is served (and told)."""
    crd = revised(None)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["elastic"]["properties"].pop("onStall")
    verdict = judge(crd)
    assert (verdict.state, verdict.served_revision, verdict.missing) == (OLDER, 0, ())
    assert not verdict.refuses and "helm upgrade" in verdict.message


def test_an_older_crd_lacking_only_the_trainers_fields_is_served_and_says_so() -> None:
    """The operator never writes status.training (the trainer's): a CRD that lacks only
    fields under it costs the operator nothing, so refusing would keep nothing and leave a
    failed slice down; the job is served, told what the trainer's reports lose."""
    crd = revised(None)
    training = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "status"]["properties"]["training"]
    training["properties"].pop("activity")
    verdict = judge(crd)
    assert (verdict.state, verdict.missing) == (OLDER, ("status.training.activity",))
    assert not verdict.refuses
    assert "status.training.activity" in verdict.message and "helm upgrade" in verdict.message


def test_a_later_revision_is_a_downgrade_served_with_what_the_operator_knows() -> None:
    verdict = judge(revised(OWN + 1, extra_status_field="shinyNewThing"))
    assert (verdict.state, verdict.served_revision) == (NEWER, OWN + 1)
    assert not verdict.refuses and verdict.unknown_to_us == ("status.shinyNewThing",)
    assert "status.shinyNewThing" in verdict.message


def test_our_revision_hand_edited_is_judged_by_its_fields() -> None:
    crd = revised(OWN)
    slices = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"][
        "properties"]["slices"]
    slices["items"]["properties"].pop("counted")
    assert judge(crd).state == OUTDATED
    assert judge(revised(OWN)).state == OLDER  # another hash, every field


def test_an_unreadable_or_garbled_revision() -> None:
    assert judge(None).state == UNKNOWN and not judge(None).refuses
    crd = old_crd()
    crd["metadata"]["annotations"] = {SCHEMA_REVISION_ANNOTATION: "seven"}
    assert judge(crd).served_revision == 0


# --- the condition ------------------------------------------------------------------------


def outdated() -> SchemaVerdict:
    return judge(old_crd())


def test_a_job_whose_crd_was_always_the_operators_own_has_no_schema_condition() -> None:
    assert with_schema_condition([], [], judge(build_crd()), T0, 1) == []


def test_schema_current_follows_the_crd_and_stays_once_set() -> None:
    (refused,) = with_schema_condition([], [], outdated(), T0, 1)
    assert (refused.type, refused.status, refused.reason) == (
        ConditionType.SCHEMA_CURRENT, "False", Reason.CRD_OUTDATED)
    (again,) = with_schema_condition([], [refused], outdated(), at(60), 1)
    assert again == refused  # no transition: the same time
    (back,) = with_schema_condition([], [refused], judge(build_crd()), at(90), 1)
    assert (back.status, back.reason, back.last_transition_time) == (
        "True", Reason.CRD_CURRENT, at(90))
    # While the CRD cannot be read, the condition stays as it was.
    ready = Condition(type=ConditionType.READY, status="True", reason="x",
                      last_transition_time=T0)
    assert with_schema_condition([ready], [ready, refused], judge(None), at(99), 1) == [
        ready, refused]


def test_the_refusal_event_is_named_once_per_job_and_pair_of_revisions() -> None:
    name, event = refusal_event("train", "u-1", outdated())
    assert name == refusal_event("train", "u-1", outdated())[0]
    assert name != refusal_event("train", "u-2", outdated())[0]
    assert (event.type, event.reason) == ("Warning", Reason.CRD_OUTDATED)


# --- the reconcile ------------------------------------------------------------------------


STORED = {"phase": "Running", "observedGeneration": 1, "slicesReady": 1,
          "counters": {"sliceFailures": 2},
          "conditions": [{"type": "Ready", "status": "True", "reason": "AllSlicesReady",
                          "message": "", "lastTransitionTime": "2026-11-29T11:00:00Z"},
                         {"type": "Custom", "status": "True", "reason": "Kept",
                          "lastTransitionTime": "2026-11-29T11:00:00Z"}]}


def test_a_refused_pass_writes_schema_current_alone_and_warns_once() -> None:
    job = the_job()
    job["status"] = copy.deepcopy(STORED)
    kube = StandInKube(job)
    verdict = {"now": outdated()}
    rec, _ = reconciler(kube, schema=lambda: verdict["now"])
    for _ in range(3):  # the first pass, then two resyncs
        result = rec.reconcile("ml", "train")
        assert result.ok and result.requeue_after is None  # the CRD's change wakes it
    assert kube.created == []  # no JobSet, no trainer RBAC: nothing created or deleted
    (patch,) = kube.patches
    assert list(patch["status"]) == ["conditions"]  # a field of every schema, alone
    status = kube.job["status"]
    assert {k: v for k, v in status.items() if k != "conditions"} == {
        k: v for k, v in STORED.items() if k != "conditions"}
    assert status["conditions"][:2] == STORED["conditions"]  # every other one as stored
    schema = condition(status, ConditionType.SCHEMA_CURRENT)
    assert (schema["status"], schema["reason"]) == ("False", Reason.CRD_OUTDATED)
    assert "status.slices[].counted" in schema["message"]
    assert [(e.type, e.reason) for e in kube.events] == [("Warning", Reason.CRD_OUTDATED)]

    verdict["now"] = judge(build_crd())  # the CRD upgraded: the next pass serves it
    assert rec.reconcile("ml", "train").ok
    assert kube.created == ["Role", "RoleBinding", "JobSet"]
    status = kube.job["status"]
    assert status["jobSetName"] == "train"
    schema = condition(status, ConditionType.SCHEMA_CURRENT)
    assert (schema["status"], schema["reason"]) == ("True", Reason.CRD_CURRENT)


def test_an_event_refused_for_now_is_posted_by_a_later_pass() -> None:
    kube = StandInKube(the_job())
    kube.fail["post_event"] = api_error(503, "ServiceUnavailable", "try later")
    rec, _ = reconciler(kube, schema=outdated)
    assert rec.reconcile("ml", "train").ok and kube.events == []
    del kube.fail["post_event"]
    assert rec.reconcile("ml", "train").ok and len(kube.events) == 1
    assert rec.reconcile("ml", "train").ok and len(kube.events) == 1


@pytest.mark.parametrize(("crd", "status", "reason"), [
    (revised(OWN + 1), "True", Reason.CRD_NEWER),
    (revised(None), "False", Reason.CRD_OLDER),
])
def test_a_served_job_carries_schema_current_when_the_crd_is_not_its_own(
        crd: dict[str, Any], status: str, reason: str) -> None:
    kube = StandInKube(the_job())
    rec, _ = reconciler(kube, schema=lambda: judge(crd))
    assert rec.reconcile("ml", "train").ok
    assert kube.created == ["Role", "RoleBinding", "JobSet"]  # served
    schema = condition(kube.job["status"], ConditionType.SCHEMA_CURRENT)
    assert (schema["status"], schema["reason"]) == (status, reason)
    assert kube.events == []


def test_an_invalid_spec_is_reported_with_schema_current_too() -> None:
    kube = StandInKube(the_job(maxRestarts=2**31))
    kube.fail["create JobSet"] = api_error(400, "BadRequest", "denied")
    rec, _ = reconciler(kube, schema=lambda: judge(revised(OWN + 1)))
    assert rec.reconcile("ml", "train").ok
    assert condition(kube.job["status"], ConditionType.SCHEMA_CURRENT)["reason"] == \
        Reason.CRD_NEWER


# --- the watch ----------------------------------------------------------------------------


class CrdKube(Kube):
    """Serves one CRD (or refuses to)."""

    def __init__(self, crd: dict[str, Any] | None, refuse: bool = False) -> None:
        super().__init__(None)
        self.crd, self.refuse = crd, refuse
        self.selectors: list[str] = []

    def list_crd(self, *, limit: int, continue_token: str | None = None) -> dict[str, Any]:
        if self.refuse:
            raise api_error(403, "Forbidden", "customresourcedefinitions is forbidden")
        return {"items": [self.crd] if self.crd else [], "metadata": {"resourceVersion": "7"}}


def served(crd: dict[str, Any], version: str = "8") -> dict[str, Any]:
    crd = copy.deepcopy(crd)
    crd["metadata"]["resourceVersion"] = version
    return crd


def watch_of(kube: CrdKube) -> tuple[SchemaWatch, CollectorRegistry, list[str]]:
    registry = CollectorRegistry()
    changes: list[str] = []
    watch = SchemaWatch(kube, OperatorMetrics(registry), watch_timeout_s=30,
                        on_change=lambda: changes.append(watch.verdict.state))
    return watch, registry, changes


def state(registry: CollectorRegistry) -> dict[str, float | None]:
    return {s: registry.get_sample_value("etj_crd_schema_state", {"state": s})
            for s in (CURRENT, NEWER, OLDER, OUTDATED, UNKNOWN)}


def test_the_watch_says_each_new_verdict_and_names_every_job_again(
        caplog: pytest.LogCaptureFixture) -> None:
    watch, registry, changes = watch_of(CrdKube(served(old_crd())))
    assert not watch.settled and watch.verdict.state == UNKNOWN  # nothing listed yet
    with caplog.at_level(logging.INFO, logger="elastic_operator"):
        watch.informer.relist("start")
        assert watch.settled and watch.verdict.state == OUTDATED
        watch.informer.apply({"type": "MODIFIED", "object": served(old_crd(), "9")})
        watch.informer.apply({"type": "MODIFIED", "object": served(build_crd(), "10")})
    assert changes == [OUTDATED, CURRENT]  # the same verdict again is no change
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and CRD_NAME in errors[0].getMessage()
    assert "status.slices[].counted" in errors[0].getMessage()
    assert state(registry) == {CURRENT: 1, NEWER: 0, OLDER: 0, OUTDATED: 0, UNKNOWN: 0}
    assert registry.get_sample_value("etj_crd_schema_revision", {"role": "served"}) == OWN
    assert registry.get_sample_value("etj_crd_schema_revision", {"role": "own"}) == OWN


def test_a_crd_the_operator_may_not_read_leaves_it_serving(
        caplog: pytest.LogCaptureFixture) -> None:
    """A chart whose RBAC predates the CRD watch: the jobs are served as before."""
    watch, registry, _ = watch_of(CrdKube(None, refuse=True))
    with caplog.at_level(logging.WARNING, logger="elastic_operator"):
        watch.informer.start(list_first=True)
        watch.stop()
    assert watch.settled and watch.verdict.state == UNKNOWN and not watch.verdict.refuses
    assert state(registry)[UNKNOWN] == 1
    assert registry.get_sample_value("etj_crd_schema_revision", {"role": "served"}) is None
    assert any("cannot read the CRD" in r.getMessage() for r in caplog.records)
