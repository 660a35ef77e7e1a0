"""The revisions of the ElasticTrainingJob CRD's schema this project has shipped, oldest
first: revision N is the schema whose hash is REVISIONS[N - 1].

`etj crd` puts the revision and the hash on the CRD it generates (its annotations,
elastic_api.names SCHEMA_REVISION_ANNOTATION and SCHEMA_HASH_ANNOTATION), so that an
operator can tell, from the CRD the API server serves, whether that schema is the one
it was built with, an older one (its status writes would lose the fields the older
schema lacks) or a newer one (a downgrade). A served CRD without the annotations is
revision 0: every CRD before revision 1 (e.g. tests/fixtures/crds/elastictrainingjobs-a59b14a.yaml).

A change of the schema (models/, validation.py, the printer columns, a description)
changes its hash: append it here, as tests/unit/test_api_crd.py says, in the change that
makes it. Never edit or remove an entry: a CRD in some cluster carries its revision.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

# The hash of each shipped schema (`schema_hash` of the CRD's spec.versions), oldest first.
REVISIONS: tuple[str, ...] = (
    # 1: the first CRD that says its revision (issue 61).
    "sha256:e3f57ffd74c28e6f67f9033e8e1d3464d89fd2657f47d2961e72be75b5b6793e",
    # 2: spec.pathways.colocatedPython, the dated Pathways default, and rules on the
    # trainer's data and model and on images that move (issue 69); no status field.
    "sha256:fa326b70a30544c11f690dc63ff381876e95d19534372713894a232bc9c59aff",
    # 3: restart in place (issue 66): spec.recovery.restartInPlace, inPlaceDeadlineSeconds;
    # status slices[].replacement.action RestartInPlace, counted.containerRestarts,
    # progress.restart.inPlace, processStartedAt, mainRestarts.
    "sha256:c65f651f12bb805bb6557ba152c170569a26aa2605c5abd7d2d0d22df483519b",
    # 4: restart budgets per window, status.budgets (main's restarts in place charged in
    # status.budgets.mainRestarts), maxRestarts optional (issue 67).
    "sha256:ba3e736f698f4d53b1ac3b37280ff9122fd84416f8e49662e4422c317b7ae970",
    # 5: spec.recovery.restartInPlace and inPlaceDeadlineSeconds lose their schema
    # defaults (the operator applies them): a release before them refused the job the
    # API server had filled them into, after a downgrade.
    "sha256:a8973daa8fd168ff87794db616d58d3872930048c313084368f10e95ea106d98",
    # 6: spec.pathways.version's description names both tag forms, jax-<version> too
    # (issue 81); no field or rule changed.
    "sha256:e2dc169d726a59e63e7393803ca15b5bdad204dfe382c596b47e48368ed445cb",
    # 7: the catalog follows GKE and xpk (issue 81): the 3D types' topologies by rule
    # (multiples of 4, at most 140/64/144 cubes) in CEL instead of a list, tpu7x 1x1x1,
    # maxSliceRestarts' bound computed from the cube count, and a rule of its own refusing
    # tpu7x super-slicing at the cube level.
    "sha256:74bd8fa41fbee87abe9ccafdf06b4e4756a48169f2930778aff83fa5ac040750",
    # 8: a rule refusing a toleration with operator Exists and no key, on new jobs
    # (issue 78), and the placement fields' descriptions name the tenant policy; no field
    # changed.
    "sha256:fd8ae8029e6b77924cabb846d588b92efe5db50b108df7762ebc73d79c4c18f9",
    # 9: maxItems on every list in status (issue 78: a writer other than the operator
    # cannot grow the status toward etcd's limit).
    "sha256:270419c64accf0700d57051554b72fbef024ea62c916a536a6cbe5991cba412f",
    # 10: spec.recovery.quarantineAfterFailures' and hardwareExitCodes' descriptions name
    # the administrator's floor and trust in reports (issue 78, item 4); no field or rule
    # changed.
    "sha256:130adfd80fd51c2da373b60e0bede40d7093b619537f8b9f376206460dab7880",
)


def schema_hash(versions: list[dict[str, Any]]) -> str:
    """The hash of a CRD's spec.versions (each version's schema, printer columns,
    subresources), over its canonical JSON: keys sorted, no whitespace."""
    canonical = json.dumps(versions, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def revision_of(hash_: str) -> int:
    """The revision of the schema with this hash: its place in REVISIONS, or the next
    one for a schema not recorded yet (a change under development, which the unit test
    refuses until it is appended)."""
    if hash_ in REVISIONS:
        return REVISIONS.index(hash_) + 1
    return len(REVISIONS) + 1
