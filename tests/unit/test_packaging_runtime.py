"""What running the images in a real container runtime (`make e2e-kind`) revealed, each
checked here without Docker so that it cannot come back unnoticed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> list[str]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while not any(marker in line for line in lines):
        assert time.monotonic() < deadline, f"no {marker!r} within {timeout}s: {lines[-20:]}"
        line = proc.stdout.readline()
        assert line or proc.poll() is None, f"exited {proc.returncode}: {lines[-20:]}"
        lines.append(line)
    return lines


def test_train_exits_143_on_sigterm(tmp_path: Path) -> None:
    """On kind, deleting the head pod took the whole grace period (30 s): `etj train` is the
    container's first process, and the kernel drops a SIGTERM whose action is the default
    for it. `etj` now handles SIGTERM and exits 128 + 15; an unhandled SIGTERM would end
    this subprocess with -15 instead."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "elastic_api.etj_cli", "train", "--steps", "100000",
         "--checkpoint-dir", str(tmp_path / "ckpt"), "--log-every", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    try:
        read_until(proc, "step 2/", timeout=300)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
    finally:
        if proc.poll() is None:
            proc.kill()


# --- hack/kind/runc-wrapper.sh ------------------------------------------------------------
# On the machine the e2e first ran on, processes lack CAP_SYS_RESOURCE (bit 24): Docker's
# privileged containers (kind's nodes) failed with "unable to apply caps". The wrapper
# leaves out of a container's spec the capabilities our bounding set lacks.

BOUNDING_WITHOUT_SYS_RESOURCE = "000001fffeffffff"  # bits 0-40 but 24
FULL_BOUNDING = "000001ffffffffff"
CAPS = ["CAP_CHOWN", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_BPF"]


def run_wrapper(tmp_path: Path, args: list[str], cap_bnd: str) -> str:
    status = tmp_path / "status"
    status.write_text(f"Name:\tx\nCapBnd:\t{cap_bnd}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    runc = bin_dir / "runc"  # the real runc, as far as the wrapper knows: records its args
    runc.write_text(f"#!/bin/sh\necho \"$*\" >{tmp_path}/runc-args\n")
    runc.chmod(0o755)
    result = subprocess.run(
        ["sh", str(ROOT / "hack/kind/runc-wrapper.sh"), *args], capture_output=True, text=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "ETJ_PROC_STATUS": str(status)}, timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return (tmp_path / "runc-args").read_text().strip()


def capability_sets(caps: list[str]) -> dict[str, list[str]]:
    return {k: list(caps) for k in ("bounding", "effective", "permitted", "inheritable")}


def test_runc_wrapper_drops_missing_capabilities_from_a_new_container(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(
        {"ociVersion": "1.0.2", "process": {"capabilities": capability_sets(CAPS)}}))
    args = ["--root", "/run/x", "create", "--bundle", str(bundle), "--pid-file", "p", "id1"]
    assert run_wrapper(tmp_path, args, BOUNDING_WITHOUT_SYS_RESOURCE) == " ".join(args)
    config = json.loads((bundle / "config.json").read_text())
    kept = [c for c in CAPS if c != "CAP_SYS_RESOURCE"]
    assert config["process"]["capabilities"] == capability_sets(kept)
    assert config["ociVersion"] == "1.0.2"


def test_runc_wrapper_drops_missing_capabilities_from_an_exec(tmp_path: Path) -> None:
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["true"], "capabilities": capability_sets(CAPS)}))
    run_wrapper(tmp_path, ["exec", "--process", str(process), "--detach", "id1"],
                BOUNDING_WITHOUT_SYS_RESOURCE)
    assert "CAP_SYS_RESOURCE" not in process.read_text()
    assert json.loads(process.read_text())["args"] == ["true"]


def test_runc_wrapper_changes_nothing_where_no_capability_is_missing(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    text = json.dumps({"process": {"capabilities": capability_sets(CAPS)}})
    (bundle / "config.json").write_text(text)
    run_wrapper(tmp_path, ["create", "--bundle", str(bundle), "id1"], FULL_BOUNDING)
    assert (bundle / "config.json").read_text() == text
