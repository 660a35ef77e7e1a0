"""Hostile specs: mutate the shipped examples at random (garbage values, deleted fields,
unknown fields, wrong types, huge and negative numbers, odd strings). `validate_job` either
accepts the manifest, and then `render` builds its objects, or raises ValueError whose every
line starts with the path of a field; nothing else ever escapes."""
from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from elastic_api.validation import validate_job
from elastic_operator.render import render
from tests.support.hostile_specs import BASES, EXAMPLES, hostile_manifest

# "<path>: <problem and fix>"; the path's last key may be any string a hostile author chose.
FIELD_LINE = re.compile(r"^(<root>|apiVersion|kind|metadata|spec)([.\[].*)?: \S")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifest=hostile_manifest())
def test_hostile_spec_is_accepted_and_rendered_or_refused_by_field(manifest: Any) -> None:
    try:
        job = validate_job(manifest)
    except ValueError as err:
        lines = str(err).splitlines()
        assert lines, "an empty error message"
        for line in lines:
            assert FIELD_LINE.match(line), f"error line names no field: {line!r}"
        return
    objects = render(job)
    kinds = [o["kind"] for o in objects]
    # A job MultiKueue dispatches runs elsewhere: here it is only its Workload.
    assert kinds == ["Workload"] if job.spec.multikueue else kinds.count("JobSet") == 1, kinds
    yaml.safe_dump(objects)  # serializable as the operator sends it


@pytest.mark.parametrize("base", BASES, ids=[p.stem for p in EXAMPLES])
def test_hostile_examples_themselves_are_valid(base: dict[str, Any]) -> None:
    """The mutation source must be valid, or the property above proves little."""
    render(validate_job(base))
