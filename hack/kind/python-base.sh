#!/usr/bin/env bash
# The Python base both Dockerfiles build FROM (their PYTHON_IMAGE build argument).
# Prints the image to use on its last line: the Dockerfiles' public default where it can be
# pulled, else a local Debian base built from Debian packages and cached:
#   debootstrap --variant=minbase (python3, python3-venv, ca-certificates, passwd for
#   useradd) from the mirror apt uses, a `python` symlink, the machine's CA bundle for pip
#   (`pip config list` names it; pip in a build behind a TLS-inspecting proxy needs it),
#   then `docker import`.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

if have_or_pull "$PYTHON_IMAGE_PUBLIC"; then
  echo "$PYTHON_IMAGE_PUBLIC"
  exit 0
fi
IMAGE=etj-local/debian-python:$KIND_DEBIAN_SUITE
log "cannot pull $PYTHON_IMAGE_PUBLIC: using the local Debian base $IMAGE"


build() {
  command -v debootstrap >/dev/null 2>&1 || {
    [ "$(id -u)" = 0 ] || die "debootstrap is missing (and $PYTHON_IMAGE_PUBLIC cannot be pulled): install debootstrap, or set PYTHON_IMAGE to a Python image you have"
    log "installing debootstrap (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >"$LOGS/apt-debootstrap.log" 2>&1
  }
  [ "$(id -u)" = 0 ] || die "debootstrap needs root (or set PYTHON_IMAGE to a Python image you have)"
  local mirror rootfs ca
  mirror=$(debian_mirror)
  rootfs=$(mktemp -d "$CACHE/debootstrap.XXXXXX")
  run_logged "debootstrap $KIND_DEBIAN_SUITE from $mirror" "$LOGS/debootstrap-python.log" \
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,passwd \
    "$KIND_DEBIAN_SUITE" "$rootfs" "$mirror"
  ln -sf python3 "$rootfs/usr/bin/python"
  ca=$(pip_ca_bundle)
  if [ -n "$ca" ]; then
    log "adding pip's CA bundle $ca to the image (/etc/pip.conf points pip at it)"
    cp "$ca" "$rootfs/usr/local/share/ca-certificates/etj-build-host.crt"
    chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  # An imported rootfs has no image config: give it the PATH and locale python:slim has
  # (the Dockerfiles extend PATH, and an unset PATH would leave only /opt/etj/bin).
  tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$IMAGE" >/dev/null
  rm -rf "$rootfs"
}

ensure_image "$IMAGE" build
echo "$IMAGE"
