"""The guard of the quick benchmarks in `make test` (the whole quick run is
test_bench_quick.py, in `make test-long`): the harness end to end on a local control
plane of its own, with the benchmark of the headline (detection: the operator against
JobSet on the same failures), under a minute. The same checkers as the whole run; no
timing is asserted."""
from __future__ import annotations

from typing import Any

import pytest

from tests.support.bench_results import CHECKS, run_quick

pytestmark = pytest.mark.cluster

GUARDED = ("detection",)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_quick(tmp_path_factory.mktemp("bench-results"), GUARDED, timeout=600)


@pytest.mark.parametrize("name", GUARDED)
def test_result(results: dict[str, Any], name: str) -> None:
    CHECKS[name](results)
