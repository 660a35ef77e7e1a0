"""The badput causes of status.goodput.badputSeconds, in words and in ml-goodput-measurement's
vocabulary (its BadputType names; docs/metrics.md, "Goodput in ml-goodput-measurement's
terms"): written once, for the operator's metrics and `kubectl etj goodput`."""
from __future__ import annotations

from typing import Final

# cause (camelCase, as in the status) -> ml-goodput-measurement's BadputType
BADPUT_TYPES: Final = {
    "waitingForSlices": "ELASTIC_SLICE_DOWN",
    "restore": "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "recompile": "ELASTIC_REINITIALIZATION",
    "recomputedSteps": "WASTED_PROGRESS_FROM_DISRUPTION",
    "checkpointing": "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "startup": "PROGRAM_STARTUP",
    "other": "OTHER",
}

# cause -> what it is (docs/metrics.md, "Goodput"), in a terminal column (44 characters)
BADPUT_MEANINGS: Final = {
    "waitingForSlices": "a failure until the slices needed are back",
    "restore": "restoring a snapshot or checkpoint",
    "recompile": "first step after a restore, beyond a normal",
    "recomputedSteps": "steps done again (steps lost)",
    "checkpointing": "the loop blocked on checkpoint saves",
    "startup": "a trainer process's start to its first step",
    "other": "the rest: scheduling, a restart's gap",
}
