"""slice_index.SliceIndex and core/wakes.py `may_move`: a paced pod change judged unable
to move its slice's state changes nothing but progress in the status a reconcile would
compute (the property test below, against compute_status itself), and the index kept
from pod changes one at a time agrees with the slice's pods read whole."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pytest

from elastic_api.models import ElasticTrainingJob, ElasticTrainingJobStatus, SliceStatus
from elastic_api.names import WORKER_REPLICATED_JOB
from elastic_operator.core.pacing import progress_only
from elastic_operator.core.plan import DeleteWorkerJob
from elastic_operator.core.pools import slice_pool
from elastic_operator.core.replacement import plan_replacements
from elastic_operator.core.sliceview import newest_per_host
from elastic_operator.core.status import compute_status
from elastic_operator.core.wakes import host_down, host_ready, may_wait
from elastic_operator.model.objects import Observed, ObservedJob, ObservedNode, ObservedPod
from elastic_operator.watch.node_index import NodeIndex
from elastic_operator.watch.slice_index import SliceIndex
from tests.builders import HOSTS, T0, etj, nodes_for, observed_jobset

JOB = ("ns", "article")
SLICES = 2
NODES = nodes_for(SLICES, HOSTS, spares=1)  # pools tpu-0, tpu-1 and a spare, tpu-2


@dataclass
class World:
    """Two slices of HOSTS hosts: pods the Job controller creates and the kubelet runs,
    faults, the operator's replacements torn down by the garbage collector pod by pod
    and recreated by JobSet; the operator looks at once after a change that wakes it at
    once or soon, as the real one does within the progress interval."""

    t: float = 100.0
    gen: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(SLICES), 0))
    deleting: set[str] = field(default_factory=set)
    failed: dict[str, int] = field(default_factory=dict)  # the Job's own count
    pods: dict[str, ObservedPod] = field(default_factory=dict)
    serial: int = 0

    def job_uid(self, index: int) -> str:
        return f"job-{index}-g{self.gen[index]}"

    def at(self) -> datetime:
        return T0 + timedelta(seconds=int(self.t))

    def host_pods(self, index: int, host: int) -> list[ObservedPod]:
        return sorted((p for p in self.pods.values()
                       if p.slice_index == index and p.host_index == host),
                      key=lambda p: (p.created_at or T0, p.name))

    def observe(self, job: ElasticTrainingJob) -> Observed:
        jobset = replace(observed_jobset(job).build(), worker_hosts_per_slice=HOSTS)
        jobs = {i: ObservedJob(name=f"article-worker-{i}", uid=self.job_uid(i), slice_index=i,
                               deleting=self.job_uid(i) in self.deleting,
                               backoff_limit=HOSTS * 1000,
                               failed_pods=self.failed.get(self.job_uid(i), 0))
                for i in range(SLICES)}
        return Observed(jobset=jobset, pods=tuple(sorted(self.pods.values(),
                                                         key=lambda p: p.name)),
                        nodes=NODES, jobs=jobs)

    def change(self, op: str, index: int, host: int, pool: int
               ) -> list[tuple[ObservedPod | None, ObservedPod | None]]:
        """Apply one operation to the first host from `host` on (round the slice) where
        it applies; the pod changes it made (old, new). A pod is scheduled onto its
        host's node of pool `pool` (its slice's, another's, or the spare's)."""
        self.t += 1.0
        for h in [*range(host, HOSTS), *range(host)]:
            changes = self._change(op, index, h, pool)
            if changes:
                return changes
        return []

    def _change(self, op: str, index: int, host: int, pool: int
                ) -> list[tuple[ObservedPod | None, ObservedPod | None]]:
        pods = self.host_pods(index, host)
        last = pods[-1] if pods else None
        uid = self.job_uid(index)
        live = uid not in self.deleting
        if op == "create" and live and (last is None or last.job_uid != uid or host_down(last)):
            self.serial += 1
            pod = ObservedPod(name=f"p{self.serial}", replicated_job=WORKER_REPLICATED_JOB,
                              slice_index=index, host_index=host, phase="Pending",
                              ready=False, created_at=self.at(), uid=f"u{self.serial}",
                              job_uid=uid)
            return self._put(None, pod)
        if last is None:
            return []
        if op == "schedule" and last.phase == "Pending" and last.node_name is None \
                and not host_down(last):
            return self._put(last, replace(last, node_name=f"tpu-{pool}-{host}"))
        if op == "start" and last.phase == "Pending" and last.node_name and not host_down(last):
            return self._put(last, replace(last, phase="Running"))
        if op == "ready" and last.phase == "Running" and not last.ready and not host_down(last):
            return self._put(last, replace(last, ready=True, ready_transition_time=self.at()))
        if op == "fail" and last.phase == "Running" and not host_down(last):
            self._count(last)
            return self._put(last, replace(last, phase="Failed", ready=False,
                                           terminated_at=self.at(), terminated_reason="Error",
                                           terminated_exit_code=1,
                                           ready_transition_time=self.at()))
        if op == "delete" and not last.terminating:
            self._count(last)
            return self._put(last, replace(last, ready=False, deletion_timestamp=self.at(),
                                           deletion_grace_seconds=0))
        gone = [p for p in pods if host_down(p)]
        if op == "remove" and gone:
            return self._put(gone[0], None)
        return []

    def _count(self, pod: ObservedPod) -> None:
        if pod.job_uid and pod.job_uid not in self.deleting:
            self.failed[pod.job_uid] = self.failed.get(pod.job_uid, 0) + 1

    def gc(self, index: int, *, early: bool = False
           ) -> list[tuple[ObservedPod | None, ObservedPod | None]]:
        """One step of the teardown of the slice's deleted Jobs; JobSet recreates the
        current one once it is empty, or at once (`early`: the old pods left behind
        go on being torn down beside the new ones)."""
        self.t += 1.0
        uid = self.job_uid(index)
        if uid in self.deleting and early:
            self.gen[index] += 1
            return []
        own = sorted((p for p in self.pods.values()
                      if p.slice_index == index and p.job_uid in self.deleting),
                     key=lambda p: p.name)
        if not own:
            if uid in self.deleting:
                self.gen[index] += 1
            return []
        pod = own[0]
        if not pod.terminating:
            return self._put(pod, replace(pod, ready=False, deletion_timestamp=self.at(),
                                          deletion_grace_seconds=0))
        return self._put(pod, None)

    def _put(self, old: ObservedPod | None, new: ObservedPod | None
             ) -> list[tuple[ObservedPod | None, ObservedPod | None]]:
        if new is None and old is not None:
            del self.pods[old.name]
        elif new is not None:
            self.pods[new.name] = new
        return [(old, new)]


OPS = ["create", "create", "create", "schedule", "schedule", "start", "start", "ready",
       "ready", "ready", "fail", "delete", "remove", "gc", "gc", "gc", "gc", "teardown",
       "look", "recreate"]
POOLS = [0, 0, 0, 0, 1, 2]  # mostly the slice's own pool (tpu-<slice>)
SEEDS = range(200)
STEPS = 200


def _ops(seed: int) -> list[tuple[str, int, int, int]]:
    rng = random.Random(seed)
    return [(rng.choice(OPS), rng.randrange(SLICES), rng.randrange(HOSTS), rng.choice(POOLS))
            for _ in range(STEPS)]


def _healthy(world: World) -> None:
    """Every host of every slice Ready on its own pool."""
    for index in range(SLICES):
        for host in range(HOSTS):
            for name in ("create", "schedule", "start", "ready"):
                world.change(name, index, host, index)


def _faults_on(status: ElasticTrainingJobStatus | None, index: int, draw: int) -> bool:
    """Faults mostly hit a slice shown Ready (one in four hits a slice still coming
    back): a slice hit over and over never comes back, and its coming back is what
    the paced changes are."""
    ready = status is not None and any(s.index == index and s.state == "Ready"
                                       for s in status.slices or [])
    return ready or draw == 0


def _node_index() -> NodeIndex:
    index = NodeIndex()
    for node in NODES.values():
        index.node_seen(node)
    return index


def _job() -> ElasticTrainingJob:
    return (etj().uid("uid-1").generation(1).num_slices(SLICES)
            .spec(elastic={"maxSliceRestarts": 1000}).build())


@dataclass
class Operator:
    job: ElasticTrainingJob
    index: SliceIndex
    status: ElasticTrainingJobStatus | None = None
    seen: Observed | None = None  # what the last look read
    deletes: list[DeleteWorkerJob] = field(default_factory=list)

    def look(self, world: World) -> None:
        """Looks until the index, told what it computed, wants no other at once."""
        for _ in range(4):
            now = world.at()
            self.seen = world.observe(self.job)
            self.status = compute_status(self.job, self.seen, self.status, now).status
            plan = plan_replacements("ns", "article", self.job.spec, self.status,
                                     replace(self.seen, jobs={
                                         i: replace(j, deleting=j.deleting or any(
                                             d.uid == j.uid for d in self.deletes))
                                         for i, j in self.seen.jobs.items()}), now)
            self.deletes += [a for a in plan.actions if isinstance(a, DeleteWorkerJob)]
            if not self.index.record_computed(JOB, self.status.slices or []):
                return

    def only_progress_since_look(self, world: World, why: str) -> None:
        """What a look now would compute differs from a look at the last one's pods, at
        the same time, in progress only (readyHosts, messages)."""
        assert self.status is not None and self.seen is not None
        now = world.at()
        base = compute_status(self.job, self.seen, self.status, now).status
        new = compute_status(self.job, world.observe(self.job), self.status, now).status
        assert new == base or progress_only(base, new), (why, base.slices, new.slices)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_paced_change_judged_unable_to_move_a_state_moves_progress_only(seed: int) -> None:
    """Seeded runs (as test_exactly_once's: the interesting runs are long) from a healthy
    job: after every paced change the index judges unable to move a state, a look would
    compute what the last look's pods give, but for progress."""
    world = World()
    _healthy(world)
    index = SliceIndex(_node_index())
    for pod in world.pods.values():
        index.pod_changed(JOB, None, pod)
    op = Operator(_job(), index)
    op.look(world)
    log: list[str] = [f"seed {seed}"]
    for name, slice_index, host, pool in _ops(seed):
        if name == "look":
            op.look(world)
            continue
        if name == "teardown":
            if op.deletes:
                world.deleting.add(op.deletes.pop(0).uid)
            continue
        if name in ("fail", "delete") and not _faults_on(op.status, slice_index, host):
            continue
        changes = world.gc(slice_index, early=name == "recreate") \
            if name in ("gc", "recreate") else \
            world.change(name, slice_index, host, (slice_index + pool) % (SLICES + 1))
        wake = False
        for old, new in changes:
            index.pod_changed(JOB, old, new)
            pod = new or old
            assert pod is not None
            paced = may_wait(old, new, torn_down=pod.job_uid in world.deleting)
            wake = wake or not paced or index.may_move(JOB, pod.slice_index)
        if changes:
            log.append(f"{name} {slice_index}/{host}")
        if wake:
            op.look(world)
        elif changes:
            op.only_progress_since_look(world, log[-8:])


def _move_a_node(rng: random.Random, nodes: NodeIndex, now: dict[str, ObservedNode]) -> None:
    """One node relabelled into another pool (or none), as an operator of the cluster
    may: the index counts its live pods by pool as they change, and again once a node
    moved."""
    name = rng.choice(sorted(now))
    now[name] = replace(now[name], pool=rng.choice([None, *sorted({n.pool for n in NODES.values()
                                                                  if n.pool})]))
    nodes.node_seen(now[name])


@pytest.mark.parametrize("seed", range(50))
def test_the_index_kept_change_by_change_is_the_slices_pods_read_whole(seed: int) -> None:
    world, nodes, now = World(), _node_index(), dict(NODES)
    index = SliceIndex(nodes)
    moves = random.Random(-seed)
    for name, slice_index, host, pool in _ops(seed):
        if moves.random() < 0.05:
            _move_a_node(moves, nodes, now)
        if name == "teardown":
            world.deleting.add(world.job_uid(slice_index))
            continue
        for old, new in (world.gc(slice_index, early=name == "recreate")
                         if name in ("gc", "recreate")
                         else world.change(name, slice_index, host,
                                           (slice_index + pool) % (SLICES + 1))):
            index.pod_changed(JOB, old, new)
        for i in range(SLICES):
            hosts = newest_per_host([p for p in world.pods.values() if p.slice_index == i])
            tally = index.tally(JOB, i)
            down = [p for p in hosts if host_down(p)]
            assert (tally.hosts, tally.ready, tally.down, tally.down_jobs, tally.jobs,
                    tally.latest_created, tally.pool) == (
                len(hosts), sum(host_ready(p) for p in hosts), len(down),
                frozenset(p.job_uid for p in down), dict(Counter(p.job_uid for p in hosts)),
                max((p.created_at for p in hosts if p.created_at), default=None),
                slice_pool([p for p in world.pods.values() if p.slice_index == i], now))


def test_a_slice_marked_moves_once_its_hosts_say_so() -> None:
    """A Restarting slice of two hosts: not with one Ready; at once with both; and a
    mark made while a change it cannot see was on its way says so (`mark`)."""
    index = SliceIndex()
    pods = [ObservedPod(name=f"p{h}", replicated_job=WORKER_REPLICATED_JOB, slice_index=0,
                        host_index=h, phase="Running", ready=False, created_at=T0,
                        job_uid="j") for h in range(2)]
    for pod in pods:
        index.pod_changed(JOB, None, pod)
    restarting = [SliceStatus(index=0, state="Restarting", hosts=2)]
    assert index.record_computed(JOB, restarting) is False
    index.pod_changed(JOB, pods[0], replace(pods[0], ready=True))
    assert index.may_move(JOB, 0) is False
    index.pod_changed(JOB, pods[1], replace(pods[1], ready=True))
    assert index.may_move(JOB, 0) is True
    # The reconcile read before the last change:
    assert index.record_computed(JOB, restarting) is True
    assert index.record_computed(JOB, [SliceStatus(index=0, state="Ready", hosts=2,
                                                   last_transition_time=T0)]) is False
    assert index.may_move(JOB, 1) is True  # a slice never computed
    index.forget_job(JOB)
    assert index.may_move(JOB, 0) is True
