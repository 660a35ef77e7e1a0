"""bench/node.py: the operator's node modelled with cgroups (what its CPU request buys it
on a busy node). The weights and CPU lists are pure; the groups are checked on a fake
cgroup tree (a folder), since writing the real one needs root. That the kernel then
shares the CPU by them is the benchmark's to measure (docs/benchmarks.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench import __main__ as cli
from bench import node as node_module
from bench.common import REPO
from bench.load import LoadGenerator
from bench.node import (
    NAME,
    NodeModel,
    chart_request_m,
    parse_millicores,
    shares,
    split_cpus,
    unavailable,
)


def test_a_cpu_quantity_in_millicores() -> None:
    assert parse_millicores("500m") == 500
    assert parse_millicores("1") == 1000
    assert parse_millicores("0.25") == 250


@pytest.mark.parametrize("text", ["half", "0", "-100m"])
def test_a_bad_quantity_names_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--operator-request"):
        parse_millicores(text)


def test_the_operator_weighs_its_request_and_the_tenants_the_rest_of_the_node() -> None:
    # As the kubelet sets cpu.shares: a request's millicores x 1024 / 1000.
    assert shares(500, 1) == (512, 512)
    assert shares(250, 1) == (256, 768)
    assert shares(500, 2) == (512, 1536)


def test_a_request_the_node_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="1000m"):
        shares(1000, 1)


def test_cpu_zero_is_the_node_and_the_rest_outside() -> None:
    assert split_cpus(2) == ("0", "1")
    assert split_cpus(8) == ("0", "1-7")
    with pytest.raises(ValueError, match="at least 2 CPUs"):
        split_cpus(1)


def fake_cgroups(root: Path) -> Path:
    for controller in ("cpu", "cpuset"):
        (root / controller).mkdir(parents=True)
        (root / controller / "tasks").write_text("")
    (root / "cpuset" / "cpuset.mems").write_text("0\n")
    return root


def test_the_groups_hold_the_cpus_and_weights(tmp_path: Path) -> None:
    node = NodeModel(500, cpus=4, root=fake_cgroups(tmp_path))
    node.create()
    cpuset, cpu = tmp_path / "cpuset" / NAME, tmp_path / "cpu" / NAME
    assert (cpuset / "cpuset.cpus").read_text() == "0-3"
    assert (cpuset / "node" / "cpuset.cpus").read_text() == "0"
    assert (cpuset / "outside" / "cpuset.cpus").read_text() == "1-3"
    assert (cpuset / "node" / "cpuset.mems").read_text() == "0"
    assert (cpu / "operator" / "cpu.shares").read_text() == "512"
    assert (cpu / "tenants" / "cpu.shares").read_text() == "512"


def test_each_process_goes_where_it_runs(tmp_path: Path) -> None:
    node = NodeModel(500, cpus=2, root=fake_cgroups(tmp_path))
    node.create()
    node.place_operator(11)
    node.place_tenant(22)
    node.place_outside(33)
    procs = {str(p.parent.relative_to(tmp_path)): p.read_text()
             for p in tmp_path.rglob("cgroup.procs")}
    assert procs == {f"cpuset/{NAME}/node": "22", f"cpu/{NAME}/operator": "11",
                     f"cpu/{NAME}/tenants": "22", f"cpuset/{NAME}/outside": "33"}


def test_removing_sends_every_process_back_and_names_a_group_left(tmp_path: Path) -> None:
    node = NodeModel(500, cpus=2, root=fake_cgroups(tmp_path))
    node.create()
    node.place_operator(11)
    # A folder of files cannot be removed as a cgroup can: the groups are named.
    with pytest.raises(RuntimeError, match=f"cgroups left behind: .*{NAME}/operator"):
        node.remove(timeout_s=0.0)
    assert (tmp_path / "cpu" / "cgroup.procs").read_text() == "11"
    assert (tmp_path / "cpuset" / "cgroup.procs").read_text() == "11"


def test_a_machine_without_the_controllers_is_told_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "tasks").write_text("")
    with pytest.raises(RuntimeError, match="cgroup v1's cpuset"):
        NodeModel(500, cpus=2, root=tmp_path).create()


def test_the_load_generator_places_each_burner() -> None:
    placed: list[int] = []
    generator = LoadGenerator(1, place=placed.append)
    generator._resize(2)  # what its loop does once it has measured the load
    try:
        assert placed == [proc.pid for proc, _ in generator._procs]
        assert len(set(placed)) == 2
    finally:
        generator.stop()
    assert generator._procs == []


def test_the_default_request_is_the_charts(tmp_path: Path) -> None:
    import yaml

    values = yaml.safe_load((REPO / "charts/elastic-operator/values.yaml").read_text())
    assert chart_request_m() == parse_millicores(str(values["resources"]["requests"]["cpu"]))
    (tmp_path / "values.yaml").write_text("resources:\n  requests:\n    cpu: 750m\n")
    assert chart_request_m(tmp_path / "values.yaml") == 750
    (tmp_path / "values.yaml").write_text("resources: {}\n")
    with pytest.raises(ValueError, match=r"resources\.requests\.cpu.*--operator-request"):
        chart_request_m(tmp_path / "values.yaml")


def test_a_machine_that_cannot_model_the_node_says_why(tmp_path: Path) -> None:
    root = fake_cgroups(tmp_path / "ok")
    assert unavailable(root, cpus=2, euid=0) is None
    assert "root" in (unavailable(root, cpus=2, euid=1000) or "")
    assert "2 CPUs" in (unavailable(root, cpus=1, euid=0) or "")
    assert "cpuset" in (unavailable(tmp_path / "v2-only", cpus=2, euid=0) or "")


def test_under_load_the_node_is_modelled_with_the_charts_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_module, "unavailable", lambda: None)
    chart = chart_request_m()
    assert cli.operator_placement(None, 0, 10.0) == (chart, None)
    assert cli.operator_placement(250, 0, 10.0) == (250, None)
    # none, no load, or a nice asked for: the operator among the burners.
    assert cli.operator_placement(cli._cpu("none"), 0, 10.0) == (None, None)
    assert cli.operator_placement(None, 0, 0.0) == (None, None)
    assert cli.operator_placement(None, -5, 10.0) == (None, None)


def test_a_machine_without_the_model_falls_back_and_says_so(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(node_module, "unavailable", lambda: "it needs root")
    assert cli.operator_placement(None, 0, 10.0) == (None, "it needs root")
    assert "not modelled (it needs root)" in capsys.readouterr().err
    args = cli.parse_args(["--only", "scale", "--operator-request", "none"])
    assert args.operator_request == cli.NO_NODE_MODEL
