"""What the operator knows of MaxText (the `maxtext` package, 0.2.x), written once for the
renderer, the admission rules and the dev tools.

A command runs MaxText's trainer when `trainer.command` or `trainer.args` holds one of its
train modules (`python3 -m maxtext.trainers.pre_train.train`, or `MaxText.train` of older
trees). For such a command the renderer passes MaxText the spec's settings it would
otherwise never see, as MaxText's own `key=value` flags after `trainer.args`: where to write
its metrics file (for the progress sidecar), how many checkpoints to keep, whether to save
asynchronously. MaxText also reads a key from the environment variable `M_<KEY>` and refuses
to start when a key comes both ways, so a key the renderer sets may come neither from
`args` nor from `env` (admission refuses it, naming the field).

The same test runs in CEL (`cel_runs_maxtext`) and in Python (`runs_maxtext`).
"""
from __future__ import annotations

from collections.abc import Sequence

from elastic_api.models import ElasticTrainingJobSpec, TrainerSpec

# MaxText 0.2.5's pre-training entry point, and the one of trees before the package layout.
TRAIN_MODULES = ("maxtext.trainers.pre_train.train", "MaxText.train")

# MaxText's config keys the renderer may set (maxtext/configs/base.yml).
METRICS_FILE_KEY = "metrics_file"
KEEP_KEY = "max_num_checkpoints_to_keep"
ASYNC_KEY = "async_checkpointing"
# pyconfig.yaml_key_to_env_key: "M_" + key.upper().
ENV_PREFIX = "M_"
# Has the TPU hosts save and restore their own shards through Pathways' colocated Python,
# which runs in the sidecar of spec.pathways.colocatedPython.
COLOCATED_KEY = "colocated_python_checkpointing"
# The words a boolean flag is read true from (stripped, any case).
TRUE_WORDS = ("true", "1", "yes")

# Where MaxText writes its metrics for the progress sidecar unless told otherwise: directly
# in the head's /tmp (MaxText opens the file for appending and creates no directory).
DEFAULT_METRICS_FILE = "/tmp/etj-metrics.jsonl"
# A metrics file lies under /tmp, the emptyDir `main` shares with the sidecar: parts of
# letters, digits, '-', '_' and '.', none of them `.` or `..`, no trailing `/`. Free of
# backslashes, so the same text is a CEL regex.
METRICS_FILE_PATTERN = r"^/tmp(/[-_.A-Za-z0-9]*[-_A-Za-z0-9][-_.A-Za-z0-9]*)+$"


def env_key(key: str) -> str:
    """The environment variable MaxText reads `key` from."""
    return ENV_PREFIX + key.upper()


def runs_maxtext(command: Sequence[str] | None, args: Sequence[str]) -> bool:
    """The command runs MaxText's trainer (`-m <train module>` anywhere in command or args)."""
    if command is None:
        return False
    return any(part in TRAIN_MODULES for part in [*command, *args])


def flag_value(args: Sequence[str], key: str) -> str | None:
    """The value of `key=value` in MaxText's args (the last one: OmegaConf's from_cli
    keeps the last), or None."""
    value = None
    for arg in args:
        name, sep, rest = arg.partition("=")
        if sep and name == key:
            value = rest
    return value


def has_flag(args: Sequence[str], key: str) -> bool:
    return any(arg.startswith(key + "=") for arg in args)


def truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in TRUE_WORDS


def asks_colocated_python(trainer: TrainerSpec) -> bool:
    """MaxText's args or its M_ variable turn colocated_python_checkpointing on, any
    mention (as the CEL rule reads them; which one MaxText keeps is restore_risk's)."""
    if not runs_maxtext(trainer.command, trainer.args):
        return False
    key = COLOCATED_KEY + "="
    return (any(a.startswith(key) and truthy(a[len(key):]) for a in trainer.args)
            or any(e.name == env_key(COLOCATED_KEY) and truthy(e.value) for e in trainer.env))


def cel_asks_colocated_python(trainer: str) -> str:
    """`asks_colocated_python` as a CEL expression over the trainer object `trainer`."""
    key = COLOCATED_KEY + "="
    words = ", ".join(f"'{w}'" for w in TRUE_WORDS)
    return (f"({cel_runs_maxtext(trainer)} && ("
            f"has({trainer}.args) && {trainer}.args.exists(a, a.startsWith('{key}') && "
            f"a.substring({len(key)}).trim().lowerAscii() in [{words}]) || "
            f"has({trainer}.env) && {trainer}.env.exists(e, "
            f"e.name == '{env_key(COLOCATED_KEY)}' && has(e.value) && "
            f"e.value.trim().lowerAscii() in [{words}])))")


def cel_runs_maxtext(trainer: str) -> str:
    """`runs_maxtext` as a CEL expression over the trainer object `trainer` (e.g.
    `self.trainer`)."""
    modules = ", ".join(f"'{m}'" for m in TRAIN_MODULES)
    return (f"(has({trainer}.command) && ({trainer}.command.exists(c, c in [{modules}]) || "
            f"has({trainer}.args) && {trainer}.args.exists(a, a in [{modules}])))")


def metrics_file(trainer: TrainerSpec) -> str | None:
    """The file the progress sidecar follows (None without `trainer.progress`): MaxText's
    `metrics_file` from args, else `progress.metricsFile`, else (MaxText) the default."""
    progress = trainer.progress
    if progress is None:
        return None
    maxtext = runs_maxtext(trainer.command, trainer.args)
    given = flag_value(trainer.args, METRICS_FILE_KEY) if maxtext else None
    if given is not None:
        return given
    if progress.metrics_file is not None:
        return progress.metrics_file
    return DEFAULT_METRICS_FILE if maxtext else None


def renderer_flags(spec: ElasticTrainingJobSpec) -> list[str]:
    """The flags the renderer appends to MaxText's args (none for any other program): the
    metrics file the progress sidecar follows (unless args name one), and the checkpoint
    settings the spec sets (admission keeps them out of args and env)."""
    trainer = spec.trainer
    if not runs_maxtext(trainer.command, trainer.args):
        return []
    flags = []
    path = metrics_file(trainer)
    if path is not None and not has_flag(trainer.args, METRICS_FILE_KEY):
        flags.append(f"{METRICS_FILE_KEY}={path}")
    if spec.checkpoint.keep is not None:
        flags.append(f"{KEEP_KEY}={spec.checkpoint.keep}")
    if spec.checkpoint.async_ is not None:
        flags.append(f"{ASYNC_KEY}={spec.checkpoint.async_}")
    return flags
