"""Whether the cluster serves the JobSet and Kueue API versions this operator speaks.

A pure decision from API discovery (GET /apis, which every authenticated client may
read): the group/versions served in, a verdict and the message the operator logs (and
posts as an Event when it refuses to start) out. The release installed is not visible
through discovery, only the API versions it serves: the message names those, and the
releases the operator is tested with (docs/operations.md, "Supported versions").
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_api.names import JOBSET_GROUP, JOBSET_VERSION, KUEUE_GROUP, KUEUE_VERSION

# What `make test` and `make test-compat` run (versions.env, versions-compat.env).
TESTED_JOBSET = "v0.12.0"
TESTED_KUEUE = "v0.19.2"
REFUSED_REASON = "UnsupportedAPIVersion"


@dataclass(frozen=True)
class Api:
    """An API the operator uses: its group and the one version it reads and writes."""

    product: str
    group: str
    version: str
    required: bool  # False: the operator runs without it (Kueue is optional)
    tested: str


JOBSET = Api("JobSet", JOBSET_GROUP, JOBSET_VERSION, True, TESTED_JOBSET)
KUEUE = Api("Kueue", KUEUE_GROUP, KUEUE_VERSION, False, TESTED_KUEUE)
APIS = (JOBSET, KUEUE)


@dataclass(frozen=True)
class ApiVerdict:
    ok: bool
    message: str  # one line: what was found, and (when not ok) what to do
    reason: str = ""  # the Event's reason when not ok


def served_versions(api_group_list: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """group -> the versions it serves, from a discovery APIGroupList (GET /apis)."""
    served: dict[str, tuple[str, ...]] = {}
    for group in api_group_list.get("groups") or []:
        if not isinstance(group, Mapping) or not isinstance(group.get("name"), str):
            continue
        versions = [v.get("version") for v in group.get("versions") or []
                    if isinstance(v, Mapping)]
        served[group["name"]] = tuple(v for v in versions if isinstance(v, str))
    return served


def _found(api: Api, versions: Sequence[str]) -> str:
    if not versions:
        return f"{api.product}: not installed"
    return f"{api.product}: {api.group} {', '.join(versions)}"


def _problem(api: Api, versions: Sequence[str]) -> str | None:
    if api.version in versions:
        return None
    if not versions:
        if not api.required:
            return None
        return (f"{api.product} is not installed: the API server serves no {api.group} API. "
                f"Install {api.product} (tested: {api.tested}), then restart the operator")
    return (f"{api.product} serves {api.group} {', '.join(versions)} but not "
            f"{api.group}/{api.version}, the version this operator uses: install a "
            f"{api.product} release that serves it (tested: {api.tested}), then restart "
            "the operator")


def judge_apis(served: Mapping[str, Sequence[str]]) -> ApiVerdict:
    """Refuse when JobSet is missing or does not serve our version, or when Kueue is
    installed without ours (its Workloads could not be read: queued jobs would be
    reported wrong); Kueue absent is fine."""
    found = "; ".join(_found(api, tuple(served.get(api.group, ()))) for api in APIS)
    problems = [p for api in APIS if (p := _problem(api, tuple(served.get(api.group, ()))))]
    if problems:
        return ApiVerdict(False, f"refusing to start: {' '.join(p + '.' for p in problems)} "
                                 f"Found {found}.", REFUSED_REASON)
    return ApiVerdict(True, f"API versions found: {found} (using "
                            + ", ".join(f"{a.group}/{a.version}" for a in APIS
                                        if a.version in served.get(a.group, ()))
                            + ")")
