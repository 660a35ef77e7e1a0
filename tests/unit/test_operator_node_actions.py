"""The rate limit on force-deletes and quarantines: a token bucket over all of them and
a cooldown per node (a flapping node is acted on at most once per cooldown)."""
from __future__ import annotations

import pytest

from elastic_operator.writes.node_actions import NodeActionLimiter, NodeActionLimits
from tests.support.clock import FakeClock


def test_the_same_node_waits_its_cooldown() -> None:
    clock = FakeClock()
    limiter = NodeActionLimiter(NodeActionLimits(per_minute=600, burst=10, cooldown_s=60),
                                clock)
    assert limiter.acquire("force-delete", "n1") == 0
    clock.advance(10)
    assert limiter.acquire("force-delete", "n1") == pytest.approx(50)
    assert limiter.acquire("quarantine", "n1") == 0  # another kind of action
    assert limiter.acquire("force-delete", "n2") == 0  # another node
    clock.advance(50)
    assert limiter.acquire("force-delete", "n1") == 0


def test_the_bucket_bounds_a_burst_across_nodes() -> None:
    clock = FakeClock()
    limiter = NodeActionLimiter(NodeActionLimits(per_minute=30, burst=3, cooldown_s=0), clock)
    assert [limiter.acquire("force-delete", f"n{i}") for i in range(3)] == [0, 0, 0]
    assert limiter.acquire("force-delete", "n3") == pytest.approx(2.0)  # 30/min: one per 2 s
    clock.advance(2.0)
    assert limiter.acquire("force-delete", "n3") == 0


def test_a_throttled_action_warns_once_per_cooldown() -> None:
    clock = FakeClock()
    limiter = NodeActionLimiter(NodeActionLimits(cooldown_s=60), clock)
    assert limiter.should_warn("force-delete", "n1")
    assert not limiter.should_warn("force-delete", "n1")
    clock.advance(61)
    assert limiter.should_warn("force-delete", "n1")
