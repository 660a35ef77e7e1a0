"""The ElasticTrainingJob CustomResourceDefinition, generated from the pydantic models.

pydantic's JSON Schema becomes a structural OpenAPI v3 schema: `$ref`s inlined, titles
dropped, `anyOf [X, null]` turned into X (nullable in status; in spec a null is pruned by
the API server instead, so CEL rules never meet one), object fields that default to an
empty object get `default: {}` so the API server fills in their defaults, and
`x-kubernetes-preserve-unknown-fields` only for free-form objects (an EnvVar's valueFrom).
The admission rules come from `validation.py`.
"""
from __future__ import annotations

import copy
from typing import Any

import yaml

from elastic_api import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from elastic_api.models import ElasticTrainingJobSpec, ElasticTrainingJobStatus
from elastic_api.names import (
    CRD_NAME,
    DISPATCHED_TO_ANNOTATION,
    SCHEMA_HASH_ANNOTATION,
    SCHEMA_REVISION_ANNOTATION,
)
from elastic_api.queueing import ADMITTED
from elastic_api.schema_revisions import revision_of, schema_hash
from elastic_api.validation import Rule, cel_rules

CRD_PATH = "crds/elastictrainingjobs.yaml"

# Keywords copied as they are; everything else pydantic emits is dropped or rewritten.
_KEPT = (
    "type", "description", "format", "enum", "minimum", "maximum", "minLength", "maxLength",
    "pattern", "minItems", "maxItems", "minProperties", "maxProperties",
    "x-kubernetes-int-or-string",
)


class SchemaError(ValueError):
    pass


def _structural(node: dict[str, Any], defs: dict[str, Any], *, nullable_ok: bool) -> dict[str, Any]:
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        merged = {**target, **node}  # sibling description/default win over the target's
        return _structural(merged, defs, nullable_ok=nullable_ok)
    if "anyOf" in node:
        variants = node.pop("anyOf")
        non_null = [v for v in variants if v.get("type") != "null"]
        had_null = len(non_null) != len(variants)
        if len(non_null) != 1:
            raise SchemaError(f"cannot express anyOf {variants} structurally")
        inner = {**non_null[0], **{k: v for k, v in node.items() if k != "default"}}
        if node.get("default") is not None:
            inner["default"] = node["default"]
        converted = _structural(inner, defs, nullable_ok=nullable_ok)
        if had_null and nullable_ok:
            converted["nullable"] = True
        return converted

    # Copies: a model used twice (e.g. status.training's two cadences) must not share
    # lists, or the YAML dump writes anchors.
    out: dict[str, Any] = {k: copy.deepcopy(node[k]) for k in _KEPT if k in node}
    if "const" in node:
        out["enum"] = [node["const"]]
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    if node.get("default") is not None:
        out["default"] = node["default"]

    if node.get("type") == "object" or "properties" in node:
        out["type"] = "object"
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if props is not None:
            required = set(node.get("required", []))
            out["properties"] = {}
            for name, sub in props.items():
                converted = _structural(sub, defs, nullable_ok=nullable_ok)
                if (
                    converted.get("type") == "object"
                    and "properties" in converted
                    and name not in required
                    and "default" not in converted
                    and not _is_optional(sub)
                ):
                    converted["default"] = {}  # a default_factory object: fill its defaults
                out["properties"][name] = converted
            if required:
                out["required"] = sorted(required)
        elif extra is True or extra == {}:
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(extra, dict):
            out["additionalProperties"] = _structural(extra, defs, nullable_ok=nullable_ok)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif node.get("type") == "array":
        out["items"] = _structural(node["items"], defs, nullable_ok=nullable_ok)
    return out


def _is_optional(sub: dict[str, Any]) -> bool:
    return any(v.get("type") == "null" for v in sub.get("anyOf", []))


def _model_schema(model: type, *, nullable_ok: bool) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")  # type: ignore[attr-defined]
    defs = schema.pop("$defs", {})
    return _structural(schema, defs, nullable_ok=nullable_ok)


def _at(schema: dict[str, Any], scope: str) -> dict[str, Any]:
    node = schema
    for part in filter(None, scope.split(".")):
        node = node["properties"][part]
    return node


def _attach(schema: dict[str, Any], rules: list[Rule]) -> None:
    for rule in rules:
        _at(schema, rule.scope).setdefault("x-kubernetes-validations", []).append(rule.to_crd())


def openapi_schema() -> dict[str, Any]:
    spec = _model_schema(ElasticTrainingJobSpec, nullable_ok=False)
    status = _model_schema(ElasticTrainingJobStatus, nullable_ok=True)
    spec["description"] = "Desired state of the training job. Immutable except suspend."
    status["description"] = (
        "Observed state. status.training is written by the trainer, the rest by the operator."
    )
    root: dict[str, Any] = {
        "type": "object",
        "description": "An elastic JAX training job on Cloud TPU slices, run with Pathways.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    _attach(root, cel_rules(list(spec["properties"]), set(spec.get("required", []))))
    return root


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Ready", "type": "integer", "jsonPath": ".status.slicesReady",
     "description": "Slices whose hosts are all ready."},
    {"name": "Slices", "type": "integer", "jsonPath": ".spec.tpu.numSlices",
     "description": "Slices the job asks for."},
    {"name": "Step", "type": "integer", "jsonPath": ".status.training.step",
     "description": "Last completed training step."},
    {"name": "Checkpoint", "type": "integer", "jsonPath": ".status.checkpoint.latestCommittedStep",
     "description": "Newest committed checkpoint step."},
    {"name": "Status", "type": "string", "jsonPath": ".status.phase",
     "description": "Short status."},
    {"name": "Admission", "type": "string",
     "jsonPath": f'.status.conditions[?(@.type=="{ADMITTED}")].reason',
     "description": "Where the job stands with its Kueue queue (empty without a queue)."},
    # The annotation's dots escaped, as kubectl's JSONPath reads a key that has them.
    {"name": "Cluster", "type": "string",
     "jsonPath": ".metadata.annotations." + DISPATCHED_TO_ANNOTATION.replace(".", "\\."),
     "description": "MultiKueue, on the manager: the worker cluster the job was dispatched "
     "to (its Workload's status.clusterName; empty elsewhere)."},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.counters.jobSetRestarts",
     "description": "Whole-JobSet restarts."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd_versions() -> list[dict[str, Any]]:
    """The CRD's spec.versions: what its schema revision is the hash of."""
    return [
        {
            "name": VERSION,
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": openapi_schema()},
            "subresources": {"status": {}},
            "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
        }
    ]


def build_crd() -> dict[str, Any]:
    """The CRD (apiextensions.k8s.io/v1) as a plain dict, carrying its schema's revision
    and hash (elastic_api/schema_revisions.py)."""
    versions = crd_versions()
    digest = schema_hash(versions)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "annotations": {SCHEMA_REVISION_ANNOTATION: str(revision_of(digest)),
                            SCHEMA_HASH_ANNOTATION: digest},
            "labels": {"app.kubernetes.io/name": "elastic-training-operator",
                       "app.kubernetes.io/part-of": "elastic-training-operator"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
            },
            "versions": versions,
        },
    }


# The header is part of every generated CRD (crds/, the chart, manifests/), byte for byte.
HEADER = (
    "# Generated from api/elastic_api/models/ by `etj crd`; do not edit.\n"
    "# Regenerate: .venv/bin/etj crd > crds/elastictrainingjobs.yaml\n"
)


def crd_yaml() -> str:
    return HEADER + yaml.safe_dump(build_crd(), sort_keys=True, default_flow_style=False, width=100)
