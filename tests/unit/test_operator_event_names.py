"""core.status_events.event_name: the same status change gets the same Event name however
often it is computed (so the API server refuses a second copy), and different changes
get different names."""
from __future__ import annotations

from elastic_api.conditions import ConditionType, Reason
from elastic_api.models import (
    Condition,
    Counters,
    ElasticTrainingJobStatus,
    RecoveryRecord,
    SliceStatus,
)
from elastic_operator.core.status_events import StatusEvent, event_name
from tests.builders import at


def status(restarts: tuple[int, ...] = (0, 1, 0), detected: float = 10,
           trainer_restarts: int = 0, failed: str | None = None) -> ElasticTrainingJobStatus:
    conditions = []
    if failed is not None:
        conditions.append(Condition(type=ConditionType.FAILED, status="True", reason=failed,
                                    message="m", last_transition_time=at(0)))
    return ElasticTrainingJobStatus(
        slices=[SliceStatus(index=i, state="Down", restarts=n) for i, n in enumerate(restarts)],
        last_recovery=RecoveryRecord(detected_at=at(detected)),
        counters=Counters(trainer_restarts=trainer_restarts), conditions=conditions)


def down(slice_index: int, message: str = "host 0 failed") -> StatusEvent:
    return StatusEvent(reason=Reason.SLICE_DOWN, message=message, type="Warning",
                       slice_index=slice_index)


def test_the_same_change_computed_again_has_the_same_name() -> None:
    # A second computation may word it differently (the pod was replaced meanwhile).
    first = event_name("train", "uid-1", down(1, "host 0 failed (exit code 1)"), status())
    again = event_name("train", "uid-1", down(1, "3/4 hosts have pods"), status())
    assert first == again and first.startswith("train.")


def test_different_changes_have_different_names() -> None:
    names = {
        event_name("train", "uid-1", down(1), status()),
        event_name("train", "uid-1", down(1), status((0, 2, 0))),  # the slice's next failure
        event_name("train", "uid-1", down(0), status((1, 1, 0))),  # another slice
        event_name("train", "uid-2", down(1), status()),  # a new job of the same name
        event_name("train", "uid-1", StatusEvent(Reason.SLICE_RESTORED, "ok", slice_index=1),
                   status()),
        event_name("train", "uid-1", StatusEvent(Reason.RECOVERED, "r"), status(detected=10)),
        event_name("train", "uid-1", StatusEvent(Reason.RECOVERED, "r"), status(detected=99)),
        event_name("train", "uid-1", StatusEvent(Reason.TRAINER_RESTARTED, "t"),
                   status(trainer_restarts=1)),
        event_name("train", "uid-1", StatusEvent(Reason.TRAINER_RESTARTED, "t"),
                   status(trainer_restarts=2)),
    }
    assert len(names) == 9


def test_a_terminal_failure_is_one_event_whatever_its_message() -> None:
    failed = status(failed=Reason.HEAD_FAILED)
    assert (event_name("t", "u", StatusEvent(Reason.HEAD_FAILED, "a", "Warning"), failed)
            == event_name("t", "u", StatusEvent(Reason.HEAD_FAILED, "b", "Warning"), failed))


def test_an_event_of_an_unknown_kind_is_told_apart_by_its_message() -> None:
    assert (event_name("t", "u", StatusEvent("SomethingNew", "a"), status())
            != event_name("t", "u", StatusEvent("SomethingNew", "b"), status()))


def test_names_are_valid_for_long_job_names() -> None:
    name = event_name("j" * 253, "u", down(0), status())
    assert len(name) <= 253


def test_maintenance_moves_of_one_slice_are_told_apart() -> None:
    """A move counts in `moves`, not `restarts`: the second maintenance of a slice that
    never failed is a new change, with new Event names."""
    def moved(moves: int) -> ElasticTrainingJobStatus:
        return ElasticTrainingJobStatus(slices=[SliceStatus(index=0, state="Ready",
                                                            moves=moves)])

    moving = StatusEvent(Reason.SLICE_MOVING, "moving off pool-a", slice_index=0)
    notice_a = StatusEvent(Reason.MAINTENANCE_SCHEDULED, "pool-a at 10:00", slice_index=0)
    notice_b = StatusEvent(Reason.MAINTENANCE_SCHEDULED, "pool-b at 12:00", slice_index=0)
    names = [event_name("train", "uid-1", moving, moved(1)),
             event_name("train", "uid-1", moving, moved(2)),
             event_name("train", "uid-1", notice_a, moved(0)),
             event_name("train", "uid-1", notice_b, moved(0))]
    assert len(set(names)) == len(names)
    assert event_name("train", "uid-1", moving, moved(1)) == names[0]
