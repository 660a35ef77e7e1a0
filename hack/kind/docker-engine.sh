#!/usr/bin/env bash
# Make sure a Docker engine is reachable. Uses the one that is there (DOCKER_HOST or the
# default socket). Only where none is reachable AND we run as root on Debian does it
# install Debian's docker.io and start dockerd itself, and it says so. Anywhere else
# (a laptop, no root) it stops with what to do: it never touches a user's system.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

engine_up() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_up; then
  log "Docker engine: $(docker version -f 'server {{.Server.Version}}, client {{.Client.Version}}')"
  exit 0
fi

is_debian() { [ -r /etc/os-release ] && grep -qiE '^(ID|ID_LIKE)=.*debian' /etc/os-release; }
if [ "$(id -u)" != 0 ] || ! is_debian; then
  die "no Docker engine is reachable ('docker info' fails). Start Docker (or set DOCKER_HOST) and rerun; this script installs one only as root on Debian. Nothing was run."
fi

if ! command -v dockerd >/dev/null 2>&1; then
  log "no Docker engine here: installing Debian's docker.io (apt-get, as root)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io \
    >"$LOGS/apt-docker.log" 2>&1 || { tail -n 20 "$LOGS/apt-docker.log" >&2; die "apt-get install docker.io failed"; }
fi
# No init system runs it here (containers and VMs without systemd): start it ourselves,
# detached, so it outlives this script and the next run finds it.
log "starting dockerd (log: $LOGS/dockerd.log); it keeps running after this script"
setsid nohup dockerd >"$LOGS/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 1 60); do
  engine_up && break
  sleep 1
done
engine_up || { tail -n 20 "$LOGS/dockerd.log" >&2; die "dockerd did not come up"; }
note_cache "started: dockerd $(docker version -f '{{.Server.Version}}') (pid $(pgrep -xo dockerd))"
