from __future__ import annotations

from pathlib import Path

import pytest

from elastic_api.etj_cli import build_parser, main
from elastic_devtools.localcluster.cluster_config import DEFAULT_TPU_POOLS, TpuPoolSpec


def test_up_arguments() -> None:
    args = build_parser().parse_args(
        ["cluster", "up", "--dir", "/tmp/x", "--tpu-pools", "v5e:4x4:3", "--tpu-pools", "v6e:2x2"])
    assert args.cluster_command == "up"
    assert args.dir == Path("/tmp/x")
    assert args.tpu_pools == [TpuPoolSpec("v5e", "4x4", 3), TpuPoolSpec("v6e", "2x2", 1)]


def test_up_defaults() -> None:
    args = build_parser().parse_args(["cluster", "up"])
    assert args.tpu_pools is None and args.dir is None
    assert (TpuPoolSpec("v5e", "4x4", 4),) == DEFAULT_TPU_POOLS  # 3 slices + 1 spare


def test_bad_pool_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["cluster", "up", "--tpu-pools", "v5e:3x3"])
    assert info.value.code == 2
    assert "3x3" in capsys.readouterr().err


def test_kubeconfig_path_and_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "kubeconfig", "--dir", str(tmp_path)]) == 1
    assert "etj cluster up" in capsys.readouterr().err
    (tmp_path / "kubeconfig").write_text("{}")
    assert main(["cluster", "kubeconfig", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "kubeconfig")


def test_status_and_down_of_an_empty_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "status", "--dir", str(tmp_path)]) == 3
    out = capsys.readouterr().out
    assert "kube-apiserver" in out and "stopped" in out
    assert main(["cluster", "down", "--dir", str(tmp_path)]) == 0
    assert "no cluster running" in capsys.readouterr().err


def test_up_without_binaries_says_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ETJ_CACHE_DIR", str(tmp_path / "empty-cache"))
    assert main(["cluster", "up", "--dir", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert "hack/build-control-plane.sh" in err and "kube-apiserver" in err


def test_up_with_kueue_is_opt_in() -> None:
    assert build_parser().parse_args(["cluster", "up", "--kueue"]).kueue is True
    assert build_parser().parse_args(["cluster", "up"]).kueue is False


def test_named_clusters_live_side_by_side(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    from elastic_devtools.localcluster import default_dir

    monkeypatch.setenv("ETJ_CACHE_DIR", str(tmp_path))
    assert default_dir("manager") == tmp_path / "cluster-manager"
    assert default_dir("worker-1") != default_dir("manager")
    args = build_parser().parse_args(["cluster", "up", "--name", "manager", "--multikueue"])
    assert (args.name, args.multikueue) == ("manager", True)
    assert build_parser().parse_args(["cluster", "down", "--name", "w"]).name == "w"
