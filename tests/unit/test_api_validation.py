"""validate_job: the admission rules in Python, with messages naming the field and the fix."""
from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_api.catalog import CATALOG, MAX_VMS_PER_SLICE, all_shapes, slice_shape
from elastic_api.models import INT32_MAX, MAX_SLICE_RESTARTS, MAX_SLICES
from elastic_api.validation import MAX_NAME_LENGTH, NUM_SLICES, validate_job
from elastic_operator.render import render_jobset


def job(**spec_overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "elastic.pathways.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "tpu": {"type": "v5e", "topology": "4x4", "numSlices": 3},
            "checkpoint": {"directory": "gs://b/ckpt"},
            "trainer": {"image": "trainer:1", "steps": 100},
            "pathways": {"gcsScratch": "gs://b/scratch"},
        },
    }
    obj["spec"].update(copy.deepcopy(spec_overrides))
    return obj


def error_of(obj: dict[str, Any]) -> str:
    with pytest.raises(ValueError) as info:
        validate_job(obj)
    return str(info.value)


def test_valid_job_gets_defaults():
    parsed = validate_job(job())
    assert parsed.metadata.name == "train"
    assert parsed.spec.backend == "pathways"
    assert parsed.spec.elastic.timeout_seconds == 300
    assert parsed.spec.min_slices == 3  # unset = all slices
    assert parsed.spec.elastic_slices == 3


@pytest.mark.parametrize(("tpu_type", "topology"),
                         [(t, topo) for t, f in CATALOG.items() for topo in f.listed])
def test_every_listed_topology_is_accepted(tpu_type: str, topology: str):
    validate_job(job(tpu={"type": tpu_type, "topology": topology, "numSlices": 1}))


def test_every_topology_of_the_rule_is_accepted():
    # Each of the ~1,760 the catalog admits (tests/unit/test_api_catalog.py compares them
    # with xpk's), through validate_job.
    for tpu_type, family in CATALOG.items():
        for topology in family.topologies:
            validate_job(job(tpu={"type": tpu_type, "topology": topology, "numSlices": 1}))


def test_topology_invalid_for_type():
    assert error_of(job(tpu={"type": "v5e", "topology": "2x2x2", "numSlices": 1})) == (
        "spec.tpu.topology: '2x2x2' is not a v5e topology; use one of "
        "1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"
    )


def test_a_shape_beyond_the_catalog_is_refused_naming_the_rule():
    # v5p's pod is 140 cubes (8,960 chips; xpk's max_cubes=140): 16x24x24 is 144.
    assert error_of(job(tpu={"type": "v5p", "topology": "16x24x24", "numSlices": 1})) == (
        "spec.tpu.topology: '16x24x24' is not a v5p topology; use one of 2x2x1, 2x2x2, "
        "2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8, 8x8x16, 8x16x16, 16x16x16, 16x16x24, "
        "or AxBxC with each a multiple of 4 up to 256, A <= B <= C, of at most 140 cubes "
        "of 4x4x4 (A/4 x B/4 x C/4)")
    assert validate_job(job(tpu={"type": "tpu7x", "topology": "16x24x24", "numSlices": 1}))
    # v4 takes any order, v5p not.
    assert validate_job(job(tpu={"type": "v4", "topology": "16x8x4", "numSlices": 1}))
    assert "'16x8x4' is not a v5p topology" in error_of(
        job(tpu={"type": "v5p", "topology": "16x8x4", "numSlices": 1}))


@given(st.sampled_from(sorted(CATALOG)), st.from_regex(r"[0-9x]{1,8}", fullmatch=True))
def test_topology_accepted_iff_in_catalog(tpu_type: str, topology: str):
    obj = job(tpu={"type": tpu_type, "topology": topology, "numSlices": 1})
    if CATALOG[tpu_type].admits(topology):
        validate_job(obj)
    else:
        assert error_of(obj).startswith(f"spec.tpu.topology: '{topology}' is not a {tpu_type}")


def test_unknown_tpu_type():
    msg = error_of(job(tpu={"type": "v3", "topology": "2x2", "numSlices": 1}))
    assert msg.startswith("spec.tpu.type: ")
    assert "'v5e', 'v5p', 'v6e', 'v4' or 'tpu7x'" in msg


def test_num_slices_at_least_one():
    msg = error_of(job(tpu={"type": "v5e", "topology": "4x4", "numSlices": 0}))
    assert msg.startswith("spec.tpu.numSlices: Input should be greater than or equal to 1")


def test_num_slices_up_to_the_cap_which_the_message_names_and_explains():
    # The largest reported run: 199 slices of v5e 16x16 (50,944 chips).
    assert validate_job(job(tpu={"type": "v5e", "topology": "16x16", "numSlices": 199}))
    assert validate_job(job(tpu={"type": "v5e", "topology": "16x16", "numSlices": MAX_SLICES}))
    assert error_of(job(tpu={"type": "v5e", "topology": "16x16",
                             "numSlices": MAX_SLICES + 1})) == NUM_SLICES == (
        "spec.tpu.numSlices: must be at most 256: the job's status keeps an entry per slice "
        "(and per node pool) in one object, and etcd stores no object over 1.5 MiB; use "
        "fewer, larger slices (e.g. v5p 16x16x24 is 6144 chips)")


def test_min_slices_at_most_num_slices():
    assert error_of(job(elastic={"minSlices": 4})) == (
        "spec.elastic.minSlices: must not be more than spec.tpu.numSlices; set minSlices to at "
        "most numSlices (numSlices: pause and resume), or leave it unset for the default"
    )
    assert validate_job(job(elastic={"minSlices": 2})).spec.min_slices == 2


def test_elastic_slices_at_most_num_slices():
    assert error_of(job(elastic={"elasticSlices": 5})) == (
        "spec.elastic.elasticSlices: must not be more than spec.tpu.numSlices; set it to at "
        "most numSlices (it counts the slices that may be missing), or leave it unset"
    )
    assert validate_job(job(elastic={"elasticSlices": 0})).spec.elastic_slices == 0


def test_name_length_limit():
    obj = job()
    obj["metadata"]["name"] = "a" * MAX_NAME_LENGTH
    validate_job(obj)
    obj["metadata"]["name"] = "a" * (MAX_NAME_LENGTH + 1)
    assert error_of(obj) == (
        f"metadata.name: '{'a' * 23}' is longer than 22 characters; use at most 22, so that "
        "the JobSet coordinator label '<name>-pathways-head-0-0.<name>' fits in 63 characters"
    )


@pytest.mark.parametrize("name", ["1train", "train.v1", "Train", "train-"])
def test_name_must_be_dns1035(name: str):
    obj = job()
    obj["metadata"]["name"] = name
    assert error_of(obj).startswith(f"metadata.name: '{name}' is not a DNS-1035 label;")


@pytest.mark.parametrize("name", ["\x1e", "a\nb", "t\u2028x"])
def test_a_name_with_line_breaking_characters_is_one_problem_on_one_line(name: str):
    """str.splitlines() breaks on \\x1e, \\u2028 and more than \\n: the name is escaped
    (found by the hostile-spec property test under a random seed)."""
    obj = job()
    obj["metadata"]["name"] = name
    lines = error_of(obj).splitlines()
    assert len(lines) == 1 and lines[0].startswith("metadata.name: '")


def test_pathways_needs_gcs_scratch():
    obj = job(checkpoint={"directory": "/tmp/ckpt"})
    del obj["spec"]["pathways"]
    assert error_of(obj) == (
        "spec.pathways.gcsScratch: required when spec.backend is pathways; set it to a gs:// "
        "location for Pathways' scratch files (or use backend simulated)")
    obj["spec"]["backend"] = "simulated"
    validate_job(obj)


def test_gcs_scratch_pattern():
    msg = error_of(job(pathways={"gcsScratch": "/scratch"}))
    assert msg.startswith("spec.pathways.gcsScratch: String should match pattern '^gs://[^/]+'")


def test_missing_and_unknown_fields_are_named():
    obj = job()
    del obj["spec"]["trainer"]["image"]
    obj["spec"]["tpu"]["slices"] = 3
    lines = error_of(obj).splitlines()
    assert ("spec.tpu.slices: unknown field; remove it (check the spelling against docs/api.md)"
            in lines)
    assert "spec.trainer.image: required; set it" in lines


def test_list_paths_are_indexed():
    msg = error_of(job(tolerations=[{"key": "a", "operator": "Sometimes"}]))
    assert msg.startswith("spec.tolerations[0].operator: ")


def test_quantities_may_be_numbers():
    resources = {"limits": {"cpu": 4}}
    parsed = validate_job(job(trainer={"image": "t", "steps": 1, "resources": resources}))
    assert parsed.spec.trainer.resources is not None
    assert parsed.spec.trainer.resources.limits == {"cpu": "4"}


def test_wrong_kind_or_version():
    obj = job()
    obj["kind"] = "JobSet"
    assert error_of(obj) == (
        "kind: 'JobSet' is not 'ElasticTrainingJob'; set kind: ElasticTrainingJob")
    obj = job()
    obj["apiVersion"] = "elastic.pathways.dev/v1"
    assert error_of(obj).startswith("apiVersion: 'elastic.pathways.dev/v1' is not")


def test_not_a_mapping():
    with pytest.raises(ValueError, match="expected a mapping"):
        validate_job(["x"])  # type: ignore[arg-type]


# What kube-apiserver 1.34 answered for these in a `type: integer` field (and in an
# int-or-string quantity): an int within int64 or a whole float below 2**53 is admitted,
# anything else is refused. pydantic's lax int took all of them but 1.5.
API_SERVER_INTEGERS = [
    (9223372036854775807, True), (-9223372036854775808, True), (2.0, True), (1e15, True),
    (9223372036854775808, False), (-9223372036854775809, False), (10**30, False),
    (float(2**53), False), (1.5, False), (True, False), ("10", False),
]


@pytest.mark.parametrize(("value", "admitted"), API_SERVER_INTEGERS)
def test_integers_are_admitted_exactly_as_the_api_server_does(value: Any, admitted: bool):
    tolerations = job(tolerations=[{"key": "k", "tolerationSeconds": value}])
    quantity = job(trainer={"image": "t:1", "steps": 1, "resources": {"limits": {"cpu": value}}})
    if admitted:
        assert validate_job(tolerations).spec.tolerations[0].toleration_seconds == int(value)
        validate_job(quantity)
    else:
        assert error_of(tolerations).startswith("spec.tolerations[0].tolerationSeconds: ")
        if not isinstance(value, str):  # a string is a quantity
            assert "spec.trainer.resources.limits.cpu" in error_of(quantity)


def test_a_name_with_a_trailing_newline_is_not_a_dns_label():
    assert "is not a DNS-1035 label" in error_of({**job(), "metadata": {"name": "train\n"}})


@pytest.mark.parametrize("key", ["\r", "a\nb", " lead", ""])
def test_an_unprintable_unknown_key_is_named_on_one_line(key: str) -> None:
    obj = job()
    obj["spec"][key] = 0
    lines = error_of(obj).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("spec[") and "unknown field" in lines[0], lines


# --- what the rendered children take (JobSet's int32 fields, quantities, account names) ---


def test_max_restarts_fits_jobsets_int32():
    assert validate_job(job(maxRestarts=INT32_MAX)).spec.max_restarts == INT32_MAX
    assert error_of(job(maxRestarts=INT32_MAX + 1)) == (
        "spec.maxRestarts: must be at most 2147483647 (JobSet's failurePolicy.maxRestarts is "
        "an int32); set it lower")


def test_max_slice_restarts_bound_keeps_every_backoff_limit_within_int32():
    assert MAX_VMS_PER_SLICE == max(s.vms for s in all_shapes()) == 2304  # tpu7x 16x24x24
    assert MAX_SLICE_RESTARTS == 33554431  # the bound of every slice of up to 64 VMs
    for shape in all_shapes():
        assert shape.vms * shape.max_slice_restarts <= INT32_MAX
        # As large as it can be: one more overflows, or it is the bound of them all.
        assert shape.vms * (shape.max_slice_restarts + 1) > INT32_MAX \
            or shape.max_slice_restarts == MAX_SLICE_RESTARTS
    assert slice_shape("v5p", "16x16x24").max_slice_restarts == 1398101


def test_backoff_limit_of_the_largest_slice_fits_int32_at_the_bound():
    for tpu_type, topology in (("v5e", "16x16"), ("v5p", "16x16x24"), ("tpu7x", "16x24x24")):
        shape = slice_shape(tpu_type, topology)
        parsed = validate_job(job(tpu={"type": tpu_type, "topology": topology, "numSlices": 1},
                                  elastic={"maxSliceRestarts": shape.max_slice_restarts}))
        worker = render_jobset(parsed)["spec"]["replicatedJobs"][1]
        assert worker["template"]["spec"]["backoffLimit"] == \
            shape.vms * shape.max_slice_restarts <= INT32_MAX


def test_max_slice_restarts_above_the_bound():
    # 2 hosts x 2**30 would be a backoffLimit of 2**31 on this small slice as well.
    for restarts in (MAX_SLICE_RESTARTS + 1, 2**30):
        obj = job(tpu={"type": "v5e", "topology": "2x4", "numSlices": 1},
                  elastic={"maxSliceRestarts": restarts})
        assert error_of(obj) == (
            "spec.elastic.maxSliceRestarts: must be at most 33554431, so that the worker "
            "Jobs' backoffLimit (VMs per slice x maxSliceRestarts) fits an int32 for every "
            "slice of up to 64 VMs (a larger slice has a lower bound); set it lower")


def test_max_slice_restarts_above_a_large_slices_own_bound():
    obj = job(tpu={"type": "v5p", "topology": "16x16x24", "numSlices": 1},
              elastic={"maxSliceRestarts": 1398102})
    assert error_of(obj) == (
        "spec.elastic.maxSliceRestarts: must be at most 1398101 for a v5p 16x16x24 slice "
        "(1536 VMs), so that the worker Jobs' backoffLimit (VMs per slice x "
        "maxSliceRestarts) fits an int32; set it lower")


def test_every_count_of_the_largest_jobs_fits_int32():
    """backoffLimit, parallelism, completions, and the workers' PodSet (slices x VMs) that
    Kueue makes of the JobSet, at the cap of slices and of restarts, for every shape."""
    for shape in all_shapes():
        assert shape.vms * shape.max_slice_restarts <= INT32_MAX
        assert MAX_SLICES * shape.vms <= INT32_MAX  # 256 x 2,304 = 589,824 pods at most
    record = validate_job(job(tpu={"type": "v5e", "topology": "16x16", "numSlices": 199}))
    worker = render_jobset(record)["spec"]["replicatedJobs"][1]
    assert (worker["replicas"], worker["template"]["spec"]["parallelism"]) == (199, 64)


def quantity_job(value: Any, where: str = "trainer") -> dict[str, Any]:
    resources = {"limits": {"cpu": value}}
    if where == "trainer":
        return job(trainer={"image": "t:1", "steps": 1, "resources": resources})
    return job(pathways={"gcsScratch": "gs://b/s", where: {"resources": resources}})


@pytest.mark.parametrize("value", [
    "1", "0", "500m", "32Gi", "1.5", ".5", "1.", "+1", "-1", "1e3", "1E3", "1e-9", "2e+18",
    "1E", "100n", "3u", "4k", "5M", "6G", "7T", "8P", "1Ki", "1Mi", "1Ei", "0.5Gi",
])
def test_kubernetes_quantities_are_accepted(value: str):
    parsed = validate_job(quantity_job(value))
    assert parsed.spec.trainer.resources is not None
    assert parsed.spec.trainer.resources.limits == {"cpu": value}


# Refused by JobSet's CRD pattern or by resource.ParseQuantity (JobSet's webhook), or an
# exponent beyond what a quantity needs.
@pytest.mark.parametrize("value", [
    "lots", "", " 1", "1 ", "1\n", "+", "-", ".", "e3", "1e", "1e1.5", "1e.5", "1ki",
    "1KiB", "1Mb", "1 Gi", "0x10", "1,5", "1e100", "\u0661",
])
def test_what_is_not_a_kubernetes_quantity_is_refused_naming_the_field(value: str):
    assert error_of(quantity_job(value)) == (
        "spec.trainer.resources.limits.cpu: not a Kubernetes quantity; write a number with an "
        f"optional suffix, e.g. 8, 0.5, 500m, 32Gi or 1e3 (got {value!r})")


@pytest.mark.parametrize("component", ["resourceManager", "proxy", "worker"])
def test_pathways_quantities_are_checked_too(component: str):
    assert error_of(quantity_job("lots", component)).startswith(
        f"spec.pathways.{component}.resources.limits.cpu: not a Kubernetes quantity;")


def test_an_integer_quantity_is_not_held_to_the_string_pattern():
    # The API server applies `pattern` to strings only; a negative count is the Job's to refuse.
    resources = validate_job(quantity_job(-5)).spec.trainer.resources
    assert resources is not None and resources.limits == {"cpu": "-5"}


SERVICE_ACCOUNT_MESSAGE = (
    "spec.serviceAccountName: not a DNS-1123 subdomain, so no ServiceAccount can have this "
    "name; use lowercase letters, digits, '-' and '.', starting and ending with a letter or "
    "digit, or leave it unset for the namespace's default account")


@pytest.mark.parametrize("name", ["default", "tpu-trainer", "a.b-c", "0sa", "x" * 253,
                                  "a.b.c"])
def test_service_account_names_that_are_dns_subdomains_are_accepted(name: str):
    assert validate_job(job(serviceAccountName=name)).spec.service_account_name == name


@pytest.mark.parametrize("name", ["Bad SA", "é", "", "Default", "a_b", "-a", "a-", "a.",
                                  ".a", "a..b", "a.-b", "sa\n"])
def test_a_service_account_name_that_no_account_can_have_is_refused(name: str):
    assert error_of(job(serviceAccountName=name)) == SERVICE_ACCOUNT_MESSAGE


# --- slice replacement and maintenance knobs ---------------------------------------------------


def test_replacement_knobs_have_their_documented_defaults():
    spec = validate_job(job()).spec
    assert spec.tpu.spares == 0 and spec.placement == "TPU"
    r = spec.recovery
    assert (r.replace_slices, r.node_not_ready_seconds, r.force_delete_after_seconds,
            r.worker_node_toleration_seconds, r.quarantine_after_failures,
            r.quarantine_window_seconds) == (True, 5, 5, 30, 2, 3600)
    m = spec.maintenance
    assert (m.enabled, m.lead_seconds, m.checkpoint_timeout_seconds,
            m.pause_timeout_seconds) == (True, 900, 300, 600)


@pytest.mark.parametrize(("field", "value", "start"), [
    ("recovery", {"nodeNotReadySeconds": -1}, "spec.recovery.nodeNotReadySeconds: "),
    ("recovery", {"nodeNotReadySeconds": 601}, "spec.recovery.nodeNotReadySeconds: "),
    ("recovery", {"forceDeleteAfterSeconds": 601}, "spec.recovery.forceDeleteAfterSeconds: "),
    ("recovery", {"workerNodeTolerationSeconds": 3601},
     "spec.recovery.workerNodeTolerationSeconds: "),
    ("recovery", {"quarantineAfterFailures": 0}, "spec.recovery.quarantineAfterFailures: "),
    ("recovery", {"quarantineWindowSeconds": 59}, "spec.recovery.quarantineWindowSeconds: "),
    ("maintenance", {"leadSeconds": 59}, "spec.maintenance.leadSeconds: "),
    ("maintenance", {"checkpointTimeoutSeconds": 0},
     "spec.maintenance.checkpointTimeoutSeconds: "),
    ("maintenance", {"pauseTimeoutSeconds": 3601}, "spec.maintenance.pauseTimeoutSeconds: "),
    ("tpu", {"type": "v5e", "topology": "4x4", "numSlices": 3, "spares": -1},
     "spec.tpu.spares: "),
])
def test_knobs_out_of_range_are_refused_naming_the_field(field, value, start):
    assert error_of(job(**{field: value})).startswith(start)


@pytest.mark.parametrize(("recovery", "start"), [
    ({"hardwareExitCodes": [0]}, "spec.recovery.hardwareExitCodes[0]: "),
    ({"hardwareExitCodes": [256]}, "spec.recovery.hardwareExitCodes[0]: "),
    ({"hardwareExitCodes": list(range(1, 34))}, "spec.recovery.hardwareExitCodes: "),
    ({"hardwareExitCodes": [42, 42]}, "spec.recovery.hardwareExitCodes: an exit code is "
                                      "listed more than once"),
    ({"hardwareReasons": ["TPU Fault"]}, "spec.recovery.hardwareReasons[0]: "),
    ({"hardwareReasons": ["A", "A"]}, "spec.recovery.hardwareReasons: a reason is listed"),
    ({"replaceSlices": False, "hardwareReasons": ["TPUChipFault"]},
     "spec.recovery.hardwareExitCodes, hardwareReasons: only read when"),
])
def test_bad_hardware_signals_are_refused_naming_the_field(recovery, start):
    assert error_of(job(recovery=recovery)).startswith(start)


def test_hardware_signals_default_to_none_and_take_kubernetes_reasons():
    assert validate_job(job()).spec.recovery.hardware_exit_codes == []
    recovery = validate_job(job(recovery={"hardwareExitCodes": [42, 137],
                                          "hardwareReasons": ["OutOfgoogle.com/tpu"]})
                            ).spec.recovery
    assert recovery.hardware_exit_codes == [42, 137]
    assert recovery.hardware_reasons == ["OutOfgoogle.com/tpu"]


def test_spares_beyond_the_slices_and_contradicting_timeouts_are_refused():
    assert error_of(job(tpu={"type": "v5e", "topology": "4x4", "numSlices": 2,
                             "spares": 3})).startswith("spec.tpu.spares: must not be more")
    assert error_of(job(recovery={"nodeNotReadySeconds": 40})).startswith(
        "spec.recovery.workerNodeTolerationSeconds: must be at least")
    assert error_of(job(maintenance={"leadSeconds": 300})).startswith(
        "spec.maintenance.checkpointTimeoutSeconds: must be less than")
    assert error_of(job(placement="Any")).startswith("spec.placement: Any is for backend")
    validate_job(job(placement="Any", backend="simulated"))


# --- MultiKueue (spec.managedBy) --------------------------------------------------------------

MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def mk_job(**spec: Any) -> dict[str, Any]:
    obj = job(managedBy=MULTIKUEUE, **spec)
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    return obj


def test_managed_by_multikueue_is_accepted_with_shared_storage():
    parsed = validate_job(mk_job())
    assert parsed.spec.multikueue
    assert not validate_job(job()).spec.multikueue


def test_a_multikueue_job_names_its_queue():
    from elastic_api.validation import MULTIKUEUE_QUEUE
    assert error_of(job(managedBy=MULTIKUEUE)).splitlines() == [MULTIKUEUE_QUEUE]


def test_managed_by_names_only_multikueue():
    message = error_of(job(managedBy="someone-else"))
    assert message.startswith("spec.managedBy: ")
    assert MULTIKUEUE in message


def test_managed_by_literal_is_the_shared_name():
    from elastic_api.names import MULTIKUEUE_CONTROLLER
    assert MULTIKUEUE == MULTIKUEUE_CONTROLLER


def test_multikueue_job_refuses_a_local_checkpoint_directory():
    from elastic_api.validation import MULTIKUEUE_CHECKPOINT_DIRECTORY
    message = error_of(mk_job(checkpoint={"directory": "/ckpt"}))
    assert message.splitlines() == [MULTIKUEUE_CHECKPOINT_DIRECTORY]
    assert message.startswith("spec.checkpoint.directory: ") and "gs://" in message
    validate_job(job(checkpoint={"directory": "/ckpt"}))  # fine in one cluster


def test_multikueue_job_refuses_a_claim_of_one_cluster():
    from elastic_api.validation import MULTIKUEUE_VOLUME
    trainer = {"image": "t:1", "steps": 1,
               "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]}
    assert error_of(mk_job(trainer=trainer)).splitlines() == \
        [MULTIKUEUE_VOLUME]
    validate_job(job(trainer=trainer))
    fuse = {"image": "t:1", "steps": 1, "volumes": [
        {"name": "v", "csi": {"driver": "gcsfuse.csi.storage.gke.io"}}]}
    validate_job(mk_job(trainer=fuse))
