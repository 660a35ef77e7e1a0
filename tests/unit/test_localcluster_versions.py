from __future__ import annotations

from pathlib import Path

import pytest

from elastic_devtools.localcluster.versions import (
    BUILD_HINT,
    COMPAT_VERSIONS_FILE,
    VERSIONS_FILE,
    VERSIONS_FILE_ENV,
    Binaries,
    MissingBinaryError,
    load_versions,
    parse_versions_env,
    versions_file,
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


def test_versions_file_is_selected_by_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other.env"
    other.write_text("KUBERNETES_VERSION=v1.0.0\n")
    monkeypatch.setenv(VERSIONS_FILE_ENV, str(other))
    assert versions_file() == other and load_versions() == {"KUBERNETES_VERSION": "v1.0.0"}
    monkeypatch.setenv(VERSIONS_FILE_ENV, str(tmp_path / "missing.env"))
    with pytest.raises(MissingBinaryError, match=r"missing\.env not found"):
        load_versions()
    monkeypatch.delenv(VERSIONS_FILE_ENV)
    assert versions_file() == VERSIONS_FILE


def test_compat_pins_the_same_control_plane_keys_at_older_versions() -> None:
    current = parse_versions_env(VERSIONS_FILE.read_text())
    compat = parse_versions_env(COMPAT_VERSIONS_FILE.read_text())
    control_plane = {k for k in current if not k.startswith(("KIND_", "PYTHON_IMAGE"))}
    assert set(compat) == control_plane
    # The previous Kubernetes minor; JobSet and Kueue as current where the current pins are
    # their newest releases (issue 66: the previous pins, 1.36, became the compat ones).
    assert compat["KUBERNETES_VERSION"] != current["KUBERNETES_VERSION"]


def test_pinned_checksums_are_hex_of_their_algorithm_or_empty() -> None:
    lengths = {"SHA256": 64, "SHA512": 128}
    for path in (VERSIONS_FILE, COMPAT_VERSIONS_FILE):
        for key, value in parse_versions_env(path.read_text()).items():
            algo = key.rsplit("_", 1)[-1]
            if algo in lengths and value:
                assert len(value) == lengths[algo], (path.name, key)
                int(value, 16)
