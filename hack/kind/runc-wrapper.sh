#!/bin/sh
# A runc for machines whose processes lack capabilities their kernel knows: some VM and
# sandbox inits drop one (CAP_SYS_RESOURCE on the machine this was written on). Docker
# gives a privileged container (a kind node) every capability the kernel knows; runc then
# fails with "unable to apply caps: operation not permitted". This wrapper removes the
# capabilities that this process's bounding set lacks from the container's spec (create,
# run) or the exec'd process (exec), then runs the real runc. docker-engine.sh starts
# dockerd with it, only where the capabilities are missing.
set -eu

# Capability names by number (linux/capability.h).
names="CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_FSETID CAP_KILL
CAP_SETGID CAP_SETUID CAP_SETPCAP CAP_LINUX_IMMUTABLE CAP_NET_BIND_SERVICE CAP_NET_BROADCAST
CAP_NET_ADMIN CAP_NET_RAW CAP_IPC_LOCK CAP_IPC_OWNER CAP_SYS_MODULE CAP_SYS_RAWIO
CAP_SYS_CHROOT CAP_SYS_PTRACE CAP_SYS_PACCT CAP_SYS_ADMIN CAP_SYS_BOOT CAP_SYS_NICE
CAP_SYS_RESOURCE CAP_SYS_TIME CAP_SYS_TTY_CONFIG CAP_MKNOD CAP_LEASE CAP_AUDIT_WRITE
CAP_AUDIT_CONTROL CAP_SETFCAP CAP_MAC_OVERRIDE CAP_MAC_ADMIN CAP_SYSLOG CAP_WAKE_ALARM
CAP_BLOCK_SUSPEND CAP_AUDIT_READ CAP_PERFMON CAP_BPF CAP_CHECKPOINT_RESTORE"

# The capabilities whose bit is clear in our bounding set, as a JSON array.
missing() {
  bnd=$(sed -n 's/^CapBnd:[[:space:]]*//p' "${ETJ_PROC_STATUS:-/proc/self/status}")
  i=0 out=""
  for name in $names; do
    if [ $(( (0x$bnd >> i) & 1 )) -eq 0 ]; then out="$out\"$name\","; fi
    i=$((i + 1))
  done
  echo "[${out%,}]"
}

# scrub FILE JQ_PATH: drop the missing capabilities from every set under JQ_PATH.
scrub() {
  drop=$(missing)
  [ "$drop" != "[]" ] || return 0
  tmp="$1.etj-tmp"
  jq --argjson drop "$drop" \
    "if $2 then $2 |= with_entries(.value |= map(select(. as \$c | \$drop | index(\$c) | not))) else . end" \
    "$1" >"$tmp" && mv "$tmp" "$1"
}

command=""
prev=""
for arg in "$@"; do
  case "$prev" in
    --bundle|-b) bundle=$arg ;;
    --process|-p) [ "$command" = exec ] && process=$arg ;;
  esac
  case "$arg" in
    --bundle=*) bundle=${arg#--bundle=} ;;
    --process=*) process=${arg#--process=} ;;
    create|run|exec) [ -n "$command" ] || command=$arg ;;
  esac
  prev=$arg
done
case "$command" in
  create|run) scrub "${bundle:-.}/config.json" .process.capabilities ;;
  exec) [ -z "${process:-}" ] || scrub "$process" .capabilities ;;
esac
exec runc "$@"
