"""How every test and dev tool runs `etj operator`: one definition (`OperatorSettings`),
and each tool's settings in one table (`SETTINGS`).

`make test`'s fixtures, the demo, `make e2e-maxtext`, `make e2e-kind` (through the
chart's values), `make test-multicluster` and the benchmarks each start an operator;
before this table each spelled its flags, and `make e2e-maxtext` missed the
checkpoint-roots guard when it landed (issue 36). Now a flag or guard is added here,
once, and every tool's row says what it gets; tests/unit/test_operator_settings.py
checks that each row is accepted by `etj operator`'s own parser and, for the tools
whose jobs live in files, that their operator may list their checkpoint roots;
tests/integration/test_long_targets.py starts the long targets' operators in `make test`.

Only the standard library, and no package import: hack/kind/steps.sh runs
`python3 devtools/elastic_devtools/localcluster/operator_settings.py kind-e2e
--helm-values` (any python3, no venv) for the chart values of its row (JSON, which is
YAML).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from typing import Any

FAST_SECONDS = 5.0  # test speed: resync and scan every 5 s (30 s by default), ...
DEMO_NAMESPACE = "etj-demo"
MAXTEXT_E2E_NAMESPACE = "maxtext-e2e"
# The prefixes `make e2e-maxtext`'s scenario writes under (base_output_directory of
# tests/fixtures/maxtext-0.2.5/scenario-*.yaml): its operator may list those, as an
# operator admin allows a team's own buckets, and nothing else.
MAXTEXT_E2E_ROOTS = ("/tmp/maxtext", "gs://maxtext-e2e/maxtext")


@dataclass(frozen=True)
class OperatorSettings:
    """The flags of one tool's `etj operator` (other than its ports and identity, which
    OperatorProcess gives each process).

    `namespaces`: those served (empty: every one). The periods: None is the operator's
    own default (what a user runs; the benchmarks and the demo measure that), a number
    the test speed. `checkpoint_roots`: `--checkpoint-roots` rules (NS=PREFIX[,PREFIX]);
    empty is the operator's default, local paths only. `extra_args`: any other flag."""

    namespaces: tuple[str, ...] = ()
    resync_seconds: float | None = FAST_SECONDS
    checkpoint_scan_seconds: float | None = FAST_SECONDS
    # A quarantined node pool released this long after its nodes are Ready (600 s).
    quarantine_release_after_seconds: float | None = FAST_SECONDS
    checkpoint_roots: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()

    def scope_args(self) -> tuple[str, ...]:
        if not self.namespaces:
            return ("--all-namespaces",)
        return tuple(a for ns in self.namespaces for a in ("--namespace", ns))

    def speed_args(self) -> tuple[str, ...]:
        """The periods that are not the operator's defaults."""
        flags = (("--resync-seconds", self.resync_seconds),
                 ("--checkpoint-scan-seconds", self.checkpoint_scan_seconds),
                 ("--quarantine-release-after-seconds", self.quarantine_release_after_seconds))
        return tuple(a for flag, value in flags if value is not None
                     for a in (flag, f"{value:g}"))

    def roots_args(self) -> tuple[str, ...]:
        return tuple(a for rule in self.checkpoint_roots for a in ("--checkpoint-roots", rule))

    def args(self) -> tuple[str, ...]:
        """`etj operator`'s arguments (without ports and leader identity)."""
        return (*self.scope_args(), *self.speed_args(), *self.roots_args(), *self.extra_args)

    def with_args(self, *extra: str) -> OperatorSettings:
        return replace(self, extra_args=(*self.extra_args, *extra))

    def roots_by_namespace(self) -> dict[str, list[str]]:
        """The rules as the chart's `checkpointRoots` value holds them."""
        roots: dict[str, list[str]] = {}
        for rule in self.checkpoint_roots:
            namespace, _, prefixes = rule.partition("=")
            roots.setdefault(namespace, []).extend(p for p in prefixes.split(",") if p)
        return roots

    def helm_values(self) -> dict[str, Any]:
        """The same operator as chart values (charts/elastic-operator/values.yaml): {}
        is the chart's defaults."""
        values: dict[str, Any] = {}
        if self.namespaces:
            values["watchNamespaces"] = list(self.namespaces)
        if self.checkpoint_roots:
            values["checkpointRoots"] = self.roots_by_namespace()
        extra = [*self.speed_args(), *self.extra_args]
        if extra:
            values["operator"] = {"extraArgs": extra}
        return values


# The operator's own defaults for every period: what a user gets.
DEFAULTS = OperatorSettings(resync_seconds=None, checkpoint_scan_seconds=None,
                            quarantine_release_after_seconds=None)
# make test's fixtures (every namespace, test speed, local checkpoint roots only).
TEST = OperatorSettings()

SETTINGS: dict[str, OperatorSettings] = {
    "test": TEST,
    # make demo: the operator as a user runs it, on the demo's namespace; its
    # checkpoints are in the demo's output directory (a local path: allowed by default).
    "demo": replace(DEFAULTS, namespaces=(DEMO_NAMESPACE,)),
    # make e2e-maxtext: scans every 2 s (a save in flight is seen before it commits);
    # the scenario's own roots, local and gs:// (fake-gcs-server), and no other.
    "maxtext-e2e": OperatorSettings(
        namespaces=(MAXTEXT_E2E_NAMESPACE,), checkpoint_scan_seconds=2.0,
        quarantine_release_after_seconds=None,
        checkpoint_roots=(f"{MAXTEXT_E2E_NAMESPACE}={','.join(MAXTEXT_E2E_ROOTS)}",)),
    # make e2e-kind: the chart as a user installs it (its defaults; the job's checkpoint
    # directory is a local path).
    "kind-e2e": DEFAULTS,
    # make test-multicluster: test speed on each cluster. Its jobs' gs:// root is not
    # allowed (no GCS there; the test is about dispatch): CheckpointRootAllowed False.
    "multicluster": TEST,
    # make bench: the operator's defaults (measured as users run it).
    "bench-detection": replace(DEFAULTS, namespaces=("etj-bench",)),
    "bench-replacement": replace(DEFAULTS, namespaces=("etj-bench-replace",)),
    # bench/goodput.py replays a week 1,000 times faster: a pool quarantined for a
    # maintenance or a hang is released 5 s after its nodes are Ready (600 s would be a
    # week of the trace), every other period the operator's default.
    "bench-goodput": replace(DEFAULTS, namespaces=("etj-bench-goodput",),
                             quarantine_release_after_seconds=FAST_SECONDS),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="operator_settings.py",
        description="print a tool's `etj operator` arguments, or its chart values")
    parser.add_argument("tool", choices=sorted(SETTINGS))
    parser.add_argument("--helm-values", action="store_true",
                        help="the chart values (JSON, for helm -f) instead of the arguments")
    args = parser.parse_args(argv)
    settings = SETTINGS[args.tool]
    if args.helm_values:
        print(json.dumps(settings.helm_values(), indent=2))
    else:
        print(" ".join(settings.args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
