"""The ElasticTrainingJob API, shared by the operator, the trainer and the tools.

Models (the CRD is generated from them), the TPU catalog, every shared name and condition
reason, CRD generation and admission validation. Everything here is pure: no I/O, no
clock, no randomness; it needs pydantic and PyYAML only (no kubernetes, no jax). The one
exception is `elastic_api.kube`, the Kubernetes access layer of both sides, which imports
the kubernetes client only when it makes a client or reads a watch.
"""
from elastic_api.names import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)

__all__ = ["API_VERSION", "GROUP", "KIND", "PLURAL", "SHORT_NAMES", "SINGULAR", "VERSION"]
