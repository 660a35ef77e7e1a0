"""The progress sidecar's view of the trainer (`etj progress`, progress_cli.py): which
process it is, and the status.training report of a metrics line.

The trainer process is known by its pod: `hostName` is the pod's name, `processId` a
number from the pod's uid, `processStartedAt` when the sidecar first started in the pod.
The three are kept in a state file on the pod's /tmp, so a restart of the sidecar reports
the same process, and a new pod (a JobSet restart) a new one (the operator's
TrainerRestarted).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from elastic_api.checkpoints import StepFile, list_local_step, step_size
from elastic_api.models import PhaseRecord, RestoreReport, TrainerActivity, TrainingReport
from elastic_api.restores import restored_step, sidecar_restore
from elastic_trainer.metrics_file import StepRecord

log = logging.getLogger("etj.progress")
# A number from the uid that the API server reads exactly (status.training.processId).
PROCESS_ID_HEX_DIGITS = 13


@dataclass(frozen=True)
class Identity:
    """The trainer process as status.training names it."""

    process_id: int
    host_name: str
    started_at: datetime


def pod_identity(pod_name: str, pod_uid: str, now: datetime) -> Identity:
    digest = hashlib.sha256(pod_uid.encode()).hexdigest()[:PROCESS_ID_HEX_DIGITS]
    return Identity(process_id=int(digest, 16), host_name=pod_name, started_at=now)


def load_identity(state_file: Path, pod_name: str, pod_uid: str, now: datetime) -> Identity:
    """The identity kept in `state_file` for this pod, else a new one (written there).
    A state file that cannot be read or written is no reason to stop: then a restart of
    the sidecar reports a new process."""
    try:
        kept = json.loads(state_file.read_text())
        if kept.get("podUid") == pod_uid and kept.get("hostName") == pod_name:
            started = datetime.fromisoformat(kept["startedAt"])
            if started.tzinfo is not None:
                return Identity(int(kept["processId"]), pod_name, started)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    identity = pod_identity(pod_name, pod_uid, now)
    record = {"podUid": pod_uid, "hostName": pod_name, "processId": identity.process_id,
              "startedAt": identity.started_at.isoformat()}
    try:
        tmp = state_file.with_name(state_file.name + ".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(state_file)
    except OSError as err:
        log.warning("cannot keep the trainer's identity in %s: %s", state_file, err)
    return identity


def progress_report(identity: Identity, record: StepRecord | None, total_steps: int | None,
                    now: datetime, last_restore: RestoreReport | None = None,
                    activity: TrainerActivity | None = None,
                    phases: list[PhaseRecord] | None = None) -> TrainingReport:
    """status.training for the newest record (None: no step yet), with what the trainer
    is doing now and how long its phases took (activity.py)."""
    common: dict[str, Any] = {
        "observed_at": now, "total_steps": total_steps, "process_id": identity.process_id,
        "host_name": identity.host_name, "process_started_at": identity.started_at,
        "last_restore": last_restore, "activity": activity, "phases": phases,
    }
    if record is None:
        return TrainingReport(state="Initializing", **common)
    return TrainingReport(state="Training", step=record.step, loss=record.loss,
                          step_seconds=record.step_seconds, **common)


def restored_bytes(directory: str | None, step: int) -> int | None:
    """The restored step's bytes as the operator's scan counts them
    (elastic_api.checkpoints.step_size): a local directory walked, gs:// listed through
    gcsfs (the trainer image's gs:// library, with the pod's credentials; no object is
    read). None when it cannot be listed: the size is for the report only."""
    if not directory:
        return None
    try:
        if directory.startswith("gs://"):
            return step_size(list_gcs_step(directory, step)).bytes
        if directory.startswith("/"):
            return step_size(list_local_step(directory, step)).bytes
    except Exception as err:  # any listing error: the report goes without its bytes
        log.info("sizing checkpoint step %d in %s: %s", step, directory, err)
    return None


def list_gcs_step(directory: str, step: int) -> list[StepFile]:
    """Every object under `<directory>/<step>/` with its listed size; a folder
    placeholder holds nothing (as the operator's google-cloud-storage listing counts)."""
    import gcsfs  # only a gs:// directory needs it; it takes a while to import

    fs = gcsfs.GCSFileSystem(skip_instance_cache=True)
    found = fs.find(f"{directory.rstrip('/')}/{step}/", detail=True)
    return [StepFile(size=int(info.get("size") or 0)) for name, info in found.items()
            if info.get("type") == "file" and not name.endswith("/")]


class RestoreWatch:
    """The restore of a new trainer process, measured from its first train line
    (elastic_api.restores.sidecar_restore). Armed only when this sidecar started the
    process's identity (it started with the pod, just before `main`) and the file had no
    train line at its first read: else the start or the first line is not this
    process's."""

    def __init__(self, identity: Identity, fresh: bool, directory: str | None) -> None:
        self.identity, self.armed, self.directory = identity, fresh, directory
        self.polls = 0
        self.report: RestoreReport | None = None

    def see(self, records: list[StepRecord], now: datetime) -> RestoreReport | None:
        self.polls += 1
        if records and self.armed and self.polls > 1:
            first = records[0]
            step = restored_step(first.step)
            nbytes = restored_bytes(self.directory, step) if step is not None else None
            self.report = sidecar_restore(
                started_at=self.identity.started_at, first_step=first.step,
                first_step_seconds=first.step_seconds, seen_at=now, nbytes=nbytes)
            if self.report is not None:
                log.info("restored step %d: %s bytes, %.1fs from the process's start to its "
                         "first step (less that step's %.2fs)", self.report.step, nbytes,
                         self.report.seconds, first.step_seconds or 0.0)
        if records:
            self.armed = False
        return self.report
