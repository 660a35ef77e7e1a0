#!/usr/bin/env bash
# Make sure a Docker engine is reachable. Uses the one that is there (DOCKER_HOST or the
# default socket). Only where none is reachable AND this runs as root on Debian does it
# install Debian's docker.io (if dockerd is missing) and start dockerd itself, saying so.
# Anywhere else (a laptop, no root) it stops and says what to do: it never changes a
# user's system.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

engine_up() { docker info >/dev/null 2>&1; }

# True (printing our bounding set) when it lacks a capability the kernel knows.
missing_capabilities() {
  local bnd last
  bnd=$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status 2>/dev/null) || return 1
  last=$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null) || return 1
  [ -n "$bnd" ] && [ -n "$last" ] || return 1
  local all=$(( (1 << (last + 1)) - 1 ))
  [ $(( 0x$bnd & all )) -ne "$all" ] && echo "$bnd"
}

if command -v docker >/dev/null 2>&1 && engine_up; then
  log "Docker engine: $(docker version -f 'server {{.Server.Version}}, client {{.Client.Version}}')"
  if bounding=$(missing_capabilities) && [ "$(docker info -f '{{.DefaultRuntime}}')" != etj-runc ]; then
    log "warning: this machine's processes lack capabilities the kernel knows (CapBnd=$bounding): privileged containers (kind's nodes) may fail to start with 'unable to apply caps'. Start dockerd with --add-runtime etj-runc=hack/kind/runc-wrapper.sh --default-runtime etj-runc (this script does that when it starts dockerd)."
  fi
  exit 0
fi

is_debian() { grep -qsE '^(ID|ID_LIKE)=.*debian' "${ETJ_OS_RELEASE:-/etc/os-release}"; }
if [ "$(id -u)" != 0 ] || ! is_debian; then
  command -v docker >/dev/null 2>&1 \
    || die "Docker is not installed. This end-to-end test builds images and runs kind, which need a Docker engine (it installs one itself only as root on Debian). Nothing was run."
  docker info 2>&1 | tail -n 5 >&2 || true
  die "the docker client cannot reach a Docker engine ('docker info' failed). Start Docker (or set DOCKER_HOST) and rerun. Nothing was run."
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v jq >/dev/null 2>&1; then
  log "no Docker engine here: installing Debian's docker.io (and jq) with apt-get (root on Debian)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io jq \
    >"$LOGS/apt-docker.log" 2>&1 || { tail -n 20 "$LOGS/apt-docker.log" >&2; die "apt-get install docker.io failed"; }
fi
# A privileged container (a kind node) gets every capability the kernel knows. Where this
# machine's processes lack one (a VM init that dropped CAP_SYS_RESOURCE), runc cannot grant
# it: dockerd then runs containers through runc-wrapper.sh, which leaves those out.
runtime_flags=()
if bounding=$(missing_capabilities); then
  install -m 0755 "$(dirname "$0")/runc-wrapper.sh" "$BIN/etj-runc"
  runtime_flags=(--add-runtime "etj-runc=$BIN/etj-runc" --default-runtime etj-runc)
  log "this machine's processes lack capabilities the kernel knows (CapBnd=$bounding): containers run through $BIN/etj-runc, which leaves them out"
fi
# No init system starts it here (containers and VMs without systemd): start it, detached,
# so that it outlives this script and the next run finds it.
log "no Docker engine is running: starting dockerd (root on Debian; log: $LOGS/dockerd.log). It keeps running after this script."
setsid nohup dockerd "${runtime_flags[@]}" >"$LOGS/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 1 60); do
  engine_up && break
  sleep 1
done
engine_up || { tail -n 20 "$LOGS/dockerd.log" >&2; die "dockerd did not come up (log: $LOGS/dockerd.log)"; }
note_cache "started: dockerd $(docker version -f '{{.Server.Version}}')"
