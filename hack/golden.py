"""Golden files: each examples/<name>.yaml rendered into tests/golden/<name>.yaml.

Regenerate with `.venv/bin/python -m hack.golden` (or hack/regen-golden,
which also regenerates the CRD); tests/unit/test_render_golden.py fails when stale.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

from elastic_api.validation import validate_job
from elastic_operator.render import render, to_yaml_stream

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"
GOLDEN = REPO_ROOT / "tests" / "golden"
REGENERATE = ".venv/bin/python -m hack.golden"

HEADER = (
    "# Rendered from examples/{name}.yaml by `etj render`; do not edit.\n"
    f"# Regenerate: {REGENERATE}\n"
)


def example_names() -> list[str]:
    return sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


def render_example(name: str) -> str:
    job = validate_job(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()))
    return HEADER.format(name=name) + to_yaml_stream(render(job))


def main() -> int:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    names = example_names()
    for stale in GOLDEN.glob("*.yaml"):
        if stale.stem not in names:
            stale.unlink()
    for name in names:
        (GOLDEN / f"{name}.yaml").write_text(render_example(name))
        print(f"wrote tests/golden/{name}.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
