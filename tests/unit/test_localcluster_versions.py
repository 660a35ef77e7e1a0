from __future__ import annotations

from pathlib import Path

import pytest

from elastic_devtools.localcluster.versions import (
    BUILD_HINT,
    Binaries,
    MissingBinaryError,
    load_versions,
    parse_versions_env,
)


def test_parse_versions_env() -> None:
    text = "# comment\n\nA=v1\n B = 'v2' \nC=\"v3\"\n"
    assert parse_versions_env(text) == {"A": "v1", "B": "v2", "C": "v3"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_versions_env("oops\n")


def test_pinned_versions_file_has_every_component() -> None:
    versions = load_versions()
    for key in ("KUBERNETES_VERSION", "ETCD_VERSION", "JOBSET_VERSION", "KWOK_VERSION"):
        assert versions[key].startswith("v"), key


def test_binaries_are_keyed_by_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "mod"))
    versions = {"KUBERNETES_VERSION": "v1.2.3", "ETCD_VERSION": "v3.0.0",
                "JOBSET_VERSION": "v0.1.0", "KWOK_VERSION": "v0.7.0"}
    b = Binaries.locate(versions, tmp_path)
    assert b.kube_apiserver == tmp_path / "bin/kube-apiserver-v1.2.3"
    assert b.jobset_controller == tmp_path / "bin/jobset-controller-v0.1.0"
    assert b.jobset_crd == tmp_path / "jobset-v0.1.0/crd.yaml"
    assert b.kwok_stages == tmp_path / "mod/sigs.k8s.io/kwok@v0.7.0/kustomize/stage"


def test_missing_binaries_error_names_them_and_the_fix(tmp_path: Path) -> None:
    versions = {"KUBERNETES_VERSION": "v1.2.3", "ETCD_VERSION": "v3.0.0",
                "JOBSET_VERSION": "v0.1.0", "KWOK_VERSION": "v0.7.0"}
    b = Binaries.locate(versions, tmp_path)
    (tmp_path / "bin").mkdir()
    b.etcd.write_text("")
    with pytest.raises(MissingBinaryError) as info:
        b.require()
    message = str(info.value)
    assert "kube-apiserver-v1.2.3" in message
    assert "etcd-v3.0.0" not in message
    assert BUILD_HINT in message and "hack/build-control-plane.sh" in message
