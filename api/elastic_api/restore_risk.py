"""Whether a job's restore can outgrow the Pathways proxy (condition RestoreAtRisk), written
once for the operator's status, its early warning from the spec alone, `etj render` and the
docs.

The article's lesson beyond the demo's size: a checkpoint restored through the controller
passes through the `pathways-proxy` container, whose memory limit (100G by default) then
bounds the checkpoint; Qwen3-4B's (params and Adam moments, about 135 GiB) got the proxy
OOM-killed at every recovery. The fix takes the controller out of the data path, and
which fix applies depends on the trainer:

- the bundled trainer saves and restores through Orbax's Pathways persistence handler
  (the TPU hosts read their own shards) when `ENABLE_PATHWAYS_PERSISTENCE=1`, which
  `spec.checkpoint.persistence` (default true) sets: off, the controller reads every array;
- MaxText 0.2.5's pre-training trainer never looks that variable up: it saves and restores
  with Orbax's NO_DISPATCHER implementation on the controller unless
  `colocated_python_checkpointing=True` (with `enable_single_controller=True`) has the
  TPU hosts do it (maxtext/common/checkpoint_context.py, configs/base.yml);
- any other program: the operator cannot tell; persistence off is taken as the
  controller's path (a program that registers the persistence handler reads it).

"At risk": the newest committed checkpoint (status.checkpoint.latestCommittedBytes; before
any, the spec's estimate: a model whose parameter count is known, in float32 with Adam's
two moments) is larger than `SAFE_SHARE` of the proxy's memory limit. Half, because the
proxy holds what it passes on plus its own buffers, and MaxText 0.2.5 reads with a
concurrency budget of 96 GB (`checkpoint_storage_concurrent_gb`), about the whole default
limit: a restore of half the limit already leaves it no room for a second copy in flight.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from elastic_api import maxtext
from elastic_api.checkpoints import GIB
from elastic_api.conditions import Reason
from elastic_api.models import DEFAULT_MODEL, ElasticTrainingJobSpec

# The pathways-proxy container's memory limit unless spec.pathways.proxy.resources sets
# one (render.PROXY_LIMITS takes it from here).
DEFAULT_PROXY_MEMORY = "100G"
SAFE_SHARE = 0.5
# float32 parameters plus Adam's two float32 moments (MaxText's default weight_dtype and
# opt_type adamw; the bundled trainer's optax.adamw).
BYTES_PER_PARAMETER_WITH_ADAM = 4 * 3

# Parameter counts of the models a spec can name: the bundled trainer's `trainer.model`
# (elastic_trainer.configs, by its param_count; a test checks they agree) and MaxText's
# `model_name=` (maxtext 0.2.5's configs/models/<name>.yml, counted the same way: GQA
# attention, a gated MLP, tied or untied embeddings; they match the published sizes).
BUNDLED_PARAMETERS = {"tiny": 90_496, "small": 3_213_824, "qwen3-0.6b": 596_049_920}
MAXTEXT_PARAMETERS = {
    "qwen3-0.6b": 596_049_920, "qwen3-1.7b": 1_720_574_976, "qwen3-4b": 4_022_468_096,
    "qwen3-8b": 8_190_735_360, "qwen3-14b": 14_768_307_200, "qwen3-32b": 32_762_123_264,
    "llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192,
    "llama3.1-8b": 8_030_261_248, "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800, "mistral-7b": 7_241_732_096,
}
MODEL_NAME_KEY = "model_name"
COLOCATED_KEY = maxtext.COLOCATED_KEY
MAXTEXT_VERSION = "0.2.5"

Trainer = Literal["bundled", "maxtext", "other"]

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
    "m": Decimal("0.001"), "u": Decimal("0.000001"), "n": Decimal("0.000000001"),
}
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([KMGTPE]i|[numkMGTPE]|"
                       r"[eE][+-]?[0-9]{1,2})?")


def quantity_bytes(text: str) -> int:
    """A Kubernetes quantity (`100G`, `96Gi`, `1e11`) in bytes, rounded up as the kubelet
    does; ValueError for what is not one."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    factor = Decimal(10) ** int(suffix[1:]) if suffix[:1] in ("e", "E") \
        else _SUFFIXES[suffix]
    value = number * factor
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def trainer_kind(spec: ElasticTrainingJobSpec) -> Trainer:
    trainer = spec.trainer
    if trainer.command is None:
        return "bundled"
    return "maxtext" if maxtext.runs_maxtext(trainer.command, trainer.args) else "other"


def _maxtext_colocated(spec: ElasticTrainingJobSpec) -> bool:
    """MaxText's colocated_python_checkpointing is on (its args, or M_ in trainer.env)."""
    given = maxtext.flag_value(spec.trainer.args, COLOCATED_KEY)
    env = maxtext.env_key(COLOCATED_KEY)
    from_env = next((e.value for e in spec.trainer.env if e.name == env), None)
    return maxtext.truthy(given) or maxtext.truthy(from_env)


@dataclass(frozen=True)
class RestorePath:
    """How this job's trainer restores a checkpoint, and what takes the proxy out of it."""

    trainer: Trainer
    through_proxy: bool  # the controller reads the arrays: they pass through the proxy
    why: str
    fix: str


def restore_path(spec: ElasticTrainingJobSpec) -> RestorePath | None:
    """None: no Pathways proxy at all (backend simulated)."""
    if spec.backend != "pathways":
        return None
    kind = trainer_kind(spec)
    persistence = spec.checkpoint.persistence
    if kind == "maxtext":
        colocated = _maxtext_colocated(spec)
        why = (f"MaxText {MAXTEXT_VERSION}'s trainer restores "
               + ("on the TPU hosts (colocated_python_checkpointing=True)" if colocated else
                  "on the controller (Orbax NO_DISPATCHER; it ignores "
                  "ENABLE_PATHWAYS_PERSISTENCE)"))
        fix = ("add colocated_python_checkpointing=True and enable_single_controller=True "
               "to spec.trainer.args and the colocated Python sidecar "
               f"(spec.pathways.colocatedPython.image) (MaxText {MAXTEXT_VERSION}: the TPU hosts "
               "then save and restore their own shards; spec.checkpoint.persistence does not "
               "help it)")
        return RestorePath(kind, not colocated, why, fix)
    fix = ("set spec.checkpoint.persistence: true (ENABLE_PATHWAYS_PERSISTENCE=1: Orbax's "
           "Pathways persistence handler has the TPU hosts read their own shards"
           + (")" if kind == "bundled" else "; your program must register it, e.g. "
              "pathwaysutils.initialize())"))
    trainer = "the bundled trainer" if kind == "bundled" else "the program in main"
    why = (f"{trainer} restores " + ("on the TPU hosts (Pathways persistence)" if persistence
                                     else "on the controller (checkpoint.persistence false)"))
    return RestorePath(kind, not persistence, why, fix)


def proxy_memory(spec: ElasticTrainingJobSpec) -> str:
    """The pathways-proxy container's memory limit as rendered (spec, else the default)."""
    component = spec.pathways.proxy
    limits = component.resources.limits if component and component.resources else None
    return (limits or {}).get("memory", DEFAULT_PROXY_MEMORY)


def estimated_checkpoint_bytes(spec: ElasticTrainingJobSpec) -> int | None:
    """The spec alone: a named model of known size, float32 with Adam (None: unknown)."""
    trainer = spec.trainer
    kind = trainer_kind(spec)
    if kind == "bundled":
        params = BUNDLED_PARAMETERS.get(trainer.model or DEFAULT_MODEL)
    elif kind == "maxtext":
        name = maxtext.flag_value(trainer.args, MODEL_NAME_KEY)
        params = MAXTEXT_PARAMETERS.get(name) if name is not None else None
    else:
        params = None
    return params * BYTES_PER_PARAMETER_WITH_ADAM if params is not None else None


def gib(n: int) -> str:
    """Bytes in a message: `150 GiB`, `1.85 GiB`, `1.3 MiB`, `512 bytes`."""
    value = n / GIB
    if value >= 10:
        return f"{value:.0f} GiB"
    if value >= 0.01:
        return f"{value:.2f} GiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


@dataclass(frozen=True)
class RestoreRisk:
    """The RestoreAtRisk condition's verdict (status: True, False or Unknown)."""

    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str


def assess(spec: ElasticTrainingJobSpec, checkpoint_bytes: int | None,
           step: int | None = None) -> RestoreRisk:
    """RestoreAtRisk from the spec and the newest committed step's size (None: none
    listed yet; the spec's estimate, where it has one, stands in)."""
    path = restore_path(spec)
    if path is None:
        return RestoreRisk("False", Reason.NO_PROXY, "backend simulated: no Pathways proxy")
    if not path.through_proxy:
        return RestoreRisk("False", Reason.HOSTS_RESTORE,
                           f"{path.why}: the pathways-proxy is not in the data path")
    limit_text = proxy_memory(spec)
    limit = quantity_bytes(limit_text)
    safe = int(limit * SAFE_SHARE)
    if checkpoint_bytes is not None:
        what = f"the newest checkpoint (step {step}) is {gib(checkpoint_bytes)}"
        size = checkpoint_bytes
    else:
        estimate = estimated_checkpoint_bytes(spec)
        if estimate is None:
            return RestoreRisk("Unknown", Reason.SIZE_UNKNOWN,
                               f"{path.why}, through the pathways-proxy (memory limit "
                               f"{limit_text}); no checkpoint listed yet to size")
        what = (f"no checkpoint listed yet; the model's parameters with Adam's two moments "
                f"(float32) come to about {gib(estimate)}")
        size = estimate
    share = f"{SAFE_SHARE:.0%} of the pathways-proxy's memory limit {limit_text} " \
            f"({gib(safe)})"
    if size <= safe:
        return RestoreRisk("False", Reason.WITHIN_PROXY_MEMORY,
                           f"{path.why}, through the pathways-proxy: {what}, within {share}")
    return RestoreRisk("True", Reason.PROXY_MEMORY,
                       f"{path.why}, through the pathways-proxy: {what}, more than {share}; "
                       f"a restore can get the proxy OOM-killed at every recovery. Fix: "
                       f"{path.fix}; or raise spec.pathways.proxy.resources.limits.memory")
