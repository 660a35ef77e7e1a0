"""Who may read /metrics: the bearer token's user, as the API server says (a TokenReview),
allowed `get` on the non-resource URL /metrics (a SubjectAccessReview), as JobSet and
Kueue guard theirs (controller-runtime's authentication and authorization filter).

No token, or one the API server does not accept: 401. A user RBAC does not allow: 403.
Each answer is kept `ttl_s` per token (by its SHA-256, never the token itself), so a
Prometheus scraping every 15 s costs two API requests per `ttl_s`, not per scrape; a
binding removed takes effect within `ttl_s`. An API error is not kept: 500, asked again
at the next scrape.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from elastic_api.kube import ApiError

METRICS_PATH = "/metrics"
# How long a review's answer is kept: a scrape interval or two.
REVIEW_TTL_S = 30.0
# At most this many tokens kept (a flood of made-up tokens must not grow the memory).
MAX_CACHED = 1024

log = logging.getLogger("elastic_operator")


class Reviewer(Protocol):
    """The API server's reviews (client/kube.py `Kube`)."""

    def review_token(self, token: str) -> dict[str, Any]: ...

    def review_metrics_access(self, user: dict[str, Any], path: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Decision:
    """The HTTP status to answer (200: serve the metrics) and why (the body otherwise)."""

    code: int
    why: str = ""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None if there is none."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def authenticated_user(token_status: dict[str, Any]) -> dict[str, Any] | None:
    """The user a TokenReview's status names, None unless it says authenticated."""
    user = token_status.get("user")
    if token_status.get("authenticated") is True and isinstance(user, dict) \
            and user.get("username"):
        return user
    return None


def decide(token_status: dict[str, Any],
           access_status: Callable[[dict[str, Any]], dict[str, Any]]) -> Decision:
    """The rule: 401 unless the token's review authenticates a user; 403 unless the
    access review (`access_status(user)`, asked only then) allows it; else 200."""
    user = authenticated_user(token_status)
    if user is None:
        why = token_status.get("error") or "the token is not valid"
        return Decision(401, f"Unauthorized: {why}")
    access = access_status(user)
    if access.get("allowed") is not True:
        reason = access.get("reason") or access.get("evaluationError") or "no RBAC rule"
        return Decision(403, f"Forbidden: user {user['username']!r} may not get "
                        f"{METRICS_PATH} ({reason}); bind the <release>-metrics-reader "
                        "ClusterRole (docs/metrics.md)")
    return Decision(200)


class MetricsAuthorizer:
    """`check(Authorization header)`: the Decision, from the cache or the API server."""

    def __init__(self, reviewer: Reviewer, *, ttl_s: float = REVIEW_TTL_S,
                 max_cached: int = MAX_CACHED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._reviewer = reviewer
        self._ttl_s = ttl_s
        self._max_cached = max_cached
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Decision]] = {}  # token hash -> (expiry, answer)

    def check(self, authorization: str | None) -> Decision:
        token = bearer_token(authorization)
        if token is None:
            return Decision(401, "Unauthorized: send 'Authorization: Bearer <token>' "
                            "(docs/metrics.md)")
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        with self._lock:
            kept = self._cache.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        try:
            decision = decide(self._reviewer.review_token(token),
                              lambda user: self._reviewer.review_metrics_access(
                                  user, METRICS_PATH))
        except (ApiError, OSError) as err:  # not kept: the next scrape asks again
            log.warning("metrics: could not review a scrape's token: %s", err)
            return Decision(500, "the API server's review failed; try again")
        self._keep(key, now, decision)
        return decision

    def _keep(self, key: str, now: float, decision: Decision) -> None:
        with self._lock:
            if len(self._cache) >= self._max_cached:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            while len(self._cache) >= self._max_cached:  # the oldest go first
                del self._cache[next(iter(self._cache))]
            self._cache[key] = (now + self._ttl_s, decision)
