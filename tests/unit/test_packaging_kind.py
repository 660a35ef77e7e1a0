"""hack/kind-e2e.sh without Docker: how it finds (or makes) a Docker engine.

The script runs for real with a PATH of symlinks to real tools plus small fakes (`id`,
`docker`, `apt-get`, `dockerd`) that record what they were asked, so no test installs or
starts anything on the machine that runs it.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
REAL_TOOLS = ["bash", "dirname", "date", "cat", "tail", "mktemp", "rm", "mkdir", "grep",
              "sed", "printf", "seq", "sleep", "setsid", "nohup", "awk", "tr", "basename",
              "chmod", "touch", "install", "cut", "uname"]


def tool_dir(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in REAL_TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run this test"
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def fake(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def run_kind_e2e(
    bin_dir: Path, os_release: str = "ID=debian\n",
) -> subprocess.CompletedProcess[str]:
    release = bin_dir.parent / "os-release"
    release.write_text(os_release)
    return subprocess.run(
        ["bash", str(ROOT / "hack" / "kind-e2e.sh")], capture_output=True, text=True,
        timeout=120, env={"PATH": str(bin_dir), "HOME": str(bin_dir.parent),
                          "ETJ_OS_RELEASE": str(release)},
    )


def test_without_docker_and_not_root_it_says_so_and_changes_nothing(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path)
    fake(bin_dir, "id", "echo 1000\n")
    fake(bin_dir, "apt-get", f"echo called >{tmp_path}/apt-get-called\n")
    result = run_kind_e2e(bin_dir)
    assert result.returncode == 1, result
    assert "Docker is not installed" in result.stderr and "Nothing was run" in result.stderr
    assert "FAILED in phase: docker" in result.stdout and "PASS" not in result.stdout
    assert not (tmp_path / "apt-get-called").exists()


def test_as_root_on_another_distribution_it_does_not_install_docker(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path)
    fake(bin_dir, "id", "echo 0\n")
    fake(bin_dir, "apt-get", f"echo called >{tmp_path}/apt-get-called\n")
    result = run_kind_e2e(bin_dir, os_release="ID=fedora\n")
    assert result.returncode == 1, result
    assert "Docker is not installed" in result.stderr
    assert not (tmp_path / "apt-get-called").exists()


def test_an_unreachable_engine_is_reported_with_docker_s_own_words(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path)
    fake(bin_dir, "id", "echo 1000\n")
    fake(bin_dir, "docker", "echo 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    result = run_kind_e2e(bin_dir)
    assert result.returncode == 1, result
    assert "cannot reach a Docker engine" in result.stderr
    assert "Cannot connect to the Docker daemon" in result.stderr
    assert "PASS" not in result.stdout


def test_as_root_on_debian_it_installs_and_starts_docker_saying_so(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path)
    up = tmp_path / "daemon-up"
    fake(bin_dir, "id", "echo 0\n")
    # apt-get "installs" a dockerd; that dockerd marks the engine up; docker sees it.
    fake(bin_dir, "apt-get", f"echo \"$*\" >{tmp_path}/apt-get-args\n"
         f"printf '#!/bin/sh\\ntouch {up}\\n' >{bin_dir}/dockerd\nchmod +x {bin_dir}/dockerd\n")
    fake(bin_dir, "docker", f"[ -e {up} ] || {{ echo 'Cannot connect' >&2; exit 1; }}\n"
         "[ \"$1\" = version ] && echo 20.10.24\nexit 0\n")
    result = run_kind_e2e(bin_dir)
    assert "install -y --no-install-recommends docker.io" in (tmp_path / "apt-get-args").read_text()
    assert "installing Debian's docker.io" in result.stderr
    assert "starting dockerd" in result.stderr
    # The engine phase passed; the run stops at the next one (no kubectl on this PATH).
    assert "FAILED in phase: tools" in result.stdout, result
    assert "started: dockerd 20.10.24" in result.stdout
    assert result.returncode == 1 and "PASS" not in result.stdout


def kind_config(tmp_path: Path, cgroup_fs: str) -> dict[str, Any]:
    """hack/kind/steps.sh's kind_config, sourced as kind-e2e.sh sources it."""
    script = (f'source "{ROOT}/hack/kind/lib.sh"; source "{ROOT}/hack/kind/steps.sh"; '
              f"kind_config {cgroup_fs}")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                          text=True, timeout=60, check=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "TMPDIR": str(tmp_path)})
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


def test_a_cgroup_v1_host_s_kubelet_is_told_not_to_refuse_it(tmp_path: Path) -> None:
    # Kubernetes >= 1.35's kubelet exits on cgroup v1 unless failCgroupV1 is false; that
    # host (tmpfs at /sys/fs/cgroup) gets the patch, a cgroup v2 host kind's own config.
    v1 = kind_config(tmp_path, "tmpfs")
    assert v1["nodes"] == [{"role": "control-plane"}]
    [patch] = v1["kubeadmConfigPatches"]
    assert yaml.safe_load(patch) == {"kind": "KubeletConfiguration", "failCgroupV1": False}
    assert kind_config(tmp_path, "cgroup2fs") == {
        "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4",
        "nodes": [{"role": "control-plane"}]}
