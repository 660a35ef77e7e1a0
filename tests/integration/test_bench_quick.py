"""`python -m bench --quick` still runs end to end and writes every figure (every
benchmark but goodput, which has test_bench_goodput_quick.py).

Over a minute (about five on a quiet machine), so it runs in `make test-long`; its guard
in `make test` is test_bench_guard.py. It starts its own local control plane (N=2 jobs
need 8 TPU node pools), so it is a cluster test. No timing is asserted.
"""
from __future__ import annotations

from typing import Any

import pytest

from tests.support.bench_results import CHECKS, run_quick

pytestmark = [pytest.mark.cluster, pytest.mark.long]

# detection_before runs only with --before REV.
BENCHMARKS = tuple(CHECKS)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_quick(tmp_path_factory.mktemp("bench-results"), BENCHMARKS, timeout=900)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_result(results: dict[str, Any], name: str) -> None:
    CHECKS[name](results)
