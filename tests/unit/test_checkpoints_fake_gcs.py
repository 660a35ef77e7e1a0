"""The fake-gcs-server runner's pure parts and failure paths (no built binary needed; the
server itself is exercised by tests/integration/test_checkpoints_gcs.py)."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from elastic_devtools.localcluster.gcs import (
    FakeGcsStartError,
    fake_gcs_binary,
    fake_gcs_command,
    free_port,
    require_fake_gcs_binary,
    start_fake_gcs,
)
from elastic_devtools.localcluster.versions import MissingBinaryError, load_versions


def test_binary_path_follows_versions_env_and_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ETJ_CACHE_DIR", str(tmp_path))
    version = load_versions()["FAKE_GCS_VERSION"]
    assert version.startswith("v")
    assert fake_gcs_binary() == tmp_path / "bin" / f"fake-gcs-server-{version}"
    assert fake_gcs_binary({"FAKE_GCS_VERSION": "v9.9.9"}, Path("/c")) == Path(
        "/c/bin/fake-gcs-server-v9.9.9",
    )


def test_missing_binary_names_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ETJ_CACHE_DIR", str(tmp_path))
    with pytest.raises(MissingBinaryError, match=r"hack/build-control-plane\.sh") as info:
        start_fake_gcs(log_dir=tmp_path / "logs")
    assert str(fake_gcs_binary()) in str(info.value)


def test_a_non_executable_file_is_not_a_binary(tmp_path: Path) -> None:
    plain = tmp_path / "fake-gcs-server-v0"
    plain.write_text("not a program")
    with pytest.raises(MissingBinaryError):
        require_fake_gcs_binary(plain)


def test_command_line() -> None:
    command = fake_gcs_command(Path("/bin/fgs"), 4443)
    assert command[0] == "/bin/fgs"
    flags = dict(zip(command[1::2], command[2::2], strict=True))
    assert flags == {
        "-scheme": "http",
        "-host": "127.0.0.1",
        "-port": "4443",
        "-backend": "memory",
        "-external-url": "http://127.0.0.1:4443",
        "-public-host": "127.0.0.1:4443",
        "-log-level": "warn",
    }


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_server_that_exits_at_once_is_reported_with_its_exit_code(tmp_path: Path) -> None:
    # /bin/false is a real program that exits 1 whatever its flags: a server that dies.
    with pytest.raises(FakeGcsStartError, match="exited with code 1 before answering"):
        start_fake_gcs(binary=Path("/bin/false"), log_dir=tmp_path, ready_timeout_s=10)


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    # A real process that runs but does not listen; it must be stopped after the timeout.
    sleeper = tmp_path / "never-answers"
    sleeper.write_text("#!/bin/sh\nexec sleep 60\n")
    sleeper.chmod(0o755)
    with pytest.raises(FakeGcsStartError, match="did not answer"):
        start_fake_gcs(binary=sleeper, log_dir=tmp_path, ready_timeout_s=1)
