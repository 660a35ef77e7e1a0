"""`kubectl etj` and `kubectl get etj` at the record job's size (199 slices of v5e 16x16,
12,736 hosts): every view stays a screen or two in 80 columns, whatever the number of
slices; a job of up to 16 slices keeps a row per slice (groups.py)."""
from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

from elastic_api.crd import PRINTER_COLUMNS
from elastic_api.indices import ranges
from elastic_kubectl import status_view, timeline_view, why_view
from elastic_kubectl.groups import MAX_ROWS, ROW_PER_SLICE_UP_TO
from elastic_kubectl.job import read_job
from elastic_kubectl.picture import draw_job
from tests.kubectl_builders import (
    RECORD_SLICES,
    at,
    event,
    iso,
    job,
    record_events,
    record_job,
    record_nodes,
)

NOW = at(310)


def fits(lines: list[str], most: int) -> list[str]:
    assert lines
    assert [line for line in lines if len(line) > 80] == []
    assert len(lines) <= most, "\n".join(lines)
    return lines


def every_slice(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    for s in obj["status"]["slices"]:
        s.update(fields)
        s.pop("replacement", None)
        s.pop("lastReplacement", None)
    return obj


def small_job(num_slices: int) -> dict[str, Any]:
    slices = [{"index": i, "state": "Ready", "readyHosts": 4, "hosts": 4, "restarts": 0,
               "reason": "AllHostsReady", "lastTransitionTime": iso(20),
               "pool": f"tpu-v5e-4x4-{i}"} for i in range(num_slices)]
    return job("small", {"phase": "Running", "slicesDesired": num_slices,
                         "slicesReady": num_slices, "slices": slices,
                         "conditions": [], "counters": {}},
               tpu={"type": "v5e", "topology": "4x4", "numSlices": num_slices})


def test_ranges_name_runs_by_their_ends() -> None:
    assert ranges([5, 0, 1, 2, 3, 7, 9, 10]) == "0-3, 5, 7, 9, 10"
    assert ranges(range(199)) == "0-198"
    assert ranges([]) == ""


def test_status_summarises_the_ready_slices_and_lists_the_others() -> None:
    lines = fits(status_view.render_status(read_job(record_job()), NOW), 16)
    assert lines[0] == "record (etj-demo)  phase SliceDown  slices 196/199 Ready  step 250/300"
    assert lines[1] == "195 Ready: slices 0-6, 8-41, 43-120, 122-197; 64/64 hosts each"
    rows = {line.split()[0]: line.split()[1] for line in lines[3:7]}
    # The Ready slice that failed last, then every slice not Ready, each with its row.
    assert rows == {"7": "Ready", "42": "Down", "121": "Restarting", "198": "Pending"}
    assert lines[2].split()[:3] == ["SLICE", "STATE", "POOL"]
    assert "…-v5e-16x16-199" in lines[3]  # a pool cut keeps its end
    text = " ".join(lines)
    assert "slice 42: PodFailed 20s ago; blame Job" in text
    assert "(slices 42, 121)" in text


def test_status_of_a_whole_job_pending_or_down_is_a_line_not_199_rows() -> None:
    pending = every_slice(record_job(), state="Pending", reason="WaitingForHosts",
                          readyHosts=0, restarts=0)
    lines = fits(status_view.render_status(read_job(pending), NOW), 10)
    assert lines[1] == "199 Pending (WaitingForHosts): slices 0-198; 0/64 hosts ready each"
    down = every_slice(record_job(), state="Down", reason="PodDeleted", readyHosts=0,
                       restarts=2, lastTransitionTime=iso(300))
    down["status"]["slices"][3].update(reason="NodeNotReady")
    lines = fits(status_view.render_status(read_job(down), NOW), 14)
    assert lines[1:3] == ["198 Down (PodDeleted): slices 0-2, 4-198; 0/64 hosts ready each; "
                          "198 restarted", "    before (396 restarts)"]
    assert lines[4].split()[:2] == ["3", "Down"]


def test_status_keeps_at_most_max_rows_however_the_slices_differ() -> None:
    obj = record_job()
    for s in obj["status"]["slices"]:  # each Down for a reason of its own
        s.update(state="Down", reason=f"Reason{s['index']}", readyHosts=0)
    lines = fits(status_view.render_status(read_job(obj), NOW), 60)
    assert lines[1].startswith("183 Down (183 reasons): slices 16-198; 0/64 hosts ready each")
    header = next(i for i, line in enumerate(lines) if line.startswith("SLICE "))
    assert [line.split()[0] for line in lines[header + 1:header + 1 + MAX_ROWS]] == \
        [str(i) for i in range(MAX_ROWS)]
    assert lines[header + 1 + MAX_ROWS].startswith("  slice 0: Reason0")
    for s in obj["status"]["slices"]:  # two by two
        s["reason"] = f"Reason{s['index'] // 2}"
    lines = fits(status_view.render_status(read_job(obj), NOW), 60)
    assert len([line for line in lines if line.startswith("2 Down (Reason")]) == 8
    assert any(line.startswith("167 Down (84 reasons): slices 32-198") for line in lines)


def test_a_job_of_up_to_16_slices_keeps_a_row_per_slice() -> None:
    lines = status_view.render_status(read_job(small_job(ROW_PER_SLICE_UP_TO)), NOW)
    assert [line.split()[0] for line in lines[2:2 + ROW_PER_SLICE_UP_TO]] == \
        [str(i) for i in range(ROW_PER_SLICE_UP_TO)]
    lines = status_view.render_status(read_job(small_job(ROW_PER_SLICE_UP_TO + 1)), NOW)
    assert lines[1] == "17 Ready: slices 0-16; 4/4 hosts each"
    assert lines[2].startswith("counters:")


def test_status_json_keeps_every_slice() -> None:
    data = status_view.status_json(read_job(record_job()), NOW)
    assert len(data["slices"]) == RECORD_SLICES


def test_timeline_has_a_lane_per_story_not_per_slice() -> None:
    lines = fits(timeline_view.render_timeline(read_job(record_job()), record_events(), NOW),
                 30)
    assert lines[1].startswith("195 slices|.....====") and len(lines[1]) == 80
    assert lines[2] == " " * 11 + "slices 0-6, 8-41, 43-120, 122-197"
    assert [line[:10].strip() for line in lines[3:7]] == ["slice 7", "slice 42", "slice 121",
                                                          "slice 198"]
    assert "X~" in lines[3] and lines[4].endswith("XXXXX|")


def many_failures() -> list[dict[str, Any]]:
    """40 slices failed one after another (each its own story), then 60 at once."""
    events = record_events()
    for k in range(40):
        events += [event("SliceDown", 30 + 6 * k, f"slice {50 + k} is down: host 1 (pod "
                         "x): node n is NotReady", "Warning", "record"),
                   event("SliceReplaced", 35 + 6 * k, f"slice {50 + k} replaced and Ready",
                         name="record")]
    events += [event("SliceDown", 300, f"slice {i} is down: host 0 (pod p-{i}-0) is "
                     "terminating", "Warning", "record") for i in range(100, 160)]
    return events


def test_timeline_keeps_at_most_max_rows_and_one_line_for_a_second_of_many_events() -> None:
    lines = fits(timeline_view.render_timeline(read_job(record_job()), many_failures(), NOW),
                 200)
    lanes = [line for line in lines if line.endswith("|") and line[10] == "|"]
    assert len(lanes) == MAX_ROWS
    assert lanes[-1].startswith("31 slices |")  # the rest: each column the worst of them
    assert " " * 11 + "slices 7, 50-79, each column the worst of them" in lines
    assert "SliceDown for slices 100-159 (60 Events), the first: slice 100 is down" in \
        " ".join(" ".join(lines).split())
    assert sum("SliceDown" in line for line in lines) == 41 + 1 + 1 + 1


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def test_the_picture_of_199_slices_has_a_bounded_height(tmp_path: Path) -> None:
    steps = [(s, at(30 + s).timestamp()) for s in range(1, 250)]
    record, worst = tmp_path / "record.png", tmp_path / "worst.png"
    draw_job(read_job(record_job()), record_events(), NOW, str(record), at(0), steps)
    draw_job(read_job(record_job()), many_failures(), NOW, str(worst), at(0), steps)
    # 110 dpi: 4.8 in of steps, 0.25 in per lane row (five rows; sixteen at most).
    assert png_size(record)[1] < 800
    assert png_size(worst)[1] < 1100


def test_why_names_each_kind_of_wait_once_and_counts_the_pools() -> None:
    obj = record_job()
    obj["status"]["pools"] = [{"name": f"tpu-v5e-16x16-{p}", "quarantined": "NodeNotReady",
                               "quarantinedAt": iso(240), "failures": []}
                              for p in range(121, 141)]
    j = read_job(obj)
    found = why_view.findings(j, record_nodes(), NOW)
    assert [f.topic for f in found] == ["PodFailed", "NoHealthyPool", "WaitingForHosts",
                                        "Pools", *["Quarantine"] * (MAX_ROWS + 1)]
    lines = fits(why_view.render_why(j, found, NOW), 120)
    text = " ".join(" ".join(lines).split())
    assert "Node pools of the job's shape: 198 run a slice of this job; " \
           "tpu-v5e-16x16-121: quarantined (NodeNotReady" in text
    assert "tpu-v5e-16x16-200: healthy, 64 nodes Ready, no slice of this job" in text
    assert "4 more node pools are quarantined: tpu-v5e-16x16-137, " in text


def test_why_a_whole_job_waits_is_one_finding() -> None:
    obj = every_slice(record_job(), state="Pending", reason="WaitingForHosts", readyHosts=0,
                      lastTransitionTime=iso(3))
    obj["status"]["phase"] = "Pending"
    j = read_job(obj)
    found = why_view.findings(j, None, NOW)
    assert [f.topic for f in found] == ["WaitingForHosts"]
    assert found[0].what.startswith("199 slices are Pending (WaitingForHosts): slices "
                                    "0-198; the first since 10:00:03 UTC (5m)")
    fits(why_view.render_why(j, found, NOW), 12)


def printed(obj: dict[str, Any], path: str) -> Any:
    """What kubectl's JSONPath makes of a printer column's path (the forms the CRD uses:
    `.a.b`, escaped dots in a key, one `[?(@.type=="X")]` filter)."""
    value: Any = obj
    for part in re.findall(r'\[\?\(@\.type=="([^"]+)"\)\]|\.((?:[^.\[\\]|\\\.)+)', path):
        wanted, key = part
        if wanted:
            value = next((c for c in value or [] if c.get("type") == wanted), None)
        else:
            value = (value or {}).get(key.replace("\\.", "."))
    return value


def test_kubectl_get_etj_prints_counts_never_lists() -> None:
    """Every printer column of the CRD is one scalar: at 199 slices, a few characters."""
    obj = record_job()
    obj["status"]["conditions"].append({"type": "Admitted", "status": "True",
                                        "reason": "Admitted"})
    values = {c["name"]: printed(obj, c["jsonPath"]) for c in PRINTER_COLUMNS}
    assert values["Ready"] == 196 and values["Slices"] == RECORD_SLICES
    assert values["Status"] == "SliceDown" and values["Admission"] == "Admitted"
    assert {c["type"] for c in PRINTER_COLUMNS} <= {"integer", "string", "date"}
    assert all(len(str(v)) <= 20 for v in values.values()), values


def test_every_slice_is_said_once_whatever_the_mix() -> None:
    """Rows and lines together name each of the 199 slices exactly once."""
    states = ["Ready", "Down", "Restarting", "Pending"]
    for seed in range(1, 8):
        obj = record_job()
        for s in obj["status"]["slices"]:
            k = (s["index"] * seed) % 11
            s.update(state=states[k % 4] if k < 8 else "Ready", reason=f"R{k % 3}")
            if s["state"] == "Ready" and k % 2:  # replaced before
                s["lastReplacement"] = {"action": "Replace", "reason": "PodFailed",
                                        "requestedAt": iso(k), "readyAt": iso(k + 1),
                                        "seconds": 1.0}
        lines = fits(status_view.render_status(read_job(obj), NOW), 70)
        header = next((i for i, line in enumerate(lines) if line.startswith("SLICE ")),
                      len(lines))
        said = sum(int(line.split()[0]) for line in lines[1:header] if line[0].isdigit())
        rows = [line for line in lines[header + 1:] if line[:1].isdigit()]
        assert said + len(rows) == RECORD_SLICES, (seed, lines)
        assert len(rows) <= MAX_ROWS
