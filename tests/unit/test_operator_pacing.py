"""The reconciler paces progress-only status writes (core/pacing.py): at most one per
interval per job, the latest state written once the interval ends (a wake is asked for
then), while a transition is written at once, however soon after the last write. A transition
carries whatever progress waited. Against the stand-in API server, with a clock the test moves."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from elastic_operator.core.pacing import PROGRESS_CAP_S, progress_interval
from elastic_operator.model.objects import ObservedPod, pod_from_dict
from tests.builders import T0, JobSetWrapper, PodWrapper
from tests.support.clock import FakeClock
from tests.support.stand_in_kube import Looks, StandInKube, reconciler, the_job

INTERVAL = 1.0


def pods(ready: int, hosts: int = 2) -> tuple[ObservedPod, ...]:
    """Slice 0's hosts: the first `ready` Running and Ready, the others Pending."""
    out = []
    for host in range(hosts):
        pod = PodWrapper.worker(0, host, job="train", namespace="ml")
        out.append(pod_from_dict((pod.running() if host < ready else pod).obj()))
    return tuple(out)


def setup(hosts: int = 2) -> tuple[StandInKube, Callable[[], bool], CollectorRegistry,
                                   FakeClock, list[float], list[tuple[ObservedPod, ...]]]:
    """The stand-in, one reconcile of the job (whether it worked), the metrics, the
    clock, every look at the job again the reconciler asked (returned or through its
    wake), and the pods the cache holds."""
    kube = StandInKube(the_job(), JobSetWrapper("train", "ml").owner("u-1")
                       .workers(1, hosts).obj())
    # From 100 the advances below add up to the interval exactly in floating point.
    clock = FakeClock(ticks=100.0)
    seen: list[tuple[ObservedPod, ...]] = [pods(0, hosts)]
    looks = Looks()
    rec, registry = reconciler(kube, pods=lambda: seen[-1], progress_interval_s=INTERVAL,
                               clock=clock, wake=looks.wake)

    def reconcile() -> bool:
        return looks.reconciled(rec.reconcile("ml", "train"))

    woken = looks.delays
    # The first status, then the first checkpoint scan's result: written at once.
    assert reconcile() and reconcile()
    assert len(kube.patches) == 2 and woken == []
    return kube, reconcile, registry, clock, woken, seen


def slice0(kube: StandInKube) -> dict[str, Any]:
    slices: list[dict[str, Any]] = kube.job["status"]["slices"]
    return slices[0]


def writes(registry: CollectorRegistry, kind: str) -> float:
    return registry.get_sample_value("etj_status_writes_total", {"kind": kind}) or 0.0


def test_progress_waits_for_the_interval_then_the_latest_is_written() -> None:
    kube, reconcile, registry, clock, woken, seen = setup(hosts=3)
    assert (slice0(kube)["state"], slice0(kube)["readyHosts"]) == ("Pending", 0)
    first = len(kube.patches)
    seen.append(pods(1, 3))
    clock.advance(0.3)
    assert reconcile()
    assert len(kube.patches) == first and slice0(kube)["readyHosts"] == 0  # waits
    assert abs(woken[-1] - 0.7) < 1e-9  # woken when the interval ends
    seen.append(pods(2, 3))
    clock.advance(0.3)
    assert reconcile()
    assert len(kube.patches) == first and abs(woken[-1] - 0.4) < 1e-9
    clock.advance(0.4)  # the wake: the interval is over, the latest count is written
    assert reconcile()
    assert len(kube.patches) == first + 1 and slice0(kube)["readyHosts"] == 2
    assert slice0(kube)["message"] == "2/3 hosts ready"
    assert writes(registry, "progress") == 1
    assert registry.get_sample_value("etj_status_writes_deferred_total") == 2


def test_a_transition_is_written_at_once_right_after_a_write() -> None:
    kube, reconcile, registry, clock, woken, seen = setup()
    first = len(kube.patches)
    seen.append(pods(2))  # every host ready: the slice is Ready
    clock.advance(0.01)
    assert reconcile()
    assert len(kube.patches) == first + 1 and slice0(kube)["state"] == "Ready"
    assert writes(registry, "progress") == 0 and writes(registry, "change") == first + 1
    assert registry.get_sample_value("etj_status_writes_deferred_total") == 0
    assert woken == []


def test_nothing_waits_when_the_last_write_is_older_than_the_interval() -> None:
    kube, reconcile, _, clock, woken, seen = setup()
    first = len(kube.patches)
    seen.append(pods(1))
    clock.advance(INTERVAL)
    assert reconcile()
    assert len(kube.patches) == first + 1 and slice0(kube)["readyHosts"] == 1
    assert woken == []


def test_a_transition_while_progress_waits_writes_both_with_its_events() -> None:
    kube, reconcile, registry, clock, _, seen = setup(hosts=3)
    seen.append(pods(2, 3))
    clock.advance(0.1)
    assert reconcile()  # progress: waits
    first = len(kube.patches)
    failed = PodWrapper.worker(0, 2, job="train", namespace="ml").failed(T0).obj()
    seen.append((*pods(2, 3)[:2], pod_from_dict(failed)))
    clock.advance(0.1)
    assert reconcile()  # host 2 failed: at once
    assert len(kube.patches) == first + 1
    assert (slice0(kube)["state"], slice0(kube)["readyHosts"]) == ("Down", 2)
    assert [e.reason for e in kube.events] == ["SliceDown", "SliceReplacing"]
    assert registry.get_sample_value("etj_slice_failures_total",
                                     {"namespace": "ml", "job": "train"}) == 1


def _progress_waits(kube: StandInKube, reconcile: Callable[[], bool], clock: FakeClock,
                    seen: list[tuple[ObservedPod, ...]], hosts: int, ready: range,
                    ) -> list[float]:
    """One more host Ready every 0.5 s; the seconds between the progress writes."""
    gaps: list[float] = []
    last = clock.monotonic()
    for n in ready:
        seen.append(pods(n, hosts))
        clock.advance(0.5)
        before = len(kube.patches)
        assert reconcile()
        if len(kube.patches) > before:
            assert slice0(kube)["readyHosts"] == n  # the latest count, when written
            gaps.append(clock.monotonic() - last)
            last = clock.monotonic()
    return gaps


def test_a_long_recovery_writes_its_progress_less_and_less_often() -> None:
    """1, 2, 4, 8, 16 s, then every 30 s: a recovery of any length costs about
    log2(cap) + one write per 30 s, not one per second (core/pacing.py)."""
    kube, reconcile, registry, clock, _, seen = setup(hosts=200)
    gaps = _progress_waits(kube, reconcile, clock, seen, 200, range(1, 200))
    assert gaps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]  # 99.5 s
    assert writes(registry, "progress") == len(gaps)


def test_progress_starts_over_at_one_interval_once_every_slice_is_ready() -> None:
    kube, reconcile, registry, clock, _, seen = setup(hosts=40)
    assert _progress_waits(kube, reconcile, clock, seen, 40, range(1, 20)) == [1.0, 2.0, 4.0]
    seen.append(pods(40, 40))
    clock.advance(0.5)
    assert reconcile()  # Ready: a transition, written at once
    assert slice0(kube)["state"] == "Ready"
    worker = PodWrapper.worker(0, 0, job="train", namespace="ml")
    seen.append((pod_from_dict(worker.failed(T0).obj()), *pods(40, 40)[1:]))
    clock.advance(0.5)
    assert reconcile()  # Down: at once
    assert slice0(kube)["state"] == "Down"
    down_message = slice0(kube)["message"]
    going = PodWrapper.worker(0, 1, job="train", namespace="ml").running() \
        .deleting(T0).obj()
    seen.append((seen[-1][0], pod_from_dict(going), *pods(40, 40)[2:]))
    progress = writes(registry, "progress")
    clock.advance(0.5)
    assert reconcile()  # a second host going: progress, waits
    assert slice0(kube)["message"] == down_message
    clock.advance(0.5)  # one interval after the Down, not the 8 s the streak reached
    assert reconcile()
    assert slice0(kube)["message"] != down_message
    assert writes(registry, "progress") == progress + 1


def test_the_progress_interval_doubles_up_to_its_cap() -> None:
    assert [progress_interval(1.0, n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert progress_interval(1.0, 10_000) == PROGRESS_CAP_S
    assert progress_interval(45.0, 3) == 45.0  # never under the job's own interval
