"""Pieces of `etj maxtext e2e`'s scenario that need no cluster: reading MaxText's newest
step from its metrics file while it is written, and the head's /tmp on this machine."""
from __future__ import annotations

from pathlib import Path

import pytest

from elastic_devtools.maxtext.scenario import (
    SCENARIOS,
    STALL_TIMEOUT,
    ScenarioFailure,
    host_path,
    load,
    newest_metrics_step,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "maxtext-0.2.5"
LINES = (FIXTURES / "metrics-local.jsonl").read_text().splitlines(keepends=True)


def test_the_newest_step_is_the_last_complete_train_line(tmp_path: Path) -> None:
    path = tmp_path / "etj-metrics.jsonl"
    assert newest_metrics_step(path) is None  # not written yet
    path.write_text("".join(LINES[:12]) + '{"eval/loss": 1.0, "step": 11.0}\n' + LINES[12][:40])
    assert newest_metrics_step(path) == 11  # the eval line and the partial line skipped
    path.write_text("".join(LINES))
    assert newest_metrics_step(path) == 29


def test_the_heads_tmp_is_a_directory_here(tmp_path: Path) -> None:
    assert host_path(tmp_path, "/tmp/maxtext/x") == tmp_path / "maxtext" / "x"
    with pytest.raises(ScenarioFailure, match="not under the head's /tmp"):
        host_path(tmp_path, "/data/x")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_job_stalls_within_the_phases_wait_and_is_recovered(name: str) -> None:
    """The stall phase waits STALL_TIMEOUT for Progressing=False and then for the
    operator's restart of the head pod: the job must give a deadline well inside that
    (the learned one would take minutes) and keep onStall Recover."""
    _, job = load(FIXTURES / SCENARIOS[name])
    deadline = job.spec.elastic.progress_deadline_seconds
    assert deadline is not None and 2 * deadline < STALL_TIMEOUT
    assert job.spec.elastic.on_stall == "Recover"
