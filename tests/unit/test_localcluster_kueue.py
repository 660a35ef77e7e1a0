"""The pure parts of Kueue on the local control plane: its config, its webhook
registrations, its CRDs' conversion webhooks and the certificates its rotator keeps."""
from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from elastic_devtools.localcluster import kueue

NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def hook(name: str, group: str, path: str) -> dict[str, Any]:
    return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                         "path": path}},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["x"]}]}


MANIFESTS = [
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
     "metadata": {"name": "mutating-webhook-configuration"},
     "webhooks": [hook("mjobset.kb.io", "jobset.x-k8s.io", "/mutate-jobset"),
                  hook("mpod.kb.io", "", "/mutate--v1-pod"),
                  hook("mworkload.kb.io", "kueue.x-k8s.io", "/mutate-workload")]},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
     "metadata": {"name": "validating-webhook-configuration"},
     "webhooks": [hook("vjob.kb.io", "batch", "/validate-batch-v1-job"),
                  hook("vclusterqueue.kb.io", "kueue.x-k8s.io", "/validate-cq")]},
]


def test_config_runs_out_of_cluster_with_the_jobset_integration():
    cfg = kueue.config(9444, 8082, Path("/state/kueue/certs"), "v0.17.0")
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 9444,
                              "certDir": "/state/kueue/certs"}
    assert cfg["health"] == {"healthProbeBindAddress": "127.0.0.1:8082"}
    assert cfg["metrics"] == {"bindAddress": "0"}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["integrations"] == {"frameworks": ["jobset.x-k8s.io/jobset"]}
    assert cfg["featureGates"] == {"VisibilityOnDemand": False}
    assert cfg["internalCertManagement"]["enable"] is True


def test_wait_for_pods_ready_is_kueue_s_default_for_the_version_and_written_out():
    certs = Path("/c")
    # v0.19 turned it on by default: the config says so, with Kueue's default settings.
    on = kueue.config(1, 2, certs, "v0.19.2")
    assert on["waitForPodsReady"] == {
        "timeout": "30m", "recoveryTimeout": "30m", "blockAdmission": False,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60,
                              "backoffMaxSeconds": 3600}}
    assert "DisableWaitForPodsReady" not in on["featureGates"]
    # Before v0.19 it was off unless configured; absent means off there.
    assert "waitForPodsReady" not in kueue.config(1, 2, certs, "v0.17.0")
    # Asked for explicitly: on for an old release; off for a new one takes the gate.
    assert "waitForPodsReady" in kueue.config(1, 2, certs, "v0.17.0", wait_for_pods_ready=True)
    off = kueue.config(1, 2, certs, "v0.19.2", wait_for_pods_ready=False)
    assert "waitForPodsReady" not in off
    assert off["featureGates"]["DisableWaitForPodsReady"] is True


def test_kueue_versions_are_compared_as_numbers():
    assert kueue.release("v0.19.2") == (0, 19, 2)
    assert kueue.wait_for_pods_ready_by_default("v0.100.0")
    assert not kueue.wait_for_pods_ready_by_default("v0.9.0")
    with pytest.raises(ValueError, match="KUEUE_VERSION"):
        kueue.release("main")


def test_webhooks_keep_kueue_and_jobset_and_point_at_loopback():
    out = kueue.webhook_configurations(MANIFESTS, 9444, b"CA")
    assert [w["metadata"]["name"] for w in out] == [
        "kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"]
    mutating, validating = out
    assert [h["name"] for h in mutating["webhooks"]] == ["mjobset.kb.io", "mworkload.kb.io"]
    assert [h["name"] for h in validating["webhooks"]] == ["vclusterqueue.kb.io"]
    assert mutating["webhooks"][0]["clientConfig"] == {
        "url": "https://127.0.0.1:9444/mutate-jobset", "caBundle": base64.b64encode(b"CA").decode()}
    assert mutating["webhooks"][0]["failurePolicy"] == "Fail"  # the rest is as released
    assert MANIFESTS[0]["webhooks"][0]["clientConfig"]["service"]  # input untouched


def test_crd_conversion_webhook_by_url():
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "workloads.kueue.x-k8s.io"}, "spec": {"group": "kueue.x-k8s.io"}}
    out = kueue.crd_with_conversion(crd, 9444, b"CA")
    assert out["spec"]["conversion"] == {"strategy": "Webhook", "webhook": {
        "clientConfig": {"url": "https://127.0.0.1:9444/convert",
                         "caBundle": base64.b64encode(b"CA").decode()},
        "conversionReviewVersions": ["v1"]}}
    assert "conversion" not in crd["spec"]


def _san(cert: x509.Certificate) -> x509.SubjectAlternativeName:
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value


def test_certificates_are_what_the_rotator_keeps_and_the_api_server_trusts():
    certs = kueue.webhook_certs(NOW)
    ca = x509.load_pem_x509_certificate(certs.ca_pem)
    cert = x509.load_pem_x509_certificate(certs.cert_pem)
    # The rotator parses PKCS#1 RSA keys and checks the CA for the DNS name kueue-ca.
    assert certs.ca_key_pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    assert certs.key_pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    assert _san(ca).get_values_for_type(x509.DNSName) == ["kueue-ca"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # The serving cert: Kueue's service name for the rotator, 127.0.0.1 for the API server.
    assert _san(cert).get_values_for_type(x509.DNSName) == [
        "kueue-webhook-service.kueue-system.svc"]
    assert _san(cert).get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    public = ca.public_key()
    assert isinstance(public, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    public.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                  cert.signature_hash_algorithm)
    # Valid beyond the rotator's 90-day lookahead, so it is never replaced by one
    # without the loopback address.
    assert cert.not_valid_after_utc - NOW > dt.timedelta(days=90)


def test_secret_holds_the_rotator_keys():
    certs = kueue.webhook_certs(NOW)
    secret = kueue.cert_secret(certs)
    assert secret["metadata"] == {"name": "kueue-webhook-server-cert", "namespace": "kueue-system"}
    assert {k: base64.b64decode(v) for k, v in secret["data"].items()} == {
        "ca.crt": certs.ca_pem, "ca.key": certs.ca_key_pem,
        "tls.crt": certs.cert_pem, "tls.key": certs.key_pem}


def test_probe_jobset_is_queued():
    probe = kueue.probe_jobset("default", "q")
    assert probe["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "q"}
    assert "suspend" not in probe["spec"]  # Kueue's webhook is what suspends it


def test_files_are_found_in_the_cache(tmp_path: Path):
    files = kueue.KueueFiles.locate({"KUEUE_VERSION": "v0.17.0"}, tmp_path)
    assert files.binary == tmp_path / "bin" / "kueue-controller-v0.17.0"
    patches = tmp_path / "kueue-v0.17.0" / "crd-patches"
    patches.mkdir(parents=True)
    (patches / "kustomization.yaml").write_text(yaml.safe_dump(
        {"patches": [{"path": "patches/webhook_in_workloads.yaml"}]}))
    (patches / "webhook_in_workloads.yaml").write_text(yaml.safe_dump(
        {"metadata": {"name": "workloads.kueue.x-k8s.io"}}))
    assert files.converted_crds() == {"workloads.kueue.x-k8s.io"}


def test_a_test_module_s_settings_are_merged_over_kueues_defaults():
    settings = kueue.KueueSettings(
        pods_ready={"recoveryTimeout": "45s", "requeuingStrategy": {"backoffBaseSeconds": 10}},
        feature_gates={"TASFailedNodeReplacementFailFast": False})
    cfg = kueue.config(1, 2, Path("/c"), "v0.19.2", settings=settings)
    assert cfg["waitForPodsReady"] == {
        "timeout": "30m", "recoveryTimeout": "45s", "blockAdmission": False,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 10,
                              "backoffMaxSeconds": 3600}}
    assert cfg["featureGates"] == {"VisibilityOnDemand": False,
                                   "TASFailedNodeReplacementFailFast": False}
    # What the running Kueue was started with is kept as JSON and compared by value.
    assert kueue.KueueSettings.from_json(settings.to_json()) == settings
    assert kueue.KueueSettings.from_json(kueue.KueueSettings().to_json()) != settings
    off = kueue.config(1, 2, Path("/c"), "v0.19.2",
                       settings=kueue.KueueSettings(wait_for_pods_ready=False))
    assert "waitForPodsReady" not in off and off["featureGates"]["DisableWaitForPodsReady"]


def test_a_manager_dispatches_elastic_training_jobs():
    from elastic_api import API_VERSION, KIND

    cfg = kueue.config(9444, 8082, Path("/c"), "v0.19.2", multikueue_origin="manager")
    frameworks = cfg["multiKueue"]["externalFrameworks"]
    group_version = API_VERSION.split("/")
    assert frameworks == [{"name": f"{KIND}.{group_version[1]}.{group_version[0]}"}]
    assert cfg["multiKueue"]["origin"] == "manager"
    assert "multiKueue" not in kueue.config(9444, 8082, Path("/c"), "v0.19.2")


def test_multikueue_objects_point_at_each_other():
    from elastic_devtools.localcluster import multikueue as mk

    secret = mk.kubeconfig_secret("w1-secret", "apiVersion: v1\n")
    assert base64.b64decode(secret["data"]["kubeconfig"]) == b"apiVersion: v1\n"
    assert secret["metadata"]["namespace"] == kueue.NAMESPACE
    source = mk.multikueue_cluster("w1", "w1-secret")["spec"]["clusterSource"]["kubeConfig"]
    assert source == {"locationType": "Secret", "location": "w1-secret"}
    check = mk.admission_check("ac", "cfg")["spec"]
    assert check["controllerName"] == "kueue.x-k8s.io/multikueue"
    assert check["parameters"]["name"] == "cfg"
    assert mk.multikueue_config("cfg", ["w1"])["spec"]["clusters"] == ["w1"]
