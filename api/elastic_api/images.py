"""The images of the Pathways servers (and the colocated Python sidecar): the tag a job
gets by default, and which references admission refuses because they move.

A slice the operator replaces is its worker Job deleted and recreated by JobSet from the
JobSet's pod template, which no one can change on a running JobSet (JobSet v0.12's
webhook keeps `replicatedJobs` immutable but for parallelism, completions and, while
suspended, scheduling fields). The new pods name the image exactly as the first ones did;
a node that has not pulled it resolves that name in the registry then. A digest always
resolves to the same build; a tag is whatever the registry holds under it that day, and
`latest` (or no tag) moves with every Pathways release: a slice replaced a week into a
run would pull a newer server than its peers and the resource manager run. So admission
refuses those (for new jobs), the default is a dated tag, and the operator reports a
worker that runs another digest than the resource manager (docs/design/pathways-images.md).
"""
from __future__ import annotations

import re

PATHWAYS_IMAGE_REPO = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"
SERVER_IMAGE, PROXY_IMAGE = "server", "proxy_server"
# The tag every job gets unless it names its own (spec.pathways.version). Google tags the
# Pathways builds two ways, each pairing with one JAX release on the client (main): dated,
# <date>-jax_<version> (e.g. 20261001-jax_0.10.2), and jax-<version> (e.g. jax-0.9.0, as
# Google's "Introduction to Pathways on Cloud" and pathways-utils'
# deploy_pathways_service.py name them). This one pairs with the JAX the bundled trainer
# pins (pyproject.toml; tests/unit/test_images.py keeps them together). No run of this
# project has pulled it.
DEFAULT_PATHWAYS_VERSION = "20261001-jax_0.10.2"
MOVING_TAG = "latest"
COLOCATED_PYTHON_REPO = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways-colocated-python"

# RE2 and Python alike (CEL's matches() searches, as re.search): a sha256 digest at the
# end; or, in a reference without '@', a tag after the last ':' (a registry's port is
# followed by a '/', which no tag holds).
DIGEST = r"@sha256:[0-9a-f]{64}$"
TAG = r"^[^@]*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
# The JAX release in a Pathways tag, in either form: `-jax_<version>` ending a dated tag,
# or `jax-<version>` as the whole tag (after an image's ':'), before an optional digest.
_TAG_JAX = re.compile(r"(?:-jax_|(?:^|:)jax-)([0-9][0-9a-z.]*)(?:@sha256:[0-9a-f]{64})?$")


def moves(reference: str) -> bool:
    """No digest, and no tag or the tag `latest`: what the registry resolves it to changes."""
    if re.search(DIGEST, reference):
        return False
    return not re.search(TAG, reference) or reference.endswith(":" + MOVING_TAG)


def cel_pinned(expr: str) -> str:
    """The CEL predicate of `not moves(expr)`."""
    return (f"{expr}.matches('{DIGEST}') || {expr}.matches('{TAG}') && "
            f"!{expr}.endsWith(':{MOVING_TAG}')")


def jax_of(tag: str) -> str | None:
    """The JAX release a Pathways tag (or an image reference ending in one) pairs with:
    `20261001-jax_0.10.2` -> `0.10.2`, `jax-0.9.0` -> `0.9.0`; None for a tag that names
    no JAX release (`latest`, `2026-10-01`, a build of one's own)."""
    match = _TAG_JAX.search(tag)
    return match.group(1) if match else None


def server_image(version: str) -> str:
    return f"{PATHWAYS_IMAGE_REPO}/{SERVER_IMAGE}:{version}"


def proxy_image(version: str) -> str:
    return f"{PATHWAYS_IMAGE_REPO}/{PROXY_IMAGE}:{version}"
