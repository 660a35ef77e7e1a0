# Shell helpers shared by hack/kind/*.sh (through hack/kind/lib.sh) and
# hack/maxtext-env.sh (sourced, not run). The sourcing script defines `log` and `die`.

# run_logged NAME LOGFILE COMMAND...: COMMAND in the background, its output in LOGFILE, a
# heartbeat every 30 s (seconds so far, log lines), the log's tail when it fails.
run_logged() {
  local name=$1 logfile=$2; shift 2
  local t0; t0=$(date +%s)
  log "$name (log: $logfile)"
  ( "$@" ) >"$logfile" 2>&1 &
  local pid=$! next=$(( t0 + 30 ))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    if [ "$(date +%s)" -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      log "    ... $name: $(( $(date +%s) - t0 ))s, $(grep -c . "$logfile" || true) log lines"
      next=$(( next + 30 ))
    fi
  done
  if ! wait "$pid"; then
    tail -n 40 "$logfile" >&2
    die "$name failed (log: $logfile)"
  fi
  log "    $name done in $(( $(date +%s) - t0 ))s"
}

# The Debian mirror apt uses (DEBIAN_MIRROR overrides it).
debian_mirror() {
  local uri
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -oE '^(deb|URIs:)[[:space:]]+(\[[^]]*\][[:space:]]+)?https?://[^[:space:]]*/debian/?([[:space:]]|$)' \
    | grep -oE 'https?://[^[:space:]]*' | head -n 1 || true)
  echo "${DEBIAN_MIRROR:-${uri:-http://deb.debian.org/debian}}"
}

# The CA bundle pip is configured with on this machine, if any.
pip_ca_bundle() {
  local cert
  cert=$(python3 -m pip config list 2>/dev/null | sed -nE "s/^[^=]*\.cert='([^']*)'$/\1/p" | head -n 1)
  [ -n "$cert" ] && [ -f "$cert" ] && echo "$cert"
  return 0
}
