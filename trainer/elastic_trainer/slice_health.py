"""Which slice a hung step points at, on Pathways: each slice asked, as pathwaysutils'
elastic Manager asks it, whether it can run a program now (docs/trainer.md, "What points
at one slice on Pathways").

pathwaysutils' health check (`elastic.get_active_slice_indices`, pathwaysutils 0.1.13)
runs a small `pmap` on a slice's devices and waits for it; a slice the Pathways resource
manager has down fails it with DATA_LOSS. Asked while a step hangs, once per slice on a
thread of its own and for at most `timeout` seconds, a slice answers:

    up      it ran the check: its devices are not busy with the step (a device runs its
            programs in the order they were dispatched, and the step came first)
    down    a slice-down error: the resource manager has it down
    silent  nothing within the timeout: still busy with the step, or hung
    error   another error (logged; no verdict on that slice)

`verdict` blames the down slices, and the silent ones when other slices answered up. A
hang inside a cross-slice collective keeps every slice waiting for the others, so every
slice is silent and nothing can be told from the controller; Pathways' own hang
diagnosis (the Megascale/RapidEye digest in the resource manager's log) names the hosts
then. Every slice up: no slice is busy with the step; the controller waits elsewhere.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

UP, DOWN, SILENT, ERROR = "up", "down", "silent", "error"
RAPIDEYE_HINT = ("the resource manager's log (container pathways-rm) names the hosts "
                 "once Megascale detects the hang: 'Potential culprit workers'")


def probe(slice_to_devices: Mapping[int, Sequence[Any]], timeout: float) -> dict[int, str]:
    """Each slice's answer to pathwaysutils' health check within `timeout` seconds. A
    silent slice's thread is left waiting (a daemon): its program stays queued behind the
    step on that slice, and nothing can take it back."""
    answers: dict[int, str] = {}
    lock = threading.Lock()

    def ask(index: int, devices: Sequence[Any]) -> None:
        from pathwaysutils.elastic import elastic

        try:
            answer = UP if index in elastic.get_active_slice_indices({index: devices}) \
                else DOWN
        except Exception as err:  # not a slice-down error: validate() re-raised it
            log.warning("health check of slice %d: %s: %s", index, type(err).__name__, err)
            answer = ERROR
        with lock:
            answers[index] = answer

    threads = [threading.Thread(target=ask, args=(i, devices), daemon=True,
                                name=f"slice-health-{i}")
               for i, devices in sorted(slice_to_devices.items())]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return {i: answers.get(i, SILENT) for i in sorted(slice_to_devices)}


def verdict(answers: Mapping[int, str], timeout: float) -> tuple[list[int], str]:
    """(the slices the answers blame, what the blame rests on)."""
    by = {kind: [i for i, a in sorted(answers.items()) if a == kind]
          for kind in (UP, DOWN, SILENT, ERROR)}
    said = [f"{slices_text(by[kind])} {text}" for kind, text in (
        (DOWN, "failed it with a slice-down error (down at the resource manager)"),
        (UP, "ran it"), (SILENT, f"did not answer within {timeout:g}s"),
        (ERROR, "failed it otherwise (see the log)")) if by[kind]]
    asked = "pathwaysutils' health check (a program on each slice): " + "; ".join(said)
    if not answers:
        return [], "no active slice to ask"
    if by[DOWN] or (by[SILENT] and by[UP]):
        suspects = sorted(by[DOWN] + (by[SILENT] if by[UP] else []))
        why = "" if not (by[SILENT] and by[UP]) else (
            ": a slice that ran it is not busy with the step, one that did not still is")
        return suspects, asked + why
    if by[SILENT]:
        return [], (f"{asked}: every slice is busy (a hang inside a collective keeps them "
                    f"all waiting), nothing tells them apart from the controller; "
                    f"{RAPIDEYE_HINT}")
    return [], f"{asked}: no slice is busy with the step; the controller waits elsewhere"


def slices_text(indices: Sequence[int]) -> str:
    """'slice 2', 'slices 0, 1 and 3'."""
    if len(indices) == 1:
        return f"slice {indices[0]}"
    return "slices " + ", ".join(str(i) for i in indices[:-1]) + f" and {indices[-1]}"
