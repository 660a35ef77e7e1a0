"""The Pathways images: the default build pairs with the JAX the trainer pins; admission
refuses an image that moves in the registry; the renderer keeps what a node pulled and
renders the colocated Python sidecar as xpk does (docs/design/pathways-images.md)."""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_api.images import (
    DEFAULT_PATHWAYS_VERSION,
    jax_of,
    moves,
    proxy_image,
    server_image,
)
from elastic_api.validation import (
    COLOCATED_NEEDS_PATHWAYS,
    COLOCATED_SIDECAR_REQUIRED,
    IMAGE_MOVES,
    PATHWAYS_VERSION_MOVES,
    validate_job,
)
from elastic_operator.render import pathways_security_context, render_jobset

REPO = Path(__file__).resolve().parents[2]
DIGEST = "@sha256:" + "ab" * 32


def _pinned_jax() -> str:
    (line,) = [x for x in (REPO / "constraints.txt").read_text().splitlines()
               if x.startswith("jax==")]
    return line.removeprefix("jax==")


def test_the_default_build_pairs_with_the_jax_the_trainer_pins():
    assert jax_of(DEFAULT_PATHWAYS_VERSION) == _pinned_jax()
    assert f'"jax=={_pinned_jax()}"' in (REPO / "pyproject.toml").read_text()


@pytest.mark.parametrize(("tag", "jax"), [
    # Dated, as the registry lists the builds.
    ("20261001-jax_0.10.2", "0.10.2"),
    ("20260623-jax_0.10.1", "0.10.1"),
    # jax-<version>, as Google's Pathways pages and pathways-utils'
    # deploy_pathways_service.py name them (server:jax-0.9.0, proxy_server:jax-0.9.0).
    ("jax-0.9.0", "0.9.0"),
    ("jax-0.12.0.1", "0.12.0.1"),
    # Either form in a whole image reference, with or without a digest.
    (server_image("jax-0.9.0"), "0.9.0"),
    (proxy_image("20261001-jax_0.10.2") + DIGEST, "0.10.2"),
    ("registry.local:5000/pathways/server:jax-0.5.3" + DIGEST, "0.5.3"),
])
def test_the_jax_release_of_either_tag_form(tag: str, jax: str):
    assert jax_of(tag) == jax


@pytest.mark.parametrize("tag", [
    # No JAX release in the tag: the pairing cannot be read, and jax_of says so (None),
    # as it always has for a tag of another form; nothing is refused for it.
    "latest", "2026-10-01", "nightly", "jax-", "jax_0.9.0", "myjax-0.9.0", "jax-v0.9.0",
    "20261001-jax-", server_image("latest"), "registry.local:5000/pathways/server",
])
def test_a_tag_without_a_jax_release_pairs_with_none(tag: str):
    assert jax_of(tag) is None


@pytest.mark.parametrize(("reference", "moving"), [
    (server_image("latest"), True),
    ("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server", True),  # no tag: latest
    ("registry.local:5000/pathways/server", True),  # a port is no tag
    (server_image(DEFAULT_PATHWAYS_VERSION), False),
    (server_image("latest") + DIGEST, False),  # the digest decides
    ("registry.local:5000/pathways/server" + DIGEST, False),
    ("registry.local:5000/pathways/server:2026-10-01", False),
    (server_image("latest") + "@sha256:abc", True),  # not a digest
])
def test_what_moves(reference: str, moving: bool):
    assert moves(reference) is moving


def _job(**pathways: Any) -> dict[str, Any]:
    obj = yaml.safe_load((REPO / "examples" / "article.yaml").read_text())
    obj["spec"]["pathways"].update(pathways)
    return obj


def _problems(obj: dict[str, Any]) -> list[str]:
    try:
        validate_job(copy.deepcopy(obj))
    except ValueError as e:
        return str(e).splitlines()
    return []


def test_images_that_move_are_refused_naming_the_field():
    assert _problems(_job(version="latest")) == [PATHWAYS_VERSION_MOVES]
    moving = {"server": server_image("latest"), "proxy": "registry.local:5000/p/proxy"}
    assert _problems(_job(images=moving)) == [
        IMAGE_MOVES.replace("{field}", "images.server"),
        IMAGE_MOVES.replace("{field}", "images.proxy")]
    pinned = {"server": server_image("latest") + DIGEST,
              "proxy": proxy_image(DEFAULT_PATHWAYS_VERSION)}
    assert _problems(_job(images=pinned)) == []
    assert _problems(_job(colocatedPython={"image": "sidecar"})) == [
        IMAGE_MOVES.replace("{field}", "colocatedPython.image")]


def test_an_unset_version_is_the_dated_default():
    obj = _job()
    del obj["spec"]["pathways"]["version"]
    rm = render_jobset(validate_job(obj))["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]["initContainers"][0]
    assert rm["image"] == server_image(DEFAULT_PATHWAYS_VERSION)
    assert re.fullmatch(r"\d{8}-jax_[0-9.]+", DEFAULT_PATHWAYS_VERSION)


MAXTEXT = {"image": "runner:1", "command": ["python3", "-m", "maxtext.trainers.pre_train.train"]}


@pytest.mark.parametrize("trainer", [
    {**MAXTEXT, "args": ["colocated_python_checkpointing=True"]},
    {**MAXTEXT, "args": ["colocated_python_checkpointing= yes "]},
    {**MAXTEXT, "env": [{"name": "M_COLOCATED_PYTHON_CHECKPOINTING", "value": "1"}]},
])
def test_colocated_checkpointing_needs_the_sidecar(trainer: dict[str, Any]):
    obj = _job()
    obj["spec"]["trainer"] = trainer
    obj["spec"]["checkpoint"].pop("keep")
    assert _problems(obj) == [COLOCATED_SIDECAR_REQUIRED]
    obj["spec"]["pathways"]["colocatedPython"] = {"image": "sidecar:1"}
    assert _problems(obj) == []


def test_colocated_off_or_another_program_needs_no_sidecar():
    obj = _job()
    obj["spec"]["checkpoint"].pop("keep")
    obj["spec"]["trainer"] = {**MAXTEXT, "args": ["colocated_python_checkpointing=False"]}
    assert _problems(obj) == []
    obj["spec"]["trainer"] = {"image": "t:1", "command": ["python3", "train.py"],
                              "args": ["colocated_python_checkpointing=True"]}
    assert _problems(obj) == []


def test_the_sidecar_needs_pathways_workers():
    obj = yaml.safe_load((REPO / "examples" / "simulated.yaml").read_text())
    obj["spec"]["pathways"] = {"colocatedPython": {"image": "sidecar:1"}}
    assert _problems(obj) == [COLOCATED_NEEDS_PATHWAYS]


def test_the_sidecar_is_rendered_beside_each_worker_as_xpk_renders_it():
    """xpk's templates/pathways_workload_create.yaml.j2 (--colocated-python-sidecar-image):
    a native sidecar on the workers, gRPC on 50051, PYTHONUNBUFFERED, the worker's /tmp."""
    obj = _job(colocatedPython={"image": "sidecar:1",
                                "resources": {"requests": {"cpu": 2, "memory": "8Gi"}}})
    head, worker = render_jobset(validate_job(obj))["spec"]["replicatedJobs"]
    pod = worker["template"]["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    assert sidecar == {
        "name": "colocated-python-sidecar", "image": "sidecar:1",
        "imagePullPolicy": "IfNotPresent", "restartPolicy": "Always",
        "env": [{"name": "GRPC_SERVER_ADDRESS", "value": "0.0.0.0:50051"},
                {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "ports": [{"containerPort": 50051, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}},
        "volumeMounts": [{"name": "shared-tmp", "mountPath": "/tmp"}],
        # Ours, not xpk's: it serves on the host network, beside the TPU VM's /tmp.
        "securityContext": pathways_security_context(),
    }
    (tmp,) = pod["volumes"]
    assert tmp["hostPath"] == {"path": "/tmp", "type": "DirectoryOrCreate"}
    head_names = [c["name"] for c in head["template"]["spec"]["template"]["spec"][
        "initContainers"]]
    assert "colocated-python-sidecar" not in head_names
