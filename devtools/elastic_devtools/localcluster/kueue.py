"""Kueue as a component of the local control plane (`etj cluster up --kueue`, and the
`kueue` test fixture): the release binary built from the Go module proxy, run out of
cluster like the JobSet controller, with its CRDs and webhooks from the same module.

Why internal certificate management stays on: with it off, Kueue (v0.17.0, v0.19.2)
reads a metrics certificate from the fixed path /etc/kueue/metrics/certs at start
(cmd/kueue/main.go) and exits without one, and /etc is no place for a developer tool to
write. With it on, Kueue's cert rotator keeps the serving certificate it finds in the Secret
kueue-system/kueue-webhook-server-cert while that certificate is valid for
kueue-webhook-service.kueue-system.svc, and injects its CA into the webhook
configurations and the conversion webhooks of its CRDs. So this module plays the part
the kubelet plays in a cluster: it issues that certificate (also valid for 127.0.0.1,
where the API server calls Kueue), stores it in the Secret and writes the same files into
Kueue's cert dir. The webhooks are registered by URL on loopback, as for JobSet.
Kueue's visibility API server is switched off (it writes certificates under /visibility).

Pure builders first (config, webhook registrations, CRDs, certificates); then `start`
and `stop`, the side effects, used by cluster.py.
"""
from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from elastic_devtools.localcluster import procs
from elastic_devtools.localcluster.kapi import ApiError, KubeApi
from elastic_devtools.localcluster.versions import (
    BUILD_HINT,
    MissingBinaryError,
    cache_dir,
    load_versions,
)

COMPONENT = "kueue-controller"
NAMESPACE = "kueue-system"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
# What Kueue's cert rotator names and checks (pkg/util/cert, open-policy-agent/cert-controller).
CA_NAME = "kueue-ca"
MUTATING_WEBHOOK = "kueue-mutating-webhook-configuration"
VALIDATING_WEBHOOK = "kueue-validating-webhook-configuration"
KUEUE_GROUP = "kueue.x-k8s.io"
# The integrations the local cluster runs: JobSet only (no pod, Job or Deployment webhooks
# that would intercept every pod of every test).
FRAMEWORKS = ("jobset.x-k8s.io/jobset",)
WEBHOOK_GROUPS = frozenset({KUEUE_GROUP, "jobset.x-k8s.io"})
CERT_VALIDITY = dt.timedelta(days=365)  # the rotator renews what expires within 90 days
CLOCK_SKEW = dt.timedelta(hours=1)

Progress = Callable[[str], None]


# ------------------------------------------------------------------------------ files

@dataclass(frozen=True)
class KueueFiles:
    """The Kueue binary and manifests hack/build-control-plane.sh put in the cache."""

    binary: Path
    crd_bases: Path
    crd_patches: Path
    webhooks: Path

    @classmethod
    def locate(cls, versions: dict[str, str] | None = None,
               cache: Path | None = None) -> KueueFiles:
        version = (versions if versions is not None else load_versions())["KUEUE_VERSION"]
        root = cache if cache is not None else cache_dir()
        manifests = root / f"kueue-{version}"
        return cls(binary=root / "bin" / f"kueue-controller-{version}",
                   crd_bases=manifests / "crd-bases", crd_patches=manifests / "crd-patches",
                   webhooks=manifests / "webhooks.yaml")

    def require(self) -> None:
        missing = [p for p in (self.binary, self.crd_bases, self.crd_patches, self.webhooks)
                   if not p.exists()]
        if missing:
            names = "\n  ".join(str(p) for p in missing)
            raise MissingBinaryError(f"Kueue is not built; missing:\n  {names}\nFix: {BUILD_HINT}.")

    def crds(self) -> list[dict[str, Any]]:
        return [yaml.safe_load(p.read_text()) for p in sorted(self.crd_bases.glob("*.yaml"))]

    def converted_crds(self) -> set[str]:
        """CRD names whose conversion webhook Kueue's kustomization enables."""
        kustomization = yaml.safe_load((self.crd_patches / "kustomization.yaml").read_text())
        names = set()
        for patch in kustomization.get("patches") or []:
            path = self.crd_patches / Path(patch["path"]).name
            names.add(yaml.safe_load(path.read_text())["metadata"]["name"])
        return names

    def webhook_manifests(self) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(self.webhooks.read_text()) if d]


@dataclass(frozen=True)
class Layout:
    """Kueue's files inside the cluster's state directory."""

    root: Path

    @property
    def dir(self) -> Path:
        return self.root / "kueue"

    @property
    def config(self) -> Path:
        return self.dir / "config.yaml"

    @property
    def certs(self) -> Path:
        return self.dir / "certs"

    @property
    def settings(self) -> Path:
        """The KueueSettings the running Kueue was started with (JSON)."""
        return self.dir / "settings.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "pki" / f"{COMPONENT}.kubeconfig"

    @property
    def pid(self) -> Path:
        return self.root / "run" / f"{COMPONENT}.pid"

    @property
    def log(self) -> Path:
        return self.root / "logs" / f"{COMPONENT}.log"


# ---------------------------------------------------------------------------- builders

# waitForPodsReady (apis/config/v1beta2): present in the config means on. Kueue v0.19
# turned it on by default (a config without it gets the settings below, its defaults.go);
# before v0.19 a config without it meant off (pkg/util/waitforpodsready: `cfg != nil`).
# From v0.19 only the feature gate DisableWaitForPodsReady turns it off (a gate the
# earlier releases do not know, and refuse).
WAIT_FOR_PODS_READY_ON_BY_DEFAULT_FROM = (0, 19)
WAIT_FOR_PODS_READY_DEFAULT: dict[str, Any] = {
    "timeout": "30m",
    "recoveryTimeout": "30m",  # defaults to timeout
    "blockAdmission": False,
    "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60,
                          "backoffMaxSeconds": 3600},
}


def release(version: str) -> tuple[int, ...]:
    """v0.19.2 -> (0, 19, 2)."""
    try:
        return tuple(int(part) for part in version.lstrip("v").split("-")[0].split("."))
    except ValueError:
        raise ValueError(f"KUEUE_VERSION {version!r} is not vMAJOR.MINOR.PATCH") from None


def wait_for_pods_ready_by_default(version: str) -> bool:
    return release(version)[:2] >= WAIT_FOR_PODS_READY_ON_BY_DEFAULT_FROM


@dataclass(frozen=True)
class KueueSettings:
    """What a test module (or a demo) may change in the local Kueue's Configuration; the
    default is the pinned release's own behaviour.

    `wait_for_pods_ready`: None is the version's default (on from v0.19), True/False
    forces it; `pods_ready` is merged over Kueue's default waitForPodsReady settings
    (e.g. `{"recoveryTimeout": "20s"}`; a nested mapping such as requeuingStrategy is
    merged key by key); `feature_gates` are added to the config's gates. Compared by
    value (the running Kueue's are kept next to its config: `running_settings`)."""

    wait_for_pods_ready: bool | None = None
    pods_ready: Mapping[str, Any] = field(default_factory=dict)
    feature_gates: Mapping[str, bool] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"waitForPodsReady": self.wait_for_pods_ready,
                "podsReady": dict(self.pods_ready), "featureGates": dict(self.feature_gates)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KueueSettings:
        return cls(data.get("waitForPodsReady"), dict(data.get("podsReady") or {}),
                   dict(data.get("featureGates") or {}))


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, Mapping) and \
            isinstance(out.get(key), Mapping) else value
    return out


# The ElasticTrainingJob as a MultiKueue external framework (`Kind.version.group`): the
# generic adapter copies a job whose spec.managedBy is kueue.x-k8s.io/multikueue to the
# worker cluster that admits its Workload and copies that copy's status back.
ETJ_EXTERNAL_FRAMEWORK = "ElasticTrainingJob.v1alpha1.elastic.pathways.dev"
# How long a manager keeps a dispatched Workload admitted while its worker cannot be
# reached (Kueue's default is 15 min; a test loses a worker in seconds).
MULTIKUEUE_WORKER_LOST_TIMEOUT = "60s"


def multikueue_config(origin: str) -> dict[str, Any]:
    """The manager's MultiKueue section: our CRD as an external framework, the origin
    label value of the copies it makes, the Kueue defaults otherwise."""
    return {"origin": origin, "workerLostTimeout": MULTIKUEUE_WORKER_LOST_TIMEOUT,
            "externalFrameworks": [{"name": ETJ_EXTERNAL_FRAMEWORK}]}


def config(webhook_port: int, health_port: int, cert_dir: Path, version: str,
           wait_for_pods_ready: bool | None = None,
           settings: KueueSettings | None = None,
           multikueue_origin: str | None = None) -> dict[str, Any]:
    """Kueue's Configuration for running outside the cluster: everything on loopback, no
    leader election, metrics and the visibility server off, the JobSet integration on.

    waitForPodsReady: `None` is what Kueue `version` does by default (on from v0.19), and
    the config says so explicitly: when on, with Kueue's default settings written out
    (and `settings.pods_ready` over them); when off from v0.19, with the gate that turns
    it off."""
    settings = settings or KueueSettings()
    if wait_for_pods_ready is None:
        wait_for_pods_ready = settings.wait_for_pods_ready
    on = wait_for_pods_ready_by_default(version) if wait_for_pods_ready is None \
        else wait_for_pods_ready
    gates: dict[str, bool] = {"VisibilityOnDemand": False, **dict(settings.feature_gates)}
    cfg: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "internalCertManagement": {"enable": True, "webhookServiceName": WEBHOOK_SERVICE,
                                   "webhookSecretName": WEBHOOK_SECRET},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "featureGates": gates,
    }
    if multikueue_origin is not None:  # a manager cluster
        cfg["multiKueue"] = multikueue_config(multikueue_origin)
    if on:
        cfg["waitForPodsReady"] = _merged(WAIT_FOR_PODS_READY_DEFAULT, settings.pods_ready)
    elif wait_for_pods_ready_by_default(version):
        gates["DisableWaitForPodsReady"] = True
    return cfg


# ETJ_KUEUE_LOG_LEVEL=3 makes Kueue log its V(2)/V(3) steps (MultiKueue's dispatch and
# status copies among them), for a failure its errors alone do not explain.
LOG_LEVEL_ENV = "ETJ_KUEUE_LOG_LEVEL"


def args(binary: Path, layout: Layout) -> list[str]:
    level = os.environ.get(LOG_LEVEL_ENV)
    return [str(binary), f"--kubeconfig={layout.kubeconfig}", f"--config={layout.config}",
            *([f"--zap-log-level={level}"] if level else [])]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def webhook_configurations(manifests: list[dict[str, Any]], port: int,
                           ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook registrations from its module (config/components/webhook), named
    as its release names them, keeping the webhooks of Kueue's own API and of JobSet, each
    pointed by URL at the controller on loopback."""
    out = []
    for manifest in manifests:
        hooks = []
        for hook in manifest.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if not groups <= WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hooks.append({**hook, "clientConfig": {"url": f"https://127.0.0.1:{port}{path}",
                                                   "caBundle": _b64(ca_pem)}})
        name = {"MutatingWebhookConfiguration": MUTATING_WEBHOOK,
                "ValidatingWebhookConfiguration": VALIDATING_WEBHOOK}[manifest["kind"]]
        out.append({"apiVersion": manifest["apiVersion"], "kind": manifest["kind"],
                    "metadata": {"name": name}, "webhooks": hooks})
    return out


def crd_with_conversion(crd: dict[str, Any], port: int, ca_pem: bytes) -> dict[str, Any]:
    """A Kueue CRD whose versions (v1beta1, v1beta2) Kueue converts through its /convert
    webhook, as the release installs it."""
    spec = {**crd["spec"], "conversion": {"strategy": "Webhook", "webhook": {
        "clientConfig": {"url": f"https://127.0.0.1:{port}/convert", "caBundle": _b64(ca_pem)},
        "conversionReviewVersions": ["v1"],
    }}}
    return {**crd, "spec": spec}


@dataclass(frozen=True)
class WebhookCerts:
    ca_pem: bytes
    ca_key_pem: bytes  # PKCS#1 RSA: what the rotator parses
    cert_pem: bytes
    key_pem: bytes


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pkcs1(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def webhook_certs(now: dt.datetime) -> WebhookCerts:
    """A CA and a serving certificate that Kueue's rotator accepts as its own (the CA valid
    for the DNS name kueue-ca, the certificate for kueue-webhook-service.kueue-system.svc)
    and that the API server accepts at https://127.0.0.1."""
    ca_key = _rsa_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kueue"),
                         x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + 10 * CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=True, key_cert_sign=True, crl_sign=False,
            content_commitment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(CA_NAME)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = _rsa_key()
    dns = f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns)]))
        .issuer_name(ca.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName(dns), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return WebhookCerts(ca.public_bytes(pem), _pkcs1(ca_key), cert.public_bytes(pem),
                        _pkcs1(key))


def cert_secret(certs: WebhookCerts) -> dict[str, Any]:
    """The Secret Kueue's rotator reads (and would fill, in a cluster)."""
    return {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
        "data": {"ca.crt": _b64(certs.ca_pem), "ca.key": _b64(certs.ca_key_pem),
                 "tls.crt": _b64(certs.cert_pem), "tls.key": _b64(certs.key_pem)},
    }


def probe_jobset(namespace: str, queue: str) -> dict[str, Any]:
    """A JobSet labelled for a queue, created with dryRun=All: Kueue's mutating webhook
    answers by suspending it."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "etj-kueue-probe", "namespace": namespace,
                     "labels": {f"{KUEUE_GROUP}/queue-name": queue}},
        "spec": {"replicatedJobs": [{"name": "probe", "template": {"spec": {"template": {
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "probe", "image": "busybox"}]}}}}}]},
    }


# ------------------------------------------------------------------------- side effects

def _write(path: Path, data: bytes | str, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if private:
        path.chmod(0o600)


def _ensure(api: KubeApi, path: str, obj: dict[str, Any]) -> None:
    try:
        api.create(path, obj)
    except ApiError as err:
        if err.status != 409:
            raise


def record(root: Path) -> procs.PidRecord | None:
    return procs.read_pid_file(COMPONENT, Layout(root).pid)


def running(root: Path) -> bool:
    rec = record(root)
    return rec is not None and procs.is_alive(rec)


def install(api: KubeApi, files: KueueFiles, port: int, ca_pem: bytes,
            progress: Progress, deadline: float) -> None:
    """Kueue's CRDs (server-side apply: the Workload CRD is 1.4 MB) and its webhooks."""
    converted = files.converted_crds()
    crds = files.crds()
    for crd in crds:
        name = crd["metadata"]["name"]
        body = crd_with_conversion(crd, port, ca_pem) if name in converted else crd
        api.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", body)
    for hook in webhook_configurations(files.webhook_manifests(), port, ca_pem):
        plural = hook["kind"].lower() + "s"
        api.apply(f"/apis/admissionregistration.k8s.io/v1/{plural}/{hook['metadata']['name']}",
                  hook)

    def established() -> bool:
        for crd in crds:
            got = api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                          + crd["metadata"]["name"])
            conditions = (got.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True"
                       for c in conditions):
                return False
        return True

    _wait(established, deadline, "Kueue's CRDs established")
    progress(f"  kueue CRDs ({len(crds)}) established")


def install_etj_crd(api: KubeApi, deadline: float) -> None:
    """The ElasticTrainingJob CRD (server-side apply), established."""
    from elastic_api.crd import build_crd

    crd = build_crd()
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
    api.apply(path, crd)

    def established() -> bool:
        conditions = (api.get(path).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    _wait(established, deadline, "the ElasticTrainingJob CRD established")


def _wait(check: Callable[[], bool], deadline: float, what: str,
          alive: Callable[[], None] | None = None) -> None:
    while not check():
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


def running_settings(root: Path) -> KueueSettings | None:
    """The settings the Kueue running in `root` was started with (None: not running)."""
    if not running(root):
        return None
    try:
        return KueueSettings.from_json(json.loads(Layout(root).settings.read_text()))
    except (OSError, ValueError):
        return KueueSettings()  # started before settings were recorded: the defaults


def start(root: Path, api: KubeApi, kubeconfig_yaml: str, *, ports: tuple[int, int],
          progress: Progress, timeout: float = 180.0, die_with_parent: bool = False,
          settings: KueueSettings | None = None,
          multikueue_origin: str | None = None) -> None:
    """Start Kueue on the running cluster in `root` and return once its webhooks answer
    (a queued JobSet comes back suspended from a dry-run create). `kubeconfig_yaml` is an
    admin kubeconfig for it; `ports` are free loopback ports (webhook, health);
    `settings` None is the pinned Kueue's default (config()); `multikueue_origin`: this is
    a MultiKueue manager cluster (our CRD is installed first: MultiKueue watches the
    external frameworks it is given from its start)."""
    settings = settings or KueueSettings()
    files = KueueFiles.locate()
    files.require()
    layout = Layout(root)
    webhook_port, health_port = ports
    t0 = time.monotonic()
    deadline = t0 + timeout
    certs = webhook_certs(dt.datetime.now(dt.UTC))
    _write(layout.certs / "tls.crt", certs.cert_pem)
    _write(layout.certs / "tls.key", certs.key_pem, private=True)
    version = load_versions()["KUEUE_VERSION"]
    _write(layout.config, yaml.safe_dump(
        config(webhook_port, health_port, layout.certs, version, settings=settings,
               multikueue_origin=multikueue_origin)))
    _write(layout.settings, json.dumps(settings.to_json(), sort_keys=True))
    _write(layout.kubeconfig, kubeconfig_yaml, private=True)
    _ensure(api, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": NAMESPACE}})
    api.apply(f"/api/v1/namespaces/{NAMESPACE}/secrets/{WEBHOOK_SECRET}", cert_secret(certs))
    install(api, files, webhook_port, certs.ca_pem, progress, deadline)
    if multikueue_origin is not None:
        install_etj_crd(api, deadline)
    rec = procs.start(COMPONENT, args(files.binary, layout), layout.pid, layout.log, root,
                      die_with_parent=die_with_parent)
    started = time.monotonic()

    def alive() -> None:
        if not procs.is_alive(rec):
            tail = "\n".join(layout.log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"{COMPONENT} exited during start; log {layout.log}:\n{tail}")

    def webhooks_answer() -> bool:
        if not _http_ok(f"http://127.0.0.1:{health_port}/readyz"):
            return False
        try:
            got = api.create("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
                             probe_jobset("default", "etj-probe"), dry_run=True)
        except ApiError:
            return False
        return bool(got["spec"].get("suspend"))

    _wait(webhooks_answer, deadline, f"{COMPONENT} (log: {layout.log})", alive)
    now = time.monotonic()
    progress(f"  {COMPONENT:<24} ready in {now - started:5.1f}s  (t={now - t0:5.1f}s)")


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, ssl.SSLError):
        return False


def stop(root: Path, api: KubeApi | None) -> bool:
    """Stop Kueue and, if `api` is given, remove its webhook registrations, so that JobSets
    are admitted without it (its CRDs stay). Returns whether it was running."""
    rec = record(root)
    was_running = rec is not None and procs.is_alive(rec)
    if rec is not None:
        procs.stop_all([rec])
        Layout(root).pid.unlink(missing_ok=True)
    if api is not None:
        for plural, name in (("mutatingwebhookconfigurations", MUTATING_WEBHOOK),
                             ("validatingwebhookconfigurations", VALIDATING_WEBHOOK)):
            try:
                api.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}")
            except ApiError as err:
                if err.status != 404:
                    raise
    return was_running
