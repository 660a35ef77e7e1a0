"""Each job's memory belongs in one record (model/job_memory.py `JobMemory`, forgotten in
one call), not in a map of its own somewhere in the operator (issue 77, item 3). The
maps that still keep something per job outside it are listed here, to move into the
record; a new one fails this test, and so does an entry that is no longer there (the
list only shrinks).

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
# Keyed by something else that a tuple[str, str] also spells: kept in their own index.
NOT_PER_JOB = {
    ("watch/node_index", "_by_shape"),  # per TPU shape: the pools
    ("writes/node_actions", "_last"),  # per node
    ("writes/node_actions", "_warned"),  # per node
}
# Per job, outside the record: to move into JobMemory (issue 77, item 3).
TO_MOVE = {
    ("queue/work_queue", name) for name in (
        "_queue", "_dirty", "_named_at", "_processing", "_failures", "_retries", "_wakes",
        "_paced", "_urgent", "_run_paced", "_due")
} | {
    ("writes/followups", "_pending"), ("writes/followups", "_ready"),
    ("writes/followups", "_running"),
    ("metrics/metrics", "_jobs"), ("metrics/metrics", "_specs"),
    ("metrics/job_metrics", "_slices"),
    ("watch/node_index", "_pods_on"), ("watch/node_index", "_failures"),
    ("watch/slice_index", "_slices"),
    ("writes/pool_warden", "_seen"),
    ("watch/caches", "_owners"),
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
    new = per_job_maps() - THE_RECORD - NOT_PER_JOB - TO_MOVE
    assert not new, (f"{sorted(new)} keep something per job outside JobMemory: make it a "
                     "field of the record (model/job_memory.py), forgotten with the job")


def test_the_list_to_move_only_shrinks() -> None:
    gone = (TO_MOVE | NOT_PER_JOB | THE_RECORD) - per_job_maps()
    assert not gone, f"{sorted(gone)} are no longer there: drop them from this list"
