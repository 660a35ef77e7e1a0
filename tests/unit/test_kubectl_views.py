"""`kubectl etj`'s pure views, from the builders' jobs and Events: what each command
says of the demo's failure, of a job Kueue keeps queued and of an older operator's
status; every line fits 80 columns; -o json carries the same facts."""
from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from elastic_kubectl import goodput_view, status_view, timeline_view, why_view
from elastic_kubectl.history import lanes, moments
from elastic_kubectl.job import read_job
from elastic_kubectl.picture import Mark, draw_job, draw_timeline, label_levels
from elastic_kubectl.text import parse_since, table
from elastic_kubectl.timeline_view import lane_text
from tests.kubectl_builders import (
    at,
    demo_events,
    event,
    job,
    pools_nodes,
    queued_job,
    recovered_job,
)

NOW = at(310)


def fits(lines: list[str]) -> list[str]:
    assert lines
    too_wide = [line for line in lines if len(line) > 80]
    assert too_wide == []
    return lines


def test_status_has_a_row_per_slice_then_counters_and_cadences() -> None:
    lines = fits(status_view.render_status(read_job(recovered_job()), NOW))
    assert lines[0] == "demo (etj-demo)  phase Running  slices 3/3 Ready  step 250/300"
    assert lines[1].split() == ["SLICE", "STATE", "POOL", "HOSTS", "RESTARTS", "LAST",
                                "FAILURE", "DOWNTIME"]
    assert lines[4].split() == ["2", "Ready", "tpu-v5e-4x4-3", "4/4", "1", "NodeNotReady",
                                "9.8", "s"]
    assert lines[5] == "  slice 2: NodeNotReady 115s ago; blame Node; tpu-v5e-4x4-1 -> " \
                       "tpu-v5e-4x4-3"
    text = " ".join(" ".join(lines).split())
    assert "counters: slice failures 1, elastic events 1, JobSet restarts 0" in text
    assert "3 steps lost, restored from step 80" in text
    assert "snapshots: every 2 steps (WithinBudget, 1.5 % of step time)" in text
    assert "committed: checkpoint of step 60" in text


def test_a_slice_restarted_in_place_says_so_not_a_move() -> None:
    obj = recovered_job()
    obj["status"]["slices"][2]["lastReplacement"] |= {
        "action": "RestartInPlace", "reason": "ContainerRestarting", "blame": "Job",
        "fromPool": "tpu-v5e-4x4-3", "toPool": "tpu-v5e-4x4-3"}
    lines = fits(status_view.render_status(read_job(obj), NOW))
    text = " ".join(" ".join(lines).split())
    assert "slice 2: ContainerRestarting 115s ago; blame Job; restarted in place on " \
           "tpu-v5e-4x4-3" in text and "->" not in text
    found = moments(read_job(obj), [event("SliceDown", 100, "slice 2 is down: ..."),
                                     event("SliceRestartingInPlace", 100, "slice 2 failed"),
                                     event("SliceRestartedInPlace", 102, "slice 2 restarted")])
    assert [m.kind for m in found if m.reason.endswith("InPlace")] == ["replacement"] * 2
    states = [seg.state for seg in lanes(read_job(obj), found, at(90), NOW)[2]]
    assert states[:3] == ["Ready", "Down", "Restarting"] and states[-1] == "Ready"


def test_a_slice_down_now_shows_its_cause_and_how_long_so_far() -> None:
    obj = recovered_job()
    obj["status"]["slices"][1] |= {
        "state": "Restarting", "reason": "NoHealthyPool", "readyHosts": 0,
        "lastTransitionTime": "2026-12-01T10:04:50Z",
        "message": "no healthy pool of shape v5e 4x4",
        "replacement": {"action": "Replace", "reason": "PodFailed", "blame": "Job",
                        "requestedAt": "2026-12-01T10:04:50Z",
                        "evidence": "container main exited 1 on a healthy node"}}
    data = status_view.status_json(read_job(obj), NOW)
    down = data["slices"][1]
    assert (down["state"], down["downNow"], down["downtimeSeconds"]) == ("Restarting", True,
                                                                         20.0)
    assert down["lastFailure"]["cause"] == "blame Job; container main exited 1 on a " \
                                           "healthy node"
    lines = fits(status_view.render_status(read_job(obj), NOW))
    assert lines[3].endswith("NoHealthyPool  20.0 s so far")
    assert "slice 1: NoHealthyPool 20s ago; blame Job" in " ".join(lines)


def test_status_json_carries_the_table() -> None:
    data = status_view.status_json(read_job(recovered_job()), NOW)
    json.dumps(data)  # plain JSON
    assert [s["pool"] for s in data["slices"]] == ["tpu-v5e-4x4-0", "tpu-v5e-4x4-2",
                                                   "tpu-v5e-4x4-3"]
    assert data["slices"][2]["lastReplacement"] == {
        "action": "Replace", "fromPool": "tpu-v5e-4x4-1", "toPool": "tpu-v5e-4x4-3",
        "seconds": 9.8, "readyAt": "2026-12-01T10:03:24.400000Z"}
    assert data["counters"]["sliceFailures"] == 1
    assert data["lastRecovery"]["stepsLost"] == 3
    assert data["cadences"]["checkpoint"] == "every 40 steps (WithinBudget, 0.8 % of step time)"
    assert data["notes"] == []


def test_an_older_operators_status_is_named_not_guessed() -> None:
    old = read_job(job("old", {"phase": "Running", "slicesReady": 3}))
    lines = fits(status_view.render_status(old, NOW))
    text = " ".join(lines)
    assert "status.slices, status.counters, status.conditions not written" in text
    assert "counters:" not in text
    assert status_view.status_json(old, NOW)["counters"] is None
    goodput = " ".join(fits(goodput_view.render_goodput(old, NOW)))
    assert "status.goodput not written" in goodput
    assert goodput_view.goodput_json(old, NOW)["goodput"] is None
    unreconciled = read_job(job("new", None))
    assert "no operator has reconciled it" in " ".join(
        status_view.render_status(unreconciled, NOW))


def test_invalid_fields_are_dropped_by_the_lenient_reader_and_said() -> None:
    obj = recovered_job()
    obj["status"]["training"]["step"] = "many"
    obj["status"]["counters"]["sliceFailures"] = "one"
    data = status_view.status_json(read_job(obj), NOW)
    assert data["step"] == 0  # the report's default, the bad field dropped
    assert data["counters"]["sliceFailures"] == 0
    assert any("status.training fields ignored: step" in n for n in data["notes"])


def test_the_timeline_tells_the_story_in_order() -> None:
    found = moments(read_job(recovered_job()), demo_events())
    assert [m.reason for m in found] == [
        "Created", "CheckpointSeen", "SliceDown", "SliceReplacing", "PoolQuarantined",
        "ElasticEvent", "Recovered", "TrainingResumed", "SliceReplaced"]
    assert {m.kind for m in found if m.slice == 2} == {"failure", "replacement"}
    assert all(m.message != "slice 0 is down" for m in found)  # an older job's Event


def test_the_text_timeline_fits_80_columns_with_a_lane_per_slice() -> None:
    lines = fits(timeline_view.render_timeline(read_job(recovered_job()), demo_events(), NOW))
    assert lines[0] == "demo (etj-demo): 10:00:00 to 10:05:10 UTC (5m10s), 9 moments"
    lane2 = lines[3]
    assert lane2.startswith("slice 2   |") and lane2.endswith("|") and len(lane2) == 80
    assert "X" in lane2 and "~" in lane2 and lane2.index("X") < lane2.index("~")
    assert lines[1].startswith("slice 0   |.....====")  # Pending until Ready at 20 s
    assert lines[3].startswith("slice 2   |.....====")
    text = "\n".join(lines)
    assert "10:03:14   +194s failure     SliceDown: slice 2 is down" in text
    assert "[trainer] TrainingResumed: training resumed from" in text


def test_since_narrows_the_window() -> None:
    j = read_job(recovered_job())
    data = timeline_view.timeline_json(j, demo_events(), NOW, timedelta(minutes=2))
    assert data["from"] == "2026-12-01T10:03:10Z"
    assert [m["reason"] for m in data["moments"]][:2] == ["SliceDown", "SliceReplacing"]
    assert data["slices"]["2"][0] == {"state": "Ready", "from": "2026-12-01T10:03:10Z",
                                      "to": "2026-12-01T10:03:14.200000Z"}
    assert parse_since("2h30m") == timedelta(hours=2, minutes=30)
    with pytest.raises(ValueError, match="--since 'soon'"):
        parse_since("soon")


def test_lanes_follow_the_events_then_the_status() -> None:
    j = read_job(recovered_job())
    found = moments(j, demo_events())
    states = [(s.state, (s.start - at(0)).total_seconds())
              for s in lanes(j, found, at(0), NOW)[2]]
    # Ready from when the other slices became Ready (no Event tells it of slice 2).
    assert states == [("Pending", 0.0), ("Ready", 20.0), ("Down", 194.2),
                      ("Restarting", 194.6), ("Ready", 204.4)]
    # A short outage stays visible in a column that is mostly Ready.
    assert lane_text(lanes(j, found, at(0), NOW)[2], at(0), NOW, width=10).count("X") == 1


def test_why_a_queued_job_waits_names_kueue_and_what_to_do() -> None:
    q = read_job(queued_job())
    found = why_view.findings(q, pools_nodes(), NOW)
    assert [f.topic for f in found] == ["Queued"]
    lines = fits(why_view.render_why(q, found, NOW))
    text = " ".join(" ".join(lines).split())
    assert "Kueue has not admitted the job: it waits in lq for quota" in text
    assert "insufficient quota for google.com/tpu" in text
    assert "Since 10:00:05 UTC (5m ago)." in text
    assert "kubectl get workload jobset-waiting-1a2b3 -n etj-demo" in text


def test_why_a_slice_without_a_pool_lists_each_pool_and_the_quarantine() -> None:
    obj = recovered_job()
    obj["status"]["slices"][2] |= {"state": "Restarting", "reason": "NoHealthyPool",
                                   "readyHosts": 0, "lastTransitionTime": "2026-12-01T10:04:00Z"}
    obj["status"]["slices"][2]["pool"] = None
    j = read_job(obj)
    found = why_view.findings(j, pools_nodes(dead="tpu-v5e-4x4-1-0",
                                             quarantined="tpu-v5e-4x4-1"), NOW)
    assert [f.topic for f in found] == ["NoHealthyPool", "Pools", "Quarantine"]
    text = " ".join(" ".join(fits(why_view.render_why(j, found, NOW))).split())
    assert "Slice 2 is Restarting (NoHealthyPool) since 10:04:00 UTC (70s)" in text
    assert "tpu-v5e-4x4-0: runs slice 0 of this job" in text
    assert "tpu-v5e-4x4-1: quarantined (NodeNotReady: etj-demo/demo: node NotReady)" in text
    assert "tpu-v5e-4x4-3: healthy, 4 nodes Ready, no slice of this job" in text
    assert "Evidence: NodeNotReady (Node) at 10:03:14" in text
    assert "kubectl label nodes -l cloud.google.com/gke-nodepool=tpu-v5e-4x4-1" in text
    nodes_hidden = why_view.findings(j, None, NOW)
    assert "nodes are not readable" in nodes_hidden[0].what


def test_why_a_stall_names_the_step_the_suspects_and_the_evidence() -> None:
    obj = recovered_job()
    obj["status"]["training"]["stall"] = {
        "step": 251, "phase": "Step", "startedAt": "2026-12-01T10:04:40Z",
        "detectedAt": "2026-12-01T10:05:00Z", "deadlineSeconds": 12.0, "suspectSlices": [1],
        "evidence": "slice 1's hosts stopped at the all-reduce"}
    j = read_job(obj)
    stall = next(f for f in why_view.findings(j, [], NOW) if f.topic == "Stall")
    assert "step 251 (Step) has run since 10:04:40 UTC, past its 12.0 s deadline" in stall.what
    assert "suspects slices 1 (slice 1's hosts stopped at the all-reduce)" in stall.what
    assert any(m.kind == "stall" for m in moments(j, []))


def test_why_a_healthy_job_waits_on_nothing() -> None:
    obj = recovered_job()
    obj["status"]["pools"] = []
    j = read_job(obj)
    assert why_view.findings(j, pools_nodes(), NOW) == []
    assert why_view.render_why(j, [], NOW) == [
        "demo (etj-demo): phase Running, 3/3 slices Ready, step 250 (reported 10s ago).",
        "It waits on nothing."]


def test_goodput_by_cause_in_the_fields_words() -> None:
    j = read_job(recovered_job())
    lines = fits(goodput_view.render_goodput(j, NOW))
    assert lines[0].startswith("demo (etj-demo): goodput 80.0 % of 5m00s of wall time")
    rows = {line.split()[0]: line.split()[1:3] for line in lines[3:14]}
    assert rows["productive"] == ["240.0", "80.0"]
    assert rows["waitingForSlices"] == ["8.0", "2.7"]
    # The causes the goodput benchmark's model names (elastic_api.badput), in its order.
    assert list(rows) == ["productive", "waitingForSlices", "fewerSlices", "startup",
                          "restore", "recompile", "recomputedSteps", "stalled", "slowSlices",
                          "checkpointing", "other"]
    data = goodput_view.goodput_json(j, NOW)
    assert data["ratio"] == 0.8
    startup = next(c for c in data["badput"] if c["cause"] == "startup")
    assert startup == {"cause": "startup", "seconds": 30.0, "share": 0.1,
                       "badputType": "PROGRAM_STARTUP"}


def test_tables_cut_the_flexible_column_to_fit() -> None:
    lines = table(["A", "B"], [["x" * 50, "y" * 50]], flexible=1)
    assert len(lines[1]) == 80 and lines[1].endswith("…")


def test_the_picture_is_drawn_from_status_events_and_recorded_steps(tmp_path: Path) -> None:
    path = tmp_path / "t.png"
    steps = [(s, at(30 + 0.6 * s).timestamp()) for s in range(1, 84)]
    draw_job(read_job(recovered_job()), demo_events(), NOW, str(path), at(0), steps)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 20_000
    bare = tmp_path / "bare.png"
    draw_job(read_job(queued_job()), [], NOW, str(bare), at(0))
    assert bare.stat().st_size > 5_000


def test_a_step_curve_alone_is_drawn(tmp_path: Path) -> None:
    path = tmp_path / "t.png"
    steps = [[s, 990.0 + 0.1 * s] for s in range(1, 101)]
    draw_timeline(steps, [Mark(1000.0, "killed", "red")], str(path))
    assert path.stat().st_size > 5_000


def test_event_numbers_of_close_lines_never_share_a_height() -> None:
    # A host dies, the operator and the trainer react within a second; resumed later.
    assert label_levels([30.0, 30.2, 30.9, 36.0, 40.0], span=100) == [0, 1, 2, 0, 0]
    assert label_levels([], span=10) == []


def test_events_of_one_second_keep_their_order_and_a_short_outage_shows() -> None:
    """The operator's Events of one failure share a second: SliceDown comes first, and
    its lane keeps the Down it had (for less than a second) visible."""
    events = [event("SliceReplacing", 194, "slice 2 failed on node pool p", "Warning"),
              event("SliceDown", 194, "slice 2 is down: host 0", "Warning"),
              event("SliceReplaced", 204, "slice 2 replaced and Ready")]
    j = read_job(recovered_job())
    found = moments(j, events)
    assert [m.reason for m in found if m.slice == 2] == ["SliceDown", "SliceReplacing",
                                                        "SliceReplaced"]
    lane = lane_text(lanes(j, found, at(0), NOW)[2], at(0), NOW)
    assert "X~" in lane


def test_long_names_wrap_the_headers_inside_80_columns() -> None:
    obj = recovered_job("a-job-with-a-name-long-enough")
    obj["metadata"]["namespace"] = "a-namespace-of-a-team-with-a-long-name-too"
    j = read_job(obj)
    fits(status_view.render_status(j, NOW))
    fits(timeline_view.render_timeline(j, demo_events(), NOW))
    fits(why_view.render_why(j, why_view.findings(j, pools_nodes(), NOW), NOW))
    fits(goodput_view.render_goodput(j, NOW))
