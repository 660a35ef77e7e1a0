"""Whether the API server keeps `main`'s container restart rules, and the words of the
MainRestartsInPlace condition that tells a job which recovery its cluster allows.

Container restart rules (KEP-5307, feature gate `ContainerRestartRules`; kubernetes
pkg/features/kube_features.go): alpha and off by default in 1.34, beta and on by default
from 1.35. What a server does with a regular container's `restartPolicy` and
`restartPolicyRules` (the head's `main`, render.py `main_restart_rules`):
- 1.33 and older: refuses the pod ("may not be set for non-init containers"): a JobSet
  is accepted, its head Job never created. The version alone tells.
- 1.34: drops both fields silently, unless the gate is on. The version cannot tell: a
  server-side dry run of a Job with the rule (watch/server_probe.py) does.
- 1.35 and newer: keeps them (the gate can be turned off; a dry run there says so).
The pod-level `RestartAllContainers` action (KEP-5532, `RestartAllContainersOnContainerExits`,
alpha 1.35) is not used: `main`'s rule only restarts `main`.

Pure: the server's /version and the dry run's outcome in, a ServerFeatures out.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from elastic_api.budgets import asks_main_in_place
from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import Condition, ElasticTrainingJobSpec
from elastic_operator.core.setter import ConditionSetter
from elastic_operator.core.status_events import StatusEvent
from elastic_operator.model.server import ServerFeatures

# The first minor that keeps the rules by default, and the one where they are alpha.
RESTART_RULES_FROM = (1, 35)
RESTART_RULES_ALPHA = (1, 34)
FEATURE_GATE = "ContainerRestartRules"

Outcome = Literal["kept", "dropped", "refused", "failed"]


@dataclass(frozen=True)
class DryRun:
    """A server-side dry run of a Job whose container carries the rule: the server kept
    the fields, dropped them, refused the Job (`message`: its words), or the dry run
    itself failed (no permission, no answer; `message`: why)."""

    outcome: Outcome
    message: str = ""


def minor_of(version_info: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) of a /version answer: its gitVersion ("v1.32.2-gke.1234"), else its
    major and minor fields (some providers write "32+"); None when neither parses."""
    found = re.match(r"v?(\d+)\.(\d+)", str(version_info.get("gitVersion") or ""))
    if found:
        return int(found[1]), int(found[2])
    major = re.match(r"\d+", str(version_info.get("major") or ""))
    minor = re.match(r"\d+", str(version_info.get("minor") or ""))
    return (int(major[0]), int(minor[0])) if major and minor else None


def needs_dry_run(version_info: Mapping[str, Any]) -> bool:
    """Only where the version cannot tell: 1.34 (the gate may be on) or no version."""
    minor = minor_of(version_info)
    return minor is None or minor == RESTART_RULES_ALPHA


def dry_run_outcome(stored: Mapping[str, Any], container: str) -> DryRun:
    """What the server kept of the rule: the dry-run Job as it would be stored."""
    containers = ((stored.get("spec") or {}).get("template") or {}).get("spec", {}) \
        .get("containers") or []
    found: Mapping[str, Any] = next(
        (c for c in containers if c.get("name") == container), {})
    return DryRun("kept" if found.get("restartPolicyRules") else "dropped")


def judge(version_info: Mapping[str, Any], dry_run: DryRun | None) -> ServerFeatures:
    """The one decision: what the server at this version, with this dry run (None: not
    run), does with `main`'s rule. Where nothing can tell, the rule is left out: a head
    every server accepts (a crash then restarts the JobSet) beats one never created."""
    version = str(version_info.get("gitVersion") or "")
    minor = minor_of(version_info)
    named = f"Kubernetes {version}" if version else "this API server"
    if minor is not None and minor < RESTART_RULES_ALPHA:
        return ServerFeatures(version, False, f"{named} refuses a restart policy on a "
                              "regular container (\"may not be set for non-init containers\")")
    if dry_run is not None and dry_run.outcome == "kept":
        return ServerFeatures(version, True, f"{named} keeps container restart rules "
                              "(server-side dry run)")
    if dry_run is not None and dry_run.outcome in ("dropped", "refused"):
        said = f": {dry_run.message}" if dry_run.message else ""
        return ServerFeatures(version, False, f"{named} {dry_run.outcome} container restart "
                              f"rules in a server-side dry run (feature gate {FEATURE_GATE} "
                              f"off){said}")
    if minor is not None and minor >= RESTART_RULES_FROM:
        return ServerFeatures(version, True, f"{named} keeps container restart rules "
                              f"({FEATURE_GATE} on by default since 1.35)")
    why = dry_run.message if dry_run is not None else "no dry run"
    return ServerFeatures(version, False, f"{named} may drop container restart rules "
                          f"({FEATURE_GATE} is off by default in 1.34) and the server-side "
                          f"dry run could not tell ({why})")


FROM_WHEN = ("main restarts in its pod from Kubernetes 1.35 (container restart rules, on "
             f"by default), or 1.34 with the {FEATURE_GATE} feature gate on")


def in_place_condition(setter: ConditionSetter, spec: ElasticTrainingJobSpec,
                       server: ServerFeatures) -> Condition | None:
    """Which recovery a crash of `main` gets on this cluster, on a job that asks for
    restarts in place (elastic_api.budgets `asks_main_in_place`); absent on one that
    does not."""
    if not asks_main_in_place(spec):
        return None
    if server.restart_rules:
        return setter.true(ConditionType.MAIN_RESTARTS_IN_PLACE, Reason.CONTAINER_RESTART_RULES,
                           f"a crash of main restarts it in its pod, every slice kept "
                           f"({server.detail})")
    return setter.false(ConditionType.MAIN_RESTARTS_IN_PLACE, Reason.RESTART_RULES_UNSUPPORTED,
                        f"{server.detail}: a crash of main restarts the whole JobSet (every "
                        f"slice), within spec.maxRestarts. {FROM_WHEN}")


def in_place_events(previous: Condition | None, new: Condition | None) -> list[StatusEvent]:
    """One Warning Event when the condition turns False (first seen, or after an upgrade
    went back), not at every reconcile."""
    if new is None or new.status != "False" or (previous is not None
                                               and previous.status == "False"):
        return []
    return [StatusEvent(reason=Reason.RESTART_RULES_UNSUPPORTED, message=new.message,
                        type="Warning")]
