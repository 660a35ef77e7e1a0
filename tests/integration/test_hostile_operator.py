"""Hostile specs against the real API server and the real operator.

Hypothesis generates ElasticTrainingJob manifests: the shipped examples mutated at random
(`hostile_manifest`, mostly refused) and jobs that stay inside the schema but push it
(`admissible_job`: huge numbers, boundary values, odd but valid names, long lists,
unicode and control characters in free text, both backends, suspended or not). Each one
is created for real. What the API server refuses, `validate_job` must refuse too; what it
admits, one `etj operator` must handle: a status for the current generation that either
runs a JobSet (SpecApplied=True) or says why it cannot (SpecApplied=False/InvalidSpec),
no crash, and no loop.
"""
from __future__ import annotations

import copy
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes import client

from elastic_api import GROUP, PLURAL, VERSION, data_paths
from elastic_api.catalog import CATALOG, slice_shape
from elastic_api.images import MOVING_TAG, moves
from elastic_api.models import BUNDLED_MODELS, MAX_SLICES
from elastic_api.names import MULTIKUEUE_CONTROLLER
from elastic_api.validation import validate_job
from elastic_devtools.localcluster import Cluster
from elastic_devtools.localcluster.faults import wait_for
from elastic_devtools.localcluster.gcs import FakeGcsServer
from elastic_devtools.localcluster.operator_process import OperatorProcess
from elastic_devtools.localcluster.operator_settings import TEST
from tests.builders import etj
from tests.support.hostile_specs import hostile_manifest

pytestmark = pytest.mark.cluster

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

RESYNC_SECONDS = 3
# "Does not loop" can only be observed as an absence of change: a window of two resync
# periods, in which every job is reconciled again, and no job or JobSet is written and no
# reconcile fails.
QUIET_WINDOW_SECONDS = 2 * RESYNC_SECONDS
SETTLE_TIMEOUT = 120  # ~40 jobs, two busy cores: admitting, creating, first status
MUTATED_EXAMPLES = 48  # about half are JSON objects, few of those admitted
ADMISSIBLE_EXAMPLES = 26

# --- generated manifests ---------------------------------------------------------------------

ODD_STRINGS = ["", " ", "é", "☃", "日本語", "\x00", "\n", "\t", "${HOME}", "$(rm -rf /)",
               "a;rm -rf /", "--steps", "'\"`\\", "%s%n", "\u202eevil", "x" * 300]


def odd_text(max_size: int, min_size: int = 0) -> st.SearchStrategy[str]:
    """Any unicode (control characters included), or a string known to be awkward."""
    return st.one_of(
        st.text(min_size=min_size, max_size=min(max_size, 40)),
        st.sampled_from([s for s in ODD_STRINGS if min_size <= len(s) <= max_size]),
    )


def pinned_image(max_size: int) -> st.SearchStrategy[str]:
    """Any reference with a tag other than `latest` or a digest: admission refuses an image
    that moves (elastic_api.images)."""
    tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
    digest = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "@sha256:" + h)
    name = odd_text(max_size - 80).map(lambda s: s.replace("@", ""))
    return st.builds(lambda n, t: n + t, name,
                     st.one_of(tag.map(lambda t: ":" + t), digest)).filter(lambda r: not moves(r))


def big_int(low: int, high: int = INT64_MAX) -> st.SearchStrategy[int]:
    """Anything the schema allows, its boundaries and the int32/float64 edges most often."""
    edges = [v for v in (low, low + 1, INT32_MAX, INT32_MAX + 1, 2**53, high) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


NAMES = st.one_of(
    st.sampled_from(["a", "z" * 22, "a-1", "x--y", "a" + "-" * 20 + "b", "v5e", "pathways"]),
    st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
)
QUANTITIES = st.one_of(  # what admission takes: ints, and strings of the quantity pattern
    st.sampled_from(["1", "500m", "32Gi", "0", "1e3", "+1", "-1", ".5", "1.", "1E", "1e-9"]),
    st.integers(INT64_MIN, INT64_MAX),
)
# DNS-1123 subdomains, up to the 253 characters admission allows.
SERVICE_ACCOUNTS = st.one_of(
    st.sampled_from(["default", "a.b-c", "0", "x" * 253, "a" + ".b" * 126]),
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?){0,3}",
                  fullmatch=True),
)


def resources() -> st.SearchStrategy[dict[str, Any]]:
    quantities = st.dictionaries(st.sampled_from(["cpu", "memory", "google.com/tpu", "é"]),
                                 QUANTITIES, max_size=3)
    return st.fixed_dictionaries({}, optional={"limits": quantities, "requests": quantities})


ENV = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["A", "_x", "JAX_PLATFORMS", "ETJ_JOB_NAME", "a=b"]),
                       odd_text(253, min_size=1))},
    optional={"value": odd_text(4096),
              "valueFrom": st.sampled_from([{"fieldRef": {"fieldPath": "metadata.name"}},
                                            {"bogus": [1.5, None]}, {"fieldRef": 5}])},
)
TOLERATION = st.fixed_dictionaries({}, optional={
    "key": odd_text(253), "operator": st.sampled_from(["Exists", "Equal"]),
    "value": odd_text(253),
    "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
    "tolerationSeconds": big_int(INT64_MIN),
})
# What the CRD admits: operator Exists needs a key (no key tolerates every taint; issue 78).
ADMISSIBLE_TOLERATION = TOLERATION.filter(
    lambda t: t.get("operator") != "Exists" or bool(t.get("key")))


@st.composite
def admissible_job(draw: st.DrawFn) -> dict[str, Any]:
    """A manifest inside the CRD's schema and rules, as hostile as they allow."""
    suspend = draw(st.booleans())
    tpu_type = draw(st.sampled_from(sorted(CATALOG)))
    topologies = CATALOG[tpu_type].topologies
    if suspend:  # no pods: any size, up to 64 slices of the largest shape
        topology = draw(st.sampled_from(topologies))
        num_slices = draw(st.one_of(st.sampled_from([1, 64]), st.integers(1, 64)))
    else:  # pods are created: keep it to a few per job on two cores
        topology = draw(st.sampled_from(
            [t for t in topologies if slice_shape(tpu_type, t).vms <= 2]))
        num_slices = draw(st.integers(1, 2))
    backend = draw(st.sampled_from(["pathways", "simulated"]))
    elastic = draw(st.fixed_dictionaries({}, optional={
        "minSlices": st.integers(1, num_slices),
        "elasticSlices": st.integers(0, num_slices),
        "timeoutSeconds": big_int(1), "maxRetries": big_int(0),
        "maxSliceRestarts": st.one_of(
            st.integers(0, 10), big_int(0, slice_shape(tpu_type, topology).max_slice_restarts)),
    }))
    spec: dict[str, Any] = {
        "backend": backend,
        "suspend": suspend,
        "tpu": {"type": tpu_type, "topology": topology, "numSlices": num_slices},
        "elastic": elastic,
        "checkpoint": draw(st.fixed_dictionaries(
            {"directory": st.one_of(
                odd_text(1024, min_size=1),
                st.sampled_from(["gs://b/ü n\ti'c\"o$(d)e", "gs://bucket", "/tmp/../../etc",
                                 "relative/path", "C:\\ckpt", "gs://" + "b" * 1019]))},
            optional={"periodSteps": big_int(1), "keep": big_int(1), "async": st.booleans(),
                      "persistence": st.booleans()})),
        "snapshot": {"periodSteps": draw(big_int(0))},
        "trainer": draw(st.fixed_dictionaries(
            {"image": odd_text(512, min_size=1), "steps": big_int(1)},
            optional={"model": st.sampled_from(BUNDLED_MODELS), "batch": big_int(1),
                      "seed": big_int(0),
                      "data": odd_text(1024).filter(lambda d: not data_paths.is_url(d)),
                      "args": st.lists(odd_text(4096), max_size=64),
                      "env": st.lists(ENV, max_size=64),
                      "resources": resources()})),
        "maxRestarts": draw(st.one_of(st.integers(0, 10), big_int(0, INT32_MAX))),
    }
    if backend == "pathways" or draw(st.booleans()):
        spec["pathways"] = draw(st.fixed_dictionaries(
            {"gcsScratch": st.sampled_from(["gs://b", "gs://scratch/ü/..", "gs://a b"])},
            optional={"version": odd_text(128).filter(lambda v: v != MOVING_TAG),
                      "images": st.fixed_dictionaries({}, optional={
                          "server": pinned_image(512), "proxy": pinned_image(512)}),
                      "worker": st.fixed_dictionaries({}, optional={
                          "args": st.lists(odd_text(4096), max_size=8),
                          "resources": resources()})}))
    # Periods within the run: a longer one would never save, and admission says so.
    steps = spec["trainer"]["steps"]
    for part in ("snapshot", "checkpoint"):
        if "periodSteps" in spec[part]:
            spec[part]["periodSteps"] = min(spec[part]["periodSteps"], steps)
    spec.update(draw(st.fixed_dictionaries({}, optional={
        "priorityClassName": odd_text(253),
        "nodeSelector": st.dictionaries(odd_text(253), odd_text(253), max_size=32),
        "tolerations": st.lists(ADMISSIBLE_TOLERATION, max_size=32),
        "headNodePool": odd_text(63),
        "serviceAccountName": SERVICE_ACCOUNTS,
        "terminationGracePeriodSeconds": big_int(0),
    })))
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ElasticTrainingJob",
            "metadata": {"name": draw(NAMES)}, "spec": spec}


def is_json_object(manifest: Any) -> bool:
    """Only a JSON object can be sent as a spec (NaN and Infinity are not JSON)."""
    if not isinstance(manifest, dict):
        return False
    try:
        json.dumps(manifest, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def drawn(strategy: st.SearchStrategy[Any], count: int, spread: int = 8) -> list[Any]:
    """`count` examples, the same on every run (derandomized: CI can reproduce them).

    Every `spread`-th of a longer run: consecutive examples are often near copies."""
    examples: list[Any] = []

    @settings(max_examples=count * spread, derandomize=True, database=None, phases=[Phase.generate],
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example: Any) -> None:
        examples.append(example)

    collect()
    return examples[::spread]


def unique_name(manifest: Any, taken: set[str]) -> Any:
    """The manifest, renamed if its (valid) name was drawn before: still 22 characters at
    most, still ending with a letter or digit."""
    meta = manifest.get("metadata") if isinstance(manifest, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or name not in taken:
        return manifest
    renamed = copy.deepcopy(manifest)
    for i in itertools.count(len(taken)):
        renamed["metadata"]["name"] = name[:22 - len(f"-{i}")] + f"-{i}"
        if renamed["metadata"]["name"] not in taken:
            return renamed
    raise AssertionError("unreachable")


# --- hand-written cases ------------------------------------------------------------------------


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A small suspended job (v5e 2x4, one slice); `spec` fields (wire names) on top."""
    return (etj(name, namespace=None).tpu("v5e", "2x4", 1).checkpoint_dir("gs://bucket/ckpt")
            .trainer("trainer:1", 10).spec(pathways={"gcsScratch": "gs://bucket/scratch"})
            .suspend().spec(**spec).obj())


# (manifest, the outcome the operator must reach: SpecApplied's reason)
EXPLICIT: list[tuple[dict[str, Any], str]] = [
    (manifest("x" * 22), "Applied"),  # the longest name admission allows
    (manifest("max-slices", tpu={"type": "v5e", "topology": "16x16", "numSlices": MAX_SLICES},
              elastic={"minSlices": MAX_SLICES, "elasticSlices": MAX_SLICES}), "Applied"),
    (manifest("odd-gcs-checkpoint",
              checkpoint={"directory": "gs://b/ü n\ti'c\"o$(d)e\x00"}), "Applied"),
    (manifest("odd-path-checkpoint", backend="simulated", suspend=False,
              checkpoint={"directory": "/tmp/ckpt dir/ü\x00;rm -rf ~"}), "Applied"),
    (manifest("list-maxima",
              tolerations=[{"key": f"k{i}", "operator": "Exists"} for i in range(32)],
              nodeSelector={f"k{i}": "v" for i in range(32)},
              trainer={"image": "trainer:1", "steps": INT64_MAX,
                       "env": [{"name": f"E{i}", "value": "☃" * 64} for i in range(64)],
                       "args": ["é\x00" * 100] * 64}), "Applied"),
    # Admission's bounds are ones the JobSet takes: its int32 fields at their largest (a
    # backoffLimit of the largest slice's hosts x its maxSliceRestarts bound), quantities at
    # the edges of the pattern.
    (manifest("int32-maxima", maxRestarts=INT32_MAX,
              tpu={"type": "tpu7x", "topology": "16x24x24", "numSlices": 1},
              elastic={"maxSliceRestarts": slice_shape("tpu7x", "16x24x24")
                       .max_slice_restarts}), "Applied"),
    (manifest("quantity-edges", trainer={"image": "t:1", "steps": 1, "resources": {
        "limits": {f"example.com/q{i}": q for i, q in enumerate(
            ["+1", "-1", ".5", "1.", "1E", "1e-99", "1e+99", "0.5Gi", "7n", INT64_MAX])},
        "requests": {"cpu": INT64_MIN, "memory": "1Ei"}}}), "Applied"),
    # What the JobSet's schema refuses and admission does not check (env is a list map
    # keyed by name): the operator reports it once instead of failing every resync.
    (manifest("duplicate-env", trainer={"image": "t:1", "steps": 1,
                                        "env": [{"name": "A", "value": "1"},
                                                {"name": "A", "value": "2"}]}),
     "InvalidSpec"),
]

# MultiKueue's (spec.managedBy): no JobSet here, ever. Its Workload queued (Dispatching)
# where Kueue's Workload API is served (an earlier test's Kueue installed it), else
# InvalidSpec saying Kueue is needed: the test sees either, never no status.
MULTIKUEUE = yaml.safe_load((EXAMPLES_DIR / "multikueue.yaml").read_text())

# Refused by the API server; validate_job accepted them (pydantic's lax int, `$` before a
# trailing newline). The last four were admitted, and their JobSet or RoleBinding refused.
REFUSED: list[dict[str, Any]] = [
    manifest("steps-beyond-int64", trainer={"image": "t:1", "steps": INT64_MAX + 1}),
    manifest("batch-bool", trainer={"image": "t:1", "steps": 1, "batch": True}),
    manifest("steps-string", trainer={"image": "t:1", "steps": "10"}),
    manifest("whole-float-too-big", trainer={"image": "t:1", "steps": float(2**53)}),
    manifest("toleration-below-int64",
             tolerations=[{"key": "k", "tolerationSeconds": INT64_MIN - 1}]),
    manifest("fractional-quantity", trainer={"image": "t:1", "steps": 1,
                                              "resources": {"limits": {"cpu": 1.5}}}),
    manifest("newline\n"),
    manifest("max-restarts-int32", maxRestarts=INT32_MAX + 1),
    manifest("backoff-overflow",  # backoffLimit = 2 hosts x 2**30 restarts = 2**31
             elastic={"maxSliceRestarts": 2**30}),
    manifest("bad-quantity", trainer={"image": "t:1", "steps": 1,
                                      "resources": {"limits": {"cpu": "lots"}}}),
    manifest("bad-service-account", serviceAccountName="Bad SA"),
]

# --- the cluster side ------------------------------------------------------------------------


@pytest.fixture
def api(crd_api: client.ApiClient) -> client.ApiClient:
    return crd_api


@pytest.fixture
def operator(cluster: Cluster, namespace: str, fake_gcs: FakeGcsServer,
             api: client.ApiClient, tmp_path: Path) -> Iterator[OperatorProcess]:
    """One operator for this namespace; gs:// checkpoint scans go to a real (fake) GCS."""
    proc = OperatorProcess(
        Path(cluster.kubeconfig), tmp_path / "operator.log",
        args=replace(TEST, namespaces=(namespace,), resync_seconds=RESYNC_SECONDS,
                     checkpoint_scan_seconds=RESYNC_SECONDS,
                     quarantine_release_after_seconds=None,
                     # gs://bucket is listed (the rest of gs:// is refused unlisted): the
                     # hostile roots meet both the GCS listing and the roots' refusal.
                     checkpoint_roots=("*=gs://bucket,/",)),
        env=fake_gcs.env)
    proc.start()
    yield proc
    custom = client.CustomObjectsApi(api)
    for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                               item["metadata"]["name"])
    proc.stop()


def condition(job: dict[str, Any], type_: str) -> dict[str, Any]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), {})


def outcome(job: dict[str, Any], jobsets: dict[str, dict[str, Any]]) -> str | None:
    """SpecApplied's reason once the operator has settled the job's current generation
    (a JobSet it owns that carries spec.suspend, or a reason why there is none)."""
    status = job.get("status") or {}
    if status.get("observedGeneration") != job["metadata"]["generation"]:
        return None
    applied = condition(job, "SpecApplied")
    jobset = jobsets.get(job["metadata"]["name"])
    if job["spec"].get("managedBy") == MULTIKUEUE_CONTROLLER and not applied:
        # MultiKueue's: its Workload waits here (Ready False, queued), it never has a
        # JobSet in this cluster. A refused one says SpecApplied False as any other.
        ready = condition(job, "Ready")
        return "Dispatching" if ready.get("status") == "False" and jobset is None else None
    if applied.get("status") == "True" and jobset is not None:
        owners = [o.get("uid") for o in jobset["metadata"].get("ownerReferences") or []]
        suspended = jobset["spec"].get("suspend", False) == job["spec"]["suspend"]
        return "Applied" if job["metadata"]["uid"] in owners and suspended else None
    if applied.get("status") == "False" and applied.get("message") and jobset is None:
        return str(applied.get("reason"))
    return None


def list_objects(custom: client.CustomObjectsApi, namespace: str
                 ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    jobs = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    jobsets = custom.list_namespaced_custom_object(*JOBSETS[:2], namespace, JOBSETS[2])["items"]
    return ({j["metadata"]["name"]: j for j in jobs},
            {j["metadata"]["name"]: j for j in jobsets})


def versions(custom: client.CustomObjectsApi, namespace: str) -> dict[str, str]:
    jobs, jobsets = list_objects(custom, namespace)
    return {**{f"job {n}": o["metadata"]["resourceVersion"] for n, o in jobs.items()},
            **{f"JobSet {n}": o["metadata"]["resourceVersion"] for n, o in jobsets.items()}}


def reconciles(operator: OperatorProcess) -> tuple[float, float]:
    """(reconciles done, reconciles failed) so far."""
    metrics = operator.metrics()
    return (metrics.get("etj_reconcile_duration_seconds_count", 0.0),
            metrics.get("etj_reconcile_errors_total", 0.0))


def wait_quiet(custom: client.CustomObjectsApi, namespace: str,
               operator: OperatorProcess, jobs: int) -> None:
    """Wait for a quiet window: QUIET_WINDOW_SECONDS and at least `jobs` reconciles (a
    resync's worth) in which no resourceVersion moved and no reconcile failed. A job
    that settled may still move once (a pod became ready); a loop never lets a window
    pass, so it ends in the TimeoutError, naming what moved."""
    last_change = "nothing"

    def window() -> bool:
        nonlocal last_change
        before, (done, failed) = versions(custom, namespace), reconciles(operator)
        started = time.monotonic()
        while True:
            time.sleep(0.5)
            now, (done_now, failed_now) = versions(custom, namespace), reconciles(operator)
            moved = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
            if moved or failed_now > failed:
                last_change = f"{moved} written, {failed_now - failed:.0f} reconciles failed"
                return False
            elapsed = time.monotonic() - started
            if elapsed >= QUIET_WINDOW_SECONDS and done_now - done >= jobs:
                return True
            if elapsed > SETTLE_TIMEOUT:  # a stuck operator reconciles nothing
                last_change = f"only {done_now - done:.0f} reconciles in {elapsed:.0f}s"
                return False

    try:
        wait_for(window, SETTLE_TIMEOUT, "a quiet window", interval=0)
    except TimeoutError as err:
        raise AssertionError(f"the operator did not go quiet: {err}; in the last window "
                             f"{last_change}") from None


def test_operator_handles_every_admitted_hostile_spec(
        api: client.ApiClient, namespace: str, operator: OperatorProcess) -> None:
    custom = client.CustomObjectsApi(api)
    # (manifest, what must happen: None anything, "admitted", "refused", or the outcome)
    candidates: list[tuple[Any, str | None]] = [
        *EXPLICIT, (MULTIKUEUE, None), *((m, "refused") for m in REFUSED),
        *((m, None) for m in drawn(hostile_manifest(), MUTATED_EXAMPLES) if is_json_object(m)),
        *((m, "admitted") for m in drawn(admissible_job(), ADMISSIBLE_EXAMPLES))]

    expected: dict[str, str | None] = {}  # admitted job -> the outcome it must reach
    disagreements = []
    for obj, want in candidates:
        obj = unique_name(obj, set(expected))
        shown = json.dumps(obj)[:2000]
        try:
            stored = custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, copy.deepcopy(obj))
        except client.ApiException as err:
            assert err.status in (400, 422), err.body
            assert want in (None, "refused"), f"refused: {shown}\n  {err.body}"
            try:
                validate_job(copy.deepcopy(obj))
                disagreements.append(f"{shown}\n  API server: {err.body}")
            except ValueError:
                pass
            continue
        assert want != "refused", f"admitted: {shown}"
        expected[stored["metadata"]["name"]] = None if want == "admitted" else want
    assert not disagreements, ("refused by the API server, accepted by validate_job:\n"
                               + "\n".join(disagreements))

    # Every admitted job: a status for its generation with a JobSet, or the reason why not.
    outcomes: dict[str, str | None] = {}

    def all_settled() -> bool:
        jobs, jobsets = list_objects(custom, namespace)
        outcomes.update({name: outcome(jobs[name], jobsets) for name in expected})
        return all(outcomes.values())

    try:
        wait_for(all_settled, SETTLE_TIMEOUT, "a status for every admitted job", interval=0.5)
    except TimeoutError as err:
        pending = sorted(name for name, got in outcomes.items() if got is None)
        jobs, _ = list_objects(custom, namespace)
        said = {name: jobs[name].get("status") for name in pending}
        raise AssertionError(f"{err}: {pending}; their status: {json.dumps(said)[:3000]}"
                             ) from None
    assert set(outcomes.values()) <= {"Applied", "InvalidSpec", "Dispatching"}, outcomes
    print(f"{len(candidates)} manifests, {len(expected)} admitted: "
          f"{list(outcomes.values()).count('Applied')} run a JobSet, "
          f"{list(outcomes.values()).count('InvalidSpec')} InvalidSpec")
    wrong = {n: (outcomes[n], want) for n, want in expected.items()
             if want is not None and outcomes[n] != want}
    assert not wrong, f"(got, want): {wrong}"
    jobs, _ = list_objects(custom, namespace)
    for name, got in outcomes.items():
        if got == "InvalidSpec":  # the API server's reason reaches the user
            assert "the API server refused" in condition(jobs[name], "SpecApplied")["message"]

    # It does not loop, and it never crashed.
    wait_quiet(custom, namespace, operator, jobs=len(expected))
    assert operator.running and operator.healthy()
    log = operator.log_path.read_text(errors="replace").splitlines()
    # kopf retries a failed watch request (a just-installed CRD answers 429 while its
    # storage initializes) and logs it at ERROR: that is not a crash.
    crashes = [line for line in log if ("Traceback" in line or "[ERROR" in line)
               and "failed; will retry" not in line]
    assert not crashes, f"{operator.log_path}:\n" + "\n".join(crashes)
