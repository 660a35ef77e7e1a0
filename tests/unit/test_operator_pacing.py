"""The reconciler paces progress-only status writes (core/pacing.py): at most one per
interval per job, the latest state written once the interval ends (a wake is asked for
then), while a transition is written at once, however soon after the last write. A transition
carries whatever progress waited. Against the stand-in API server, with a clock the test moves."""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from elastic_operator.observed import ObservedPod, pod_from_dict
from tests.builders import T0, JobSetWrapper, PodWrapper
from tests.support.clock import FakeClock
from tests.support.stand_in_kube import StandInKube, reconciler, the_job

INTERVAL = 1.0


def pods(ready: int, hosts: int = 2) -> tuple[ObservedPod, ...]:
    """Slice 0's hosts: the first `ready` Running and Ready, the others Pending."""
    out = []
    for host in range(hosts):
        pod = PodWrapper.worker(0, host, job="train", namespace="ml")
        out.append(pod_from_dict((pod.running() if host < ready else pod).obj()))
    return tuple(out)


def setup(hosts: int = 2) -> tuple[StandInKube, Any, CollectorRegistry, FakeClock,
                                   list[float], list[tuple[ObservedPod, ...]]]:
    kube = StandInKube(the_job(), JobSetWrapper("train", "ml").owner("u-1")
                       .workers(1, hosts).obj())
    # From 100 the advances below add up to the interval exactly in floating point.
    clock = FakeClock(ticks=100.0)
    seen: list[tuple[ObservedPod, ...]] = [pods(0, hosts)]
    rec, registry = reconciler(kube, pods=lambda: seen[-1], progress_interval_s=INTERVAL,
                               clock=clock)
    woken: list[float] = []
    rec.wake = lambda _ns, _name, delay: woken.append(delay)
    # The first status, then the first checkpoint scan's result: written at once.
    assert rec.reconcile("ml", "train") and rec.reconcile("ml", "train")
    assert len(kube.patches) == 2 and woken == []
    return kube, rec, registry, clock, woken, seen


def slice0(kube: StandInKube) -> dict[str, Any]:
    slices: list[dict[str, Any]] = kube.job["status"]["slices"]
    return slices[0]


def writes(registry: CollectorRegistry, kind: str) -> float:
    return registry.get_sample_value("etj_status_writes_total", {"kind": kind}) or 0.0


def test_progress_waits_for_the_interval_then_the_latest_is_written() -> None:
    kube, rec, registry, clock, woken, seen = setup(hosts=3)
    assert (slice0(kube)["state"], slice0(kube)["readyHosts"]) == ("Pending", 0)
    first = len(kube.patches)
    seen.append(pods(1, 3))
    clock.advance(0.3)
    assert rec.reconcile("ml", "train")
    assert len(kube.patches) == first and slice0(kube)["readyHosts"] == 0  # waits
    assert abs(woken[-1] - 0.7) < 1e-9  # woken when the interval ends
    seen.append(pods(2, 3))
    clock.advance(0.3)
    assert rec.reconcile("ml", "train")
    assert len(kube.patches) == first and abs(woken[-1] - 0.4) < 1e-9
    clock.advance(0.4)  # the wake: the interval is over, the latest count is written
    assert rec.reconcile("ml", "train")
    assert len(kube.patches) == first + 1 and slice0(kube)["readyHosts"] == 2
    assert slice0(kube)["message"] == "2/3 hosts ready"
    assert writes(registry, "progress") == 1
    assert registry.get_sample_value("etj_status_writes_deferred_total") == 2


def test_a_transition_is_written_at_once_right_after_a_write() -> None:
    kube, rec, registry, clock, woken, seen = setup()
    first = len(kube.patches)
    seen.append(pods(2))  # every host ready: the slice is Ready
    clock.advance(0.01)
    assert rec.reconcile("ml", "train")
    assert len(kube.patches) == first + 1 and slice0(kube)["state"] == "Ready"
    assert writes(registry, "progress") == 0 and writes(registry, "change") == first + 1
    assert registry.get_sample_value("etj_status_writes_deferred_total") == 0
    assert woken == []


def test_nothing_waits_when_the_last_write_is_older_than_the_interval() -> None:
    kube, rec, _, clock, woken, seen = setup()
    first = len(kube.patches)
    seen.append(pods(1))
    clock.advance(INTERVAL)
    assert rec.reconcile("ml", "train")
    assert len(kube.patches) == first + 1 and slice0(kube)["readyHosts"] == 1
    assert woken == []


def test_a_transition_while_progress_waits_writes_both_with_its_events() -> None:
    kube, rec, registry, clock, _, seen = setup(hosts=3)
    seen.append(pods(2, 3))
    clock.advance(0.1)
    assert rec.reconcile("ml", "train")  # progress: waits
    first = len(kube.patches)
    failed = PodWrapper.worker(0, 2, job="train", namespace="ml").failed(T0).obj()
    seen.append((*pods(2, 3)[:2], pod_from_dict(failed)))
    clock.advance(0.1)
    assert rec.reconcile("ml", "train")  # host 2 failed: at once
    assert len(kube.patches) == first + 1
    assert (slice0(kube)["state"], slice0(kube)["readyHosts"]) == ("Down", 2)
    assert [e.reason for e in kube.events] == ["SliceDown", "SliceReplacing"]
    assert registry.get_sample_value("etj_slice_failures_total",
                                     {"namespace": "ml", "job": "train"}) == 1
