"""Prometheus' text exposition format, read: the operator's /metrics and the API
server's, for the tests and benchmarks (a module of its own below both readers)."""
from __future__ import annotations


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format -> {'name{labels}': value}; comments skipped."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values
