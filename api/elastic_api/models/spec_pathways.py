"""The spec's Pathways part: the resource manager, proxy and server images, colocated
Python (`spec.pathways`), and the tolerations the pods carry.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from elastic_api.images import COLOCATED_PYTHON_REPO, DEFAULT_PATHWAYS_VERSION, server_image
from elastic_api.models.base import ApiModel, LongStr, ShortStr, SpecInt
from elastic_api.models.spec_trainer import Resources


class PathwaysComponent(ApiModel):
    """Overrides for one Pathways component."""

    resources: Resources | None = None
    args: list[LongStr] = Field(
        default_factory=list, max_length=64, description="Extra flags for this component.",
    )


class PathwaysImages(ApiModel):
    """Full image references; override `version`. Each with a digest (@sha256:...) or a
    tag other than latest."""

    server: str | None = Field(
        None, max_length=512, description="Resource manager and worker image, e.g. "
        f"{server_image(DEFAULT_PATHWAYS_VERSION)}@sha256:<digest>.",
    )
    proxy: str | None = Field(None, max_length=512, description="IFRT proxy image.")


class ColocatedPythonSpec(ApiModel):
    """The colocated Python sidecar on every TPU worker (Pathways' colocated Python: code
    the controller sends to run on the TPU hosts, e.g. MaxText's
    colocated_python_checkpointing), rendered as xpk's --colocated-python-sidecar-image
    renders it: a native sidecar `colocated-python-sidecar` serving gRPC on port 50051,
    sharing the workers' /tmp."""

    image: str = Field(
        min_length=1, max_length=512,
        description="The sidecar's image: your program's code (e.g. MaxText) built on "
        f"{COLOCATED_PYTHON_REPO}/sidecar:<date>-python_<version>-jax_<version>, the JAX "
        "of main. A digest or a dated tag: no tag or latest is refused (a replaced "
        "slice would run other code than its peers).",
    )
    resources: Resources | None = None


class PathwaysSpec(ApiModel):
    """The Pathways servers: resource manager, IFRT proxy and TPU workers."""

    version: str = Field(
        DEFAULT_PATHWAYS_VERSION, max_length=128,
        description="Tag of the Pathways server and proxy images (<date>-jax_<version> or "
        "jax-<version>, pairing with the JAX of main; the default pairs with the bundled "
        "trainer's). "
        "latest is refused: it moves, and a slice replaced later would pull another "
        "server than its peers run.",
    )
    images: PathwaysImages | None = None
    colocated_python: ColocatedPythonSpec | None = Field(
        None,
        description="Run the colocated Python sidecar on every TPU worker (backend "
        "pathways). Required by MaxText's colocated_python_checkpointing=True.",
    )
    gcs_scratch: str | None = Field(
        None, max_length=1024, pattern=r"^gs://[^/]+",
        description="gs:// scratch location for Pathways (required with backend pathways).",
    )
    resource_manager: PathwaysComponent | None = None
    proxy: PathwaysComponent | None = None
    worker: PathwaysComponent | None = None


class Toleration(ApiModel):
    """A pod toleration, as in core/v1."""

    key: ShortStr | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: ShortStr | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: SpecInt | None = None
