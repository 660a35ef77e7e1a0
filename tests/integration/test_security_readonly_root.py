"""Least privilege at run time, without a container runtime.

`etj operator` and `etj train` run as uid/gid 65532 (the images' user) with no
capabilities and no_new_privs, in a private mount namespace where every mount but the
kernel's (/proc, /sys, /dev) is read-only and /tmp is a fresh writable directory: the
emptyDir their pods mount there under `readOnlyRootFilesystem: true`. Their environment is
the one their Dockerfile's final stage sets. The operator (debug logging on) takes a
simulated ElasticTrainingJob on the local control plane; the trainer, with a token of the
job's own ServiceAccount, trains through a slice failure and reports to the job.

The same runs' logs (and what they wrote into the job) are then scanned for the
credentials they held: the kubeconfig's client key and certificate, the trainer's token,
and fake cloud credentials put in their environment.

What a container runtime adds (the image's own root filesystem, pid and network
namespaces, seccomp, cgroups) stays unproven here (docs/threat-model.md).

Needs root (to unshare and to drop to uid 65532): skipped otherwise, and fails, never
skips, when root cannot build the sandbox.
"""
from __future__ import annotations

import base64
import errno
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from elastic_devtools.localcluster import Cluster

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
IMAGE_UID = 65532  # USER of both Dockerfiles
JOB = "ro-root"
SLICES = 2
STEPS = 40
FAILED_SLICE, FAIL_AT_STEP = 1, 15
# What a read-only root or a missing permission looks like when something swallows it.
FS_ERRORS = re.compile(r"Read-only file system|Permission denied|EROFS|EACCES")
# Fake cloud credentials put into both processes' environment: none may reach a log.
FAKE_AWS_SECRET = "etjFakeAwsSecret/" + uuid.uuid4().hex + "K7MDENG"
FAKE_GCP_KEY_ID = "etjfakekeyid" + uuid.uuid4().hex


# --- the sandbox ----------------------------------------------------------------------------
# Built by `unshare --mount` running this file (below, `__main__`) as root; it then
# becomes the image's user with `setpriv` and execs the command through `env`, so the
# command itself is looked up and run without any capability. unshare, this file and
# setpriv all exec in turn: the process started is the one that runs the command.


def _mount_id(path: str) -> int | None:
    """The id of the mount `path` resolves to now (None if it does not resolve)."""
    try:
        fd = os.open(path, os.O_PATH)
    except OSError:
        return None
    try:
        with open(f"/proc/self/fdinfo/{fd}") as info:
            for line in info:
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
    finally:
        os.close(fd)
    return None


def _visible_mounts() -> list[tuple[str, list[str]]]:
    """(mount point, per-mount options) of each mount a path can reach (not covered)."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if _mount_id(target) == int(fields[0]):
                mounts.append((target, fields[5].split(",")))
    return mounts


def _under(path: str, *tops: str) -> bool:
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)


# Where the sandbox holds paths from under the host's /tmp while it replaces /tmp: an
# existing directory nothing in the sandbox needs (a tmpfs goes over it, in the private
# mount namespace only).
HOLD_DIRS = ("/srv", "/mnt", "/opt")


def _under_tmp(paths: list[Path]) -> list[str]:
    """The paths under /tmp, nested ones collapsed into the topmost."""
    wanted = sorted({str(p.resolve()) for p in paths if _under(str(p.resolve()), "/tmp")})
    return [p for p in wanted if not any(q != p and _under(p, q) for q in wanted)]


def enter_sandbox(spec: dict[str, Any]) -> None:
    """`python <this file> <spec>` under `unshare --mount`, as root; never returns."""
    def mount(*args: str) -> None:
        subprocess.run(["mount", *args], check=True)

    # 1. What an image keeps world-readable but this host may hide in a private directory
    #    (a pyenv interpreter under /root): staged, then shown alone on a tmpfs over it.
    for i, (hidden, paths) in enumerate(spec["expose"]):
        staged = []
        for j, path in enumerate(paths):
            stage = Path(spec["stage"]) / f"{i}-{j}"
            stage.mkdir(parents=True, exist_ok=True)
            mount("--rbind", path, str(stage))
            staged.append((stage, path))
        mount("-t", "tmpfs", "-o", "mode=0755", "etj-sandbox", hidden)
        for stage, path in staged:
            Path(path).mkdir(parents=True, exist_ok=True)
            mount("--rbind", str(stage), path)
    # 2. /tmp: the pod's emptyDir. What the run needs from the host's /tmp (a checkout
    #    there and its venv, as in CI) is held aside on a private tmpfs, then shown
    #    again at the same path, read-only.
    held = []
    if spec["under_tmp"]:
        hold = next(d for d in HOLD_DIRS if os.path.isdir(d))
        mount("-t", "tmpfs", "-o", "mode=0700", "etj-sandbox-hold", hold)
        for k, path in enumerate(spec["under_tmp"]):
            stage = Path(hold) / str(k)
            stage.mkdir()
            mount("--rbind", path, str(stage))
            held.append((stage, path))
    mount("--bind", spec["tmp"], "/tmp")
    for stage, path in held:
        Path(path).mkdir(parents=True, exist_ok=True)
        mount("--rbind", str(stage), path)
        mount("-o", "remount,bind,ro", path)
    # 3. The rest read-only, as a container's root filesystem; the kernel's own file
    #    systems stay as a container runtime gives them.
    for target, options in _visible_mounts():
        if _under(target, "/proc", "/sys", "/dev", "/tmp") or "ro" in options:
            continue
        mount("-o", ",".join(["remount", "bind", *("ro" if o == "rw" else o for o in options)]),
              target)
    # Root ignores permissions: only a read-only mount refuses it.
    probe = "/.etj-sandbox-probe"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError as err:
        if err.errno != errno.EROFS:
            raise
    else:
        os.unlink(probe)
        sys.exit("sandbox: / is still writable after the read-only remount")
    os.chdir("/")  # the images set no WORKDIR
    uid = str(spec["uid"])
    os.execvp("setpriv", [
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
        "--inh-caps=-all", "--bounding-set=-all", "--", "env", *spec["command"]])


def image_env(dockerfile: str) -> dict[str, str]:
    """The ENV of the Dockerfile's final stage, but PATH (the image's venv is elsewhere)."""
    text = (REPO / dockerfile).read_text().replace("\\\n", " ")
    final = re.split(r"^FROM ", text, flags=re.MULTILINE)[-1]
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            env.update(re.findall(r"\b(\w+)=(\S+)", line))
    env.pop("PATH", None)
    return env


def _hidden_ancestors(paths: list[Path]) -> list[tuple[str, list[str]]]:
    """For each path the sandboxed user must reach: the topmost directory above it that
    others cannot traverse, with the paths under it to show (nested ones collapsed)."""
    wanted = sorted({p.resolve() for p in paths})
    wanted = [p for p in wanted if not any(q != p and q in p.parents for q in wanted)]
    hidden: dict[str, list[str]] = {}
    for path in wanted:
        for parent in reversed(path.parents):
            if not parent.stat().st_mode & stat.S_IXOTH:
                hidden.setdefault(str(parent), []).append(str(path))
                break
    return sorted(hidden.items())


@dataclass
class Sandbox:
    """One sandboxed process's world: `tmp` (owned by root, mode 0777 like an emptyDir)
    becomes its /tmp."""

    root: Path

    def __post_init__(self) -> None:
        self.tmp.mkdir(parents=True)
        self.tmp.chmod(0o777)

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def put(self, name: str, content: str | bytes, mode: int = 0o400) -> str:
        """A file only the image's user can read, at /tmp/<name> inside; returns that path."""
        path = self.tmp / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        os.chown(path, IMAGE_UID, IMAGE_UID)
        path.chmod(mode)
        return f"/tmp/{name}"

    def argv(self, command: list[str]) -> list[str]:
        """`command` (absolute, or looked up on the sandbox's PATH) run in the sandbox."""
        reach = [REPO, Path(sys.prefix), Path(sys.base_prefix),
                 Path(os.path.realpath(sys.executable)).parent]
        spec = {"tmp": str(self.tmp), "stage": str(self.root / "stage"), "uid": IMAGE_UID,
                "expose": _hidden_ancestors(reach), "under_tmp": _under_tmp(reach),
                "command": command}
        return ["unshare", "--mount", "--propagation", "private", "--",
                sys.executable, str(Path(__file__).resolve()), json.dumps(spec)]

    @staticmethod
    def env(dockerfile: str, **extra: str) -> dict[str, str]:
        """The image's environment, this venv first on PATH, plus `extra`."""
        return {**image_env(dockerfile),
                "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
                **extra}


def etj(*args: str) -> list[str]:
    """`etj ...` with this venv's interpreter, as the image's entrypoint runs it."""
    return [sys.executable, "-m", "elastic_api.etj_cli", *args]


def run_sandboxed(box: Sandbox, command: list[str], env: dict[str, str],
                  timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(box.argv(command), env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def sandbox_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("needs root: the sandbox is a mount namespace (unshare) and drops to "
                    f"uid {IMAGE_UID} (setpriv); run the integration tests as root")
    missing = [tool for tool in ("unshare", "setpriv", "mount", "env") if not shutil.which(tool)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: install util-linux", pytrace=False)
    root = tmp_path_factory.mktemp("sandbox")
    probe = Sandbox(root / "probe")
    result = run_sandboxed(probe, ["true"], Sandbox.env("Dockerfile.trainer"))
    if result.returncode != 0:
        pytest.fail(f"running as root, but could not build the sandbox (unshare --mount, "
                    f"remount read-only, setpriv), exit {result.returncode}:\n"
                    f"{result.stderr[-3000:]}", pytrace=False)
    return root


PROBE = r"""
import errno, json, os, sys
def write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
    except OSError as err:
        return errno.errorcode[err.errno]
    os.unlink(path)
    return "ok"
import elastic_operator, elastic_trainer, jax, kopf, kubernetes, orbax.checkpoint
print(json.dumps({
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()], "groups": os.getgroups(),
    "version": sys.version, "prefix": sys.prefix, "home": os.path.expanduser("~"),
    "write_tmp": write("/tmp/probe"), "write_prefix": write(os.path.join(sys.prefix, "probe")),
    "write_code": write(os.path.join(os.path.dirname(elastic_operator.__file__), "probe")),
    "caps": [line.split()[1] for line in open("/proc/self/status")
             if line.startswith(("CapEff", "CapPrm", "CapBnd"))],
    "no_new_privs": [line.split()[1] for line in open("/proc/self/status")
                     if line.startswith("NoNewPrivs")],
}))
"""


def test_sandbox_is_non_root_read_only_but_tmp_and_runs_this_venv(sandbox_root: Path) -> None:
    box = Sandbox(sandbox_root / "venv-probe")
    result = run_sandboxed(box, [sys.executable, "-c", PROBE], Sandbox.env("Dockerfile.trainer"))
    assert result.returncode == 0, (
        f"uid {IMAGE_UID} cannot run this venv ({sys.prefix}); it must be readable by "
        f"others, as a fresh clone and venv made with umask 022 are:\n{result.stderr[-3000:]}")
    seen = json.loads(result.stdout)
    assert seen["ids"] == [IMAGE_UID] * 4 and seen["groups"] == []
    assert seen["caps"] == ["0000000000000000"] * 3 and seen["no_new_privs"] == ["1"]
    # The same interpreter and venv as the tests (a user who cannot read the interpreter's
    # own directory would get another Python's libpython, or none).
    assert seen["version"] == sys.version and seen["prefix"] == sys.prefix
    assert seen["home"] == "/tmp"
    assert seen["write_tmp"] == "ok"
    assert seen["write_prefix"] in ("EROFS", "EACCES")
    assert seen["write_code"] in ("EROFS", "EACCES")
    assert not (box.tmp / "probe").exists()  # it wrote into the box, and cleaned up


# --- the runs: operator and trainer against the local control plane --------------------------


@dataclass
class Runs:
    operator_log: str
    trainer_log: str
    trainer_exit: int
    summary: dict[str, Any]
    status: dict[str, Any]
    written: str  # the job and its Events as JSON: what the two processes wrote to the API
    checkpoint_dir: Path
    secrets: dict[str, str]  # what -> secret text that must not appear
    held: str  # the credential files and values the two processes were given


def _pem_body(pem: bytes) -> str:
    return "".join(line for line in pem.decode().splitlines() if not line.startswith("-----"))


def secret_fragments(secrets: dict[str, str]) -> dict[str, str]:
    """Each secret, and pieces of it long enough to be unique (a log may wrap or cut)."""
    fragments = {}
    for what, value in secrets.items():
        fragments[value] = what
        for i in range(0, len(value) - 47, 48):
            fragments[value[i:i + 48]] = what
    return fragments


def leaks(text: str, secrets: dict[str, str]) -> list[str]:
    return sorted({what for fragment, what in secret_fragments(secrets).items()
                   if fragment in text})


def _fake_gcp_credentials() -> tuple[str, str]:
    """A service-account key file as GCP writes them, with a fresh (never used) RSA key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    doc = {"type": "service_account", "project_id": "etj-test", "private_key_id": FAKE_GCP_KEY_ID,
           "private_key": pem, "client_email": "etj@etj-test.iam.gserviceaccount.com",
           "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}
    return json.dumps(doc), _pem_body(pem.encode())


def _create_namespace(api: Any) -> str:
    from kubernetes import client

    from elastic_devtools.localcluster.faults import wait_for

    name = f"etj-ro-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name, "labels": {"etj.test/namespace": "true"}}})
    wait_for(lambda: any(sa.metadata.name == "default"
                         for sa in core.list_namespaced_service_account(name).items),
             30, f"ServiceAccount {name}/default")
    return name


def _delete_namespace(api: Any, name: str) -> None:
    from kubernetes import client

    from elastic_devtools.localcluster.faults import wait_for

    core = client.CoreV1Api(api)
    core.delete_namespace(name)
    # Free the fake nodes for the next test (see conftest's `namespace`).
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    try:
        wait_for(lambda: not core.list_namespaced_pod(name).items, 60, f"pods of {name} gone")
    except TimeoutError as err:
        warnings.warn(str(err), stacklevel=1)


def job_manifest(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "elastic.pathways.dev/v1alpha1", "kind": "ElasticTrainingJob",
        "metadata": {"name": JOB, "namespace": namespace},
        "spec": {
            "backend": "simulated",
            "tpu": {"type": "v5e", "topology": "4x4", "numSlices": SLICES},
            "elastic": {"timeoutSeconds": 60, "maxRetries": 3},
            # Inside the trainer's sandbox: its /tmp (the checkpoint volume of a real pod).
            "checkpoint": {"directory": "/tmp/ckpt", "periodSteps": 10, "keep": 2},
            "snapshot": {"periodSteps": 5},
            "trainer": {"image": "trainer:test", "model": "tiny", "steps": STEPS, "batch": 8,
                        "args": ["--report-interval", "0.5"]},
        },
    }


def trainer_argv(job_obj: dict[str, Any]) -> list[str]:
    """What the head pod's `main` container runs for this job, with the fault schedule in
    place of the worker pods' readiness (there are no real workers here)."""
    from elastic_api.validation import validate_job
    from elastic_operator.render import trainer_command

    command = trainer_command(validate_job(job_obj))
    assert command[:2] == ["etj", "train"], command
    health = command.index("--slice-health")
    command[health + 1] = "schedule"
    ns, name = job_obj["metadata"]["namespace"], job_obj["metadata"]["name"]
    return etj(*command[1:], "--job", f"{ns}/{name}", "--summary", "/tmp/summary.json",
               "--fail-at", f"{FAIL_AT_STEP}:{FAILED_SLICE}", "--fault-duration", "0.3")


@dataclass
class SandboxedOperator:
    """`etj operator --verbose` in a sandbox (same network: /healthz is reachable)."""

    box: Sandbox
    log: Path
    liveness: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self, kubeconfig: str, extra_env: dict[str, str], namespace: str) -> None:
        from elastic_devtools.localcluster.cluster import free_port
        from elastic_devtools.localcluster.faults import wait_for

        self.liveness = free_port()
        # Its own namespace only: the log it is judged by must not carry the errors of
        # other tests' jobs (a namespace being deleted refuses new objects).
        command = etj("operator", "--namespace", namespace, "--verbose",
                      "--liveness-port", str(self.liveness), "--metrics-port", "0",
                      "--readiness-port", str(free_port()),
                      "--resync-seconds", "5", "--checkpoint-scan-seconds", "2")
        env = Sandbox.env("Dockerfile.operator", KUBECONFIG=kubeconfig, **extra_env)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(self.box.argv(command), env=env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(self.healthy, 60, f"the sandboxed operator's /healthz (log: {self.log})",
                 interval=0.5)

    def healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the sandboxed operator exited {self.proc.returncode}:\n"
                                 f"{self.log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness}/healthz",
                                        timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def _admin_secrets(user: dict[str, str], gcp_key_body: str) -> dict[str, str]:
    """What no log may hold, by what it is: the admin kubeconfig's client key and
    certificate (as inlined and as PEM bodies) and the fake cloud credentials."""
    return {
        "kubeconfig client-key-data": user["client-key-data"],
        "kubeconfig client-certificate-data": user["client-certificate-data"],
        "client key (PEM body)": _pem_body(base64.b64decode(user["client-key-data"])),
        "client certificate (PEM body)":
            _pem_body(base64.b64decode(user["client-certificate-data"])),
        "GOOGLE_APPLICATION_CREDENTIALS private_key": gcp_key_body,
        "GOOGLE_APPLICATION_CREDENTIALS private_key_id": FAKE_GCP_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": FAKE_AWS_SECRET,
    }


def _wait_jobset_and_status(custom: Any, namespace: str, job_status: Any,
                            operator: SandboxedOperator) -> None:
    """The sandboxed operator created the job's JobSet and wrote its status."""
    from kubernetes import client

    from elastic_devtools.localcluster.faults import wait_for

    def jobset_and_status() -> bool:
        try:
            custom.get_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", JOB)
        except client.ApiException as err:
            if err.status == 404:
                return False
            raise
        return bool(job_status().get("phase"))

    wait_for(jobset_and_status, 60, f"the operator's JobSet and status (log: {operator.log})")


def _trainer_kubeconfig(api: Any, namespace: str, job_obj: dict[str, Any],
                        admin_config: dict[str, Any], box: Sandbox,
                        secrets: dict[str, str]) -> Path:
    """A kubeconfig in the trainer's sandbox with a token of the job's own
    ServiceAccount, which the operator created (the head pod's in-cluster credentials);
    the token joins `secrets`."""
    import yaml
    from kubernetes import client

    from elastic_api.validation import validate_job
    from elastic_devtools.localcluster.faults import wait_for
    from elastic_operator.render import pod_service_account

    sa_name = pod_service_account(validate_job(job_obj))
    core = client.CoreV1Api(api)
    wait_for(lambda: any(sa.metadata.name == sa_name
                         for sa in core.list_namespaced_service_account(namespace).items),
             30, f"ServiceAccount {namespace}/{sa_name}")
    token = core.create_namespaced_service_account_token(
        sa_name, namespace, client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)),
    ).status.token
    assert token, "the TokenRequest returned no token"
    secrets["trainer ServiceAccount token"] = token
    secrets["trainer token signature"] = token.rsplit(".", 1)[-1]
    cluster_entry = admin_config["clusters"][0]
    return box.put("kubeconfig", yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster_entry],
        "users": [{"name": "trainer", "user": {"token": token}}],
        "contexts": [{"name": "trainer", "context": {"cluster": cluster_entry["name"],
                                                     "user": "trainer"}}],
        "current-context": "trainer"}))


def _wait_recovered(job_status: Any, operator: SandboxedOperator) -> None:
    """The operator took in the trainer's report: Recovered, at the last step."""
    from elastic_devtools.localcluster.faults import wait_for

    def recovered() -> bool:
        status = job_status()
        return (_condition(status, "Recovering").get("reason") == "Recovered"
                and (status.get("training") or {}).get("step") == STEPS)

    wait_for(recovered, 60, f"Recovering=False/Recovered at step {STEPS} "
                            f"(operator log: {operator.log})")


@pytest.fixture(scope="module")
def runs(cluster: Cluster, sandbox_root: Path) -> Iterator[Runs]:
    """The operator, then the trainer, each in its own sandbox, on one simulated job."""
    import yaml
    from kubernetes import client

    from elastic_api import GROUP, PLURAL, VERSION
    from elastic_devtools.localcluster.crds import install_crd

    admin_config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    user = admin_config["users"][0]["user"]
    gcp_json, gcp_key_body = _fake_gcp_credentials()
    secrets = _admin_secrets(user, gcp_key_body)

    api = cluster.api_client()
    install_crd(api, timeout=30)
    namespace = _create_namespace(api)
    operator = SandboxedOperator(Sandbox(sandbox_root / "operator"),
                                 sandbox_root / "operator.log")
    trainer_box = Sandbox(sandbox_root / "trainer")
    custom = client.CustomObjectsApi(api)

    def cloud_env(box: Sandbox) -> dict[str, str]:
        return {"GOOGLE_APPLICATION_CREDENTIALS": box.put("gcp-sa.json", gcp_json),
                "AWS_ACCESS_KEY_ID": "AKIAETJFAKE0000000", "AWS_SECRET_ACCESS_KEY": FAKE_AWS_SECRET}

    def job_status() -> dict[str, Any]:
        job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, JOB)
        return dict(job.get("status") or {})

    try:
        # The admin kubeconfig (client certificate and key inline), readable by the
        # operator's user only, as a mounted Secret would be.
        operator.start(operator.box.put("kubeconfig", Path(cluster.kubeconfig).read_bytes()),
                       cloud_env(operator.box), namespace)
        job_obj = job_manifest(namespace)
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job_obj)

        _wait_jobset_and_status(custom, namespace, job_status, operator)
        operator.healthy()
        trainer_kubeconfig = _trainer_kubeconfig(api, namespace, job_obj, admin_config,
                                                 trainer_box, secrets)
        env = Sandbox.env("Dockerfile.trainer", KUBECONFIG=trainer_kubeconfig,
                          JAX_PLATFORMS="cpu", **cloud_env(trainer_box))
        trainer = run_sandboxed(trainer_box, trainer_argv(job_obj), env, timeout=300)
        trainer_log = trainer.stdout + trainer.stderr
        (sandbox_root / "trainer.log").write_text(trainer_log)  # for a human, on failure
        summary_path = trainer_box.tmp / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}

        if trainer.returncode == 0:
            _wait_recovered(job_status, operator)
        operator.healthy()
        events = client.CoreV1Api(api).list_namespaced_event(namespace)
        written = json.dumps([custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, JOB), api.sanitize_for_serialization(events)])
        status = job_status()
    finally:
        operator.stop()
        try:
            _delete_namespace(api, namespace)
        finally:
            api.close()
    held = "\n".join([
        *(box.tmp.joinpath(name).read_text() for box in (operator.box, trainer_box)
          for name in ("kubeconfig", "gcp-sa.json")),
        *(base64.b64decode(user[key]).decode()
          for key in ("client-key-data", "client-certificate-data")),
        env["AWS_SECRET_ACCESS_KEY"]])
    yield Runs(operator.log.read_text(), trainer_log, trainer.returncode, summary, status,
               written, trainer_box.tmp / "ckpt", secrets, held)


def test_trainer_runs_through_a_slice_failure_on_a_read_only_root_as_non_root(
        runs: Runs) -> None:
    assert runs.trainer_exit == 0, runs.trainer_log[-4000:]
    assert runs.summary["status"] == "Succeeded" and runs.summary["final_step"] == STEPS
    [event] = [e for e in runs.summary["elastic_events"] if e["kind"] == "slice_down"]
    assert event["slices_down"] == [FAILED_SLICE]
    assert event["resume_seconds"] is not None, event  # recovered in the same process
    # Checkpoints and the default compilation cache (under the checkpoint directory) were
    # written where the pod can write.
    committed = sorted(p.name for p in runs.checkpoint_dir.iterdir() if p.name.isdigit())
    assert committed and committed[-1] == str(STEPS), committed
    assert any((runs.checkpoint_dir / "compilation-cache").iterdir())
    assert not FS_ERRORS.search(runs.trainer_log), FS_ERRORS.search(runs.trainer_log)
    assert "Traceback" not in runs.trainer_log, runs.trainer_log[-4000:]


def test_operator_runs_a_job_on_a_read_only_root_as_non_root(runs: Runs) -> None:
    # It created the JobSet (the fixture waited for it), wrote the status all through the
    # trainer's failure and recovery, and never crashed (the fixture checked it was alive).
    status = runs.status
    assert _condition(status, "Recovering")["reason"] == "Recovered", status
    assert status["counters"]["elasticEvents"] == 1, status["counters"]
    assert (status.get("training") or {}).get("step") == STEPS
    assert not FS_ERRORS.search(runs.operator_log), FS_ERRORS.search(runs.operator_log)
    assert "Traceback" not in runs.operator_log, runs.operator_log[-4000:]


def test_no_credentials_in_the_logs(runs: Runs) -> None:
    # The scan looks for what the processes really held (and would find each of them).
    assert leaks(runs.held, runs.secrets) == sorted(runs.secrets)
    assert "DEBUG" in runs.operator_log  # the verbose run, where clients dump requests
    for where, text in (("operator log", runs.operator_log), ("trainer log", runs.trainer_log),
                        ("the job and its Events", runs.written)):
        found = leaks(text, runs.secrets)
        assert not found, f"{where} shows {', '.join(found)}"


def test_leak_scan_finds_each_secret_whole_and_wrapped() -> None:
    """The scan itself (no cluster): a secret printed whole, or wrapped at 64 columns as
    PEM does, is found; nothing is found in clean text."""
    secrets = {"token": "a" * 10 + uuid.uuid4().hex * 4, "key": uuid.uuid4().hex * 3}
    wrapped = "\n".join(secrets["token"][i:i + 64] for i in range(0, len(secrets["token"]), 64))
    assert leaks(f"header {secrets['key']} trailer", secrets) == ["key"]
    assert leaks(wrapped, secrets) == ["token"]
    assert leaks("nothing to see " * 50, secrets) == []


if __name__ == "__main__":  # the sandbox's entry (see Sandbox.argv), as root in unshare
    enter_sandbox(json.loads(sys.argv[1]))
