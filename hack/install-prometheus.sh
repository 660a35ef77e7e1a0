#!/usr/bin/env bash
# Make `prometheus` and `promtool` available for the tests of the alert rules and the
# dashboard (tests/unit/test_alerts_promtool.py, tests/integration/test_prometheus.py).
#
# Debian's `prometheus` package (bookworm: 2.42), installed with apt as root. Idempotent:
# a few milliseconds when both binaries are there. The package's own server is never
# left running: services are not started during the install (policy-rc.d), and where
# systemd runs the unit is disabled and stopped; the tests start `prometheus` themselves
# on free ports. Recommends (prometheus-node-exporter, another service) are not installed.
#
# Elsewhere: put Prometheus >= 2.42's `prometheus` and `promtool` on PATH (or point
# PROMETHEUS and PROMTOOL at them) and this script only checks them.
set -euo pipefail

MIN_MINOR=42  # 2.42: keep_firing_for, and what tests/prometheus/*.yaml were written for

prometheus=${PROMETHEUS:-$(command -v prometheus || true)}
promtool=${PROMTOOL:-$(command -v promtool || true)}

version_ok() {  # promtool --version: "promtool, version 2.42.0+ds (branch: ...)"
  local version
  version=$("$1" --version 2>&1 | sed -n 's/.*version \([0-9]*\.[0-9]*\).*/\1/p' | head -1)
  [ -n "$version" ] && [ "${version%%.*}" -ge 2 ] && { [ "${version%%.*}" -gt 2 ] || [ "${version#*.}" -ge "$MIN_MINOR" ]; }
}

if [ -n "$prometheus" ] && [ -n "$promtool" ] && [ -x "$prometheus" ] && [ -x "$promtool" ]; then
  if version_ok "$promtool"; then
    exit 0
  fi
  echo "error: $promtool is older than 2.$MIN_MINOR; install a newer Prometheus or set PROMTOOL/PROMETHEUS." >&2
  exit 1
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: prometheus and promtool (>= 2.$MIN_MINOR) are not on PATH. On Debian/Ubuntu, as root:" >&2
  echo "  apt-get install -y --no-install-recommends prometheus   (then stop its service)" >&2
  echo "or put both binaries on PATH (or set PROMETHEUS and PROMTOOL) and rerun." >&2
  exit 1
fi

echo "Installing Debian's prometheus package (prometheus, promtool; its service is not started)..."
# No service may start during the install: invoke-rc.d and deb-systemd-invoke ask
# policy-rc.d, and exit status 101 means "forbidden". Keep a policy that is already there.
policy=/usr/sbin/policy-rc.d
own_policy=false
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  own_policy=true
fi
cleanup() { if $own_policy; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
# Another apt run (a helper installing something else) holds the lock: wait for it.
apt_get() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }
if ! apt_get install -y --no-install-recommends prometheus >/tmp/etj-apt-prometheus.log 2>&1; then
  # The package lists may be missing or stale on a fresh machine.
  apt_get update >>/tmp/etj-apt-prometheus.log 2>&1
  apt_get install -y --no-install-recommends prometheus >>/tmp/etj-apt-prometheus.log 2>&1 || {
    echo "error: apt-get install prometheus failed; see /tmp/etj-apt-prometheus.log" >&2
    exit 1
  }
fi

# Where systemd runs, the package enables its unit: keep no server on :9090.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
if command -v service >/dev/null 2>&1 && service prometheus status >/dev/null 2>&1; then
  service prometheus stop >/dev/null 2>&1 || true
fi

promtool=$(command -v promtool)
version_ok "$promtool" || { echo "error: installed promtool is older than 2.$MIN_MINOR" >&2; exit 1; }
echo "$("$promtool" --version 2>&1 | head -1)"
