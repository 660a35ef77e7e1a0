"""Run `etj operator` with a count of the API requests it makes (benchmarks only).

    python -m bench.opshim COUNTS_FILE -- <etj operator arguments>

The operator talks to the API server through two HTTP clients: urllib3 (every request
and watch of its own, elastic_api.kube via the kubernetes client) and aiohttp (kopf's
discovery at start, and the watches of operators before kopf stopped watching). Both
are wrapped before the operator starts; the counts, keyed "VERB resource[/subresource]",
are written to COUNTS_FILE every half second. The API server's own metrics cannot tell
the operator's requests from the controllers' (apiserver_request_total has no user-agent
label), hence this.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

_counts: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()


def classify(method: str, url: str) -> str:
    """'GET /api/v1/namespaces/x/pods?watch=true' -> 'WATCH pods'."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        return f"{method.upper()} {parts.path or '/'}"
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] if rest else "(root)"
    if len(rest) > 2:
        resource += "/" + rest[2]
    verb = method.upper()
    query = parse_qs(parts.query)
    if verb == "GET":
        if query.get("watch", [""])[0] in ("true", "1"):
            verb = "WATCH"
        elif len(rest) == 1:
            verb = "LIST"
    return f"{verb} {resource}"


def _count(method: str, url: str) -> None:
    key = classify(method, url)
    with _lock:
        _counts[key] += 1


def install() -> None:
    import aiohttp
    import urllib3.connectionpool

    original_urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def urlopen(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        _count(method, url)
        return original_urlopen(self, method, url, *args, **kwargs)

    urllib3.connectionpool.HTTPConnectionPool.urlopen = urlopen  # type: ignore[method-assign]

    original_request = aiohttp.ClientSession._request

    async def request(self: Any, method: str, str_or_url: Any, **kwargs: Any) -> Any:
        _count(method, str(str_or_url))
        return await original_request(self, method, str_or_url, **kwargs)

    aiohttp.ClientSession._request = request  # type: ignore[method-assign]


def _writer(path: str) -> None:
    """The counts to `path`; to `path`.threads which native thread is which Python
    thread (bench.detection reads each thread's CPU time off /proc and names it)."""
    while True:
        with _lock:
            data = dict(_counts)
        threads = {str(t.native_id): t.name for t in threading.enumerate()}
        for target, content in ((path, data), (f"{path}.threads", threads)):
            tmp = f"{target}.tmp"
            with open(tmp, "w") as f:
                json.dump(content, f)
            os.replace(tmp, target)
        time.sleep(0.5)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        print("usage: python -m bench.opshim COUNTS_FILE -- <etj operator arguments>",
              file=sys.stderr)
        return 2
    install()
    threading.Thread(target=_writer, args=(argv[0],), name="opshim-writer", daemon=True).start()
    from elastic_api.etj_cli import main as etj_main

    return etj_main(["operator", *argv[2:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
