#!/usr/bin/env bash
# Make `tmux` available for the test that runs `kubectl etj` in a real terminal
# (tests/integration/test_kubectl_etj.py: send-keys, capture-pane). Debian's package,
# installed with apt as root; idempotent (nothing to do when tmux is on PATH).
set -euo pipefail

if command -v tmux >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: tmux is not on PATH. On Debian/Ubuntu, as root: apt-get install -y tmux;" >&2
  echo "elsewhere install tmux (>= 3.0) with the system's package manager and rerun." >&2
  exit 1
fi
echo "Installing Debian's tmux package..."
export DEBIAN_FRONTEND=noninteractive
apt_get() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }
if ! apt_get install -y --no-install-recommends tmux >/tmp/etj-apt-tmux.log 2>&1; then
  apt_get update >>/tmp/etj-apt-tmux.log 2>&1
  apt_get install -y --no-install-recommends tmux >>/tmp/etj-apt-tmux.log 2>&1 || {
    echo "error: apt-get install tmux failed; see /tmp/etj-apt-tmux.log" >&2
    exit 1
  }
fi
tmux -V
