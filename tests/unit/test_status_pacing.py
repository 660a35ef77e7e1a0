"""core/pacing.progress_only: which status changes may wait (a slice's ready-host count,
messages) and which are written at once (every transition, counter, condition status or
reason, Event). Driven through compute_status on a slice failing, torn down, replaced and
coming back host by host, as the reconciler sees it, then on single fields."""
from __future__ import annotations

from elastic_api.conditions import ConditionType
from elastic_api.models import (
    Condition,
    Counters,
    ElasticTrainingJob,
    ElasticTrainingJobStatus,
    PendingEvent,
    SliceStatus,
)
from elastic_operator.core.pacing import progress_only
from elastic_operator.core.status import compute_status
from elastic_operator.model.objects import ObservedPod
from tests.builders import HOSTS, SLICES, WorkerPod, at, etj, healthy_pods, nodes_for, observe

SLICE = 1  # the slice that fails


def job() -> ElasticTrainingJob:
    # Hosts per slice: 4 (v5e 4x4, the article's); a bigger slice only adds steps.
    return etj().uid("uid-1").generation(1).build()


def slice_pods(hosts: list[WorkerPod]) -> list[ObservedPod]:
    """Every slice healthy but SLICE, whose pods are `hosts`."""
    return [p for p in healthy_pods() if p.slice_index != SLICE] + [h.build() for h in hosts]


def walk(pods_over_time: list[list[ObservedPod]]) -> list[tuple[bool, list[str], str]]:
    """Each step: (progress only?, the Events, the slice's state), from the previous
    status to the one computed from these pods (as one reconcile after another)."""
    j = job()
    current, _ = compute_status(j, observe(healthy_pods(), nodes=nodes_for()), None, at(1))
    out = []
    for i, pods in enumerate(pods_over_time):
        new, events = compute_status(j, observe(pods, nodes=nodes_for()), current, at(10 + i))
        out.append((progress_only(current, new), [e.reason for e in events],
                    new.slices[SLICE].state))
        current = new
    return out


def test_a_slice_failing_torn_down_and_back_host_by_host() -> None:
    old = [WorkerPod(SLICE, h) for h in range(HOSTS)]
    failed_at = at(9)
    torn: list[WorkerPod] = [old[0].failed(failed_at), *old[1:]]
    steps = [slice_pods(torn)]  # host 0 failed: Down
    for h in range(1, HOSTS):  # the Job deleted: its other pods go one by one
        torn = [*torn[:h], old[h].deleting(at(10)), *torn[h + 1:]]
        steps.append(slice_pods(torn))
    new = [WorkerPod(SLICE, h).recreated(at(12)).pending() for h in range(HOSTS)]
    steps.append(slice_pods(new))  # the recreated Job's pods: Restarting
    for h in range(HOSTS):  # ready one by one; the last makes the slice Ready
        new = [*new[:h], WorkerPod(SLICE, h).recreated(at(12)), *new[h + 1:]]
        steps.append(slice_pods(new))
    result = walk(steps)
    assert [state for _, _, state in result] == (
        ["Down"] * HOSTS + ["Restarting"] * HOSTS + ["Ready"])
    progress = [p for p, _, _ in result]
    # At once: the failure, the Job's pods all gone and new ones there (Restarting), the
    # slice Ready again. Paced: the teardown host by host, the hosts coming back.
    assert progress == [False] + [True] * (HOSTS - 1) + [False] + [True] * (HOSTS - 1) \
        + [False]
    assert result[0][1] and result[-1][1]  # the transitions carry their Events
    assert not any(events for p, events, _ in result if p)


def walk_reasons(pods_over_time: list[list[ObservedPod]]) -> list[tuple[bool, str, str]]:
    """Each step: (progress only?, the slice's state, its reason)."""
    j = job()
    current, _ = compute_status(j, observe(healthy_pods(), nodes=nodes_for()), None, at(1))
    out = []
    for i, pods in enumerate(pods_over_time):
        new, _ = compute_status(j, observe(pods, nodes=nodes_for()), current, at(10 + i))
        out.append((progress_only(current, new), new.slices[SLICE].state,
                    new.slices[SLICE].reason or ""))
        current = new
    return out


def test_the_teardown_in_the_clusters_order_is_one_down_one_restarting_one_ready() -> None:
    """As the garbage collector and JobSet do it: the failed pod goes first (its host has
    no pod for a moment, the others still up), the others go one by one while the new
    Job's pods arrive. Before, a look without a pod down showed the slice Restarting, the
    next Down again (PodDeleted): four or more transitions, each a status write at once.
    Now three transitions (Down, Restarting once no host's newest pod is the old Job's,
    Ready) and the reason it went down for kept; the rest is progress (paced)."""
    old = [WorkerPod(SLICE, h) for h in range(HOSTS)]
    new = [WorkerPod(SLICE, h).recreated(at(12)).pending() for h in range(HOSTS)]
    steps = [slice_pods([old[0].failed(at(9)), *old[1:]])]  # host 0 failed: Down
    steps.append(slice_pods(old[1:]))  # its pod gone; the others still Ready
    torn: list[WorkerPod] = list(old[1:])
    for h in range(1, HOSTS):  # the others deleted one by one, new pods for the gone
        torn = [*torn[:h - 1], old[h].deleting(at(10)), *torn[h:]]
        steps.append(slice_pods([new[0], *torn]))
    steps.append(slice_pods(new))  # every old pod gone: Restarting
    for h in range(HOSTS):  # ready one by one; the last makes the slice Ready
        new = [*new[:h], WorkerPod(SLICE, h).recreated(at(12)), *new[h + 1:]]
        steps.append(slice_pods(new))
    result = walk_reasons(steps)
    down = HOSTS + 1
    assert [state for _, state, _ in result] == (
        ["Down"] * down + ["Restarting"] * HOSTS + ["Ready"])
    assert {reason for _, state, reason in result if state == "Down"} == {"PodFailed"}
    assert [p for p, _, _ in result] == (
        [False] + [True] * (down - 1) + [False] + [True] * (HOSTS - 1) + [False])


def status(**fields: object) -> ElasticTrainingJobStatus:
    """A running job's status: SLICES slices, Ready condition True, as `fields` change."""
    base: dict[str, object] = {
        "phase": "Running", "slices_desired": SLICES, "slices_ready": SLICES,
        "slices": [SliceStatus(index=i, state="Ready", ready_hosts=HOSTS, hosts=HOSTS)
                   for i in range(SLICES)],
        "conditions": [Condition(type=ConditionType.READY, status="True", reason="AllReady",
                                 message="3/3 slices ready", last_transition_time=at(1),
                                 observed_generation=1)],
    }
    return ElasticTrainingJobStatus(**{**base, **fields})  # type: ignore[arg-type]


def restarting(ready_hosts: int, **changes: object) -> SliceStatus:
    return SliceStatus(index=SLICE, state="Restarting", ready_hosts=ready_hosts, hosts=HOSTS,
                       restarts=1, reason="ReplacementPodsNotReady",
                       message=f"{ready_hosts}/{HOSTS} hosts ready",
                       last_transition_time=at(5), **changes)  # type: ignore[arg-type]


def with_slice(s: SliceStatus, **fields: object) -> ElasticTrainingJobStatus:
    slices = status().slices
    slices[SLICE] = s
    return status(slices=slices, **fields)


def ready_condition(**changes: object) -> list[Condition]:
    cond = status().conditions[0]
    return [cond.model_copy(update=changes)]


def test_equal_statuses_are_not_progress_there_is_nothing_to_write() -> None:
    assert not progress_only(status(), status())


def test_ready_hosts_and_messages_are_progress() -> None:
    before = with_slice(restarting(1))
    assert progress_only(before, with_slice(restarting(2)))
    assert progress_only(status(), status(conditions=ready_condition(message="other words")))


def test_everything_else_about_a_slice_is_written_at_once() -> None:
    before = with_slice(restarting(1))
    for changed in (
        restarting(1).model_copy(update={"state": "Down"}),
        restarting(1).model_copy(update={"reason": "NoHealthyPool"}),
        restarting(1).model_copy(update={"restarts": 2}),
        restarting(1).model_copy(update={"moves": 1}),
        restarting(1).model_copy(update={"pool": "tpu-4"}),
        restarting(1).model_copy(update={"last_transition_time": at(7)}),
        restarting(1).model_copy(update={"hosts": HOSTS * 2}),
    ):
        assert not progress_only(before, with_slice(changed)), changed
        # ... also when the count moves with it.
        assert not progress_only(before, with_slice(changed.model_copy(
            update={"ready_hosts": 2, "message": "2/4 hosts ready"}))), changed


def test_conditions_counters_summary_and_events_are_written_at_once() -> None:
    before = status()
    changes: list[dict[str, object]] = [
        {"conditions": ready_condition(status="False")},
        {"conditions": ready_condition(reason="SlicesNotReady")},
        {"conditions": ready_condition(observed_generation=2)},
        {"conditions": ready_condition(last_transition_time=at(3))},
        {"conditions": [*ready_condition(), Condition(
            type=ConditionType.SLICE_DOWN, status="False", reason="AllSlicesUp",
            last_transition_time=at(1))]},
        {"counters": Counters(slice_failures=1)},
        {"phase": "SliceDown"},
        {"slices_ready": SLICES - 1},
        {"observed_generation": 2},
        {"pending_events": [PendingEvent(name="e", reason="SliceDown", type="Warning",
                                         message="m")]},
    ]
    for fields in changes:
        after = status(**fields)
        assert not progress_only(before, after), fields
        if "pending_events" not in fields:  # (the way back, below)
            assert not progress_only(after, before), fields


def test_an_outbox_cleared_after_its_posts_is_progress_an_event_added_is_not() -> None:
    """The Events went out already (the posts follow the reconcile): clearing them may
    wait, unless something else changes with it; an Event added is written at once."""
    entry = PendingEvent(name="e", reason="SliceDown", type="Warning", message="m")
    other = PendingEvent(name="f", reason="SliceReplacing", type="Normal", message="m")
    assert progress_only(status(pending_events=[entry, other]), status(pending_events=[other]))
    assert progress_only(status(pending_events=[entry]), status())
    assert not progress_only(status(pending_events=[entry]), status(pending_events=[other]))
    assert not progress_only(status(pending_events=[entry]),
                             status(pending_events=[entry], phase="SliceDown"))
    assert not progress_only(status(pending_events=[entry]), status(phase="SliceDown"))
