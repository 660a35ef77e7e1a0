"""The badput causes of status.goodput.badputSeconds, in words and in ml-goodput-measurement's
vocabulary (its BadputType names; docs/metrics.md, "Goodput in ml-goodput-measurement's
terms"): written once, for the operator's metrics, `kubectl etj goodput` and the goodput
benchmark's model (bench/goodput_model.py), so a live job is read in the model's words."""
from __future__ import annotations

from typing import Final

# cause (camelCase, as in the status) -> ml-goodput-measurement's BadputType
BADPUT_TYPES: Final = {
    "waitingForSlices": "ELASTIC_SLICE_DOWN",
    "fewerSlices": "ELASTIC_SLICE_DOWN",
    "startup": "PROGRAM_STARTUP",
    "restore": "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "recompile": "ELASTIC_REINITIALIZATION",
    "recomputedSteps": "WASTED_PROGRESS_FROM_DISRUPTION",
    "stalled": "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "slowSlices": "OTHER",
    "checkpointing": "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "other": "OTHER",
}
# Every cause, in the order they are shown (the status's fields, then `other`).
CAUSES: Final = tuple(BADPUT_TYPES)

# cause -> what it is (docs/metrics.md, "Goodput"), in a terminal column (44 characters)
BADPUT_MEANINGS: Final = {
    "waitingForSlices": "a failure until the slices needed are back",
    "fewerSlices": "steps on fewer slices: the missing share",
    "startup": "a trainer process's start to its first step",
    "restore": "restoring a snapshot or checkpoint",
    "recompile": "first step after a restore, beyond a normal",
    "recomputedSteps": "steps done again (steps lost)",
    "stalled": "a hung step until the watchdog noticed it",
    "slowSlices": "steps held up by a slow slice",
    "checkpointing": "the loop blocked on checkpoint saves",
    "other": "the rest: scheduling, a restart's gap",
}
