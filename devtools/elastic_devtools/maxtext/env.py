"""Where hack/maxtext-env.sh put real MaxText, and how to run a process inside it.

The environment is a Debian root (python3 >= 3.12, which MaxText needs) with a venv of
`maxtext==MAXTEXT_VERSION` under `/opt/maxtext-<version>-<hash of the requirement files>`,
cached in `$ETJ_CACHE_DIR/maxtext/debian-<suite>`. A process is run inside it with
`unshare -m` and `chroot` (root only): a mount namespace of its own, /proc and /dev bound
in, the host's resolv.conf, and host directories bound at the paths the pod has them (the
head's /tmp above all). The bindings go when the process ends.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from elastic_devtools.localcluster.versions import cache_dir, parse_versions_env

HERE = Path(__file__).resolve().parent
VERSIONS_FILE = HERE / "versions.env"
REQUIREMENTS_FILE = HERE / "requirements-tpu.txt"
CONSTRAINTS_FILE = HERE / "constraints.txt"
SETUP_SCRIPT = "hack/maxtext-env.sh"
READY_STAMP = ".etj-ready"
# The image's own environment in MaxText's runner images (not the pod's): where python3 is,
# a writable home (the head's /tmp, as our trainer image has it), UTF-8.
IMAGE_ENV = {"HOME": "/tmp", "LANG": "C.UTF-8"}


class MaxTextEnvMissing(RuntimeError):
    """hack/maxtext-env.sh has not set the environment up (or not for these pins)."""


def versions() -> dict[str, str]:
    return parse_versions_env(VERSIONS_FILE.read_text())


def venv_key() -> str:
    """As hack/maxtext-env.sh names the venv: a hash of the two requirement files."""
    data = REQUIREMENTS_FILE.read_bytes() + CONSTRAINTS_FILE.read_bytes()
    return hashlib.sha256(data).hexdigest()[:12]


@dataclass(frozen=True)
class MaxTextEnv:
    rootfs: Path  # on the host
    venv: str  # inside the root
    version: str

    @classmethod
    def locate(cls, cache: Path | None = None) -> MaxTextEnv:
        v = versions()
        root = (cache or cache_dir()) / "maxtext" / f"debian-{v['MAXTEXT_DEBIAN_SUITE']}"
        env = cls(rootfs=root, venv=f"/opt/maxtext-{v['MAXTEXT_VERSION']}-{venv_key()}",
                  version=v["MAXTEXT_VERSION"])
        for stamp in (root / READY_STAMP, env.host_path(env.venv) / READY_STAMP):
            if not stamp.is_file():
                raise MaxTextEnvMissing(
                    f"MaxText {env.version} is not set up: {stamp} is missing.\n"
                    f"Fix: run {SETUP_SCRIPT} (as root; a few minutes the first time).")
        return env

    def host_path(self, path_in_root: str) -> Path:
        return self.rootfs / path_in_root.lstrip("/")

    @property
    def path(self) -> str:
        """PATH inside the root: the venv's python3 first, as in an image with MaxText."""
        return f"{self.venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    def command(self, argv: Sequence[str], env: Mapping[str, str],
                binds: Mapping[str, Path], cwd: str = "/") -> list[str]:
        """The host command that runs `argv` in the root with exactly `env` (plus PATH and
        the image's environment where `env` leaves them unset), the host directories
        `binds` mounted at their paths in the root, in `cwd`."""
        full = {"PATH": self.path, **IMAGE_ENV, **env}
        mounts = ['mount --rbind /proc "$root/proc"', 'mount --rbind /dev "$root/dev"',
                  '[ ! -e /etc/resolv.conf ] || mount --bind "$(readlink -f /etc/resolv.conf)"'
                  ' "$root/etc/resolv.conf"']
        script_args: list[str] = []
        for i, (inside, host) in enumerate(sorted(binds.items())):
            mounts.append(f'mkdir -p "$root{inside}" && mount --bind "${{{i + 2}}}" '
                          f'"$root{inside}"')
            script_args.append(str(host))
        script = "set -e; root=$1; " + "; ".join(mounts) + \
            f'; shift {len(binds) + 1}; exec chroot "$root" /usr/bin/env -i "$@"'
        entry = ["/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cwd, *argv]
        return ["unshare", "-m", "--", "bash", "-c", script, "maxtext-root", str(self.rootfs),
                *script_args, *(f"{k}={v}" for k, v in full.items()), *entry]


def require_root() -> None:
    if os.geteuid() != 0:
        raise MaxTextEnvMissing("running MaxText in its root needs root (unshare -m, chroot)")
