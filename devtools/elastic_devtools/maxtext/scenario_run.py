"""The scenarios of `etj maxtext e2e` on one local control plane, in order: a slice lost
and a hung save with checkpoints in the head's /tmp, the same on gs:// through
fake-gcs-server (scenario.py), then an evaluation of minutes and a stopped MaxText
(scenario_phases.py), and the progress sidecar restarted mid-evaluation
(scenario_sidecar.py); each reported as it passes.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

from elastic_devtools.maxtext.env import MaxTextEnv
from elastic_devtools.maxtext.scenario import Run, run_one, say
from elastic_devtools.maxtext.scenario_cluster import control_plane
from elastic_devtools.maxtext.scenario_phases import run_evaluation
from elastic_devtools.maxtext.scenario_sidecar import run_sidecar_restart

SCENARIO_NAMES = ("local", "gcs", "evaluation", "sidecar-restart")


def run_scenarios(env: MaxTextEnv, fixtures: Path, work: Path, gcs: bool,
                  only: tuple[str, ...] = SCENARIO_NAMES, sidecar_only: bool = False
                  ) -> list[Run]:
    """The scenarios named in `only` (gcs False: not the gs:// one)."""
    from elastic_devtools.localcluster.gcs import create_bucket, start_fake_gcs

    names = [n for n in SCENARIO_NAMES if n in only and (gcs or n != "gcs")]
    runs: list[Run] = []
    with ExitStack() as stack:
        gcs_env: dict[str, str] = {}
        if "gcs" in names:
            server = stack.enter_context(start_fake_gcs(log_dir=work / "scenario-gcs-server"))
            gcs_env = server.env
            create_bucket(server.endpoint, "maxtext-e2e")
        cluster = stack.enter_context(control_plane(work, work / "scenario-local" / "pod-tmp",
                                                    gcs_env, say))
        for name in names:
            started = time.monotonic()
            if name == "evaluation":
                run = run_evaluation(cluster, env, fixtures, work, sidecar_only)
            elif name == "sidecar-restart":
                run = run_sidecar_restart(cluster, env, fixtures, work, sidecar_only)
            else:
                run = run_one(name, cluster, env, fixtures, work, sidecar_only)
            run.figures["scenario wall time"] = f"{time.monotonic() - started:.0f} s"
            runs.append(run)
            report(run)
    return runs


def report(run: Run) -> None:
    width = max(len(k) for k in run.figures)
    say(f"{run.name}: the scenario passed")
    for key, value in run.figures.items():
        say(f"    {key:<{width}}  {value}")
