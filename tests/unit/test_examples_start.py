"""Every example's programs of this project start far enough to refuse what they would
refuse later: each container the renderer starts from our image (`etj train`, `etj
progress`, `etj slice-agent`) parses its rendered command, and the bundled trainer runs
its start checks (`preflight`: its flags, the model config, the form of --data) in this
process, without training. MaxText itself is started by `make e2e-maxtext`, not here."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_api import data_paths
from elastic_api.etj_cli import build_parser
from elastic_api.models import BUNDLED_MODELS
from elastic_api.validation import DATA_URL, MODEL_UNKNOWN, validate_job
from elastic_operator.render import render_jobset
from elastic_trainer.configs import CONFIGS
from elastic_trainer.train_cli import preflight
from hack import golden

REPO = Path(__file__).resolve().parents[2]


def _ours(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container (sidecars too) whose command is `etj ...`."""
    found = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            if c.get("command", [""])[0] == "etj":
                found.append(c)
    return found


def _argv(container: dict[str, Any]) -> list[str]:
    return [*container["command"][1:], *container.get("args", [])]


@pytest.mark.parametrize("name", golden.example_names())
def test_each_example_starts_the_programs_it_names(name: str):
    job = validate_job(yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text()))
    started = _ours(render_jobset(job))
    assert started or job.spec.trainer.command is not None, name
    for container in started:
        args = build_parser().parse_args(_argv(container))  # SystemExit on a bad flag
        if container["command"][:2] == ["etj", "train"]:
            assert preflight(args) is None, (name, container["name"])


def test_the_start_refuses_what_admission_refuses_with_the_same_fix():
    """One contract, both sides fed the same spec: a URL as data, a model the trainer
    does not have. Admission refuses them (validate_job, and the CRD's CEL in
    tests/integration/test_admission.py); a job stored before those rules, rendered
    anyway, is refused by the trainer at start with the same words."""
    obj = yaml.safe_load((REPO / "examples" / "article.yaml").read_text())
    obj["spec"]["trainer"]["data"] = "gs://my-bucket/datasets/c4/train"
    with pytest.raises(ValueError) as info:
        validate_job(obj)
    assert DATA_URL in str(info.value).splitlines()
    stored = validate_job(yaml.safe_load((REPO / "examples" / "article.yaml").read_text()))
    stored.spec.trainer.data = "gs://my-bucket/datasets/c4/train"
    (main,) = [c for c in _ours(render_jobset(stored)) if c["name"] == "main"]
    problem = preflight(build_parser().parse_args(_argv(main)))
    assert problem == f"--data gs://my-bucket/datasets/c4/train: " \
                      f"{data_paths.READ_FROM_A_FILESYSTEM}"
    assert DATA_URL.endswith(data_paths.READ_FROM_A_FILESYSTEM)

    obj = yaml.safe_load((REPO / "examples" / "article.yaml").read_text())
    obj["spec"]["trainer"]["model"] = "qwen3-32b"
    with pytest.raises(ValueError) as info:
        validate_job(obj)
    assert MODEL_UNKNOWN in str(info.value).splitlines()
    stored.spec.trainer.data = "synthetic"
    stored.spec.trainer.model = "qwen3-32b"
    (main,) = [c for c in _ours(render_jobset(stored)) if c["name"] == "main"]
    assert "unknown model config 'qwen3-32b'" in (
        preflight(build_parser().parse_args(_argv(main))) or "")


def test_admission_knows_exactly_the_trainers_models():
    assert set(BUNDLED_MODELS) == set(CONFIGS)
