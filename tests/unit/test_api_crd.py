"""The generated CRD: committed copy up to date, structural, with the admission rules."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from elastic_api import crd
from elastic_api.catalog import CATALOG
from elastic_api.models import QUANTITY_PATTERN

REPO = Path(__file__).resolve().parents[2]


def _walk(node: Any, path: str = ""):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def _schema_nodes(schema: dict[str, Any], path: str = ""):
    """Every schema node (not CEL rule dicts, not defaults)."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _schema_nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _schema_nodes(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        yield from _schema_nodes(schema["items"], f"{path}[]")


def test_committed_crd_is_current():
    committed = (REPO / crd.CRD_PATH).read_text()
    assert committed == crd.crd_yaml(), (
        "crds/elastictrainingjobs.yaml is stale; regenerate it with "
        "`.venv/bin/etj crd > crds/elastictrainingjobs.yaml` (or hack/regen-golden)"
    )


def test_names_and_subresources():
    obj = crd.build_crd()
    assert obj["metadata"]["name"] == "elastictrainingjobs.elastic.pathways.dev"
    spec = obj["spec"]
    assert spec["group"] == "elastic.pathways.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "ElasticTrainingJob"
    assert spec["names"]["plural"] == "elastictrainingjobs"
    assert spec["names"]["shortNames"] == ["etj"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_printer_columns():
    (version,) = crd.build_crd()["spec"]["versions"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Ready": ".status.slicesReady",
        "Slices": ".spec.tpu.numSlices",
        "Step": ".status.training.step",
        "Checkpoint": ".status.checkpoint.latestCommittedStep",
        "Status": ".status.phase",
        "Admission": '.status.conditions[?(@.type=="Admitted")].reason',
        "Cluster": r".metadata.annotations.elastic\.pathways\.dev/dispatched-to",
        "Restarts": ".status.counters.jobSetRestarts",
        "Age": ".metadata.creationTimestamp",
    }


def test_schema_is_structural():
    schema = crd.openapi_schema()
    for path, node in _schema_nodes(schema):
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "title", "$defs", "const"):
            assert banned not in node, f"{path} has {banned}"
        assert node.get("additionalProperties") is not False, path
        untyped_ok = node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields")
        if not untyped_ok:
            assert "type" in node, f"{path} has no type"
        if "properties" in node:
            assert "additionalProperties" not in node, path
    # Free-form only where it must be.
    preserved = [p for p, n in _schema_nodes(schema)
                 if n.get("x-kubernetes-preserve-unknown-fields")]
    assert preserved == [".spec.trainer.env[].valueFrom"]


def test_spec_has_no_nullable_but_status_does():
    schema = crd.openapi_schema()
    spec_nullable = [p for p, n in _schema_nodes(schema["properties"]["spec"]) if n.get("nullable")]
    assert spec_nullable == []
    status = schema["properties"]["status"]["properties"]
    assert status["phase"].get("nullable") is True
    assert status["training"]["properties"]["loss"] == {"nullable": True, "type": "number"}


def test_defaults_and_descriptions_kept():
    spec = crd.openapi_schema()["properties"]["spec"]
    elastic = spec["properties"]["elastic"]
    assert elastic["default"] == {}
    assert elastic["properties"]["timeoutSeconds"]["default"] == 300
    assert spec["properties"]["backend"]["default"] == "pathways"
    assert spec["properties"]["backend"]["enum"] == ["pathways", "simulated"]
    assert "description" in spec["properties"]["tpu"]["properties"]["numSlices"]
    assert spec["properties"]["tpu"]["properties"]["numSlices"]["minimum"] == 1
    limits = spec["properties"]["trainer"]["properties"]["resources"]["properties"]["limits"]
    assert limits["additionalProperties"] == {"x-kubernetes-int-or-string": True,
                                              "pattern": QUANTITY_PATTERN}
    assert set(spec["required"]) == {"tpu", "checkpoint", "trainer"}


def test_every_quantity_has_the_quantity_pattern():
    spec = crd.openapi_schema()["properties"]["spec"]
    quantities = [path for path, node in _schema_nodes(spec)
                  if node.get("x-kubernetes-int-or-string")]
    # limits and requests of the trainer, of the three Pathways components and of the
    # colocated Python sidecar, and an emptyDir's sizeLimit
    assert len(quantities) == 11, quantities
    for path, node in _schema_nodes(spec):
        if node.get("x-kubernetes-int-or-string"):
            assert node.get("pattern") == QUANTITY_PATTERN, path


def test_topology_rules_generated_from_catalog():
    """One rule per type: its listed topologies, and the 3D types' rule (multiples of 4
    up to 256, at most max_cubes cubes, ordered but for v4) written in CEL, not listed:
    kube-apiserver 1.37's CEL agrees with validate_job on it (issue 81, compared on ~6,000
    jobs); tests/integration/test_admission.py checks it on the real API server."""
    tpu = crd.openapi_schema()["properties"]["spec"]["properties"]["tpu"]
    rules = [r["rule"] for r in tpu["x-kubernetes-validations"]
             if "self.topology in" in r["rule"]]
    assert len(rules) == len(CATALOG)
    for tpu_type, family in CATALOG.items():
        (rule,) = [r for r in rules if f"self.type != '{tpu_type}'" in r]
        for topology in family.listed:
            assert f"'{topology}'" in rule
        assert (f"<= {family.max_cubes}" in rule) == bool(family.max_cubes)
        assert ("int(self.topology.split('x')[0]) <= " in rule) == (
            bool(family.max_cubes) and family.ordered)
        generated = set(family.topologies) - set(family.listed)
        assert not any(f"'{t}'" in rule for t in generated)


def test_every_spec_field_but_suspend_and_multi_cluster_is_immutable():
    spec = crd.openapi_schema()["properties"]["spec"]
    # Immutability: the transition rules (a rule at creation only names oldSelf too).
    transition = [r for r in spec["x-kubernetes-validations"]
                  if "oldSelf" in r["rule"] and not r.get("optionalOldSelf")]
    guarded = {r["message"].split(" ")[0].removeprefix("spec.") for r in transition}
    assert guarded == set(spec["properties"]) - {"suspend", "multiCluster"}
    for rule in transition:
        assert "suspend" not in rule["rule"] and "multiCluster" not in rule["rule"]


def test_root_rules_check_the_name():
    root = crd.openapi_schema()
    rules = [r["rule"] for r in root["x-kubernetes-validations"]]
    assert "size(self.metadata.name) <= 22" in rules


def test_yaml_is_stable_and_sorted():
    text = crd.crd_yaml()
    assert text == crd.crd_yaml()
    doc = yaml.safe_load(text)
    assert doc == crd.build_crd()
    assert "&id" not in text  # no YAML anchors


def test_etj_crd_prints_it(capsys):
    from elastic_api.etj_cli import main

    assert main(["crd"]) == 0
    assert capsys.readouterr().out == crd.crd_yaml()


def test_the_schema_is_the_newest_revision_recorded():
    """A schema change is a new revision: its hash appended to REVISIONS, so that the CRD
    says which revision it is and an operator can tell an older one apart."""
    from elastic_api.schema_revisions import REVISIONS, schema_hash

    digest = schema_hash(crd.crd_versions())
    assert digest == REVISIONS[-1], (
        "the CRD's schema changed (models/, validation.py or the printer columns): "
        "append its hash as the last entry of REVISIONS in "
        "api/elastic_api/schema_revisions.py,\n"
        f'    "{digest}",  # {len(REVISIONS) + 1}: <what changed>\n'
        "then regenerate the CRD (make crd, or hack/regen-golden) and the chart "
        "(hack/render-manifests)" if digest not in REVISIONS else
        f"the CRD's schema is revision {REVISIONS.index(digest) + 1} again, older than the "
        f"newest ({len(REVISIONS)}): a schema goes forward, as a new revision")


def test_the_crd_carries_its_revision_and_hash():
    from elastic_api.names import SCHEMA_HASH_ANNOTATION, SCHEMA_REVISION_ANNOTATION
    from elastic_api.schema_revisions import REVISIONS, schema_hash

    obj = crd.build_crd()
    annotations = obj["metadata"]["annotations"]
    assert annotations == {SCHEMA_REVISION_ANNOTATION: str(len(REVISIONS)),
                           SCHEMA_HASH_ANNOTATION: schema_hash(obj["spec"]["versions"])}


def test_a_revision_is_its_place_in_the_list():
    from elastic_api.schema_revisions import REVISIONS, revision_of, schema_hash

    assert revision_of(REVISIONS[0]) == 1
    assert revision_of("sha256:not-recorded") == len(REVISIONS) + 1
    # Canonical: the order of keys does not change the hash; a value does.
    assert schema_hash([{"a": 1, "b": [2]}]) == schema_hash([{"b": [2], "a": 1}])
    assert schema_hash([{"a": 1}]) != schema_hash([{"a": 2}])


def test_spec_fields_newer_than_the_previous_release_carry_no_schema_default():
    """A downgrade keeps this CRD: a default the API server writes into every job is a
    field the previous release refuses (docs/operations.md). Unset, the operator applies
    them itself."""
    from elastic_api.models import DEFAULT_IN_PLACE_DEADLINE_SECONDS, RecoverySpec

    recovery = crd.openapi_schema()["properties"]["spec"]["properties"]["recovery"]
    for name in ("restartInPlace", "inPlaceDeadlineSeconds"):
        assert "default" not in recovery["properties"][name], name
    unset = RecoverySpec()
    assert unset.in_place_allowed and unset.in_place_deadline == DEFAULT_IN_PLACE_DEADLINE_SECONDS
    assert not RecoverySpec(restart_in_place=False).in_place_allowed
    assert RecoverySpec(in_place_deadline_seconds=30).in_place_deadline == 30
