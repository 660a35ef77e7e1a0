"""The job of make test-multicluster (tests/multicluster), shared with its guard in
`make test` (tests/integration/test_long_targets.py), which renders it and checks it at
admission on one control plane."""
from __future__ import annotations

from typing import Any

from elastic_api.names import KUEUE_QUEUE_NAME_LABEL, MULTIKUEUE_CONTROLLER
from tests.builders import etj


def manifest(name: str, queue: str) -> dict[str, Any]:
    """One simulated v5e 2x4 slice (2 hosts), checkpoints on gs:// (MultiKueue requires
    storage every cluster reads), dispatched by MultiKueue."""
    obj = (etj(name, namespace=None).backend("simulated").tpu("v5e", "2x4", 1)
           .checkpoint_dir(f"gs://etj-multicluster/{name}").trainer("trainer:test", 1000)
           .spec(managedBy=MULTIKUEUE_CONTROLLER,
                 elastic={"maxSliceRestarts": 5}).obj())
    obj["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: queue}
    return obj
