"""Who may read /metrics (entry/metrics_auth.py): the rule and its cache, with a reviewer
that answers as the API server would and counts what it is asked; and the HTTPS server
(entry/metrics_server.py, metrics_tls.py) on the loopback with that reviewer. The real
API server's reviews: tests/integration/test_metrics_auth.py."""
from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from typing import Any

import pytest

from elastic_api.kube import ApiError
from elastic_operator.client import kube_bodies
from elastic_operator.entry.metrics_auth import (
    Decision,
    MetricsAuthorizer,
    bearer_token,
    decide,
)
from elastic_operator.entry.metrics_server import SecureMetricsServer
from elastic_operator.entry.metrics_tls import self_signed, server_context
from tests.support.metrics_scrape import scrape

READER = {"username": "system:serviceaccount:monitoring:prometheus",
          "groups": ["system:serviceaccounts"], "uid": "u-1"}
TENANT = {"username": "system:serviceaccount:team-a:default", "uid": "u-2"}


class Reviews:
    """The API server's answers: `users` maps a token to its user, `readers` are the
    usernames RBAC allows; every review asked is counted; `fail` raises instead."""

    def __init__(self) -> None:
        self.users = {"reader-token": READER, "tenant-token": TENANT}
        self.readers = {READER["username"]}
        self.token_reviews: list[str] = []
        self.access_reviews: list[str] = []
        self.fail: Exception | None = None

    def review_token(self, token: str) -> dict[str, Any]:
        self.token_reviews.append(token)
        if self.fail is not None:
            raise self.fail
        user = self.users.get(token)
        return {"authenticated": True, "user": user} if user else \
            {"authenticated": False, "error": "invalid bearer token"}

    def review_metrics_access(self, user: dict[str, Any], path: str) -> dict[str, Any]:
        assert path == "/metrics"
        self.access_reviews.append(user["username"])
        return {"allowed": user["username"] in self.readers}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("header,token", [
    (None, None), ("", None), ("Bearer", None), ("Bearer  ", None), ("Basic abc", None),
    ("Bearer abc", "abc"), ("bearer abc ", "abc")])
def test_bearer_token_is_read_from_the_header(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_the_rule_401_then_403_then_200() -> None:
    def never(user: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("no access review for a user not authenticated")

    assert decide({"authenticated": False}, never).code == 401
    assert decide({"authenticated": True, "user": {"username": ""}}, never).code == 401
    refused = decide({"authenticated": True, "user": TENANT},
                     lambda user: {"allowed": False, "reason": "no rule"})
    assert refused.code == 403 and TENANT["username"] in refused.why \
        and "metrics-reader" in refused.why
    assert decide({"authenticated": True, "user": READER},
                  lambda user: {"allowed": True}) == Decision(200)


def test_access_review_asks_for_get_on_the_url_as_the_reviewed_user() -> None:
    body = kube_bodies.metrics_access_review(READER, "/metrics")
    assert body["spec"] == {"user": READER["username"], "groups": READER["groups"],
                            "uid": "u-1", "nonResourceAttributes": {"path": "/metrics",
                                                                    "verb": "get"}}
    assert kube_bodies.token_review("t")["spec"] == {"token": "t"}


def test_no_token_is_refused_without_asking_the_api_server() -> None:
    reviews = Reviews()
    assert MetricsAuthorizer(reviews).check(None).code == 401
    assert reviews.token_reviews == []


def test_answers_are_kept_per_token_for_the_ttl() -> None:
    reviews, clock = Reviews(), Clock()
    auth = MetricsAuthorizer(reviews, ttl_s=30, clock=clock)
    for _ in range(3):  # three scrapes 10 s apart: one review of each kind
        assert auth.check("Bearer reader-token").code == 200
        assert auth.check("Bearer tenant-token").code == 403
        assert auth.check("Bearer made-up").code == 401
        clock.now += 10
    assert reviews.token_reviews == ["reader-token", "tenant-token", "made-up"]
    assert reviews.access_reviews == [READER["username"], TENANT["username"]]
    # 30 s after the first answers: asked again, and the API server's new word counts.
    reviews.readers.clear()
    assert auth.check("Bearer reader-token").code == 403
    assert reviews.token_reviews[-1] == "reader-token"


def test_the_cache_holds_hashes_not_tokens_and_is_bounded() -> None:
    reviews, clock = Reviews(), Clock()
    auth = MetricsAuthorizer(reviews, ttl_s=30, max_cached=2, clock=clock)
    for token in ("a", "b", "reader-token"):
        auth.check(f"Bearer {token}")
    kept = auth._cache
    assert set(kept) == {hashlib.sha256(t.encode()).hexdigest() for t in ("b", "reader-token")}
    assert auth.check("Bearer reader-token").code == 200
    assert reviews.token_reviews == ["a", "b", "reader-token"]  # still kept


def test_an_api_error_is_a_500_and_not_kept() -> None:
    reviews = Reviews()
    auth = MetricsAuthorizer(reviews, clock=Clock())
    reviews.fail = ApiError(503, "Service Unavailable", "")
    assert auth.check("Bearer reader-token").code == 500
    reviews.fail = None
    assert auth.check("Bearer reader-token").code == 200
    assert reviews.token_reviews == ["reader-token", "reader-token"]


def test_a_self_signed_certificate_names_its_hosts() -> None:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(self_signed(["op-0", "127.0.0.1"])[0])
    alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert alt.get_values_for_type(x509.DNSName) == ["op-0"]
    assert [str(ip) for ip in alt.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    with pytest.raises(ValueError, match="--metrics-key-file"):
        server_context("cert.pem", None)


def test_the_https_server_answers_as_the_rule_says() -> None:
    reviews = Reviews()
    server = SecureMetricsServer(
        "127.0.0.1", 0, server_context(None, None), MetricsAuthorizer(reviews),
        lambda: (b"etj_leader 1.0\n", "text/plain; version=0.0.4")).start()
    try:
        assert scrape(server.port, None)[0] == 401
        assert scrape(server.port, "made-up")[0] == 401
        assert scrape(server.port, "tenant-token")[0] == 403
        assert scrape(server.port, "reader-token") == (200, "etj_leader 1.0\n")
        with pytest.raises(OSError):  # plain HTTP: the handshake fails, no answer
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
    finally:
        server.stop()


def test_the_flags_default_to_secure_and_a_lone_certificate_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from elastic_operator.entry.operator_cli import add_arguments, serve_metrics

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).metrics_secure
    assert not parser.parse_args(["--metrics-secure", "--metrics-insecure"]).metrics_secure
    args = parser.parse_args(["--metrics-cert-file", "tls.crt", "--metrics-port", "1"])
    assert serve_metrics(args, Reviews()) is False  # type: ignore[arg-type]
    assert "--metrics-key-file" in capsys.readouterr().err
