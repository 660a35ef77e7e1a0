"""The commit rule: which Orbax steps under a checkpoint root are committed.

One pure decision over a listing of the root (`decide`), applied by the operator's scan
(`status.checkpoint`) and by the trainer (what it restores and what it deletes), so the
step the status calls `latestCommittedStep` is the step the trainer restores.

What Orbax 0.12.8 writes (orbax/checkpoint/_src/path/atomicity.py, step.py) and MaxText
0.2.5 uses (`<run>/checkpoints/<step>/` holding `_CHECKPOINT_METADATA`, `items/` and
`commit_success.txt`):

- gs:// (`CommitFileTemporaryPath`): `<step>/` is written in place; `commit_success.txt`
  is written last, and only then is the step finalized.
- a filesystem (`AtomicRenameTemporaryPath`): `<step>.orbax-checkpoint-tmp/` (older
  releases: `...-tmp-<timestamp>`; a partial save: `<step>.partial_save.orbax-
  checkpoint-tmp...`) is written, `commit_success.txt` is written into it, then it is
  renamed to `<step>/`. A save killed before the rename leaves the tmp directory; Orbax
  removes it only when the same step is saved again.

The rule, and why:

- A step name is a canonical decimal in ASCII digits: `0`, or digits without a leading
  zero, as Orbax's default step name format writes and reads (`0|[1-9]\\d*`). `007`
  names no step (Orbax's manager would open `7/` to restore step 7), and neither do
  other scripts' digits (Arabic-Indic U+0666 U+0660, which `int()` reads as 60). So a
  step has exactly one name, `str(step)`, and a restore of step N opens the entry that
  was listed.
- Committed: a directory (not a symbolic link) with a step name that holds
  `commit_success.txt`, on gs:// and on a filesystem alike. Orbax 0.12.8 writes that file
  on both before the step is final; a step directory without it is a save cut short, an
  empty directory or someone else's: nothing a restore can load. (Orbax itself would list
  an empty `30/` on a filesystem as a step; it calls marker-less renamed steps "legacy"
  and reads them only with `allow_legacy_atomic_rename`.) Never calling such a step
  committed is the point: a status that promises a step the trainer cannot load is worse
  than one that promises an older step.
- Uncommitted: a step directory without the marker, or a tmp directory of a step.
  Newer than the newest committed step (or no step committed yet): *incomplete*, a save
  that may still be in flight. Not newer: *abandoned*, nothing will finish it (saves
  only go forward: every save is of a step past the newest committed one), e.g. the tmp
  directory of a save killed before a later step committed, which Orbax keeps for good,
  or a step Orbax's `max_to_keep` is deleting. A save that a trainer stopped waiting for
  may still land; a listing cannot tell, and the rule does not guess.
- Ignored: everything else (files, symbolic links, foreign names such as `prefix_100`,
  `tensorboard/`). A link is not what Orbax writes (it renames real directories), and
  following one would count, or delete, another run's data.
- A root with no step at all but a `checkpoints/` directory is MaxText's run directory,
  one level above its checkpoint root: `nested_root_hint` says so.

A committed step's size (`step_size`) is what a restore of it reads: the bytes of the
regular files under its directory, by their length as listed (a sparse file counts its
length: a restore reads it whole), links neither followed nor counted, no object read.
The operator's scan (status.checkpoint.latestCommittedBytes) and the trainer's report of
its restore (status.training.lastRestore.bytes) count it the same way.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

COMMIT_MARKER = "commit_success.txt"
TMP_DIR_SUFFIX = ".orbax-checkpoint-tmp"
# What MaxText names its checkpoint root under its run directory.
NESTED_ROOT = "checkpoints"

_STEP = r"(0|[1-9][0-9]*)"  # ASCII only: \d would take other scripts' digits
_STEP_NAME = re.compile(_STEP)
_TMP_STEP_NAME = re.compile(
    _STEP + r"(?:\.partial_save)?" + re.escape(TMP_DIR_SUFFIX) + r"(?:-[0-9]+)?",
)


def step_of(name: str) -> int | None:
    """The step a committed directory of this name would hold; None: not a step name."""
    return int(name) if _STEP_NAME.fullmatch(name) else None


def tmp_step_of(name: str) -> int | None:
    """The step of an Orbax tmp directory of this name; None: not one."""
    match = _TMP_STEP_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def needs_marker_lookup(name: str) -> bool:
    """Whether a lister must look for `<name>/commit_success.txt` (one lookup per step
    directory; no other name's contents matter)."""
    return step_of(name) is not None


def matters(name: str) -> bool:
    """Whether the rule looks at this name at all (a lister may skip asking whether any
    other name is a directory: it is ignored either way)."""
    return step_of(name) is not None or tmp_step_of(name) is not None or name == NESTED_ROOT


@dataclass(frozen=True)
class RootEntry:
    """One name directly under the checkpoint root, as a lister saw it.

    `has_commit_marker`: `<name>/commit_success.txt` exists (looked up only where
    `needs_marker_lookup`). `is_link`: a symbolic link (never on gs://).
    """

    name: str
    is_dir: bool
    has_commit_marker: bool = False
    is_link: bool = False


@dataclass(frozen=True)
class RootDecision:
    """What the commit rule makes of one listing of a checkpoint root."""

    committed: tuple[int, ...] = ()
    incomplete: tuple[int, ...] = ()  # uncommitted, newer than the newest committed
    abandoned: tuple[int, ...] = ()  # uncommitted, not newer: nothing will finish them
    ignored: tuple[str, ...] = ()
    # Each uncommitted step's entries under the root (what a cleanup deletes).
    uncommitted: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    nested_root: bool = False  # no step, but a `checkpoints/` directory

    @property
    def latest_committed(self) -> int | None:
        return self.committed[-1] if self.committed else None


def decide(listing: Iterable[RootEntry]) -> RootDecision:
    """The commit rule (module docstring) over one listing of the root. Pure."""
    committed: set[int] = set()
    uncommitted: dict[int, list[str]] = {}
    ignored: list[str] = []
    nested = False
    for entry in listing:
        kind = _classify(entry)
        if kind is None:
            ignored.append(entry.name)
            nested = nested or (entry.name == NESTED_ROOT and entry.is_dir)
        elif kind[1]:
            committed.add(kind[0])
        else:
            uncommitted.setdefault(kind[0], []).append(entry.name)
    newest = max(committed) if committed else None
    fresh = sorted(s for s in uncommitted if newest is None or s > newest)
    stale = sorted(s for s in uncommitted if newest is not None and s <= newest)
    return RootDecision(
        committed=tuple(sorted(committed)), incomplete=tuple(fresh), abandoned=tuple(stale),
        ignored=tuple(sorted(ignored)),
        uncommitted={s: tuple(sorted(names)) for s, names in sorted(uncommitted.items())},
        nested_root=nested and not committed and not uncommitted,
    )


def _classify(entry: RootEntry) -> tuple[int, bool] | None:
    """(step, committed) for a step's entry; None for an ignored one."""
    if not entry.is_dir or entry.is_link:
        return None
    step = step_of(entry.name)
    if step is not None:
        return step, entry.has_commit_marker
    tmp = tmp_step_of(entry.name)
    return (tmp, False) if tmp is not None else None


@dataclass(frozen=True)
class StepFile:
    """One entry under a step's directory, as a lister saw it (`size`: its length)."""

    size: int
    is_file: bool = True
    is_link: bool = False


@dataclass(frozen=True)
class StepSize:
    """What a restore of one step reads."""

    bytes: int = 0
    files: int = 0

    @property
    def gib(self) -> float:
        return self.bytes / GIB


GIB = 2**30


def step_size(entries: Iterable[StepFile]) -> StepSize:
    """The bytes and files of a step's listing: regular files only, links not counted."""
    total = count = 0
    for entry in entries:
        if entry.is_file and not entry.is_link and entry.size >= 0:
            total += entry.size
            count += 1
    return StepSize(bytes=total, files=count)


def list_local_step(directory: str, step: int) -> list[StepFile]:
    """Every entry under `<directory>/<step>/` on a filesystem, for `step_size` (lstat:
    links are not followed). The operator's scan and the trainer list a local step so."""
    files: list[StepFile] = []
    pending = [os.path.join(directory, str(step))]
    while pending:
        with os.scandir(pending.pop()) as it:
            for item in it:
                if item.is_symlink():
                    files.append(StepFile(size=0, is_file=False, is_link=True))
                elif item.is_dir(follow_symlinks=False):
                    pending.append(item.path)
                else:
                    files.append(StepFile(size=item.stat(follow_symlinks=False).st_size,
                                          is_file=item.is_file(follow_symlinks=False)))
    return files


def nested_root_hint(directory: str) -> str:
    """What to tell a user whose checkpoint root is MaxText's run directory."""
    inner = f"{directory.rstrip('/')}/{NESTED_ROOT}"
    return (f"{directory} holds no checkpoint step but a '{NESTED_ROOT}' directory: did "
            f"you mean {inner}? (MaxText writes its steps to "
            f"<base_output_directory>/<run_name>/{NESTED_ROOT}/)")
