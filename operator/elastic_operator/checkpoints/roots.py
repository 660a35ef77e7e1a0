"""Which checkpoint roots the operator lists, per namespace (`etj operator
--checkpoint-roots`, the chart's `checkpointRoots`).

The operator lists spec.checkpoint.directory with its own identity (its Google Cloud
credentials, its filesystem) and publishes the step names it finds in the job's status.
Unbounded, that makes it a confused deputy: a job author who may not read a bucket names
it, and the operator tells them what is there (docs/threat-model.md). So a root is
listed only under a prefix the operator's configuration allows for the job's namespace;
any other is refused before any I/O, with status.checkpoint.error naming the field.

Whose identity is whose, on GKE: the operator lists with its own (its pod is not on the
host network, so its ServiceAccount's Workload Identity: grant that principal
storage.objects.list on each allowed root). The job's pods run on the host network, where
Workload Identity does not apply: they write the checkpoints as their node pools' Google
service account (docs/gke.md, "Identity"). Listing "as the job" would thus mean acting as
the nodes' service account, which every job on those pools shares and no operator should
hold, or minting tokens for the job's ServiceAccount, which is not what wrote the
checkpoints (docs/threat-model.md says why not).

A rule is NAMESPACE=PREFIX[,PREFIX...], NAMESPACE a namespace or `*` (every one); a
prefix is gs://BUCKET[/PATH] or an absolute path, and covers itself and what is below it
(on path boundaries: gs://team-a covers gs://team-a/x, not gs://team-ab). With no rule
given, local paths are allowed everywhere (the operator's own filesystem, where nothing
of another tenant is unless an admin mounts it: then write rules) and no gs:// root is.
"""
from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from elastic_operator.checkpoints.listing import (
    GCS_SCHEME,
    CheckpointScanError,
    parse_gcs_url,
)

ANY_NAMESPACE = "*"
FLAG = "--checkpoint-roots"


@dataclass(frozen=True)
class RootRule:
    namespace: str  # or ANY_NAMESPACE
    prefix: str


@dataclass(frozen=True)
class CheckpointRoots:
    rules: tuple[RootRule, ...]

    @classmethod
    def default(cls) -> CheckpointRoots:
        """Local paths everywhere; no gs:// root."""
        return cls((RootRule(ANY_NAMESPACE, "/"),))

    @classmethod
    def parse(cls, specs: Sequence[str]) -> CheckpointRoots:
        """The rules of repeated NAMESPACE=PREFIX[,PREFIX...] (none given: `default`).
        ValueError names the bad one."""
        if not specs:
            return cls.default()
        rules = []
        for spec in specs:
            namespace, sep, prefixes = spec.partition("=")
            namespace = namespace.strip()
            if not sep or not namespace:
                raise ValueError(f"{FLAG} {spec!r}: expected NAMESPACE=PREFIX[,PREFIX...] "
                                 f"(NAMESPACE {ANY_NAMESPACE} for every namespace)")
            for prefix in filter(None, (p.strip() for p in prefixes.split(","))):
                rules.append(RootRule(namespace, _checked_prefix(spec, prefix)))
        return cls(tuple(rules))

    def allowed_for(self, namespace: str) -> list[str]:
        return [r.prefix for r in self.rules if r.namespace in (namespace, ANY_NAMESPACE)]

    def refusal(self, namespace: str, directory: str) -> str | None:
        """Why `directory` may not be listed for a job of `namespace` (None: it may). A
        directory that is neither gs:// nor absolute is left to the scan, which says
        what is wrong with it."""
        if not (directory.startswith(GCS_SCHEME) or os.path.isabs(directory)):
            return None
        allowed = self.allowed_for(namespace)
        if any(covers(prefix, directory) for prefix in allowed):
            return None
        return (f"spec.checkpoint.directory: {directory} is not under a checkpoint root the "
                f"operator may list for namespace {namespace} (allowed: "
                f"{', '.join(allowed) or 'none'}); not listed, so that no job learns of "
                f"storage it was not given. An operator admin allows roots per namespace "
                f"with `etj operator {FLAG}` (chart value checkpointRoots) and grants the "
                f"operator's own ServiceAccount (Workload Identity) the listing")


def _checked_prefix(spec: str, prefix: str) -> str:
    if prefix.startswith(GCS_SCHEME):
        try:
            parse_gcs_url(prefix)
        except CheckpointScanError as e:
            raise ValueError(f"{FLAG} {spec!r}: {e}") from None
        return prefix
    if not os.path.isabs(prefix):
        raise ValueError(f"{FLAG} {spec!r}: {prefix!r} is neither gs://BUCKET[/PATH] nor an "
                         "absolute path")
    return posixpath.normpath(prefix)


def covers(prefix: str, directory: str) -> bool:
    """`directory` is `prefix` or below it, as the listing would see it: for gs://, the
    same bucket and an object-name prefix that starts with the rule's (GCS names are
    literal: `..` is no parent); for a path, after normalizing `..` away."""
    if prefix.startswith(GCS_SCHEME) != directory.startswith(GCS_SCHEME):
        return False
    if directory.startswith(GCS_SCHEME):
        try:
            bucket, path = parse_gcs_url(directory)
        except CheckpointScanError:
            return False
        rule_bucket, rule_path = parse_gcs_url(prefix)
        return bucket == rule_bucket and path.startswith(rule_path)
    path = posixpath.normpath(directory)
    root = prefix.rstrip("/") + "/"
    return path == prefix or (path + "/").startswith(root)
