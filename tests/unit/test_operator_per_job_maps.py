"""Each job's memory belongs in one record (model/job_memory.py `JobMemory`, forgotten in
one call), not in a map of its own somewhere in the operator (issue 77, item 3): an AST
check over the package finds every per-job map, and fails on one outside the record that
is not allowed below, each with why: not per job (per node, per pool: their own index),
or outside by design (it must outlive the record, or it is the work queue's ordering).
An allowed map that is no longer there fails too (the list only shrinks).

A map is a collection (dict, set, deque, list, ...) whose annotation names a job
(`JobKey`, or the `tuple[str, str]` it is): annotate every collection attribute, so that
this test sees it."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "elastic_operator"
COLLECTIONS = {"dict", "set", "frozenset", "deque", "list", "defaultdict", "OrderedDict",
               "Counter"}
# The record itself: every job's JobMemory.
THE_RECORD = {("model/job_memory", "_jobs")}
# Keyed by something else that a tuple[str, str] also spells, or holding jobs per node or
# per pool: kept in their own index.
NOT_PER_JOB = {
    ("watch/node_index", "_by_shape"): "per TPU shape: the pools",
    ("watch/node_index", "_pods_on"): "per node: the jobs whose pods run on a node, asked "
    "by the node when it changes",
    ("watch/node_index", "_failures"): "per pool: each job's failures on pools, read by "
    "pool for every job's verdict (`_marks_of_others`) under the node index's lock; in "
    "the records, each verdict would walk every record and take the memory lock under it",
    ("writes/node_actions", "_last"): "per node",
    ("writes/node_actions", "_warned"): "per node",
}
# Per job, but outside the record by design: each must outlive the job's record, or is
# not one job's memory.
OUTSIDE_BY_DESIGN = {
    **{("queue/work_queue", name): "the queue's in-flight state (and `_queue` its order "
       "across jobs): a job forgotten while queued or running keeps it until its run "
       "ends (forget_job keeps it); in the record, a naming after the forget would find "
       "a new record not running, and a second worker would run the job at once"
       for name in ("_queue", "_dirty", "_named_at", "_processing", "_urgent",
                    "_run_paced", "_following")},
    ("queue/work_queue", "_due"): "the timer's heap of delayed adds, one order by due "
    "time across jobs (forget_job drops the job's entries from it): per job, the timer "
    "would scan every record at each tick",
    ("watch/slice_index", "_slices"): "an index of the pod cache: a pod that goes after "
    "its job was forgotten must still find its slice's entry",
    ("watch/caches", "_owners"): "by worker Job uid, the newest TORN_DOWN_KEPT over all "
    "jobs, asked by uid from the pod informer's thread: per job it would keep another set",
    ("writes/pool_warden", "_seen"): "a quarantine's cited jobs by (name, uid) as last "
    "seen existing, maybe never reconciled here: it exists to learn that a job is gone, "
    "so it must outlive the record; it follows the nodes' labels (swept to what they cite)",
}
def _names_a_job(annotation: ast.expr) -> bool:
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "JobKey":
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and node.value.id == "tuple" and isinstance(node.slice, ast.Tuple) \
                and [ast.unparse(e) for e in node.slice.elts] == ["str", "str"]:
            return True
    return False


def _is_collection(annotation: ast.expr) -> bool:
    return isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name) \
        and annotation.value.id in COLLECTIONS


def per_job_maps() -> set[tuple[str, str]]:
    """(folder/module, attribute) of every collection annotated with a job in it."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).with_suffix("").as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AnnAssign) and _is_collection(node.annotation) \
                    and _names_a_job(node.annotation):
                target = node.target
                name = target.attr if isinstance(target, ast.Attribute) else ast.unparse(target)
                found.add((module, name))
    return found


def test_no_new_per_job_map_outside_the_record() -> None:
    new = per_job_maps() - THE_RECORD - NOT_PER_JOB.keys() - OUTSIDE_BY_DESIGN.keys()
    assert not new, (f"{sorted(new)} keep something per job outside JobMemory: make it a "
                     "field of the record (model/job_memory.py), forgotten with the job")


def test_every_map_allowed_is_still_there() -> None:
    gone = (NOT_PER_JOB.keys() | OUTSIDE_BY_DESIGN.keys() | THE_RECORD) - per_job_maps()
    assert not gone, f"{sorted(gone)} are no longer there: drop them from this list"
