"""docs/api.md: the generated field table is current and covers every spec field."""
from __future__ import annotations

from elastic_api.crd import openapi_schema
from hack import fieldsdoc


def test_field_table_is_current():
    text = fieldsdoc.DOC.read_text()
    assert fieldsdoc.updated_doc(text) == text, (
        "docs/api.md's field table is stale; regenerate it with "
        "`.venv/bin/python -m hack.fieldsdoc` (or hack/regen-golden)")


def test_every_spec_field_is_documented():
    text = fieldsdoc.DOC.read_text()

    def walk(node: dict, path: str):
        yield path
        if node.get("type") == "array":
            node, path = node["items"], path + "[]"
        for name, sub in node.get("properties", {}).items():
            yield from walk(sub, f"{path}.{name}")

    spec = openapi_schema()["properties"]["spec"]
    for name, sub in spec["properties"].items():
        for path in walk(sub, f"spec.{name}"):
            assert f"| `{path}` |" in text, f"{path} is missing from docs/api.md"
