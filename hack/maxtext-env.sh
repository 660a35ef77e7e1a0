#!/usr/bin/env bash
# The environment real MaxText runs in on this machine (make e2e-maxtext): MaxText 0.2.5
# needs Python >= 3.12, the machine has 3.11. Built once, cached by version outside the
# work tree, reused on every later run:
#
#   rootfs  a Debian $MAXTEXT_DEBIAN_SUITE `debootstrap --variant=minbase` root with python3
#           (3.13) and the machine's CA bundle (pip here needs it)
#           -> $CACHE/maxtext/debian-$MAXTEXT_DEBIAN_SUITE
#   venv    maxtext==$MAXTEXT_VERSION plus its [tpu] extra's requirements less pytype
#           (requirements-tpu.txt), every version pinned by constraints.txt
#           -> <rootfs>/opt/maxtext-$MAXTEXT_VERSION-<hash of the two files>
#
# Both files live in devtools/elastic_devtools/maxtext/. The root is entered with
# `unshare -m` + `chroot` (root only; /proc, /dev and resolv.conf bound in a mount
# namespace of its own, gone when the command ends); elastic_devtools.maxtext.env does the
# same from Python. Prints the venv's python (inside the root) on its last line.
#
#   hack/maxtext-env.sh          set up (or check) the environment
#   hack/maxtext-env.sh --lock   resolve requirements-tpu.txt afresh and rewrite
#                                constraints.txt from what got installed (pip freeze)
#   hack/maxtext-env.sh --shell  a shell inside the root
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=$REPO/devtools/elastic_devtools/maxtext
# shellcheck source=../devtools/elastic_devtools/maxtext/versions.env
source "$DIR/versions.env"
CACHE=${ETJ_CACHE_DIR:-$HOME/.cache/elastic-training-operator}
ROOTFS=$CACHE/maxtext/debian-$MAXTEXT_DEBIAN_SUITE
LOGS=$CACHE/logs
MODE=${1:-setup}

log() { echo "[maxtext-env $(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "[maxtext-env] error: $*" >&2; exit 1; }

# The venv's name: the MaxText version and a hash of what it is installed from, so that a
# change to either makes a new one (the Python side computes the same: env.py).
venv_key() { cat "$DIR/requirements-tpu.txt" "$DIR/constraints.txt" 2>/dev/null | sha256sum | cut -c1-12; }

# run_logged, debian_mirror, pip_ca_bundle.
# shellcheck source=common.sh
source "$REPO/hack/common.sh"

# in_root COMMAND...: COMMAND inside the root with a clean environment (pip's certificate,
# proxies if set), in a mount namespace of its own.
in_root() {
  local env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
             LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt
             PIP_DEFAULT_TIMEOUT=180 PIP_DISABLE_PIP_VERSION_CHECK=1)
  local var
  for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -z "${!var:-}" ] || env+=("$var=${!var}")
  done
  unshare -m -- bash -c '
    set -e
    root=$1; shift
    mount --rbind /proc "$root/proc"
    mount --rbind /dev "$root/dev"
    [ ! -e /etc/resolv.conf ] || mount --bind "$(readlink -f /etc/resolv.conf)" "$root/etc/resolv.conf"
    exec chroot "$root" /usr/bin/env -i "$@"' _ "$ROOTFS" "${env[@]}" "$@"
}


rootfs() {
  if [ -f "$ROOTFS/.etj-ready" ]; then
    log "cached: $(cat "$ROOTFS/.etj-ready") ($ROOTFS)"
    return
  fi
  command -v debootstrap >/dev/null 2>&1 || {
    log "installing debootstrap (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap \
      >"$LOGS/apt-debootstrap.log" 2>&1 || die "apt-get install debootstrap failed (log: $LOGS/apt-debootstrap.log)"
  }
  local mirror tmp ca
  mirror=$(debian_mirror)
  mkdir -p "$CACHE/maxtext"
  rm -rf "$ROOTFS.partial"
  tmp=$ROOTFS.partial
  run_logged "debootstrap --variant=minbase $MAXTEXT_DEBIAN_SUITE from $mirror" \
    "$LOGS/debootstrap-maxtext.log" \
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$MAXTEXT_DEBIAN_SUITE" "$tmp" "$mirror"
  ca=$(pip_ca_bundle)
  if [ -n "$ca" ]; then
    log "adding pip's CA bundle $ca to the root"
    cp "$ca" "$tmp/usr/local/share/ca-certificates/etj-build-host.crt"
    chroot "$tmp" update-ca-certificates >/dev/null 2>&1
  fi
  rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
  [ -e "$tmp/etc/resolv.conf" ] || : >"$tmp/etc/resolv.conf"
  echo "Debian $MAXTEXT_DEBIAN_SUITE, $(chroot "$tmp" python3 --version)" >"$tmp/.etj-ready"
  mv "$tmp" "$ROOTFS"
  log "built: $(cat "$ROOTFS/.etj-ready"), $(du -sh "$ROOTFS" | cut -f1)"
}

# venv NAME CONSTRAINTS: maxtext and requirements-tpu.txt into <root>/opt/NAME.
venv() {
  local name=$1 constraints=$2 target=$ROOTFS/opt/$1
  if [ -f "$target/.etj-ready" ]; then
    log "cached: venv /opt/$name ($(cat "$target/.etj-ready"))"
    return
  fi
  rm -rf "$target"
  mkdir -p "$ROOTFS/opt/etj-install"
  cp "$DIR/requirements-tpu.txt" "$ROOTFS/opt/etj-install/requirements-tpu.txt"
  local args=(-r /opt/etj-install/requirements-tpu.txt "maxtext==$MAXTEXT_VERSION")
  if [ -n "$constraints" ]; then
    cp "$constraints" "$ROOTFS/opt/etj-install/constraints.txt"
    args=(-c /opt/etj-install/constraints.txt "${args[@]}")
  fi
  run_logged "python3 -m venv /opt/$name" "$LOGS/maxtext-venv.log" \
    in_root python3 -m venv "/opt/$name"
  run_logged "pip install maxtext==$MAXTEXT_VERSION and its [tpu] requirements less pytype (~2.8 GB)" \
    "$LOGS/maxtext-pip.log" in_root "/opt/$name/bin/pip" install --progress-bar off "${args[@]}"
  run_logged "pip check" "$LOGS/maxtext-pip-check.log" in_root "/opt/$name/bin/pip" check
  echo "maxtext $MAXTEXT_VERSION, $(du -sh "$target" | cut -f1)" >"$target/.etj-ready"
  log "built: venv /opt/$name ($(cat "$target/.etj-ready"))"
}

[ "$(id -u)" = 0 ] || die "entering the root needs root (unshare -m and chroot); run as root"
mkdir -p "$LOGS"
T0=$(date +%s)
rootfs
case "$MODE" in
  --lock)
    name=maxtext-$MAXTEXT_VERSION-lock
    rm -rf "$ROOTFS/opt/$name"
    venv "$name" ""
    {
      echo "# Every package of the MaxText venv (hack/maxtext-env.sh --lock: pip freeze after"
      echo "# installing maxtext==$MAXTEXT_VERSION and requirements-tpu.txt, Python of Debian $MAXTEXT_DEBIAN_SUITE)."
      in_root "/opt/$name/bin/pip" freeze --all | grep -vE '^(pip|setuptools|wheel)==' || true
    } >"$DIR/constraints.txt"
    log "wrote $DIR/constraints.txt ($(grep -vc '^#' "$DIR/constraints.txt") pins)"
    name=maxtext-$MAXTEXT_VERSION-$(venv_key)
    rm -rf "$ROOTFS/opt/$name"
    mv "$ROOTFS/opt/maxtext-$MAXTEXT_VERSION-lock" "$ROOTFS/opt/$name"
    ;;
  --shell)
    exec_name=maxtext-$MAXTEXT_VERSION-$(venv_key)
    in_root bash -c "PATH=/opt/$exec_name/bin:\$PATH exec bash"
    exit
    ;;
  setup)
    [ -f "$DIR/constraints.txt" ] || die "$DIR/constraints.txt is missing: run $0 --lock"
    venv "maxtext-$MAXTEXT_VERSION-$(venv_key)" "$DIR/constraints.txt"
    ;;
  *) die "unknown argument $MODE (use --lock or --shell, or nothing)" ;;
esac
name=maxtext-$MAXTEXT_VERSION-$(venv_key)
version=$(in_root "/opt/$name/bin/python" -c "import importlib.metadata as m; print(m.version('maxtext'))")
[ "$version" = "$MAXTEXT_VERSION" ] || die "the venv has maxtext $version, not $MAXTEXT_VERSION"
log "ready in $(( $(date +%s) - T0 ))s: maxtext $version in $ROOTFS/opt/$name"
echo "$ROOTFS/opt/$name/bin/python"
