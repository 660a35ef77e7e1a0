"""The chart's RBAC is exactly what the operator's code needs: no less, no more.

Three sources of need, all read from the real code:
  - every method of `Kube` (operator/elastic_operator/client/kube.py, the only module that calls
    the API; its informers list and watch through it too) maps to the permissions its
    request needs (the table below; a new method fails the test until it is added, and
    the chart with it);
  - kopf would list and watch every resource a handler subscribes to (read from the
    registry that `etj operator` builds): none, kopf watches nothing;
  - RBAC lets the operator create the per-job trainer Role only if it holds every
    permission the Role grants (render_rbac, for every backend).
The chart must grant the union of these, and nothing else. Sufficiency is also shown for
real on the local control plane (tests/integration/test_install.py).
"""
from __future__ import annotations

import inspect
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from elastic_api import GROUP, PLURAL
from elastic_api.kube import KubeClient
from elastic_api.models import ElasticTrainingJob
from elastic_devtools.localcluster.versions import cache_dir, load_versions
from elastic_operator.client.kube import Kube
from elastic_operator.render import render, render_rbac

ROOT = Path(__file__).resolve().parents[2]
LEASES = "coordination.k8s.io"
CHART = ROOT / "charts" / "elastic-operator"
Permission = tuple[str, str, str]  # (apiGroup, resource, verb)
CLUSTER_SCOPED = {"nodes", "multikueueclusters", "workloadpriorityclasses",
                  "priorityclasses", "customresourcedefinitions"}
CRDS = "apiextensions.k8s.io"

# What each request of kube.py needs. `create` is resolved from what the renderer emits.
KUBE_METHODS: dict[str, set[Permission]] = {
    "get_job": {(GROUP, PLURAL, "get")},
    "list_jobs": {(GROUP, PLURAL, "list")},
    "watch_jobs": {(GROUP, PLURAL, "watch")},
    "get_jobset": {("jobset.x-k8s.io", "jobsets", "get")},
    "list_pods": {("", "pods", "list")},
    "watch_pods": {("", "pods", "watch")},
    "list_jobsets": {("jobset.x-k8s.io", "jobsets", "list")},
    "watch_jobsets": {("jobset.x-k8s.io", "jobsets", "watch")},
    "list_nodes": {("", "nodes", "list")},
    "watch_nodes": {("", "nodes", "watch")},
    "get_lease": {(LEASES, "leases", "get")},
    "create_lease": {(LEASES, "leases", "create")},
    "patch_lease": {(LEASES, "leases", "patch")},
    "list_worker_jobs": {("batch", "jobs", "list")},
    "watch_worker_jobs": {("batch", "jobs", "watch")},
    "delete_job": {("batch", "jobs", "delete")},
    "delete_pod_now": {("", "pods", "delete")},
    "lower_job_backoff_limit": {("batch", "jobs", "patch")},
    "fail_job": {("batch", "jobs", "patch")},
    "get_batch_job": {("batch", "jobs", "get")},
    "allow_job_failure": {("batch", "jobs", "patch")},
    "delete_pod": {("", "pods", "delete")},
    "label_node": {("", "nodes", "patch")},
    "patch_jobset_suspend": {("jobset.x-k8s.io", "jobsets", "patch")},
    "list_workloads": {("kueue.x-k8s.io", "workloads", "list")},
    "list_all_workloads": {("kueue.x-k8s.io", "workloads", "list")},
    "watch_workloads": {("kueue.x-k8s.io", "workloads", "watch")},
    "patch_workload_active": {("kueue.x-k8s.io", "workloads", "patch")},
    "get_workload": {("kueue.x-k8s.io", "workloads", "get")},
    "apply_workload_condition": {("kueue.x-k8s.io", "workloads/status", "patch")},
    "patch_workload_status": {("kueue.x-k8s.io", "workloads/status", "patch")},
    "get_multikueue_cluster": {("kueue.x-k8s.io", "multikueueclusters", "get")},
    "get_priority_class": {("kueue.x-k8s.io", "workloadpriorityclasses", "get"),
                           ("scheduling.k8s.io", "priorityclasses", "get")},
    "annotate_dispatched_to": {(GROUP, PLURAL, "patch")},
    # Our own CRD only (the chart names it: resourceNames).
    "list_crd": {(CRDS, "customresourcedefinitions", "list")},
    "watch_crd": {(CRDS, "customresourcedefinitions", "watch")},
    "serves": set(),  # discovery: open to every authenticated client (system:discovery)
    "api_groups": set(),  # discovery too (GET /apis)
    "server_version": set(),  # discovery too (GET /version)
    # A server-side dry run (nothing stored) still needs create (issue 81: whether a 1.34
    # server keeps main's container restart rules).
    "dry_run_job": {("batch", "jobs", "create")},
    "patch_job_status": {(GROUP, f"{PLURAL}/status", "patch")},
    "post_event": {("", "events", "create")},
    # Who scrapes /metrics (entry/metrics_auth.py): reviews, nothing stored.
    "review_token": {("authentication.k8s.io", "tokenreviews", "create")},
    "review_metrics_access": {("authorization.k8s.io", "subjectaccessreviews", "create")},
    "create": set(),  # filled in by created_kinds()
}
# Not requests of their own: the transport, and construction.
KUBE_NOT_CALLS = {"request", "from_environment"}
PLURALS = {"JobSet": ("jobset.x-k8s.io", "jobsets"), "ServiceAccount": ("", "serviceaccounts"),
           "Role": ("rbac.authorization.k8s.io", "roles"),
           "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
           "Workload": ("kueue.x-k8s.io", "workloads")}


def example_jobs() -> list[ElasticTrainingJob]:
    jobs = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "ElasticTrainingJob":
                doc["metadata"].setdefault("namespace", "ns")
                jobs.append(ElasticTrainingJob.model_validate(doc))
    backends = {job.spec.backend for job in jobs}
    assert backends == {"pathways", "simulated"}, f"examples cover only {backends}"
    return jobs


def created_permissions() -> set[Permission]:
    needed = set()
    for job in example_jobs():
        for obj in render(job):
            assert obj["kind"] in PLURALS, (
                f"the renderer now emits a {obj['kind']}: add it to PLURALS here and the "
                "create verb to the chart's RBAC"
            )
            group, resource = PLURALS[obj["kind"]]
            needed.add((group, resource, "create"))
    return needed


def kube_permissions() -> set[Permission]:
    methods = {
        name for name, member in vars(Kube).items()
        if not name.startswith("_") and (callable(member) or isinstance(member, classmethod))
    }
    unknown = methods - set(KUBE_METHODS) - KUBE_NOT_CALLS
    assert not unknown, (
        f"kube.py has new API calls {sorted(unknown)}: add the permissions they need to "
        "KUBE_METHODS here and to charts/elastic-operator/templates/_helpers.tpl"
    )
    needed: set[Permission] = set()
    for perms in KUBE_METHODS.values():
        needed |= perms
    return needed | created_permissions()


def kopf_permissions() -> set[Permission]:
    from elastic_operator.app import build_operator
    from elastic_operator.entry.handlers import build_registry
    from elastic_operator.metrics.metrics import OperatorMetrics

    operator = build_operator(Kube(None), OperatorMetrics(CollectorRegistry()),
                              watch_workloads=True)
    registry = build_registry(operator)
    needed: set[Permission] = set()
    for kind, verbs in ((registry._watching, ("list", "watch")),
                        (registry._spawning, ("list", "watch", "patch")),
                        (registry._changing, ("list", "watch", "patch")),
                        (registry._indexing, ("list", "watch"))):
        for handler in kind.get_all_handlers():
            selector = handler.selector
            assert selector is not None and selector.group is not None
            resource = selector.plural or selector.any_name
            assert resource, f"cannot tell the resource of {selector}"
            needed |= {(selector.group, resource, verb) for verb in verbs}
    assert not registry._webhooks.get_all_handlers(), "admission webhooks need more RBAC"
    return needed


def trainer_role_permissions() -> set[Permission]:
    granted: set[Permission] = set()
    for job in example_jobs():
        for obj in render_rbac(job):
            if obj["kind"] == "Role":
                for rule in obj["rules"]:
                    granted |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"]
                                for v in rule["verbs"]}
    return granted


def chart_permissions() -> set[Permission]:
    version = load_versions()["HELM_VERSION"]
    helm = Path(os.environ.get("HELM") or cache_dir() / "bin" / f"helm-{version}")
    if not os.access(helm, os.X_OK):
        pytest.fail(f"helm {version} not found at {helm}: run hack/build-control-plane.sh")
    result = subprocess.run([str(helm), "template", "x", str(CHART)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    granted: set[Permission] = set()
    for doc in yaml.safe_load_all(result.stdout):
        if doc and doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                if "nonResourceURLs" in rule:  # <release>-metrics-reader: Prometheus'
                    continue
                granted |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"]
                            for v in rule["verbs"]}
    return granted


def describe(perms: set[Permission]) -> str:
    return ", ".join(f"{v} {g + '/' if g else ''}{r}" for g, r, v in sorted(perms))


def test_chart_grants_everything_the_operator_does() -> None:
    needed = kube_permissions() | kopf_permissions() | trainer_role_permissions()
    missing = needed - chart_permissions()
    assert not missing, f"the chart's RBAC lacks: {describe(missing)}"


def test_chart_grants_nothing_the_operator_does_not_do() -> None:
    needed = kube_permissions() | kopf_permissions() | trainer_role_permissions()
    extra = chart_permissions() - needed
    assert not extra, f"the chart grants what no code uses: {describe(extra)}"


def test_operator_holds_every_permission_it_grants_to_trainers() -> None:
    # Without this, creating the trainer Role is refused (RBAC escalation prevention).
    missing = trainer_role_permissions() - chart_permissions()
    assert not missing, f"the operator cannot grant {describe(missing)}"


def test_trainer_role_is_scoped_to_its_own_job() -> None:
    for job in example_jobs():
        (role,) = [o for o in render_rbac(job) if o["kind"] == "Role"]
        for rule in role["rules"]:
            if GROUP in rule["apiGroups"]:
                assert rule["resourceNames"] == [job.metadata.name], rule
            assert "secrets" not in rule["resources"]
            assert set(rule["verbs"]) <= {"get", "list", "watch", "patch"}, rule


def test_only_nodes_worker_clusters_priority_classes_and_our_crd_need_cluster_scope(
        ) -> None:
    resources = {r for _, r, _ in kube_permissions() | kopf_permissions()}
    # Everything but nodes (and, read-only, MultiKueue's worker clusters, the priority
    # classes a MultiKueue job's Workload is ordered by and the operator's own CRD, whose
    # schema revision it checks) is namespaced, so namespace mode (RoleBindings) suffices.
    assert resources & CLUSTER_SCOPED == CLUSTER_SCOPED
    assert not {"namespaces", "secrets"} & resources
    assert {v for _, r, v in kube_permissions() if r == "customresourcedefinitions"} == {
        "list", "watch"}


def test_kopf_watches_nothing() -> None:
    """kopf 1.45 runs the process only: no resource handler, so it lists, watches and
    patches nothing (its CRD and namespace scanning are off, handlers.configure_settings)."""
    assert kopf_permissions() == set()


# KubeClient's method -> the HTTP verb it sends (and the helpers that send GET).
CLIENT_VERBS = {"get": "GET", "get_or_none": "GET", "list_page": "GET", "watch": "GET",
                "create": "POST", "patch": "PATCH", "delete": "DELETE"}


def test_the_client_methods_send_the_verbs_they_are_named_for() -> None:
    for name, verb in CLIENT_VERBS.items():
        source = inspect.getsource(getattr(KubeClient, name))
        helper = verb == "GET" and ("self.get(" in source or "self.request" not in source)
        assert f'"{verb}"' in source or helper, f"KubeClient.{name} no longer sends {verb}"
    assert '"watch": "true"' in inspect.getsource(KubeClient.watch)
    assert '"limit"' in inspect.getsource(KubeClient.list_page)


def test_the_table_matches_the_requests_kube_py_makes() -> None:
    """Each method's source names the path and the client call (HTTP verb) the table
    claims."""
    expected_http = {"get_job": "GET", "list_jobs": "GET", "watch_jobs": "GET",
                     "get_jobset": "GET", "list_pods": "GET", "watch_pods": "GET",
                     "list_jobsets": "GET", "watch_jobsets": "GET", "list_nodes": "GET",
                     "watch_nodes": "GET", "get_lease": "GET", "create_lease": "POST",
                     "patch_lease": "PATCH", "create": "POST",
                     "patch_jobset_suspend": "PATCH", "patch_job_status": "PATCH",
                     "post_event": "POST", "list_workloads": "GET",
                     "list_all_workloads": "GET", "watch_workloads": "GET",
                     "patch_workload_active": "PATCH", "serves": "GET",
                     "get_workload": "GET", "apply_workload_condition": "PATCH",
                     "patch_workload_status": "PATCH",
                     "get_multikueue_cluster": "GET", "get_priority_class": "GET",
                     "annotate_dispatched_to": "PATCH",
                     "list_worker_jobs": "GET", "watch_worker_jobs": "GET",
                     "list_crd": "GET", "watch_crd": "GET",
                     "lower_job_backoff_limit": "PATCH", "fail_job": "PATCH",
                     "label_node": "PATCH", "delete_job": "DELETE",
                     "delete_pod_now": "DELETE", "server_version": "GET",
                     "dry_run_job": "POST"}
    watches = {"watch_jobs", "watch_pods", "watch_jobsets", "watch_nodes", "watch_workloads",
               "watch_worker_jobs", "watch_crd"}
    for name, verb in expected_http.items():
        source = inspect.getsource(getattr(Kube, name))
        if verb == "DELETE":
            source += inspect.getsource(Kube._delete)
        if "self._patch_job_if(" in source:
            source += inspect.getsource(Kube._patch_job_if)
        calls = {m for m, v in CLIENT_VERBS.items() if v == verb
                 and f"self.client.{m}(" in source}
        assert calls, f"Kube.{name} no longer sends {verb}"
        if name in watches:
            assert calls == {"watch"}, name
        elif name.startswith("list_"):
            assert calls & {"list_page", "get", "get_or_none"}, name
    fragments: dict[str, Any] = {"list_jobs": "PLURAL", "watch_jobs": "PLURAL",
                                 "get_job": "job_path",
                                 "list_pods": '"pods"', "watch_pods": '"pods"',
                                 "list_jobsets": '"jobsets"', "watch_jobsets": '"jobsets"',
                                 "list_nodes": "/nodes", "watch_nodes": "/nodes",
                                 "get_lease": "_lease_path", "patch_lease": "_lease_path",
                                 "create_lease": '"leases"',
                                 "get_jobset": "jobsets", "patch_jobset_suspend": "jobsets",
                                 "patch_job_status": "/status", "post_event": '"events"',
                                 "list_workloads": "KUEUE_WORKLOAD_PLURAL",
                                 "list_all_workloads": "KUEUE_WORKLOAD_PLURAL",
                                 "watch_workloads": "KUEUE_WORKLOAD_PLURAL",
                                 "patch_workload_active": "KUEUE_WORKLOAD_PLURAL",
                                 "get_workload": "KUEUE_WORKLOAD_PLURAL",
                                 "apply_workload_condition": "/status",
                                 "patch_workload_status": "/status",
                                 "get_multikueue_cluster": "MULTIKUEUE_CLUSTER_PLURAL",
                                 "get_priority_class": "WORKLOAD_PRIORITY_CLASS_PLURAL",
                                 "annotate_dispatched_to": "job_path",
                                 "list_worker_jobs": '"jobs"', "watch_worker_jobs": '"jobs"',
                                 "list_crd": "CRD_PATH", "watch_crd": "CRD_PATH",
                                 "delete_job": '"jobs"',
                                 "delete_pod_now": '"pods"', "lower_job_backoff_limit": '"jobs"',
                                 "fail_job": '"jobs"',
                                 "label_node": '"nodes"'}
    for name, fragment in fragments.items():
        assert fragment in inspect.getsource(getattr(Kube, name)), (name, fragment)


def documented_permissions() -> dict[str, set[str]]:
    """docs/operations.md's table "What the operator may do (RBAC)": resource -> verbs.
    A resource cell names one or more backticked resources (`workloads.kueue.x-k8s.io`,
    `jobs` (`batch`)); a verbs cell lists them, `;` and parentheses aside."""
    import re

    text = (ROOT / "docs" / "operations.md").read_text()
    table = text[text.index("| resource | verbs | why |"):].split("\n\n")[0].splitlines()[2:]
    documented: dict[str, set[str]] = {}
    for row in table:
        resource_cell, verbs_cell = [c.strip() for c in row.strip("|").split("|")[:2]]
        resources = re.findall(r"`([a-z0-9/.-]+)`", re.sub(r"\([^)]*\)", "", resource_cell))
        verbs = set(re.findall(r"\b(get|list|watch|create|patch|delete|update)\b",
                               re.sub(r"\([^)]*\)", "", verbs_cell)))
        for resource in resources:
            documented.setdefault(resource.split(".")[0], set()).update(verbs)
    return documented


def test_the_operations_rbac_table_is_the_charts() -> None:
    """The table users read (docs/operations.md) says exactly what the chart grants,
    resource by resource: it once lacked the job's patch, the worker Jobs' watch, the
    priority classes and the operator's own CRD."""
    granted: dict[str, set[str]] = {}
    for _, resource, verb in chart_permissions():
        granted.setdefault(resource, set()).add(verb)
    assert documented_permissions() == granted
