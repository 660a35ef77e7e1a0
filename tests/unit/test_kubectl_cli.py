"""`kubectl etj`'s command line and its reader, on a stand-in API: kubectl's flags before
or after the command, -o json, and the errors a person gets (no such job, no CRD, no
access), with what it shows when only the Events or the nodes are out of reach."""
from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from elastic_api.kube import ApiError
from elastic_kubectl import kubectl_cli
from elastic_kubectl.reader import PluginError, Reader
from tests.kubectl_builders import at, demo_events, pools_nodes, recovered_job

ROOT = Path(__file__).resolve().parents[2]
NOW = at(310)


def status_body(code: int, reason: str, message: str, **details: Any) -> str:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                       "reason": reason, "message": message, "details": details})


class StandInApi:
    """GETs answered from a dict of path -> object, or an ApiError."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, dict[str, str] | None]] = []

    def get(self, path: str, *, query: dict[str, str] | None = None, **_: Any) -> Any:
        self.asked.append((path, query))
        answer = self.answers.get(path)
        if answer is None:  # as the API server says it of an object it does not have
            kind = {"group": "elastic.pathways.dev", "kind": "elastictrainingjobs"} \
                if "/elastictrainingjobs/" in path else {}
            raise ApiError(404, "Not Found", status_body(404, "NotFound", "not found", **kind))
        if isinstance(answer, ApiError):
            raise answer
        return answer


JOB_PATH = "/apis/elastic.pathways.dev/v1alpha1/namespaces/etj-demo/elastictrainingjobs/demo"
EVENTS_PATH = "/api/v1/namespaces/etj-demo/events"
NODES_PATH = "/api/v1/nodes"
FORBIDDEN = ApiError(403, "Forbidden", status_body(
    403, "Forbidden", 'elastictrainingjobs.elastic.pathways.dev "demo" is forbidden: User '
    '"system:serviceaccount:etj-demo:nobody" cannot get resource "elastictrainingjobs"'))


def run(argv: list[str], api: StandInApi, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setattr(kubectl_cli, "connect", lambda kubeconfig, context: api)
    monkeypatch.setattr(kubectl_cli, "default_namespace", lambda kubeconfig, context: "default")
    out = io.StringIO()
    args = kubectl_cli.build_parser().parse_args(argv)
    try:
        return kubectl_cli.run(args, out, clock=lambda: NOW), out.getvalue()
    except PluginError as e:
        return 1, str(e)


def demo_api() -> StandInApi:
    return StandInApi({JOB_PATH: recovered_job(), EVENTS_PATH: {"items": demo_events()},
                       NODES_PATH: {"items": pools_nodes()}})


@pytest.mark.parametrize("argv", [["status", "demo", "-n", "etj-demo"],
                                  ["-n", "etj-demo", "status", "demo"],
                                  ["--namespace", "etj-demo", "status", "demo"]])
def test_kubectls_flags_go_before_or_after_the_command(
        argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out = run(argv, demo_api(), monkeypatch)
    assert rc == 0 and out.startswith("demo (etj-demo)  phase Running")


def test_without_n_the_contexts_namespace_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    api = demo_api()
    rc, message = run(["status", "demo"], api, monkeypatch)
    assert rc == 1 and 'no ElasticTrainingJob "demo" in namespace default' in message
    assert api.asked[0][0].endswith("/namespaces/default/elastictrainingjobs/demo")


@pytest.mark.parametrize("command", ["status", "timeline", "why", "goodput"])
def test_every_command_has_json(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out = run([command, "demo", "-n", "etj-demo", "-o", "json"], demo_api(), monkeypatch)
    data = json.loads(out)
    assert rc == 0 and data["name"] == "demo" and data["namespace"] == "etj-demo"


def test_the_timeline_reads_the_jobs_events_only(monkeypatch: pytest.MonkeyPatch) -> None:
    api = demo_api()
    rc, out = run(["timeline", "demo", "-n", "etj-demo", "-o", "json"], api, monkeypatch)
    assert rc == 0
    assert (EVENTS_PATH, {"fieldSelector": "involvedObject.kind=ElasticTrainingJob,"
                                           "involvedObject.name=demo"}) in api.asked
    assert "SliceReplaced" in [m["reason"] for m in json.loads(out)["moments"]]


def test_no_such_job_no_crd_and_no_access_are_said_plainly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    missing = StandInApi({JOB_PATH: ApiError(404, "Not Found", status_body(
        404, "NotFound", 'elastictrainingjobs.elastic.pathways.dev "demo" not found',
        name="demo", group="elastic.pathways.dev", kind="elastictrainingjobs"))})
    rc, message = run(["status", "demo", "-n", "etj-demo"], missing, monkeypatch)
    assert rc == 1 and message.startswith('no ElasticTrainingJob "demo" in namespace etj-demo')
    no_crd = StandInApi({JOB_PATH: ApiError(404, "Not Found", "404 page not found")})
    rc, message = run(["status", "demo", "-n", "etj-demo"], no_crd, monkeypatch)
    assert "the ElasticTrainingJob CRD is not installed" in message
    rc, message = run(["why", "demo", "-n", "etj-demo"], StandInApi({JOB_PATH: FORBIDDEN}),
                      monkeypatch)
    assert rc == 1 and message.startswith("not allowed to read ElasticTrainingJob demo in "
                                          "namespace etj-demo")
    assert "cannot get resource" in message and "get, list and watch" in message


def test_events_and_nodes_out_of_reach_are_named_not_fatal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    api = StandInApi({JOB_PATH: recovered_job(), EVENTS_PATH: FORBIDDEN, NODES_PATH: FORBIDDEN})
    rc, out = run(["timeline", "demo", "-n", "etj-demo"], api, monkeypatch)
    assert rc == 0 and "note: Events not readable (Forbidden)" in out
    rc, out = run(["why", "demo", "-n", "etj-demo", "-o", "json"], api, monkeypatch)
    assert rc == 0 and any("nodes not readable" in n for n in json.loads(out)["notes"])


def test_png_is_drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    png = tmp_path / "timeline.png"
    rc, out = run(["timeline", "demo", "-n", "etj-demo", "--png", str(png), "--since", "1h"],
                  demo_api(), monkeypatch)
    assert rc == 0 and png.read_bytes()[:4] == b"\x89PNG"
    assert out.startswith("demo (etj-demo): ")  # the text timeline too


def test_a_bad_since_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        kubectl_cli.build_parser().parse_args(["timeline", "demo", "--since", "yesterday"])
    assert exit_.value.code == 2
    assert "use a duration such as 30s, 5m, 1h" in capsys.readouterr().err


def test_the_plugin_is_installed_as_kubectl_etj_with_the_cli_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["kubectl-etj"] == "elastic_kubectl.kubectl_cli:main"
    cli_extra = project["optional-dependencies"]["cli"]
    pins = set((ROOT / "constraints.txt").read_text().split())
    assert {d for d in cli_extra if d.split("==")[0] in ("kubernetes", "matplotlib")} <= pins
    krew = (ROOT / "kubectl" / "krew" / "etj.yaml").read_text()
    assert "kind: Plugin" in krew and "name: etj" in krew and "bin: kubectl-etj" in krew


def test_reader_degrades_on_events_only_for_access(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = ApiError(500, "Internal Server Error", status_body(500, "InternalError", "etcd"))
    reader = Reader(StandInApi({EVENTS_PATH: broken}), "etj-demo")  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="listing the job's Events failed"):
        reader.events(recovered_job())


class WatchedApi(StandInApi):
    """One watch round brings a newer version of the job (the trainer at step 260);
    the next one is the user's Ctrl-C."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__(answers)
        self.rounds = 0
        self.watched: list[tuple[str, str, str | None]] = []

    def watch(self, path: str, version: str, timeout_s: int, *,
              field_selector: str | None = None, **_: Any) -> Any:
        self.rounds += 1
        self.watched.append((path, version, field_selector))
        if self.rounds > 1:
            raise KeyboardInterrupt
        newer = recovered_job()
        newer["metadata"]["resourceVersion"] = "43"
        newer["status"]["training"] |= {"step": 260, "observedAt": "2026-12-01T10:05:06Z"}
        yield {"type": "MODIFIED", "object": newer}


def test_a_watch_shows_each_change_and_draws_the_picture_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = WatchedApi({JOB_PATH: recovered_job(), EVENTS_PATH: {"items": demo_events()}})
    png = tmp_path / "live.png"
    rc, out = run(["timeline", "demo", "-n", "etj-demo", "-w", "--png", str(png)], api,
                  monkeypatch)
    assert rc == 0 and png.stat().st_size > 20_000
    assert api.watched[0] == ("/apis/elastic.pathways.dev/v1alpha1/namespaces/etj-demo/"
                              "elastictrainingjobs", "42", "metadata.name=demo")
    # The new version changed nothing the timeline shows (at the same time): not repeated.
    assert out.count("demo (etj-demo): 10:00:00 to 10:05:10") == 1
    api = WatchedApi({JOB_PATH: recovered_job()})
    rc, out = run(["status", "demo", "-n", "etj-demo", "-w", "-o", "json"], api, monkeypatch)
    steps = [json.loads(line)["step"] for line in out.splitlines()]
    assert rc == 0 and steps[:2] == [250, 260]


def test_trainer_written_strings_reach_the_terminal_without_control_characters(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A trainer writes status.training and a pod's failure reaches the Events: an escape
    sequence (a colour, a cursor move, OSC 52 writing the clipboard), a bell, a bidi
    override or a newline making a line of its own is shown as `?`, never sent on."""
    job = recovered_job()
    hostile = "ok\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\u202eevil\nSliceReplaced fake"
    job["status"]["training"]["message"] = hostile
    job["status"]["conditions"][0]["message"] = hostile
    events = demo_events()
    for event in events:  # whichever the timeline shows
        event["message"] = hostile
    api = StandInApi({JOB_PATH: job, EVENTS_PATH: {"items": events},
                      NODES_PATH: {"items": pools_nodes()}})
    rc, out = run(["timeline", "demo", "-n", "etj-demo"], api, monkeypatch)
    assert rc == 0 and "?evil" in out and "?]52;c;" in out  # shown, not acted on
    assert not any(c in out for c in "\x1b\x07\u202e"), out
    assert not any(line.startswith("SliceReplaced fake") for line in out.splitlines())
