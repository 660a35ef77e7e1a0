"""Run real MaxText on CPU exactly as a job's head pod runs it in `main`.

`main_process(job)` takes the command, args and env of `main` from the renderer (what
`etj render` prints) and resolves what the kubelet would: the downward API fields the
renderer uses (the pod's namespace, name and JobSet labels) and `$(VAR)` references.
`cpu_process` then makes the only changes a CPU needs: `JAX_PLATFORMS=cpu` and the tiny
model's flags after the job's args (MaxText keeps the last value of a key). `run` executes
that in the MaxText root (env.py) with a host directory as the pod's /tmp, the emptyDir
that `main` shares with the progress sidecar.
"""
from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_api.models import ElasticTrainingJob
from elastic_api.names import (
    COORDINATOR_LABEL,
    HEAD_REPLICATED_JOB,
    JOBSET_NAME_LABEL,
    MAIN_CONTAINER,
    REPLICATED_JOB_LABEL,
)
from elastic_devtools.maxtext.env import MaxTextEnv

# A CPU config that trains and checkpoints in about 30 s (field notes, "Real MaxText
# 0.2.5"): the model's shape, a short sequence, no jax.distributed on one CPU host.
TINY_FLAGS = (
    "hardware=cpu", "skip_jax_distributed_system=True", "per_device_batch_size=1",
    "max_target_length=64", "vocab_size=256", "base_emb_dim=64", "base_num_query_heads=2",
    "base_num_kv_heads=2", "base_mlp_dim=128", "base_num_decoder_layers=2", "head_dim=32",
    "attention=dot_product",
)
CPU_ENV = {"JAX_PLATFORMS": "cpu"}
POD_TMP = "/tmp"  # the head's shared emptyDir (render.SHARED_TMP)
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


@dataclass(frozen=True)
class MainProcess:
    """What the kubelet executes in `main`: argv and environment, resolved."""

    argv: list[str]
    env: dict[str, str]
    pod_name: str
    namespace: str


def _head_main(job: ElasticTrainingJob) -> dict[str, Any]:
    from elastic_operator.render import render_jobset

    jobset = render_jobset(job)
    for rjob in jobset["spec"]["replicatedJobs"]:
        if rjob["name"] != HEAD_REPLICATED_JOB:
            continue
        for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            if container["name"] == MAIN_CONTAINER:
                return dict(container)
    raise ValueError("the rendered JobSet has no head `main` container")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: a defined VAR is replaced, `$$` is `$`, anything else
    stays as written."""
    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR_REF.sub(sub, text)


LOCAL_POD_UID = "00000000-0000-4000-8000-000000000000"


def _pod_fields(job: ElasticTrainingJob, pod_name: str, namespace: str,
                pod_uid: str) -> dict[str, str]:
    """The downward API values of the head pod that the renderer refers to."""
    jobset = job.metadata.name
    return {
        "metadata.name": pod_name,
        "metadata.namespace": namespace,
        "metadata.uid": pod_uid,
        f"metadata.labels['{COORDINATOR_LABEL}']": f"{jobset}-{HEAD_REPLICATED_JOB}-0-0.{jobset}",
        f"metadata.annotations['{JOBSET_NAME_LABEL}']": jobset,
        f"metadata.annotations['{REPLICATED_JOB_LABEL}']": HEAD_REPLICATED_JOB,
    }


def main_process(job: ElasticTrainingJob, namespace: str | None = None,
                 pod_name: str | None = None, pod_uid: str = LOCAL_POD_UID) -> MainProcess:
    """`main` of the job's head pod; `pod_name`, `pod_uid`: a real head pod's (the
    scenario's, on the local control plane), else made up."""
    namespace = namespace or job.metadata.namespace or "default"
    pod_name = pod_name or f"{job.metadata.name}-{HEAD_REPLICATED_JOB}-0-0-local"
    fields = _pod_fields(job, pod_name, namespace, pod_uid)
    container = _head_main(job)
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
        elif "fieldRef" in var.get("valueFrom", {}):
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in fields:
                raise ValueError(f"env {var['name']}: no local value for the pod field {path}")
            env[var["name"]] = fields[path]
        else:
            raise ValueError(f"env {var['name']}: only values and pod fields run locally")
    argv = [expand(a, env) for a in [*container.get("command", []), *container.get("args", [])]]
    return MainProcess(argv=argv, env=env, pod_name=pod_name, namespace=namespace)


def cpu_process(main: MainProcess, tiny: bool = True,
                extra_env: Mapping[str, str] | None = None) -> MainProcess:
    """`main` with JAX on the CPU and (tiny) the tiny model's flags after its args;
    `extra_env` for what the machine needs that a pod gets elsewhere (a GCS emulator)."""
    argv = [*main.argv, *(TINY_FLAGS if tiny else ())]
    env = {**main.env, **CPU_ENV, **(extra_env or {})}
    return MainProcess(argv=argv, env=env, pod_name=main.pod_name, namespace=main.namespace)


@dataclass
class RunResult:
    returncode: int
    seconds: float
    pod_tmp: Path  # the host directory that was the pod's /tmp
    log: Path
    argv: list[str] = field(default_factory=list)

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def start(env: MaxTextEnv, process: MainProcess, pod_tmp: Path, log: Path,
          binds: Mapping[str, Path] | None = None, cwd: str = "/",
          enter: Callable[[list[str]], list[str]] | None = None) -> subprocess.Popen[bytes]:
    """Start `process` in the MaxText root with `pod_tmp` as its /tmp, output appended to
    `log`, in a process group of its own (the command execs down to MaxText's python, so
    the group is MaxText: a signal to it reaches every thread and child); `enter`: into
    the pod's process namespace (pod.PodProcesses.enter)."""
    pod_tmp.mkdir(parents=True, exist_ok=True)
    pod_tmp.chmod(0o1777)  # an emptyDir is world-writable, like /tmp
    command = env.command(process.argv, process.env, {POD_TMP: pod_tmp, **(binds or {})},
                          cwd=cwd)
    if enter is not None:
        command = enter(command)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(("# " + " ".join(_shown(process.argv)) + "\n").encode())
        out.flush()
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def run(env: MaxTextEnv, process: MainProcess, pod_tmp: Path, log: Path,
        binds: Mapping[str, Path] | None = None, timeout: float = 900.0,
        cwd: str = "/") -> RunResult:
    """Run `process` in the MaxText root with `pod_tmp` as its /tmp; output to `log`."""
    log.unlink(missing_ok=True)
    started = time.monotonic()
    proc = start(env, process, pod_tmp, log, binds, cwd)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    return RunResult(returncode=code, seconds=time.monotonic() - started, pod_tmp=pod_tmp,
                     log=log, argv=list(process.argv))


def _shown(argv: Sequence[str]) -> list[str]:
    return [a if a and not re.search(r"\s", a) else repr(a) for a in argv]
