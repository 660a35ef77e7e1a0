"""Checkpoint awareness: the operator's listing of a checkpoint root, for status.checkpoint.

The commit rule itself (which names are committed, incomplete or abandoned steps) is
elastic_api.checkpoints, which the trainer applies too: this module lists a gs:// prefix
(google-cloud-storage) or a local directory into `RootEntry`s, and `summarize` turns the
rule's decision into the CheckpointStatus to publish, with the newest committed step's
size (`step_size` over one more listing, of that step's directory: its files' lengths,
no object read). Anything else under the root
(foreign files, non-step names such as `prefix_100`, links) is ignored, never an error,
and reported in `CheckpointSummary.ignored_entries` (for logs and events).
"""
from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elastic_api.checkpoints import (
    COMMIT_MARKER,
    RootEntry,
    StepFile,
    StepSize,
    decide,
    list_local_step,
    needs_marker_lookup,
    nested_root_hint,
    step_size,
)
from elastic_api.models import CheckpointStatus
from elastic_api.models.status import MAX_LISTED_STEPS

__all__ = ["COMMIT_MARKER", "CheckpointScanError", "CheckpointSummary", "RootEntry",
           "scan_checkpoints", "scan_checkpoints_detailed", "summarize", "summarize_entries"]

GCS_SCHEME = "gs://"
# How many ignored names a summary keeps (the root of a long run may hold many).
MAX_IGNORED_REPORTED = 10
DEFAULT_TIMEOUT_S = 10.0

# GCS bucket naming rules (cloud.google.com/storage/docs/buckets#naming), simplified.
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")


@dataclass(frozen=True)
class CheckpointSummary:
    """The status to publish plus what was ignored (for logs and events, not the CRD)."""

    status: CheckpointStatus
    committed_steps: list[int] = field(default_factory=list)
    ignored_entries: list[str] = field(default_factory=list)


def summarize_entries(
    listing: Iterable[RootEntry], directory: str, now: datetime,
    size: StepSize | None = None,
) -> CheckpointSummary:
    """The commit rule's decision over a listing of `directory`, as a status (pure);
    `size`: the newest committed step's (step_size), when it was listed.

    A root with no step but a `checkpoints/` directory gets the rule's hint as its error
    (MaxText's run directory given instead of its checkpoint root)."""
    decision = decide(listing)
    if decision.latest_committed is None:
        size = None
    status = CheckpointStatus(
        latest_committed_bytes=size.bytes if size is not None else None,
        latest_committed_files=size.files if size is not None else None,
        directory=directory,
        latest_committed_step=decision.latest_committed,
        # The newest steps, within the schema's bound (a root of thousands of abandoned
        # saves would otherwise make the status write refused).
        incomplete_steps=list(decision.incomplete)[-MAX_LISTED_STEPS:],
        abandoned_steps=list(decision.abandoned)[-MAX_LISTED_STEPS:],
        observed_at=now,
        error=nested_root_hint(directory) if decision.nested_root else None,
    )
    return CheckpointSummary(
        status=status,
        committed_steps=list(decision.committed),
        ignored_entries=list(decision.ignored[:MAX_IGNORED_REPORTED]),
    )


def summarize(listing: Iterable[RootEntry], directory: str, now: datetime) -> CheckpointStatus:
    """The CheckpointStatus for a listing of `directory` (pure; see summarize_entries)."""
    return summarize_entries(listing, directory, now).status


# --- I/O edge ---------------------------------------------------------------------------


class CheckpointScanError(Exception):
    """A directory that cannot be listed; the message is what the status shows."""


def parse_gcs_url(directory: str) -> tuple[str, str]:
    """`gs://bucket/a/b` -> ("bucket", "a/b/"); the prefix is "" for a bucket's root."""
    if not directory.startswith(GCS_SCHEME):
        raise CheckpointScanError(f"'{directory}' is not a gs:// URL")
    bucket, _, path = directory[len(GCS_SCHEME):].partition("/")
    if not bucket:
        raise CheckpointScanError(
            f"'{directory}' has no bucket name; expected gs://BUCKET/PATH",
        )
    if not _BUCKET_NAME.fullmatch(bucket):
        raise CheckpointScanError(
            f"'{directory}': '{bucket}' is not a valid GCS bucket name (3-63 characters: "
            "lowercase letters, digits, '-', '_', '.'; starting and ending with a letter "
            "or digit)",
        )
    path = path.strip("/")
    return bucket, f"{path}/" if path else ""


def storage_client_from_env() -> Any:
    """A google-cloud-storage client; anonymous against STORAGE_EMULATOR_HOST.

    Build it once and pass it to scan_checkpoints: credential discovery is not free.
    The google libraries are imported here, not at the top: they take about a second to
    import, and only a gs:// checkpoint directory needs them.
    """
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return storage.Client(project="etj-emulator", credentials=AnonymousCredentials())
    return storage.Client()


def list_gcs(
    directory: str, client: Any, *, timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[RootEntry]:
    """One delimited list call for the root, then one metadata GET per step directory
    for its marker (no object is downloaded)."""
    from google.api_core import exceptions as gexc  # see storage_client_from_env
    from google.cloud.storage.retry import DEFAULT_RETRY

    bucket_name, prefix = parse_gcs_url(directory)
    retry = DEFAULT_RETRY.with_timeout(timeout_s)
    try:
        bucket = client.bucket(bucket_name)
        pages = client.list_blobs(
            bucket, prefix=prefix, delimiter="/", timeout=timeout_s, retry=retry,
        )
        # Prefixes are filled in as pages are read, so read the objects first.
        files = [blob.name[len(prefix):] for blob in pages]
        dirs = [p[len(prefix):].rstrip("/") for p in pages.prefixes]
        entries = [RootEntry(name=name, is_dir=False) for name in files if name]
        for name in dirs:
            marker = False
            if needs_marker_lookup(name):
                blob_name = f"{prefix}{name}/{COMMIT_MARKER}"
                marker = bucket.get_blob(blob_name, timeout=timeout_s, retry=retry) is not None
            entries.append(RootEntry(name=name, is_dir=True, has_commit_marker=marker))
    except gexc.NotFound as e:
        raise CheckpointScanError(
            f"cannot list {directory}: bucket '{bucket_name}' does not exist ({_short(e)})",
        ) from e
    except gexc.Forbidden as e:
        raise CheckpointScanError(
            f"cannot list {directory}: permission denied ({_short(e)}); grant the operator's "
            f"service account roles/storage.objectViewer on bucket '{bucket_name}'",
        ) from e
    except gexc.Unauthorized as e:
        raise CheckpointScanError(
            f"cannot list {directory}: not authenticated ({_short(e)})",
        ) from e
    return entries


def list_gcs_step(directory: str, step: int, client: Any, *,
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> list[StepFile]:
    """One recursive list call under `<root>/<step>/`: every object's size as listed (no
    object is read)."""
    from google.cloud.storage.retry import DEFAULT_RETRY  # see storage_client_from_env

    bucket_name, prefix = parse_gcs_url(directory)
    blobs = client.list_blobs(client.bucket(bucket_name), prefix=f"{prefix}{step}/",
                              timeout=timeout_s, retry=DEFAULT_RETRY.with_timeout(timeout_s))
    return [StepFile(size=int(blob.size or 0)) for blob in blobs
            if not blob.name.endswith("/")]  # a folder placeholder holds nothing


# A committed step's size on gs://, once listed: Orbax writes commit_success.txt last and
# never writes a committed step again (saves only go forward), so each scan need not list
# the same step (thousands of objects for an unsharded save: several paged requests)
# again. Bounded; oldest out first. A local step is listed each time (a few lstat calls).
_SIZES: dict[tuple[str, int], StepSize] = {}
_SIZES_LOCK = threading.Lock()  # the scanner's threads share it
MAX_SIZES_KEPT = 4096


def _newest_step_size(directory: str, listing: list[RootEntry], client: Any,
                      timeout_s: float) -> StepSize | None:
    """The newest committed step's size; None when it could not be listed (the step may
    have been deleted since, by the trainer's keep)."""
    newest = decide(listing).latest_committed
    if newest is None:
        return None
    with _SIZES_LOCK:
        known = _SIZES.get((directory, newest)) if client is not None else None
    if known is not None:
        return known
    try:
        files = (list_gcs_step(directory, newest, client, timeout_s=timeout_s)
                 if client is not None else list_local_step(directory, newest))
    except Exception:  # the size is extra: a step deleted meanwhile keeps the listing good
        return None
    size = step_size(files)
    if client is None:
        return size
    with _SIZES_LOCK:
        _SIZES[(directory, newest)] = size
        while len(_SIZES) > MAX_SIZES_KEPT:
            del _SIZES[next(iter(_SIZES))]
    return size


def list_local(directory: str) -> list[RootEntry]:
    """os.scandir of the root; a marker lookup (one stat) per step directory. Links are
    not followed (the rule ignores them)."""
    if not os.path.isabs(directory):
        raise CheckpointScanError(
            f"'{directory}' is neither a gs:// URL nor an absolute path",
        )
    entries: list[RootEntry] = []
    try:
        with os.scandir(directory) as it:
            for item in it:
                is_link = item.is_symlink()
                is_dir = not is_link and item.is_dir()
                marker = bool(
                    is_dir and needs_marker_lookup(item.name)
                    and os.path.exists(os.path.join(item.path, COMMIT_MARKER)),
                )
                entries.append(RootEntry(name=item.name, is_dir=is_dir, has_commit_marker=marker,
                                         is_link=is_link))
    except FileNotFoundError as e:
        raise CheckpointScanError(
            f"{directory} does not exist on the operator's filesystem (no checkpoint written "
            "yet, or the path is not mounted into the operator)",
        ) from e
    except NotADirectoryError as e:
        raise CheckpointScanError(f"{directory} is not a directory") from e
    except PermissionError as e:
        raise CheckpointScanError(f"cannot read {directory}: permission denied") from e
    return entries


def scan_checkpoints(
    directory: str, *, now: datetime, storage_client: Any = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> CheckpointStatus:
    """List `directory` (gs://bucket/path or an absolute path) and summarize it.

    Never raises: any failure becomes `CheckpointStatus.error` (with `directory` and
    `observedAt` set, and no step information).
    """
    return scan_checkpoints_detailed(
        directory, now=now, storage_client=storage_client, timeout_s=timeout_s,
    ).status


def scan_checkpoints_detailed(
    directory: str, *, now: datetime, storage_client: Any = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> CheckpointSummary:
    """scan_checkpoints, also returning the committed steps and the ignored names."""
    try:
        if directory.startswith(GCS_SCHEME):
            parse_gcs_url(directory)  # a bad URL needs no client (nor credentials)
            client = storage_client if storage_client is not None else storage_client_from_env()
            listing = list_gcs(directory, client, timeout_s=timeout_s)
            size = _newest_step_size(directory, listing, client, timeout_s)
        elif "://" in directory:
            scheme = directory.split("://", 1)[0]
            raise CheckpointScanError(
                f"'{directory}': scheme '{scheme}://' is not supported; use gs://BUCKET/PATH "
                "or an absolute filesystem path",
            )
        else:
            listing = list_local(directory)
            size = _newest_step_size(directory, listing, None, timeout_s)
    except CheckpointScanError as e:
        return _failed(directory, now, str(e))
    except Exception as e:  # the edge must not crash the reconcile loop
        if _is_missing_credentials(e):
            return _failed(
                directory, now,
                f"cannot list {directory}: no Google Cloud credentials ({_short(e)}); give the "
                "operator's service account access (Workload Identity) or set "
                "GOOGLE_APPLICATION_CREDENTIALS",
            )
        return _failed(directory, now, f"cannot list {directory}: {type(e).__name__}: {_short(e)}")
    return summarize_entries(listing, directory, now, size)


def _failed(directory: str, now: datetime, message: str) -> CheckpointSummary:
    return CheckpointSummary(
        status=CheckpointStatus(directory=directory, observed_at=now, error=message),
    )


def _is_missing_credentials(e: Exception) -> bool:
    from google.auth.exceptions import DefaultCredentialsError  # see storage_client_from_env

    return isinstance(e, DefaultCredentialsError)


def _short(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
