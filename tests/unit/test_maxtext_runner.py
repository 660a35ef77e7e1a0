"""The MaxText runner of `make e2e-maxtext`: it runs what the renderer puts in `main`
(command, args, env resolved as the kubelet would) with only JAX_PLATFORMS and the tiny
model's flags changed; the environment's name is the one hack/maxtext-env.sh gives it;
what MaxText 0.2.5 wrote (the recorded checkpoint tree) reads as the operator expects."""
from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import yaml

from elastic_api.models import ElasticTrainingJob
from elastic_api.validation import validate_job
from elastic_devtools.maxtext import env as maxtext_env
from elastic_devtools.maxtext.runner import (
    CPU_ENV,
    TINY_FLAGS,
    MainProcess,
    cpu_process,
    expand,
    main_process,
)
from elastic_operator.checkpoints.listing import scan_checkpoints_detailed
from elastic_operator.render import render_jobset

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "maxtext-0.2.5"


def fixture_job(name: str = "job-local.yaml") -> ElasticTrainingJob:
    return validate_job(yaml.safe_load((FIXTURES / name).read_text()))


def test_main_is_run_as_rendered_with_pod_values_resolved() -> None:
    job = fixture_job()
    rendered = render_jobset(job)["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]["containers"][0]
    main = main_process(job, namespace="team-a")
    assert main.argv == [*rendered["command"], *rendered["args"]]
    assert main.argv[-1] == "async_checkpointing=False"  # from checkpoint.async: false
    assert main.env == {
        "PATHWAYS_HEAD": "maxtext-cpu-pathways-head-0-0.maxtext-cpu",
        "JAX_PLATFORMS": "proxy", "XCLOUD_ENVIRONMENT": "GCP",
        "JAX_BACKEND_TARGET": "grpc://maxtext-cpu-pathways-head-0-0.maxtext-cpu:29000",
        "ENABLE_PATHWAYS_PERSISTENCE": "1",
        "ETJ_JOB_NAME": "maxtext-cpu", "ETJ_JOB_NAMESPACE": "team-a",
    }


def test_the_cpu_run_changes_only_the_platform_and_the_model_size() -> None:
    main = main_process(fixture_job())
    cpu = cpu_process(main)
    assert cpu.argv == [*main.argv, *TINY_FLAGS]
    assert cpu.env == {**main.env, **CPU_ENV}
    assert {k for k in cpu.env if cpu.env[k] != main.env.get(k)} == {"JAX_PLATFORMS"}
    assert cpu_process(main, tiny=False).argv == main.argv


def test_the_gcs_job_differs_only_in_where_it_writes() -> None:
    local, gcs = main_process(fixture_job()), main_process(fixture_job("job-gcs.yaml"))
    changed = [(a, b) for a, b in zip(local.argv, gcs.argv, strict=True) if a != b]
    assert changed == [("base_output_directory=/tmp/maxtext",
                        "base_output_directory=gs://maxtext-e2e/maxtext")]


def test_expand_follows_kubernetes() -> None:
    env = {"A": "x", "B": "$(A)"}
    assert expand("$(A)-$(B)-$(C)-$$(A)-$", env) == "x-$(A)-$(C)-$(A)-$"


def test_the_command_enters_the_root_with_exactly_the_environment(tmp_path: Path) -> None:
    env = maxtext_env.MaxTextEnv(rootfs=tmp_path / "root", venv="/opt/maxtext-v-k", version="v")
    process = MainProcess(argv=["python3", "-m", "m", "a=b c"], env={"X": "1"}, pod_name="p",
                          namespace="n")
    command = env.command(process.argv, process.env, {"/tmp": tmp_path / "pod-tmp"})
    assert command[:5] == ["unshare", "-m", "--", "bash", "-c"]
    script, *rest = command[5:]
    assert 'exec chroot "$root" /usr/bin/env -i "$@"' in script
    assert 'mount --bind "${2}" "$root/tmp"' in script
    assert rest[:3] == ["maxtext-root", str(tmp_path / "root"), str(tmp_path / "pod-tmp")]
    assert f"PATH={env.venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        in rest and "X=1" in rest and "HOME=/tmp" in rest
    assert rest[-4:] == ["python3", "-m", "m", "a=b c"]


def test_the_venv_is_named_as_the_setup_script_names_it() -> None:
    files = [maxtext_env.REQUIREMENTS_FILE, maxtext_env.CONSTRAINTS_FILE]
    out = subprocess.run(f"cat {' '.join(map(str, files))} | sha256sum | cut -c1-12",
                         shell=True, capture_output=True, text=True, check=True)
    assert maxtext_env.venv_key() == out.stdout.strip()
    script = (REPO / "hack" / "maxtext-env.sh").read_text()
    assert 'name=maxtext-$MAXTEXT_VERSION-$(venv_key)' in script


def test_the_constraints_pin_maxtext_and_leave_out_pytype() -> None:
    pins = dict(line.split("==", 1) for line in
                maxtext_env.CONSTRAINTS_FILE.read_text().splitlines()
                if line and not line.startswith("#"))
    assert pins["maxtext"] == maxtext_env.versions()["MAXTEXT_VERSION"] == "0.2.5"
    assert pins["jax"] == "0.12.0.1" and pins["orbax-checkpoint"] == "0.12.8"
    assert "pytype" not in pins
    requirements = maxtext_env.REQUIREMENTS_FILE.read_text()
    assert "pytype" not in requirements.split("\n", 4)[-1]  # past the header's mention


def test_maxtexts_checkpoint_tree_reads_as_the_operator_expects(tmp_path: Path) -> None:
    """The tree MaxText 0.2.5 left on a filesystem (keep 3 of steps 0, 10, 20, 29)."""
    root = tmp_path / "checkpoints"
    for entry in (FIXTURES / "checkpoints-local.txt").read_text().split():
        path = root / entry
        if entry.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
    summary = scan_checkpoints_detailed(str(root), now=datetime.now(UTC))
    assert summary.committed_steps == [10, 20, 29]
    assert summary.status.latest_committed_step == 29
    assert summary.status.incomplete_steps == []
    # On gs:// each step is committed by its commit_success.txt, which MaxText wrote.
    gcs = (FIXTURES / "checkpoints-gcs.txt").read_text().split()
    assert {e.split("/")[0] for e in gcs} == {"10", "20", "29"}
    assert all(f"{s}/commit_success.txt" in gcs for s in ("10", "20", "29"))


def test_a_real_head_pods_identity_fills_the_downward_api() -> None:
    """The scenario runs `main` as the local control plane's head pod: its name and uid."""
    job = fixture_job("scenario-local.yaml")
    main = main_process(job, namespace="maxtext-e2e", pod_name="maxtext-local-head-x",
                        pod_uid="0f1e-uid")
    assert main.pod_name == "maxtext-local-head-x" and main.namespace == "maxtext-e2e"
    assert main.env["ETJ_JOB_NAMESPACE"] == "maxtext-e2e"
    assert main.env["ETJ_JOB_NAME"] == "maxtext-local"
    assert main_process(job).pod_name == "maxtext-local-pathways-head-0-0-local"


def test_the_scenario_jobs_differ_only_in_name_and_where_they_write() -> None:
    local, gcs = fixture_job("scenario-local.yaml"), fixture_job("scenario-gcs.yaml")
    changed = [(a, b) for a, b in zip(main_process(local).argv, main_process(gcs).argv,
                                      strict=True) if a != b]
    assert changed == [("base_output_directory=/tmp/maxtext",
                        "base_output_directory=gs://maxtext-e2e/maxtext")]
    assert local.spec.checkpoint.directory == "/tmp/maxtext/maxtext-e2e/checkpoints"
    assert gcs.spec.checkpoint.directory == "gs://maxtext-e2e/maxtext/maxtext-e2e/checkpoints"
    # MaxText writes <base_output_directory>/<run_name>/checkpoints: what the operator lists.
    assert "run_name=maxtext-e2e" in local.spec.trainer.args
    assert local.spec.tpu.num_slices == 2 and local.spec.trainer.progress is not None
