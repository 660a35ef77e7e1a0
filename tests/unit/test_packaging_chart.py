"""The Helm chart and the manifests rendered from it, checked with the pinned helm.

`helm lint --strict` and `helm template` run for real; the rendered objects are checked
for the hardening the operator promises (non-root, read-only root filesystem, no
privilege escalation, least-privilege RBAC) and against the real `etj operator` argument
parser, so the chart and the CLI cannot drift apart.
"""
from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_devtools.localcluster.versions import cache_dir, load_versions

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "elastic-operator"
RELEASE = "elastic-operator"
RELEASE_NAMESPACE = "elastic-operator-system"

# Verbs the operator may hold at all. Never update: every write is a patch. Deleting is
# limited to DELETABLE (the garbage collector cascades a job's own deletion).
ALLOWED_VERBS = {"get", "list", "watch", "create", "patch", "delete"}
# What the operator may delete: a failed slice's worker Job (JobSet recreates it) and a pod
# stuck Terminating on a dead node. Nothing else.
DELETABLE = {("batch", "jobs"), ("", "pods")}


def helm() -> Path:
    version = load_versions()["HELM_VERSION"]
    path = Path(os.environ.get("HELM") or cache_dir() / "bin" / f"helm-{version}")
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"helm {version} not found at {path}: run hack/build-control-plane.sh "
            "(make cluster-binaries), or set HELM to a helm v3 binary"
        )
    return path


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm()), *args], capture_output=True, text=True, timeout=120)


def set_args(values: dict[str, str] | None) -> list[str]:
    args: list[str] = []
    for key, value in (values or {}).items():
        args += ["--set", f"{key}={value}"]
    return args


def render(values: dict[str, str] | None = None) -> list[dict[str, Any]]:
    result = run_helm("template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE,
                      *set_args(values))
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def only(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


NAMESPACED = {"watchNamespaces": "{team-a,team-b}",
              "checkpointRoots.team-a": "{gs://team-a-ckpt,/mnt/team-a}"}
SCENARIOS = {
    "defaults": None,
    "namespaced": NAMESPACED,
    "servicemonitor": {"metrics.serviceMonitor.enabled": "true", "operator.logFormat": "text"},
    # The monitoring objects alone (the CRD is checked against crds/ instead).
    "monitoring": {"metrics.serviceMonitor.enabled": "true", "crds.enabled": "false",
                   "alerts.prometheusRule.enabled": "true", "dashboard.enabled": "true"},
}
MONITORING_GOLDEN = ROOT / "tests" / "golden" / "chart" / "monitoring.yaml"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_helm_lint_strict(scenario: str) -> None:
    result = run_helm("lint", "--strict", str(CHART), "--namespace", RELEASE_NAMESPACE,
                      *set_args(SCENARIOS[scenario]))
    assert result.returncode == 0, f"helm lint failed:\n{result.stdout}\n{result.stderr}"


def test_chart_version_follows_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["version"] == version and chart["appVersion"] == version, (
        f"Chart.yaml version/appVersion {chart['version']}/{chart['appVersion']} != "
        f"pyproject.toml {version}"
    )


def test_deployment_is_two_replicas_rolling_and_hardened() -> None:
    docs = render()
    deployment = only(docs, "Deployment")
    spec = deployment["spec"]
    # Two replicas electing a leader; a rolling update starts a standby before it stops
    # an old replica, which hands the Lease over.
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == only(docs, "ServiceAccount")["metadata"]["name"]
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True
    assert container["resources"]["requests"] and container["resources"]["limits"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]], "/tmp must be an emptyDir (read-only root)"
    assert all("hostPath" not in v for v in volumes.values())

    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probe = container["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    assert probe["port"] == "liveness" and ports["liveness"] == 8080
    assert f"--liveness-port={ports['liveness']}" in container["args"]
    assert f"--metrics-port={ports['metrics']}" in container["args"]
    # Ready once it could lead (caches synced): the rollout stops an old replica only then.
    ready = container["readinessProbe"]
    assert ready["httpGet"] == {"path": "/readyz", "port": "readiness"}
    assert ports["readiness"] == 8081 and f"--readiness-port={ports['readiness']}" in \
        container["args"]
    assert ready["periodSeconds"] <= 2 and ready["failureThreshold"] == 1
    assert container["image"] == "ghcr.io/elastic-training-operator/operator:0.1.0"


def test_the_operator_runs_with_bounded_malloc_arenas_unless_told_not_to() -> None:
    def env(values: dict[str, str] | None = None) -> dict[str, Any]:
        (container,) = only(render(values), "Deployment")["spec"]["template"]["spec"][
            "containers"]
        return {e["name"]: e.get("value") for e in container["env"]}
    assert env()["MALLOC_ARENA_MAX"] == "2"
    assert env({"operator.mallocArenaMax": "4"})["MALLOC_ARENA_MAX"] == "4"
    assert "MALLOC_ARENA_MAX" not in env({"operator.mallocArenaMax": "null"})


def test_without_election_it_is_one_replica_recreated() -> None:
    docs = render({"leaderElection.enabled": "false", "replicaCount": "1"})
    spec = only(docs, "Deployment")["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    (container,) = spec["template"]["spec"]["containers"]
    assert operator_parser_args(container["args"]).leader_elect is False
    assert not [d for d in of_kind(docs, "Role") if "leader" in d["metadata"]["name"]]
    result = run_helm("template", RELEASE, str(CHART), "--set", "leaderElection.enabled=false")
    assert result.returncode != 0 and "leaderElection.enabled" in result.stderr


def test_the_lease_role_names_the_lease_the_operator_uses() -> None:
    """get and patch on exactly the Lease the operator is told to use, in the namespace
    it is told (the release's); create (which cannot name it) on leases. Each replica is
    known by its pod's name."""
    docs = render()
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    parsed = operator_parser_args(container["args"])
    assert parsed.leader_elect is True
    assert parsed.leader_election_namespace == RELEASE_NAMESPACE
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in container["env"]}
    assert env["POD_NAME"] == "metadata.name"
    role = only(docs, "Role", f"{RELEASE}-leader-election")
    assert role["metadata"]["namespace"] == RELEASE_NAMESPACE
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": [parsed.leader_election_name],
                      "verbs": ["get", "patch"]}]
    unnamed = [r for r in role["rules"] if not r.get("resourceNames")]
    assert unnamed == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                        "verbs": ["create"]}]
    (binding,) = bindings_of(docs, role["metadata"]["name"])
    assert binding["kind"] == "RoleBinding"
    assert binding["metadata"]["namespace"] == RELEASE_NAMESPACE
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_a_drain_evicts_one_replica_at_a_time_and_replicas_spread() -> None:
    docs = render()
    pdb = only(docs, "PodDisruptionBudget")
    template = only(docs, "Deployment")["spec"]["template"]
    assert pdb["spec"]["maxUnavailable"] == 1
    # Only Ready replicas count; one that is not may go (a drain never waits on it).
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    anti = template["spec"]["affinity"]["podAntiAffinity"]
    (preferred,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    term = preferred["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    hard = only(render({"podAntiAffinity": "hard"}), "Deployment")["spec"]["template"]
    (required,) = hard["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["topologyKey"] == "kubernetes.io/hostname"
    none = only(render({"podAntiAffinity": "none"}), "Deployment")["spec"]["template"]
    assert "affinity" not in none["spec"]
    assert not of_kind(render({"podDisruptionBudget.enabled": "false"}), "PodDisruptionBudget")


def operator_parser_args(args: list[str]) -> Any:
    from elastic_api.etj_cli import build_parser

    parser = build_parser()
    subparsers = parser._subparsers
    assert subparsers is not None
    subcommands = subparsers._group_actions[0].choices
    assert "operator" in subcommands, (
        "`etj operator` is not registered (elastic_operator.entry.operator_cli is missing or fails "
        "to import), so the chart's arguments cannot be checked"
    )
    return parser.parse_args(["operator", *args])


@pytest.mark.parametrize("scenario", ["defaults", "namespaced"])
def test_container_args_parse_with_the_real_operator_cli(scenario: str) -> None:
    deployment = only(render(SCENARIOS[scenario]), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    try:
        parsed = operator_parser_args(container["args"])
    except SystemExit as exc:
        pytest.fail(f"`etj operator {' '.join(container['args'])}` is rejected (exit {exc.code})")
    assert parsed.log_format == "json"
    assert parsed.liveness_port == 8080 and parsed.metrics_port == 9090
    if scenario == "namespaced":
        assert sorted(parsed.namespace) == ["team-a", "team-b"]
        assert not parsed.all_namespaces
        assert parsed.checkpoint_roots == ["team-a=gs://team-a-ckpt,/mnt/team-a"]
    else:
        assert parsed.all_namespaces and not parsed.namespace
        assert parsed.checkpoint_roots == []  # local paths only, no gs://


def rbac_rules(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The rules of the operator's roles (not the metrics reader's, which is Prometheus')."""
    return [
        (f"{d['kind']}/{d['metadata']['name']}", rule)
        for d in docs if d["kind"] in ("ClusterRole", "Role")
        and d["metadata"]["name"] != f"{RELEASE}-metrics-reader"
        for rule in d.get("rules", [])
    ]


@pytest.mark.parametrize("scenario", ["defaults", "namespaced"])
def test_rbac_has_no_wildcards_no_secrets_and_only_needed_verbs(scenario: str) -> None:
    rules = rbac_rules(render(SCENARIOS[scenario]))
    assert rules
    for where, rule in rules:
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert "*" not in rule.get(key, []), f"{where}: wildcard in {key}: {rule}"
        assert "nonResourceURLs" not in rule, f"{where}: {rule}"
        assert "secrets" not in rule["resources"], f"{where} grants Secrets: {rule}"
        assert set(rule["verbs"]) <= ALLOWED_VERBS, (
            f"{where} grants {set(rule['verbs']) - ALLOWED_VERBS}: {rule}"
        )
        assert not {"bind", "escalate", "impersonate"} & set(rule["verbs"])
        if "delete" in rule["verbs"]:
            deleted = {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
            assert deleted <= DELETABLE, f"{where} deletes {deleted - DELETABLE}: {rule}"


def grants(docs: list[dict[str, Any]], role_name: str) -> set[tuple[str, str, str]]:
    role = only(docs, "ClusterRole", role_name)
    return {
        (group, resource, verb)
        for rule in role["rules"] for group in rule["apiGroups"]
        for resource in rule["resources"] for verb in rule["verbs"]
    }


def test_nodes_worker_clusters_priority_classes_and_our_crd_are_the_only_cluster_scoped(
        ) -> None:
    docs = render(NAMESPACED)
    # list and watch: the node cache (no single node is read by name); patch: the
    # quarantine label on the nodes of a failing pool (never spec or status). get: on a
    # MultiKueue manager, whether a job's worker cluster can be reached, and the priority
    # class a job's Workload is ordered by. list and watch of the operator's own CRD (by
    # name), whose schema revision it checks.
    assert grants(docs, f"{RELEASE}-nodes") == {
        *{("", "nodes", v) for v in ("list", "watch", "patch")},
        ("kueue.x-k8s.io", "multikueueclusters", "get"),
        ("kueue.x-k8s.io", "workloadpriorityclasses", "get"),
        ("scheduling.k8s.io", "priorityclasses", "get"),
        *{("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")},
        # Who scrapes /metrics: the API server's reviews of a token and of its user.
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create")}
    (crd_rule,) = [r for r in only(docs, "ClusterRole", f"{RELEASE}-nodes")["rules"]
                   if "customresourcedefinitions" in r["resources"]]
    assert crd_rule["resourceNames"] == [CRD_NAME], "the operator reads its own CRD only"
    cluster_scoped = {"nodes", "namespaces", "customresourcedefinitions", "leases",
                      "multikueueclusters", "workloadpriorityclasses", "priorityclasses"}
    namespaced = grants(docs, RELEASE)
    assert not {r for _, r, _ in namespaced} & cluster_scoped


def bindings_of(docs: list[dict[str, Any]], role_name: str) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and d["roleRef"]["name"] == role_name
    ]


def test_cluster_scope_binds_the_operator_role_cluster_wide() -> None:
    docs = render()
    sa = only(docs, "ServiceAccount")["metadata"]
    for role in (RELEASE, f"{RELEASE}-nodes"):
        (binding,) = bindings_of(docs, role)
        assert binding["kind"] == "ClusterRoleBinding"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["name"], "namespace": RELEASE_NAMESPACE}
        ]
    assert sa["namespace"] == RELEASE_NAMESPACE


def test_namespace_scope_binds_the_operator_role_only_in_watched_namespaces() -> None:
    docs = render(NAMESPACED)
    bindings = bindings_of(docs, RELEASE)
    assert {b["kind"] for b in bindings} == {"RoleBinding"}
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    (nodes,) = bindings_of(docs, f"{RELEASE}-nodes")
    assert nodes["kind"] == "ClusterRoleBinding"


def test_metrics_service_selects_the_operator_pod_and_its_metrics_port() -> None:
    docs = render()
    service = only(docs, "Service")
    pod = only(docs, "Deployment")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    (container,) = pod["spec"]["containers"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    assert not of_kind(docs, "ServiceMonitor"), "the ServiceMonitor must be opt-in"
    assert not of_kind(docs, "PrometheusRule"), "the alert rules must be opt-in"
    assert not of_kind(docs, "ConfigMap"), "the dashboard must be opt-in"


def test_service_monitor_scrapes_the_metrics_service_when_enabled() -> None:
    docs = render(SCENARIOS["servicemonitor"])
    monitor = only(docs, "ServiceMonitor")
    service = only(docs, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # The job's namespace and job labels must not become exported_namespace/exported_job.
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    result = run_helm("template", RELEASE, str(CHART),
                      "--set", "metrics.serviceMonitor.enabled=true",
                      "--set", "metrics.service.enabled=false")
    assert result.returncode != 0 and "metrics.service.enabled" in result.stderr


def test_metrics_are_served_to_readers_over_https_by_default() -> None:
    docs = render(SCENARIOS["servicemonitor"])
    (container,) = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--metrics-secure" in container["args"]
    reader = only(docs, "ClusterRole", f"{RELEASE}-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not [b for b in of_kind(docs, "ClusterRoleBinding")
                if b["roleRef"]["name"] == reader["metadata"]["name"]], "bound by the user"
    (endpoint,) = only(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {
        "insecureSkipVerify": True}
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert not of_kind(docs, "NetworkPolicy"), "the NetworkPolicy must be opt-in"


def test_metrics_certificate_from_a_secret_and_insecure_as_asked() -> None:
    docs = render({"operator.metrics.certSecret": "operator-metrics-tls"})
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    parsed = operator_parser_args(container["args"])
    assert parsed.metrics_secure and parsed.metrics_cert_file.startswith("/etc/etj/metrics-tls/")
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "metrics-tls"]
    assert parsed.metrics_key_file.startswith(mount["mountPath"]) and mount["readOnly"]
    assert {"name": "metrics-tls", "secret": {"secretName": "operator-metrics-tls"}} \
        in pod["volumes"]
    docs = render({"operator.metrics.secure": "false", "metrics.serviceMonitor.enabled": "true"})
    (container,) = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not operator_parser_args(container["args"]).metrics_secure
    assert "scheme" not in only(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert not [d for d in of_kind(docs, "ClusterRole") if "metrics-reader" in
                d["metadata"]["name"]]
    assert ("authentication.k8s.io", "tokenreviews", "create") not in grants(
        docs, f"{RELEASE}-nodes"), "no reviews to make: no right to make them"


def test_metrics_network_policy_admits_the_named_namespaces_on_the_metrics_port() -> None:
    docs = render({"metrics.networkPolicy.enabled": "true",
                   "metrics.networkPolicy.fromNamespaceLabels.team": "observability"})
    policy = only(docs, "NetworkPolicy")
    pod = only(docs, "Deployment")["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() \
        <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring", "team": "observability"}}}]
    (container,) = pod["spec"]["containers"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert "metrics" in {p["name"] for p in container["ports"]}


@pytest.mark.parametrize(
    ("key", "value"),
    [("operator.metrics.certSecret", "Not_A_Name"),
     ("operator.logFormat", "xml"), ("watchNamespaces", "{Bad_Namespace}"),
     ("operator.metricsPort", "0"), ("operator.readinessPort", "0"),
     ("podAntiAffinity", "always"), ("replicaCount", "0"),
     ("operator.mallocArenaMax", "0")],
)
def test_values_schema_rejects_bad_values_naming_the_field(key: str, value: str) -> None:
    result = run_helm("template", RELEASE, str(CHART), "--set", f"{key}={value}")
    assert result.returncode != 0, f"{key}={value} was accepted"
    assert key.split(".")[-1] in result.stderr, result.stderr


CRD_NAME = "elastictrainingjobs.elastic.pathways.dev"
KEEP = "helm.sh/resource-policy"


def test_chart_ships_the_generated_crd_as_a_template_kept_on_uninstall() -> None:
    """The CRD is a template (so `helm upgrade` upgrades it), the one `etj crd` generates,
    annotated so that `helm uninstall` leaves it and the jobs in place."""
    generated = yaml.safe_load((ROOT / "crds" / "elastictrainingjobs.yaml").read_text())
    assert not (CHART / "crds").exists(), (
        "charts/elastic-operator/crds/ is installed once and never upgraded by Helm: the CRD "
        "belongs in templates/crd.yaml (hack/render-manifests)")
    crd = only(render(), "CustomResourceDefinition", CRD_NAME)
    assert crd["metadata"]["annotations"][KEEP] == "keep"
    crd["metadata"]["annotations"].pop(KEEP)
    if not crd["metadata"]["annotations"]:
        crd["metadata"].pop("annotations")
    assert crd == generated, "templates/crd.yaml is stale: run hack/render-manifests"


def test_crds_keep_false_lets_uninstall_delete_the_crd() -> None:
    crd = only(render({"crds.keep": "false"}), "CustomResourceDefinition", CRD_NAME)
    assert KEEP not in (crd["metadata"].get("annotations") or {})


def test_crds_enabled_false_leaves_the_crd_to_you() -> None:
    assert not of_kind(render({"crds.enabled": "false"}), "CustomResourceDefinition")


def test_install_manifest_is_current() -> None:
    helm()  # a clear failure when helm is missing
    result = subprocess.run(
        [str(ROOT / "hack" / "render-manifests"), "--check"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HELM": str(helm())},
    )
    assert result.returncode == 0, (
        f"manifests/install.yaml is stale: run hack/render-manifests (make manifests)\n"
        f"{result.stdout}{result.stderr}"
    )


def test_install_manifest_stands_alone_for_kubectl_apply() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests" / "install.yaml").read_text()) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds.index("CustomResourceDefinition") < kinds.index("Deployment"), (
        "the CRD must come before the operator that watches it")
    namespace = only(docs, "Namespace")["metadata"]["name"]
    assert namespace == RELEASE_NAMESPACE
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "Deployment", "Service"):
            assert doc["metadata"]["namespace"] == namespace, doc["metadata"]
    crd = only(docs, "CustomResourceDefinition")
    assert crd["spec"]["group"] == "elastic.pathways.dev"


def test_monitoring_golden_is_current() -> None:
    """The chart with the ServiceMonitor, the alert rules and the dashboard on, byte for
    byte (hack/render-manifests writes it; the --check run of
    test_install_manifest_is_current compares it too)."""
    result = run_helm("template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE,
                      *set_args(SCENARIOS["monitoring"]))
    assert result.returncode == 0, result.stderr
    golden = MONITORING_GOLDEN.read_text()
    body = golden[golden.index("---"):]  # after the header comment
    assert body == result.stdout, (
        "tests/golden/chart/monitoring.yaml is stale: review the diff, then run "
        "hack/render-manifests (make manifests)")


def test_the_rules_are_the_plain_rules_file_and_the_dashboard_the_committed_json() -> None:
    docs = render(SCENARIOS["monitoring"])
    rule = only(docs, "PrometheusRule")
    plain = yaml.safe_load((ROOT / "manifests" / "prometheus-rules.yaml").read_text())
    assert rule["spec"] == plain, "manifests/prometheus-rules.yaml is stale: hack/render-manifests"
    assert rule["metadata"]["namespace"] == RELEASE_NAMESPACE
    dashboard = only(docs, "ConfigMap", f"{RELEASE}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    committed = (CHART / "dashboards" / "elastic-training-operator.json").read_text()
    assert json.loads(dashboard["data"]["elastic-training-operator.json"]) == json.loads(committed)


def test_alert_values_reach_the_rules() -> None:
    # --set gives a fraction as a string (helm types only integers): accepted as such.
    docs = render({"alerts.prometheusRule.enabled": "true", "alerts.sliceDown.for": "3m",
                   "alerts.sliceRestartBudget.spentFraction": "0.5",
                   "alerts.labels.team": "ml-platform",
                   "alerts.prometheusRule.labels.release": "kps",
                   "alerts.runbookUrl": "https://wiki.example/etj"})
    rule = only(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert alerts["ElasticTrainingSliceDown"]["for"] == "3m"
    assert ">= 0.5" in alerts["ElasticTrainingSliceRestartBudgetLow"]["expr"]
    for name, alert in alerts.items():
        assert alert["labels"]["team"] == "ml-platform", name
        assert alert["annotations"]["runbook_url"] == f"https://wiki.example/etj#{name.lower()}"


def test_dashboard_configmap_follows_its_values() -> None:
    docs = render({"dashboard.enabled": "true", "dashboard.namespace": "monitoring",
                   "dashboard.annotations.grafana_folder": "ML"})
    dashboard = only(docs, "ConfigMap")
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "ML"}


@pytest.mark.parametrize(
    ("key", "value"),
    [("alerts.sliceDown.for", "10 minutes"), ("alerts.goodputLow.threshold", "1.5"),
     ("alerts.sliceRestartBudget.spentFraction", "0"), ("alerts.checkpointStale.periods", "x"),
     ("dashboard.namespace", "Bad_NS")],
)
def test_values_schema_rejects_bad_alert_values(key: str, value: str) -> None:
    result = run_helm("template", RELEASE, str(CHART), "--set", f"{key}={value}")
    assert result.returncode != 0, f"{key}={value} was accepted"
    assert key.split(".")[-1] in result.stderr, result.stderr


def test_the_install_notes_name_only_paths_that_exist() -> None:
    """NOTES.txt (what `helm install` prints) once told every installer to apply
    charts/elastic-operator/crds/, gone since the CRD became a template: every path of
    this repository it names must exist."""
    import re

    notes = (CHART / "templates" / "NOTES.txt").read_text()
    paths = set(re.findall(r"\b((?:docs|crds|charts|examples|manifests)/[\w./-]*\w/?)", notes))
    assert paths, notes
    for path in sorted(paths):
        assert (ROOT / path).exists(), f"NOTES.txt names {path}, which does not exist"
    assert "crds/elastictrainingjobs.yaml" in notes and "docs/gke.md" in notes
