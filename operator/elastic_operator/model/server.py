"""What the API server the operator runs on accepts, as one value: learnt at start and
again periodically (watch/server_probe.py), decided by core/server_features.py, and
passed to the pure renderer and the status core. Kept once for the operator, not per job:
every job of the cluster shares its API server."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerFeatures:
    """`version`: the server's gitVersion ("" before it was read); `restart_rules`:
    whether it keeps a regular container's `restartPolicy` and `restartPolicyRules`
    (container restart rules, KEP-5307); `detail`: how that was decided, in words."""

    version: str = ""
    restart_rules: bool = True
    detail: str = ""


# Before the first probe answers, and in tests and `etj render`: the newest server.
NEWEST = ServerFeatures(restart_rules=True, detail="assumed: the newest Kubernetes")
