"""What the bundled trainer's data (`spec.trainer.data`, `etj train --data`) may name,
written once for admission (a CEL rule and `validate_job`) and the trainer
(`elastic_trainer.data.find_shards`).

The trainer reads ArrayRecord shards through grain from a filesystem; it has no
object-store client. A URL (`gs://...`) would pass admission and `etj render` and only
fail once the head pod runs, TPUs reserved: so it is refused where the spec is written,
with the same fix the trainer gives: mount the bucket with Cloud Storage FUSE
(`spec.trainer.volumes`) and name the mounted path.
"""
from __future__ import annotations

SYNTHETIC = "synthetic"
URL_MARK = "://"
# The fix, in the words both refusals end with.
READ_FROM_A_FILESYSTEM = (
    "ArrayRecord shards are read from a filesystem, not a URL; mount the bucket with "
    "spec.trainer.volumes (the Cloud Storage FUSE CSI driver) and name the mounted path, "
    "e.g. /data/c4/train"
)
# The CEL predicate over `self` = spec.trainer (validation.py wraps it in `has`).
CEL_NOT_URL = f"!self.data.contains('{URL_MARK}')"


def is_url(path: str) -> bool:
    """A URL (gs://bucket/..., https://...): not a path the trainer can read."""
    return URL_MARK in path
