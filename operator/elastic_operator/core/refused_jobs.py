"""Jobs JobSet cannot create, and the JobsCreated condition that says so.

When the API server (a field it does not accept, an admission webhook, a
ValidatingAdmissionPolicy) refuses a Job the JobSet controller creates from our JobSet,
JobSet posts only a Warning Event (JobCreationFailed) on the JobSet, and the Job never
appears. The operator sees our JobSet with a Job missing past a short grace, asks the
server to create that Job as JobSet would, as a server-side dry run (nothing is stored;
watch/job_refusals.py sends it, at most once an interval per job), and a refusal becomes
the False JobsCreated condition naming the Job, the field and the server's words at once,
with one Warning Event; the condition turns True once every Job exists.

Pure: the rendered JobSet, what was seen, the dry run's answers and `now` in.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import Condition
from elastic_api.names import (
    HEAD_REPLICATED_JOB,
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    REPLICATED_JOB_REPLICAS_LABEL,
    RESTART_ATTEMPT_LABEL,
)
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.model.objects import Observed, RefusedJob

# JobSet creates its Jobs within a second or two of the JobSet's creation or of a Job's
# deletion: one missing for longer is asked about.
GRACE_S = 5.0
# The most often one job's missing Jobs are dry-run (a refusal stands until they exist).
DRY_RUN_INTERVAL_S = 30.0
# JobSet's labels (and annotations) on its Jobs beyond ours (jobset_controller.go
# constructJob, labelAndAnnotateObject): what admission policies may match.
JOB_KEY_LABEL = "jobset.sigs.k8s.io/job-key"
GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"


def _merged(meta: Mapping[str, Any] | None, key: str, extra: Mapping[str, str]) -> dict[str, str]:
    return {**((meta or {}).get(key) or {}), **extra}


def expected_jobs(jobset: Mapping[str, Any], restarts: int = 0) -> dict[str, dict[str, Any]]:
    """Every Job JobSet creates of this JobSet, by name (<jobset>-<replicatedJob>-<index>),
    as it builds them: the replicatedJob's template with JobSet's labels and annotations
    on the Job and its pod template (no ownerReference: a dry run needs none)."""
    meta = jobset.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), meta.get("namespace")
    out: dict[str, dict[str, Any]] = {}
    global_index = 0
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        template, replicas = rjob.get("template") or {}, int(rjob.get("replicas") or 1)
        for index in range(replicas):
            job_name = f"{name}-{rjob['name']}-{index}"
            ours = {JOBSET_NAME_LABEL: name, REPLICATED_JOB_LABEL: str(rjob["name"]),
                    REPLICATED_JOB_REPLICAS_LABEL: str(replicas), JOB_INDEX_LABEL: str(index),
                    GLOBAL_INDEX_LABEL: str(global_index),
                    RESTART_ATTEMPT_LABEL: str(restarts),
                    JOB_KEY_LABEL: hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest()}
            global_index += 1
            spec = dict(template.get("spec") or {})
            pod = dict(spec.get("template") or {})
            pod_meta = pod.get("metadata") or {}
            pod["metadata"] = {**pod_meta, "labels": _merged(pod_meta, "labels", ours),
                               "annotations": _merged(pod_meta, "annotations", ours)}
            spec["template"] = pod
            tmeta = template.get("metadata") or {}
            out[job_name] = {
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": job_name, "namespace": namespace,
                             "labels": _merged(tmeta, "labels", ours),
                             "annotations": _merged(tmeta, "annotations", ours)},
                "spec": spec}
    return out


def _started(jobset: Mapping[str, Any], observed: Observed) -> set[str]:
    """The replicatedJobs JobSet creates Jobs of now: those whose `dependsOn` is met (the
    workers wait for the head Ready, render.py; a head pod Ready tells it here)."""
    head_ready = any(pod.ready for pod in observed.head_pods)
    return {str(rjob["name"]) for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []
            if all(dep.get("name") != HEAD_REPLICATED_JOB or head_ready
                   for dep in rjob.get("dependsOn") or [])}


def missing_jobs(jobset: Mapping[str, Any], expected: Mapping[str, Mapping[str, Any]],
                 observed: Observed) -> list[str]:
    """The expected Jobs (`expected_jobs` of `jobset`) not seen: a worker Job by the Job
    cache, the head Job by its pods (the cache holds worker Jobs only). None while the
    JobSet is absent, suspended or finished, nor one whose replicatedJob waits for
    another (`dependsOn`): JobSet creates none of them then."""
    seen_jobset = observed.jobset
    if seen_jobset is None or seen_jobset.suspended or seen_jobset.terminal_state:
        return []
    seen = {job.name for job in observed.jobs.values()}
    if observed.head_pods:
        seen.add(f"{(jobset.get('metadata') or {}).get('name')}-{HEAD_REPLICATED_JOB}-0")
    started = _started(jobset, observed)
    return [name for name, job in expected.items() if name not in seen
            and job["metadata"]["labels"][REPLICATED_JOB_LABEL] in started]


def missing_since(before: Mapping[str, datetime], missing: Iterable[str],
                  now: datetime) -> dict[str, datetime]:
    """When each missing Job was first seen missing (those seen again are forgotten)."""
    return {name: before.get(name, now) for name in missing}


def dry_run_wait(since: Mapping[str, datetime], last_dry_run: datetime | None,
                 now: datetime) -> float | None:
    """Seconds until the missing Jobs are due a dry run (0: now); None: nothing missing.
    Due once the longest missing is past the grace, and the last dry run an interval ago."""
    if not since:
        return None
    due = min(since.values()).timestamp() + GRACE_S
    if last_dry_run is not None:
        due = max(due, last_dry_run.timestamp() + DRY_RUN_INTERVAL_S)
    return max(0.0, due - now.timestamp())


def refusal(name: str, code: int, api_status: Mapping[str, Any]) -> RefusedJob | None:
    """A dry run's error as a refusal of the Job: Invalid (422), BadRequest (400) or an
    admission's Forbidden (403); None for anything else (409: the Job exists after all; a
    403 of RBAC is the operator's own permission, not the Job's fault)."""
    message = str(api_status.get("message") or "")
    if code not in (400, 403, 422) or (code == 403 and "cannot create resource" in message):
        return None
    causes = (api_status.get("details") or {}).get("causes") or []
    field = next((str(c.get("field")) for c in causes if c.get("field")), "")
    return RefusedJob(name=name, field=field, message=message)


def jobs_created_condition(setter: ConditionSetter, refused: Iterable[RefusedJob],
                           previous: Condition | None) -> Condition | None:
    """False (JobRefused) naming each refused Job, its field and the server's words; True
    (AllJobsCreated) once none is refused after one was; absent on a job never refused."""
    said = [f"Job {r.name}: {f'field {r.field}: ' if r.field else ''}{r.message}"
            for r in refused]
    if said:
        return setter.false(
            ConditionType.JOBS_CREATED, Reason.JOB_REFUSED,
            "the API server refuses to create " + "; ".join(said) + " (a server-side dry "
            "run of the Job as JobSet creates it; fix the spec or the admission policy, and "
            "JobSet creates it)")
    if previous is None:
        return None
    return setter.true(ConditionType.JOBS_CREATED, Reason.ALL_JOBS_CREATED,
                       "every Job of the JobSet exists or is accepted by the API server")


def jobs_created_events(previous: Condition | None,
                        new: Condition | None) -> list[StatusEvent]:
    """One Warning Event when the condition turns False (or its words change)."""
    if new is None or new.status != "False" or (
            previous is not None and previous.status == "False"
            and previous.message == new.message):
        return []
    return [StatusEvent(reason=Reason.JOB_REFUSED, message=new.message, type="Warning")]
