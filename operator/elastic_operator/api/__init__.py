"""The ElasticTrainingJob API: models, TPU catalog, CRD generation and JobSet rendering.

Everything in this package is pure: no I/O, no clock, no randomness.
"""

GROUP = "elastic.pathways.dev"
VERSION = "v1alpha1"
KIND = "ElasticTrainingJob"
PLURAL = "elastictrainingjobs"
SINGULAR = "elastictrainingjob"
SHORT_NAMES = ["etj"]
API_VERSION = f"{GROUP}/{VERSION}"
