"""The spec's trainer part: the program in the head pod's `main` container
(`spec.trainer`: the bundled trainer or a command), its pod's parts (env, resources,
security context, volumes) and how its progress is read (`spec.trainer.progress`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from elastic_api.models.base import (
    ApiModel,
    LongStr,
    Quantity,
    ShortStr,
    SpecCount,
    SpecPositive,
)


class EnvVar(ApiModel):
    """An environment variable, as in a core/v1 EnvVar."""

    name: str = Field(min_length=1, max_length=253)
    value: LongStr | None = None
    value_from: dict[str, Any] | None = Field(None, description="As in a core/v1 EnvVar.")


class Resources(ApiModel):
    """Container resources, as in core/v1 ResourceRequirements."""

    limits: dict[ShortStr, Quantity] | None = Field(
        None, max_length=16,
        description="Resource name to quantity: an integer or a string such as 500m or 32Gi.",
    )
    requests: dict[ShortStr, Quantity] | None = Field(
        None, max_length=16,
        description="Resource name to quantity: an integer or a string such as 500m or 32Gi.",
    )


class SecurityContext(ApiModel):
    """What main's security context may relax, as in a core/v1 SecurityContext: the user
    and the root filesystem, for images that run as root or write next to their code.
    Nothing that grants privileges (privileged, capabilities, privilege escalation,
    seccomp, AppArmor, SELinux) is offered: those stay hardened."""

    run_as_non_root: bool | None = None
    run_as_user: SpecCount | None = None
    run_as_group: SpecCount | None = None
    read_only_root_filesystem: bool | None = None


class VolumeMount(ApiModel):
    """Where `main` mounts one of `trainer.volumes`, as in a core/v1 VolumeMount."""

    name: str = Field(max_length=63, description="A volume of trainer.volumes.")
    mount_path: str = Field(min_length=1, max_length=1024)
    read_only: bool | None = None
    sub_path: str | None = Field(None, max_length=1024)


class CsiVolumeSource(ApiModel):
    """An inline CSI volume, as in a core/v1 CSIVolumeSource (e.g. Cloud Storage FUSE)."""

    driver: ShortStr = Field(description="e.g. gcsfuse.csi.storage.gke.io (Cloud Storage FUSE).")
    read_only: bool | None = None
    volume_attributes: dict[ShortStr, LongStr] | None = Field(
        None, max_length=32, description="e.g. bucketName and mountOptions for Cloud Storage FUSE.",
    )


class PvcVolumeSource(ApiModel):
    """As in a core/v1 PersistentVolumeClaimVolumeSource."""

    claim_name: ShortStr
    read_only: bool | None = None


class EmptyDirVolumeSource(ApiModel):
    """As in a core/v1 EmptyDirVolumeSource."""

    medium: Literal["", "Memory"] | None = None
    size_limit: Quantity | None = None


class Volume(ApiModel):
    """A volume of the head pod for `main`, as in a core/v1 Volume: one source of csi
    (Cloud Storage FUSE), persistentVolumeClaim or emptyDir."""

    name: str = Field(max_length=63, description="A DNS-1123 label, not shared-tmp.")
    csi: CsiVolumeSource | None = None
    persistent_volume_claim: PvcVolumeSource | None = None
    empty_dir: EmptyDirVolumeSource | None = None


class ProgressSpec(ApiModel):
    """A progress sidecar for a program that does not write status.training itself: `etj
    progress`, a native sidecar in the head pod, follows the program's metrics file on the
    head's /tmp and reports step, loss and step time, and samples the program's process
    (the head pod then shares its process namespace) for what it is doing
    (status.training.activity; docs/api.md, "Progress of any trainer")."""

    image: str = Field(
        min_length=1, max_length=512,
        description="The trainer image of this project (it runs `etj progress`), e.g. "
        "<registry>/elastic-trainer:<version>.",
    )
    format: Literal["maxtext"] = Field(
        "maxtext",
        description="maxtext: MaxText's metrics_file, one JSON object per line with step, "
        "learning/loss and perf/step_time_seconds; its evaluation lines (eval/...) are the "
        "evaluation's heartbeat.",
    )
    metrics_file: str | None = Field(
        None, max_length=1024,
        description="The file to follow, under /tmp (the emptyDir main shares with the "
        "sidecar). Unset: for MaxText, metrics_file in trainer.args, else /tmp/etj-metrics.jsonl "
        "(the renderer passes it to MaxText as metrics_file); required for any other program.",
    )


@dataclass(frozen=True)
class BundledTrainer:
    """The bundled trainer's settings, unset ones filled with their defaults."""

    model: str
    steps: int
    batch: int
    seed: int
    data: str


# What the bundled trainer uses for a field left unset.
DEFAULT_MODEL, DEFAULT_BATCH, DEFAULT_SEED, DEFAULT_DATA = "tiny", 8, 0, "synthetic"
# The bundled trainer's model configs (elastic_trainer.configs; a test keeps them equal):
# admission refuses any other trainer.model, which `etj train` would refuse at start.
BUNDLED_MODELS = ("tiny", "small", "qwen3-0.6b")
# The fields that configure `etj train` only; admission refuses them with `command`.
BUNDLED_TRAINER_FIELDS = ("model", "steps", "batch", "seed", "data")


class TrainerSpec(ApiModel):
    """The program in the head pod's `main` container: the bundled trainer (`etj train`),
    or any JAX program given by `command` (e.g. MaxText)."""

    image: str = Field(
        min_length=1, max_length=512,
        description="Image of the head's main container (the trainer).",
    )
    command: list[LongStr] | None = Field(
        None, max_length=64,
        description="Entrypoint of main, as in a core/v1 Container (not run in a shell). "
        "Set: main runs it instead of `etj train`, and model, steps, batch, seed and data "
        "must be unset. Unset: main runs `etj train` with flags from this spec.",
    )
    args: list[LongStr] = Field(
        default_factory=list, max_length=64,
        description="Arguments of main, as in a core/v1 Container: after command, or after "
        "`etj train` and its flags.",
    )
    model: str | None = Field(
        None, max_length=253,
        description="Bundled trainer only: model config name, one of "
        f"{', '.join(BUNDLED_MODELS)}; unset = tiny.",
    )
    steps: SpecPositive | None = Field(
        None, description="Bundled trainer only, and required for it: training steps.",
    )
    batch: SpecPositive | None = Field(
        None, description="Bundled trainer only: global batch size (sequences per step); "
        "unset = 8.",
    )
    seed: SpecCount | None = Field(
        None, description="Bundled trainer only: seed for parameters and data; unset = 0.",
    )
    data: str | None = Field(
        None, max_length=1024,
        description="Bundled trainer only: `synthetic` (the default when unset), or a "
        "directory or glob of ArrayRecord shards on a filesystem: mount a bucket with "
        "trainer.volumes (Cloud Storage FUSE) and name the mounted path; a URL (gs://...) "
        "is refused.",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=64, description="Extra environment variables for `main`.",
    )
    resources: Resources | None = None
    security_context: SecurityContext | None = Field(
        None,
        description="Relaxes main's hardened security context field by field: the user and "
        "the read-only root filesystem (no privilege escalation, no capabilities and "
        "RuntimeDefault seccomp always stay).",
    )
    volumes: list[Volume] = Field(
        default_factory=list, max_length=16,
        description="Volumes of the head pod for main (e.g. a bucket through Cloud Storage "
        "FUSE).",
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list, max_length=16, description="Mounts of trainer.volumes in main.",
    )
    progress: ProgressSpec | None = Field(
        None,
        description="Only with command: a sidecar that reports the program's progress "
        "(status.training) from its metrics file. Unset: no sidecar.",
    )

    def bundled(self) -> BundledTrainer:
        """The bundled trainer's settings (admission requires steps when command is unset)."""
        if self.steps is None:
            raise ValueError("spec.trainer.steps: required for the bundled trainer")
        return BundledTrainer(
            model=self.model if self.model is not None else DEFAULT_MODEL,
            steps=self.steps,
            batch=self.batch if self.batch is not None else DEFAULT_BATCH,
            seed=self.seed if self.seed is not None else DEFAULT_SEED,
            data=self.data if self.data is not None else DEFAULT_DATA,
        )
