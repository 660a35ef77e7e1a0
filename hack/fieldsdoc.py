"""The field reference table of docs/api.md, generated from the CRD schema.

Regenerate with `.venv/bin/python -m hack.fieldsdoc` (hack/regen-golden
does it too); tests/unit/test_api_docs.py fails when docs/api.md is stale.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from elastic_api.crd import openapi_schema

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BEGIN = "<!-- BEGIN GENERATED: spec fields (python -m hack.fieldsdoc) -->"
END = "<!-- END GENERATED: spec fields -->"


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = node.get("type", "any")
    if kind == "array":
        return f"list of {_type(node['items'])}"
    if kind == "object" and "additionalProperties" in node:
        return f"map of {_type(node['additionalProperties'])}"
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    return str(kind)


def _constraints(node: dict[str, Any], required: bool) -> str:
    parts = ["required"] if required else []
    for key, label in (("minimum", ">="), ("maximum", "<="), ("minLength", "min length"),
                       ("maxLength", "max length"), ("maxItems", "max items"),
                       ("maxProperties", "max entries"), ("pattern", "pattern")):
        if key in node:
            value = f"`{node[key]}`" if key == "pattern" else node[key]
            parts.append(f"{label} {value}")
    return ", ".join(parts)


def _rows(node: dict[str, Any], path: str, required: bool, out: list[str]) -> None:
    default = f"`{json.dumps(node['default'])}`" if "default" in node else ""
    description = node.get("description", "").replace("|", "\\|").replace("\n", " ")
    out.append(f"| `{path}` | {_type(node)} | {default} | {_constraints(node, required)} | "
               f"{description} |")
    props = node.get("properties")
    if props is None and node.get("type") == "array":
        props = node["items"].get("properties")
        path += "[]"
        node = node["items"]
    for name, sub in (props or {}).items():
        _rows(sub, f"{path}.{name}", name in node.get("required", []), out)


def fields_table() -> str:
    spec = openapi_schema()["properties"]["spec"]
    rows: list[str] = ["| field | type | default | constraints | description |",
                       "|---|---|---|---|---|"]
    for name, sub in spec["properties"].items():
        _rows(sub, f"spec.{name}", name in spec.get("required", []), rows)
    return "\n".join(rows) + "\n"


def updated_doc(text: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + fields_table() + text[end:]


def main() -> int:
    DOC.write_text(updated_doc(DOC.read_text()))
    print("wrote docs/api.md (field table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
