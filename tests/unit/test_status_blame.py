"""Who is to blame for a slice failure (core/blame.py) and what each blame calls for
(core/pools.py, core/replacement.py): evidence against the nodes quarantines a pool, a
job's own crashes never do, a fault that follows a job from pool to pool is the job's,
failures of different jobs on one pool are the pool's; a quarantine records who and why,
and ends when its evidence does."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from elastic_api.conditions import ConditionType as C
from elastic_api.conditions import Reason
from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus, RecoverySpec
from elastic_api.names import OUT_OF_TPU, UNEXPECTED_ADMISSION_ERROR
from elastic_operator.core.blame import Evidence, pod_evidence
from elastic_operator.core.plan import DeleteWorkerJob, QuarantinePool, ReleasePool
from elastic_operator.core.pools import (
    DEFAULT_QUARANTINE,
    TRUSTING,
    QuarantinePolicy,
    cited_jobs,
    pools_to_release,
    quarantine_verdict,
)
from elastic_operator.core.replacement import ReplacementPlan, plan_replacements
from elastic_operator.core.sliceview import SliceView
from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import (
    FailureMark,
    Observed,
    ObservedNode,
    QuarantineCause,
    node_from_dict,
    pod_from_dict,
    quarantine_cause_from,
)
from elastic_operator.watch.node_index import NodeIndex
from tests.builders import (
    HOSTS,
    SLICES,
    T0,
    NodeWrapper,
    PodWrapper,
    WorkerPod,
    at,
    etj,
    healthy_pods,
    nodes_for,
    observe,
    pools_of,
    tpu_node,
    worker_job,
)

RECOVERY = RecoverySpec(hardware_exit_codes=[42], hardware_reasons=["TPUChipFault"])
ME = ("ns/article", "uid-1")


def job(**spec: Any) -> ElasticTrainingJob:
    return etj().uid("uid-1").generation(1).spec(**spec).build()


def world(pods: list[Any] | None = None, *, nodes: dict[str, ObservedNode] | None = None,
          spares: int = 1, gens: dict[int, int] | None = None,
          busy: tuple[str, ...] = ()) -> Observed:
    nodes = nodes or nodes_for(spares=spares)
    return observe(pods if pods is not None else healthy_pods(), nodes=nodes,
                   pools=pools_of(nodes, busy=busy),
                   jobs={i: worker_job(i, (gens or {}).get(i, 0)) for i in range(SLICES)})


def step(j: ElasticTrainingJob, prev: ElasticTrainingJobStatus | None, observed: Observed,
         now: datetime, policy: QuarantinePolicy = DEFAULT_QUARANTINE,
         ) -> tuple[ElasticTrainingJobStatus, ReplacementPlan]:
    """A reconcile under the administrator's quarantine `policy` (--quarantine-*)."""
    st, _ = compute_status(j, observed, prev, now, quarantine=policy)
    return st, plan_replacements("ns", "article", j.spec, st, observed, now, policy)


def quarantined(nodes: dict[str, ObservedNode], pool: str, reason: str,
                cause: QuarantineCause | None = None, **more: Any) -> dict[str, ObservedNode]:
    return {n: replace(v, quarantined=reason, quarantined_at=at(0), quarantine_cause=cause,
                       **more) if v.pool == pool else v for n, v in nodes.items()}


# --- the classification of one host ---------------------------------------------------------


def evidence_of(pod: WorkerPod, node: ObservedNode | None = None) -> Evidence:
    built = pod.build()
    nodes = {} if node is None and built.node_name == "gone" else {
        built.node_name or "": node or tpu_node(built.node_name or "")}
    return pod_evidence(built, nodes, RECOVERY)


@pytest.mark.parametrize(("pod", "node", "blame", "reason"), [
    # The control plane's evidence against the node.
    (WorkerPod(1, 0).not_ready(), tpu_node("tpu-1-0", ready=False), "Node",
     Reason.NODE_NOT_READY),
    (WorkerPod(1, 0).on_node("gone").failed(at(1)), None, "Node", Reason.NODE_NOT_READY),
    (WorkerPod(1, 0).failed(at(1)), tpu_node("tpu-1-0", tpu_capacity=4, tpu_allocatable=3),
     "Node", Reason.DEVICE_UNHEALTHY),
    (WorkerPod(1, 0).failed(at(1)), tpu_node("tpu-1-0", impending_termination=True), "Node",
     Reason.MAINTENANCE),
    (WorkerPod(1, 0).failed_with_status(UNEXPECTED_ADMISSION_ERROR), None,
     "Node", Reason.DEVICE_UNHEALTHY),
    (WorkerPod(1, 0).failed_with_status(OUT_OF_TPU), None, "Node",
     Reason.DEVICE_UNHEALTHY),
    (WorkerPod(1, 0).deleting(at(1)).disrupted("DeletionByTaintManager"), None, "Node",
     Reason.NODE_DISRUPTION),
    (WorkerPod(1, 0).failed_with_status("Terminated").disrupted("TerminationByKubelet"), None,
     "Node", Reason.NODE_DISRUPTION),
    # What the job's spec declares as the hardware's.
    (WorkerPod(1, 0).failed(at(1), exit_code=42), None, "Reported", Reason.HARDWARE_FAILURE),
    (WorkerPod(1, 0).failed(at(1), reason="TPUChipFault"), None, "Reported",
     Reason.HARDWARE_FAILURE),
    # A container that exits on a healthy node: the job's (a scheduled maintenance far
    # ahead is no evidence either).
    (WorkerPod(1, 0).failed(at(1)), None, "Job", Reason.POD_FAILED),
    (WorkerPod(1, 0).failed(at(1), exit_code=137, reason="OOMKilled"), None, "Job",
     Reason.POD_FAILED),
    (WorkerPod(1, 0).failed(at(1)), tpu_node("tpu-1-0", scheduled_maintenance=at(10_000)),
     "Job", Reason.POD_FAILED),
    # Neither.
    (WorkerPod(1, 0).evicted("The node was low on resource: memory."), None, "Other",
     Reason.POD_EVICTED),
    (WorkerPod(1, 0).deleting(at(1)).disrupted("EvictionByEvictionAPI"), None, "Other",
     Reason.POD_DELETED),
    (WorkerPod(1, 0).deleting(at(1)).disrupted("PreemptionByScheduler"), None, "Other",
     Reason.POD_DELETED),
])
def test_each_hosts_evidence_is_classified(pod: WorkerPod, node: ObservedNode | None,
                                           blame: str, reason: str) -> None:
    found = evidence_of(pod, node)
    assert (found.blame, found.reason) == (blame, reason), found.detail


def test_the_strongest_evidence_of_a_slice_decides_and_says_why() -> None:
    """A crash on one host while another host's node died: the node is to blame."""
    pods = healthy_pods()
    pods[HOSTS] = WorkerPod(1, 0).failed(at(10)).build()
    pods[HOSTS + 1] = WorkerPod(1, 1).deleting(at(10)).build()
    nodes = nodes_for(spares=1)
    assert SliceView.of(pods[HOSTS:2 * HOSTS], nodes).evidence(RECOVERY).blame == "Job"
    nodes["tpu-1-3"] = tpu_node("tpu-1-3", ready=False, status="Unknown", since=at(9))
    found = SliceView.of(pods[HOSTS:2 * HOSTS], nodes).evidence(RECOVERY)
    assert (found.blame, found.node) == ("Node", "tpu-1-3")
    assert found.detail == "node tpu-1-3 is NotReady (Ready=Unknown)"


def test_a_crash_the_job_controller_replaced_before_a_look_is_still_the_jobs() -> None:
    """On a loaded control plane the Job controller's new pod for a crashed host (restart
    policy OnFailure) can be there before the operator looks: the failed pod it replaced
    is the evidence, not a host lost for no reason."""
    j = job()
    st, _ = step(j, None, world(), at(1))
    assert st.slices[1].state == "Ready"
    pods = healthy_pods()
    crashed = WorkerPod(1, 0).failed(at(10))
    pods[HOSTS] = crashed.build()
    pods.append(crashed.replacement(at(11)).pending().on_node(None).build())
    st, plan = step(j, st, world(pods), at(12))
    assert st.slices[1].state == "Down" and st.slices[1].restarts == 1
    record = st.slices[1].replacement
    assert record is not None and record.blame == "Job"
    assert "exited with code 1" in (record.evidence or "")
    assert {(p.name, f.blame, f.reason) for p in st.pools for f in p.failures} == {
        ("tpu-1", "Job", Reason.POD_FAILED)}
    assert [type(a) for a in plan.actions] == [DeleteWorkerJob]


def test_what_the_classification_reads_is_parsed_from_the_cluster() -> None:
    pod = pod_from_dict(PodWrapper.worker(1, 0).on_node("tpu-1-0").failed(at(1), exit_code=42)
                        .obj())
    assert pod.terminated_exit_code == 42 and pod.disruption is None
    raw = PodWrapper.worker(1, 0).on_node("tpu-1-0").deleting(at(1)).obj()
    raw["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                    "reason": "DeletionByTaintManager"}]
    assert pod_from_dict(raw).disruption == "DeletionByTaintManager"
    node_raw = NodeWrapper("tpu-1-0").ready().obj()
    node_raw["status"].update(capacity={"google.com/tpu": "4"},
                              allocatable={"google.com/tpu": "2"})
    node = node_from_dict(node_raw)
    assert (node.unhealthy_chips, node.healthy) == (2, False)
    cause = QuarantineCause((ME, ("team-b/other", "uid-b")), "node x is gone")
    assert quarantine_cause_from(cause.to_json()) == cause
    assert quarantine_cause_from("not json") is None and quarantine_cause_from('"x"') is None


# --- the article's story: one tenant's crash loop takes nothing from the others ------------


def crash_loop(j: ElasticTrainingJob, pools: list[str],
               nodes: dict[str, ObservedNode] | None = None,
               policy: QuarantinePolicy = DEFAULT_QUARANTINE) -> list[tuple[
        ElasticTrainingJobStatus, ReplacementPlan]]:
    """Slice 1's worker exits 1 on a healthy node of each of `pools` in turn (the first
    tpu-1, where it starts; recreated on the next after each failure); the status and
    the plan after each failure."""
    st, _ = step(j, None, world(), at(1), policy)
    out = []
    for n, pool in enumerate(pools, start=1):
        pods = healthy_pods()
        if n > 1:
            pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(n * 10), n - 1,
                                                               node=f"{pool}-{h}").build()
                                     for h in range(HOSTS)]
        st, _ = step(j, st, world(pods, nodes=nodes, gens={1: n - 1}),
                     at(n * 10 + 3), policy)  # Ready there
        assert st.slices[1].state == "Ready" and st.slices[1].pool == pool
        pods[HOSTS] = replace(pods[HOSTS], phase="Failed", ready=False,
                              terminated_at=at(n * 10 + 5), terminated_exit_code=1,
                              terminated_reason="Error")
        st, plan = step(j, st, world(pods, nodes=nodes, gens={1: n - 1}), at(n * 10 + 6),
                        policy)
        out.append((st, plan))
    return out


def test_a_crash_loop_that_follows_the_job_from_pool_to_pool_quarantines_nothing() -> None:
    """Job A's worker exits 1 four times on healthy nodes while its slice alternates
    between two pools: its own failure each time (no quarantine), and the failures
    follow it: they count against neither pool, for A or for anyone. (Its restart budget
    allows the four: the default's three within the hour would give it up at the fourth.)"""
    j = job(elastic={"maxSliceRestarts": 5})
    steps = crash_loop(j, ["tpu-1", "tpu-3", "tpu-1", "tpu-3"])
    for n, (st, plan) in enumerate(steps, start=1):
        assert st.slices[1].restarts == n
        assert [type(a) for a in plan.actions] == [DeleteWorkerJob], n
    st = steps[-1][0]
    assert {(p.name, f.blame) for p in st.pools for f in p.failures} == {
        ("tpu-1", "Job"), ("tpu-3", "Job")}
    eager = RecoverySpec(quarantine_after_failures=1)  # even this job's own failure would do
    assert quarantine_verdict(Evidence("Job", Reason.POD_FAILED, "x"), "tpu-1", st.pools,
                              None, eager, at(50)) is None
    index = NodeIndex()
    for node in nodes_for(spares=1).values():
        index.node_seen(node)
    index.note_failures(("ns-a", "article"), "uid-a", st.pools)
    marks = {p.name: p.failures_of_others
             for p in index.pools("tpu-v5-lite-podslice", "4x4", ("ns-b", "article"))}
    assert {m.pools for m in marks["tpu-1"] + marks["tpu-3"]} == {2}  # it follows the job


def test_with_quarantine_after_one_failure_its_own_quarantine_is_withdrawn_when_it_moves(
        ) -> None:
    """quarantineAfterFailures 1, which the administrator lets a job decide
    (--quarantine-min-jobs 1): this job's own crash is enough to quarantine tpu-1;
    once the slice crashes on tpu-3 too, the fault follows the job: tpu-3 is not
    quarantined and tpu-1's quarantine, which rested on it, is withdrawn."""
    j = job(recovery={"quarantineAfterFailures": 1})
    (_, plan), = crash_loop(j, ["tpu-1"], policy=TRUSTING)
    quarantine = plan.actions[0]
    assert isinstance(quarantine, QuarantinePool)
    assert quarantine.reason == Reason.REPEATED_FAILURES and quarantine.cause.jobs == (ME,)
    nodes = quarantined(nodes_for(spares=1), "tpu-1", Reason.REPEATED_FAILURES,
                        quarantine.cause)
    _, (_, plan) = crash_loop(j, ["tpu-1", "tpu-3"], nodes, TRUSTING)
    assert not [a for a in plan.actions if isinstance(a, QuarantinePool)]
    (release,) = [a for a in plan.actions if isinstance(a, ReleasePool)]
    assert release.pool == "tpu-1" and "ns/article's failures follow the job to tpu-3" in \
        release.why


def test_other_jobs_read_a_jobs_failures_and_forget_them_with_it() -> None:
    """NodeIndex keeps each job's own-failure marks from its status, for the others'
    reconciles; a failure on two pools says it follows the job; deletion forgets it."""
    j = job()
    pods = healthy_pods()
    pods[HOSTS] = WorkerPod(1, 0).failed(at(10)).build()
    st, _ = step(j, step(j, None, world(), at(1))[0], world(pods), at(11))
    index = NodeIndex()
    for node in nodes_for(spares=1).values():
        index.node_seen(node)
    index.note_failures(("ns", "article"), "uid-1", st.pools)

    def marks(pool: str, reader: tuple[str, str]) -> tuple[FailureMark, ...]:
        return next(p for p in index.pools("tpu-v5-lite-podslice", "4x4", reader)
                    if p.name == pool).failures_of_others

    assert marks("tpu-1", ("team-b", "b")) == (FailureMark("ns/article", "uid-1", at(11), 1),)
    assert marks("tpu-1", ("ns", "article")) == ()  # a job is not another to itself
    index.forget_job(("ns", "article"))
    assert marks("tpu-1", ("team-b", "b")) == ()


def test_a_node_loss_of_another_job_still_finds_the_spare() -> None:
    """Job B (the article's shape) loses a node after A's crash loop: no pool is
    quarantined for A's crashes, so B's slice is moved to the spare at once."""
    j = job()
    nodes = nodes_for(spares=1)
    nodes["tpu-1-2"] = tpu_node("tpu-1-2", ready=False, status="Unknown", since=at(10))
    observed = world(nodes=nodes)
    a_marks = (FailureMark("ns-a/article", "uid-a", at(5), pools=2),)
    observed = replace(observed, pools=tuple(replace(p, failures_of_others=a_marks)
                                             for p in observed.pools))
    _, plan = step(j, step(j, None, world(), at(1))[0], observed, at(10.5))
    assert [type(a) for a in plan.actions] == [QuarantinePool, DeleteWorkerJob]
    assert plan.actions[0].pool == "tpu-1"  # type: ignore[union-attr]


# --- the job's own report -------------------------------------------------------------------


def test_a_trusted_reported_hardware_failure_quarantines_unless_it_follows_the_job() -> None:
    """The administrator trusts jobs' reports (--quarantine-on-job-report)."""
    j = job(recovery={"hardwareExitCodes": [42]})
    st0 = step(j, None, world(), at(1), TRUSTING)[0]
    pods = healthy_pods()
    pods[HOSTS] = WorkerPod(1, 0).failed(at(10), exit_code=42).build()
    st, plan = step(j, st0, world(pods), at(11), TRUSTING)
    quarantine = plan.actions[0]
    assert isinstance(quarantine, QuarantinePool)
    assert (quarantine.reason, quarantine.cause.jobs) == (Reason.HARDWARE_FAILURE, (ME,))
    assert "exited with code 42 (spec.recovery.hardwareExitCodes)" in quarantine.cause.evidence
    # Moved to tpu-3 (tpu-1 quarantined), the same code again: the fault follows the job.
    nodes = quarantined(nodes_for(spares=1), "tpu-1", Reason.HARDWARE_FAILURE,
                        quarantine.cause)
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(12), 1, node=f"tpu-3-{h}").build()
                             for h in range(HOSTS)]
    st, _ = step(j, st, world(pods, nodes=nodes, gens={1: 1}), at(13), TRUSTING)
    pods[HOSTS] = replace(pods[HOSTS], phase="Failed", ready=False, terminated_at=at(20),
                          terminated_exit_code=42, terminated_reason="Error")
    st, plan = step(j, st, world(pods, nodes=nodes, gens={1: 1}), at(21), TRUSTING)
    assert not [a for a in plan.actions if isinstance(a, QuarantinePool)]
    # ... and the quarantine it caused on tpu-1 is withdrawn with it.
    (release,) = [a for a in plan.actions if isinstance(a, ReleasePool)]
    assert release.pool == "tpu-1" and "follow the job to tpu-3" in release.why


# --- the administrator's policy (--quarantine-min-jobs, --quarantine-on-job-report) -------


def fail_once(j: ElasticTrainingJob, exit_code: int = 1,
              policy: QuarantinePolicy = DEFAULT_QUARANTINE,
              others: tuple[FailureMark, ...] = ()) -> tuple[
        ElasticTrainingJobStatus, list[str], ReplacementPlan]:
    """Slice 1's worker exits `exit_code` on healthy tpu-1 (`others`: what other jobs'
    statuses say of tpu-1): the status, the SliceReplacing Events' messages, the plan."""
    st0 = step(j, None, world(), at(1), policy)[0]
    pods = healthy_pods()
    pods[HOSTS] = WorkerPod(1, 0).failed(at(10), exit_code=exit_code).build()
    observed = world(pods)
    observed = replace(observed, pools=tuple(
        replace(p, failures_of_others=others) if p.name == "tpu-1" else p
        for p in observed.pools))
    st, events = compute_status(j, observed, st0, at(11), quarantine=policy)
    said = [e.message for e in events if e.reason == Reason.SLICE_REPLACING]
    return st, said, plan_replacements("ns", "article", j.spec, st, observed, at(11), policy)


def kinds(plan: ReplacementPlan) -> list[type]:
    return [type(a) for a in plan.actions]


def test_a_job_asking_to_quarantine_after_its_own_failure_alone_quarantines_nothing() -> None:
    """quarantineAfterFailures 1 is the tenant's to write: by default the administrator
    requires 2 jobs, so the slice is replaced (at once) and the pool stays, and the
    SliceReplacing Event says why and which flag would change it."""
    j = job(recovery={"quarantineAfterFailures": 1})
    st, (said,), plan = fail_once(j)
    assert kinds(plan) == [DeleteWorkerJob]
    assert st.slices[1].replacement is not None and st.slices[1].replacement.action == "Replace"
    assert "node pool tpu-1 not quarantined: slices of 1 job failed there, fewer than the 2 " \
        "jobs the administrator requires" in said and "(--quarantine-min-jobs)" in said
    # A second job's failure there reaches the floor.
    other = FailureMark("team-b/other", "uid-b", at(5), pools=1)
    _, (said,), plan = fail_once(j, others=(other,))
    assert kinds(plan) == [QuarantinePool, DeleteWorkerJob] and "not quarantined" not in said


def test_a_floor_above_the_jobs_threshold_holds_and_one_below_does_not_lower_it() -> None:
    evidence = Evidence("Job", Reason.POD_FAILED, "exited with code 1")
    j = job(recovery={"quarantineAfterFailures": 2})
    st, _, _ = fail_once(j)
    one = (FailureMark("team-b/other", "uid-b", at(5), pools=1),)
    two = (*one, FailureMark("team-c/third", "uid-c", at(6), pools=1))

    def verdict(others: tuple[FailureMark, ...], policy: QuarantinePolicy) -> str | None:
        pool = replace(world().pools[1], failures_of_others=others)
        assert pool.name == "tpu-1"
        found = quarantine_verdict(evidence, "tpu-1", st.pools, pool, j.spec.recovery, at(11),
                                   policy)
        return found.reason if found is not None else None

    assert verdict(one, QuarantinePolicy(min_jobs=3)) is None
    assert verdict(two, QuarantinePolicy(min_jobs=3)) == Reason.REPEATED_FAILURES
    assert verdict((), QuarantinePolicy(min_jobs=1)) is None  # the job's own 2 still holds
    assert verdict(one, QuarantinePolicy(min_jobs=1)) == Reason.REPEATED_FAILURES


def test_a_plain_crash_below_the_jobs_own_threshold_says_nothing_of_the_administrator(
        ) -> None:
    """The job's own quarantineAfterFailures (2), not the policy, keeps the pool: the
    Event does not blame the administrator's setting."""
    _, (said,), plan = fail_once(job())
    assert kinds(plan) == [DeleteWorkerJob] and "not quarantined" not in said


def test_a_jobs_own_report_alone_does_not_quarantine_a_pool_by_default() -> None:
    """hardwareExitCodes is the job's own word: by default it counts as the job's own
    failure (needs 2 jobs); the slice is still replaced at once."""
    j = job(recovery={"hardwareExitCodes": [42]})
    st, (said,), plan = fail_once(j, exit_code=42)
    assert kinds(plan) == [DeleteWorkerJob]
    assert [(f.blame, p.name) for p in st.pools for f in p.failures] == [("Reported", "tpu-1")]
    assert "node pool tpu-1 not quarantined: the job's own report is no evidence against a " \
        "pool other teams use unless the administrator allows it " \
        "(--quarantine-on-job-report)" in said
    _, (said,), plan = fail_once(j, exit_code=42, policy=QuarantinePolicy(trust_reports=True))
    assert kinds(plan) == [QuarantinePool, DeleteWorkerJob] and "not quarantined" not in said


def test_reports_of_two_jobs_on_one_pool_quarantine_it() -> None:
    """Job B's report on tpu-1 reaches job A's reconcile through the node index (as the
    operator's own status of B records it); A's report there makes two jobs."""
    j = job(recovery={"hardwareExitCodes": [42]})
    b_status, _, _ = fail_once(j, exit_code=42)
    index = NodeIndex()
    for node in nodes_for(spares=1).values():
        index.node_seen(node)
    index.note_failures(("team-b", "other"), "uid-b", b_status.pools)
    marks = next(p for p in index.pools("tpu-v5-lite-podslice", "4x4", ("ns", "article"))
                 if p.name == "tpu-1").failures_of_others
    _, _, plan = fail_once(j, exit_code=42, others=marks)
    quarantine = plan.actions[0]
    assert isinstance(quarantine, QuarantinePool)
    assert (quarantine.pool, quarantine.reason) == ("tpu-1", Reason.REPEATED_FAILURES)
    assert quarantine.cause.jobs == (ME, ("team-b/other", "uid-b"))


# --- a slice that waits for a pool ---------------------------------------------------------


def waiting_slice(nodes: dict[str, ObservedNode], busy: tuple[str, ...] = ()
                  ) -> tuple[ElasticTrainingJob, ElasticTrainingJobStatus, Observed]:
    """Slice 1 failed on tpu-1 (its node died), was quarantined off it, and its
    replacement pods are Pending: the spare is gone (another job took it)."""
    j = job()
    dead = nodes_for(spares=1)
    dead["tpu-1-2"] = tpu_node("tpu-1-2", ready=False, status="Unknown", since=at(10))
    st, _ = step(j, step(j, None, world(), at(1))[0], world(nodes=dead), at(10.5))
    pods = healthy_pods()
    pods[HOSTS:2 * HOSTS] = [WorkerPod(1, h).recreated(at(12), 1).pending().on_node(None)
                             .build() for h in range(HOSTS)]
    observed = world(pods, nodes=nodes, gens={1: 1}, busy=busy)
    st, _ = step(j, st, observed, at(13))
    return j, st, observed


def test_a_waiting_slice_says_which_pools_it_considered_and_why_each_was_refused() -> None:
    cause = QuarantineCause((ME,), "node tpu-1-2 is NotReady (Ready=Unknown)")
    nodes = quarantined(nodes_for(spares=1), "tpu-1", Reason.NODE_NOT_READY, cause)
    nodes["tpu-1-2"] = tpu_node("tpu-1-2", ready=False, status="Unknown", since=at(10),
                                quarantined=Reason.NODE_NOT_READY, quarantine_cause=cause)
    _, st, _ = waiting_slice(nodes, busy=("tpu-3",))
    s = st.slices[1]
    assert (s.state, s.reason) == ("Restarting", Reason.NO_HEALTHY_POOL)
    assert s.message == (
        "4 replacement pods Pending: no healthy node pool of this shape is free (tpu-0: runs "
        "slice 0 of this job; tpu-1: quarantined (NodeNotReady, by ns/article: node tpu-1-2 "
        "is NotReady (Ready=Unknown)); tpu-2: runs slice 2 of this job; tpu-3: runs pods of "
        "another job)")
    spares = next(c for c in st.conditions if c.type == C.SPARES_AVAILABLE)
    assert (spares.status, spares.reason) == ("False", Reason.NO_HEALTHY_POOL)
    assert spares.message == f"slice 1 waits for a node pool: {s.message}"


def test_a_waiting_slice_takes_its_old_pool_back_once_its_nodes_are_healthy() -> None:
    cause = QuarantineCause((ME,), "node tpu-1-2 is NotReady (Ready=Unknown)")
    sick = quarantined(nodes_for(spares=1), "tpu-1", Reason.NODE_NOT_READY, cause)
    sick["tpu-1-2"] = replace(sick["tpu-1-2"], ready=False, ready_status="Unknown")
    j, st, observed = waiting_slice(sick, busy=("tpu-3",))
    plan = plan_replacements("ns", "article", j.spec, st, observed, at(13))
    assert not [a for a in plan.actions if isinstance(a, ReleasePool)]  # still NotReady
    healthy = quarantined(nodes_for(spares=1), "tpu-1", Reason.NODE_NOT_READY, cause)
    j, st, observed = waiting_slice(healthy, busy=("tpu-3",))
    plan = plan_replacements("ns", "article", j.spec, st, observed, at(14))
    (release,) = [a for a in plan.actions if isinstance(a, ReleasePool)]
    assert (release.pool, release.slice_index) == ("tpu-1", 1)
    assert release.nodes == tuple(f"tpu-1-{h}" for h in range(HOSTS))
    # A pool quarantined on jobs' failures is not taken back for looking healthy.
    repeated = quarantined(nodes_for(spares=1), "tpu-1", Reason.REPEATED_FAILURES, cause)
    j, st, observed = waiting_slice(repeated, busy=("tpu-3",))
    plan = plan_replacements("ns", "article", j.spec, st, observed, at(14))
    assert not [a for a in plan.actions if isinstance(a, ReleasePool)]


def test_a_node_with_unhealthy_chips_is_no_spare() -> None:
    nodes = nodes_for(spares=1)
    nodes["tpu-3-1"] = replace(nodes["tpu-3-1"], tpu_capacity=4, tpu_allocatable=3)
    st, _ = step(job(), None, world(nodes=nodes), at(1))
    assert st.spare_pools == 0


# --- a quarantine ends with its evidence ----------------------------------------------------


def pool_nodes(reason: str, cause: QuarantineCause | None, *, since: datetime = T0,
               **more: Any) -> list[ObservedNode]:
    return [tpu_node(f"tpu-1-{h}", since=since, quarantined=reason, quarantined_at=at(100),
                     quarantine_cause=cause, **more) for h in range(HOSTS)]


def test_a_deleted_jobs_quarantines_are_released_at_once() -> None:
    for reason in (Reason.REPEATED_FAILURES, Reason.HARDWARE_FAILURE):
        cause = QuarantineCause((("ns-a/article", "uid-a"), ("ns-c/x", "uid-c")), "crashes")
        nodes = pool_nodes(reason, cause)
        assert cited_jobs(nodes) == {("ns-a/article", "uid-a"), ("ns-c/x", "uid-c")}
        assert pools_to_release(nodes, at(200), 600, 3600) == []  # within its hold
        (release,) = pools_to_release(nodes, at(200), 600, 3600,
                                      frozenset({("ns-a/article", "uid-a")}))
        assert release.pool == "tpu-1" and "ns-a/article no longer exists" in release.message


def test_node_evidence_is_not_released_for_its_jobs_deletion() -> None:
    cause = QuarantineCause((("ns-a/article", "uid-a"),), "node tpu-1-0 is gone")
    nodes = pool_nodes(Reason.NODE_NOT_READY, cause, since=at(150))
    gone = frozenset({("ns-a/article", "uid-a")})
    assert cited_jobs(nodes) == set()
    assert pools_to_release(nodes, at(200), 600, 3600, gone) == []
    assert [r.pool for r in pools_to_release(nodes, at(751), 600, 3600, gone)] == ["tpu-1"]


def test_unhealthy_chips_keep_a_pool_quarantined() -> None:
    nodes = pool_nodes(Reason.DEVICE_UNHEALTHY, None)
    nodes[0] = replace(nodes[0], tpu_capacity=4, tpu_allocatable=3)
    assert pools_to_release(nodes, at(10_000), 600, 3600) == []
    nodes[0] = replace(nodes[0], tpu_allocatable=4)
    assert [r.pool for r in pools_to_release(nodes, at(10_000), 600, 3600)] == ["tpu-1"]
