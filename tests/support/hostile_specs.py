"""Hostile specs: the shipped examples mutated at random (garbage values, deleted fields,
unknown fields, wrong types, huge and negative numbers, odd strings), as a Hypothesis
strategy for the unit tests (validate_job, render) and the operator's integration test."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
BASES = [yaml.safe_load(p.read_text()) for p in EXAMPLES]

hostile_value = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30, float("inf"), float("nan"), 1e308]),
    st.floats(allow_nan=True), st.text(max_size=40),
    st.sampled_from(["", " ", "-", "A", "x" * 300, "a" * 23, "v5e", "4x4", "2x2x1", "gs://",
                     "gs://b/c", "/abs/path", "relative", "é", "\x00", "${HOME}", "a;rm -rf /",
                     "--steps", "pathways", "simulated"]),
    st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=5),
                                                               st.integers(), max_size=2),
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _paths(value, (*prefix, i))
    return out


def _parent(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        obj = obj[key]
    return obj


@st.composite
def hostile_manifest(draw: st.DrawFn) -> Any:
    manifest = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(manifest)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(manifest, path)
        action = draw(st.sampled_from(["set", "set", "delete", "extra"]))
        if action == "set":
            parent[path[-1]] = draw(hostile_value)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            # Keys without control characters: a newline in a key would split the one-line
            # message (the API server's own field paths have the same limit).
            key = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1,
                          max_size=12)
            parent[draw(key)] = draw(hostile_value)
    return draw(st.one_of(st.just(manifest), st.just(manifest),
                          st.just(manifest), hostile_value))
