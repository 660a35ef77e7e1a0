# The phases of hack/kind-e2e.sh (sourced after lib.sh). Each phase is one function.

CLUSTER_NAME=${CLUSTER_NAME:-etj-e2e}
TIMEOUT_S=${TIMEOUT_S:-600}
NS=etj-e2e
JOB=kind-e2e
OPERATOR_NS=elastic-operator-system
RELEASE=elastic-operator
HELM=$BIN/helm-$HELM_VERSION
KIND=$BIN/kind-$KIND_VERSION
WORK=$(mktemp -d)
export KUBECONFIG=$WORK/kubeconfig
PHASE_LINES=()
CURRENT_PHASE=
PASSED=0
STARTED=$(date +%s)

# phase NAME COMMAND...: run one phase, timed.
phase() {
  CURRENT_PHASE=$1; shift
  local t0; t0=$(date +%s)
  log "=== $CURRENT_PHASE"
  "$@"
  PHASE_LINES+=("$(printf '  %-13s %5ss' "$CURRENT_PHASE" $(( $(date +%s) - t0 )))")
}

on_exit() {
  local rc=$?
  [ -z "${WATCH_PID:-}" ] || kill "$WATCH_PID" 2>/dev/null || true
  # Exiting 0 before the last phase would be a bug of this script: never call it a pass.
  if [ "$rc" = 0 ] && [ "$PASSED" != 1 ]; then rc=1; fi
  [ "$rc" = 0 ] || diagnostics
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    log "keeping cluster $CLUSTER_NAME: export KUBECONFIG=$KUBECONFIG"
  else
    [ ! -x "$KIND" ] || "$KIND" delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
    [ "$rc" != 0 ] || rm -rf "$WORK"
  fi
  echo "--- phases (seconds) ---"
  printf '%s\n' "${PHASE_LINES[@]}"
  [ "$rc" = 0 ] || echo "  FAILED in phase: $CURRENT_PHASE"
  printf '  %-13s %5ss\n' total $(( $(date +%s) - STARTED ))
  echo "--- cache ($CACHE) ---"
  sed 's/^/  /' "$ETJ_E2E_REPORT" 2>/dev/null || true
  rm -f "$ETJ_E2E_REPORT"
  [ "$rc" = 0 ] && echo "PASS" || echo "FAIL (work files: $WORK)"
  exit "$rc"
}

diagnostics() {
  [ -s "$KUBECONFIG" ] || return 0
  echo "[kind-e2e] FAILED; diagnostics:" >&2
  {
    kubectl get etj,jobsets,jobs,pods -n "$NS" -o wide
    kubectl get pods -A -o wide
    kubectl get etj "$JOB" -n "$NS" -o yaml
    kubectl get events -n "$NS" --sort-by=.lastTimestamp | tail -n 30
    kubectl logs -n "$OPERATOR_NS" deploy/elastic-operator --tail=100
    kubectl logs -n "$NS" -l "jobset.sigs.k8s.io/replicatedjob-name=pathways-head" -c main --tail=60
  } >&2 2>&1 || true
}

# wait_for DESCRIPTION COMMAND...: poll COMMAND every second until it succeeds, or fail
# after TIMEOUT_S.
wait_for() {
  local what=$1; shift
  local deadline=$(( $(date +%s) + TIMEOUT_S ))
  log "waiting for $what"
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${TIMEOUT_S}s waiting for $what"
    sleep 1
  done
  log "ok: $what"
}

# A client of the cluster's minor version once built (the node image phase builds it).
kubectl_bin() {
  local own=$BIN/kubectl-$KUBERNETES_VERSION
  if [ -x "$own" ]; then echo "$own"; else command -v kubectl; fi
}
kubectl() { "$(kubectl_bin)" "$@"; }
job_field() { kubectl get etj "$JOB" -n "$NS" -o jsonpath="{$1}"; }
condition() { job_field ".status.conditions[?(@.type==\"$1\")].$2"; }
head_pod() { kubectl get pods -n "$NS" -l jobset.sigs.k8s.io/replicatedjob-name=pathways-head -o name | head -n 1; }
# The identity of the trainer: its pod, the main container's restarts, its process.
trainer_identity() {
  local pod; pod=$(head_pod)
  echo "$(kubectl get -n "$NS" "$pod" -o jsonpath='{.metadata.uid} restarts={.status.containerStatuses[?(@.name=="main")].restartCount}')" \
    "pid=$(job_field .status.training.processId)@$(job_field .status.training.hostName)" \
    "started=$(job_field .status.training.processStartedAt)"
}

# --- tools, images ------------------------------------------------------------------------
tools() {
  command -v kubectl >/dev/null 2>&1 || [ -x "$BIN/kubectl-$KUBERNETES_VERSION" ] \
    || die "kubectl is not installed"
  # helm and the JobSet controller (and the control plane, whose binaries the node image
  # reuses): cached by version, seconds when warm.
  "$ROOT/hack/build-control-plane.sh" >&2
  "$ROOT/hack/kind/go-binaries.sh" tools
}
python_base() { PYTHON_BASE=$("$ROOT/hack/kind/python-base.sh"); }
node_image() { NODE_IMAGE=$("$ROOT/hack/kind/node-image.sh" "$PYTHON_BASE"); }

# --- cluster ------------------------------------------------------------------------------
# kind_config CGROUP_FS: the cluster's kind config, for a host whose /sys/fs/cgroup is of
# type CGROUP_FS (cgroup2fs: cgroup v2). One node: the simulated backend needs no TPU
# nodes, and a node image built here carries a one-node stand-in for kindnetd
# (hack/kind/node-image.sh).
kind_config() {
  cat <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
EOF
  # Since Kubernetes 1.35 the kubelet refuses to start on a cgroup v1 host unless told
  # (failCgroupV1 defaults to true), and kubeadm waits 4 minutes for a kubelet that
  # never answers. Only there; a cgroup v2 host gets kind's own kubelet config.
  [ "$1" = cgroup2fs ] || cat <<'EOF'
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
EOF
}

create_cluster() {
  if "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
    log "deleting the cluster $CLUSTER_NAME a previous run left"
    "$KIND" delete cluster --name "$CLUSTER_NAME"
  fi
  local cgroup_fs; cgroup_fs=$(stat -fc %T /sys/fs/cgroup)
  [ "$cgroup_fs" = cgroup2fs ] \
    || log "this host runs cgroup v1 ($cgroup_fs): the node's kubelet is told failCgroupV1: false"
  kind_config "$cgroup_fs" >"$WORK/kind.yaml"
  "$KIND" create cluster --name "$CLUSTER_NAME" --config "$WORK/kind.yaml" \
    --image "$NODE_IMAGE" --kubeconfig "$KUBECONFIG" --wait 5m
  log "loading the images into the node"
  "$KIND" load docker-image --name "$CLUSTER_NAME" \
    "elastic-operator:$E2E_TAG" "elastic-trainer:$E2E_TAG" "$JOBSET_IMAGE"
}

# JobSet from its module's kustomize config (what its release manifests.yaml is rendered
# from), with the image loaded above.
install_jobset() {
  local src
  src=$(go mod download -json "sigs.k8s.io/jobset@$JOBSET_VERSION" | sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p')
  kubectl kustomize "$src/config/default" \
    | sed -E "s#^( *)image: .*jobset.*#\1image: $JOBSET_IMAGE#" >"$WORK/jobset.yaml"
  grep -q "image: $JOBSET_IMAGE" "$WORK/jobset.yaml" || die "no JobSet image to replace in its manifests"
  kubectl apply --server-side -f "$WORK/jobset.yaml" >/dev/null
  kubectl -n jobset-system rollout status deployment/jobset-controller-manager --timeout="${TIMEOUT_S}s"
}

# --- the operator, with the chart -----------------------------------------------------------
# Both namespaces enforce the `restricted` Pod Security Standard, as manifests/install.yaml's
# Namespace does: a pod the chart or the renderer gets wrong is rejected for real.
restricted_namespace() {
  kubectl create namespace "$1" >/dev/null
  kubectl label namespace "$1" pod-security.kubernetes.io/enforce=restricted >/dev/null
}

install_operator() {
  restricted_namespace "$OPERATOR_NS"
  # The operator's settings for this target, from their one definition (stdlib only:
  # any python3 runs it): chart values, {} for the chart's defaults.
  python3 "$ROOT/devtools/elastic_devtools/localcluster/operator_settings.py" kind-e2e \
    --helm-values >"$WORK/operator-values.yaml"
  "$HELM" install "$RELEASE" "$ROOT/charts/elastic-operator" --namespace "$OPERATOR_NS" \
    -f "$WORK/operator-values.yaml" \
    --set image.repository=elastic-operator --set image.tag="$E2E_TAG" \
    --set image.pullPolicy=Never --set operator.logFormat=text \
    --set resources.requests.cpu=100m --wait --timeout "${TIMEOUT_S}s"
  # 100m, not the chart's 500m: this one 2-CPU node holds the control plane (~1 CPU of
  # requests) and JobSet's controller (500m); two replicas and a rolling upgrade's third
  # at 500m would not fit. The request sizes a busy node's share, not what this tests.
  # Two replicas (the chart's default): each is checked; one leads through the Lease.
  local pods pod
  pods=$(operator_pods)
  [ "$(wc -w <<<"$pods")" = 2 ] || die "expected 2 operator replicas, got: $pods"
  for pod in $pods; do
    [ "$(kubectl exec -n "$OPERATOR_NS" "$pod" -- id -u)" = 65532 ] || die "$pod does not run as 65532"
    if kubectl exec -n "$OPERATOR_NS" "$pod" -- touch /opt/etj/written 2>/dev/null; then
      die "$pod: the operator's root filesystem is writable"
    fi
    wait_for "$pod's liveness endpoint (through its port)" \
      kubectl get --raw "/api/v1/namespaces/$OPERATOR_NS/pods/${pod#pod/}:8080/proxy/healthz"
  done
  wait_for "a replica to hold the leader Lease" lease_held_by_one_of "$pods"
  log "operator up: $(echo $pods), uid 65532, read-only root; leader $(lease_holder)"
}
operator_pods() {
  kubectl get pods -n "$OPERATOR_NS" -l app.kubernetes.io/instance=$RELEASE \
    --field-selector=status.phase=Running -o name
}
lease_holder() {
  kubectl get lease -n "$OPERATOR_NS" "$RELEASE" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null
}
lease_held_by_one_of() {
  local holder; holder=$(lease_holder)
  [ -n "$holder" ] && grep -qw -- "pod/$holder" <<<"$1"
}

# --- a simulated job ------------------------------------------------------------------------
start_training() {
  restricted_namespace "$NS"
  # hack/kind/job.yaml (named $JOB, in $NS), with the images of this checkout.
  sed "s/@E2E_TAG@/$E2E_TAG/g" "$ROOT/hack/kind/job.yaml" >"$WORK/job.yaml"
  kubectl apply -f "$WORK/job.yaml" >/dev/null
  wait_for "the trainer to report step 10 or later" step_at_least 10
  TRAINER_BEFORE=$(trainer_identity)
  JOBSET_RESTARTS=$(jobset_restarts)
  log "training: step $(job_field .status.training.step), trainer $TRAINER_BEFORE"
}
jobset_restarts() { kubectl get jobsets -n "$NS" -o jsonpath='{.items[0].status.restarts}'; }
step_at_least() { local s; s=$(job_field .status.training.step); [ -n "$s" ] && [ "$s" -ge "$1" ]; }

# --- slice loss -------------------------------------------------------------------------------
# Record every status the operator writes (a watch misses none of them).
watch_status() {
  "$(kubectl_bin)" get etj "$JOB" -n "$NS" --watch --output-watch-events -o jsonpath='{.object.status.phase} SliceDown={.object.status.conditions[?(@.type=="SliceDown")].status} Recovering={.object.status.conditions[?(@.type=="Recovering")].status}/{.object.status.conditions[?(@.type=="Recovering")].reason} failures={.object.status.counters.sliceFailures}{"\n"}' \
    >"$1" 2>&1 &
  WATCH_PID=$!
}
worker_pod() {
  kubectl get pods -n "$NS" -o name --field-selector=status.phase=Running \
    -l "jobset.sigs.k8s.io/replicatedjob-name=worker,jobset.sigs.k8s.io/job-index=$1" | head -n 1
}
counter() { job_field ".status.counters.$1"; }
recovered_event_count() {
  kubectl get events -n "$NS" --field-selector "reason=Recovered,involvedObject.name=$JOB" -o name | grep -c . || true
}
recovered_after_event() {  # recovered_after_event ID: Recovered, for elastic event ID
  [ "$(condition Recovering reason)" = Recovered ] \
    && [ "$(job_field .status.lastRecovery.elasticEventId)" = "$1" ] \
    && [ "$(job_field .status.training.elasticEvent.phase)" = Resumed ]
}
# kill_worker SLICE: delete a worker pod of SLICE at once, as a lost host does.
kill_worker() {
  local victim; victim=$(worker_pod "$1")
  [ -n "$victim" ] || die "no running worker pod of slice $1"
  log "killing $victim (slice $1)"
  kubectl delete -n "$NS" "$victim" --grace-period=0 --force --wait=false >/dev/null 2>&1
}
# expect_one_more_recovery BEFORE_FAILURES BEFORE_EVENTS BEFORE_RECOVERED_EVENTS
expect_one_more_recovery() {
  local event=$(( $2 + 1 ))
  wait_for "Recovering=False, reason Recovered, for elastic event $event" recovered_after_event "$event"
  [ "$(condition Recovering status)" = False ] || die "Recovering has reason Recovered but is not False"
  [ "$(counter sliceFailures)" = $(( $1 + 1 )) ] || die "sliceFailures went $1 -> $(counter sliceFailures), not +1"
  [ "$(counter elasticEvents)" = "$event" ] || die "elasticEvents went $2 -> $(counter elasticEvents), not +1"
  [ "$(recovered_event_count)" = $(( $3 + 1 )) ] || die "Recovered events went $3 -> $(recovered_event_count), not +1"
  [ "$(counter trainerRestarts)" = "${TRAINER_RESTARTS:-0}" ] \
    || die "the trainer was restarted (${TRAINER_RESTARTS:-0} -> $(counter trainerRestarts)), not recovered in process"
  [ "$(trainer_identity)" = "$TRAINER_BEFORE" ] \
    || die "the trainer changed: before $TRAINER_BEFORE, now $(trainer_identity)"
  [ "$(jobset_restarts)" = "$JOBSET_RESTARTS" ] \
    || die "the JobSet restarted ($JOBSET_RESTARTS -> $(jobset_restarts)): the slice failure was not kept local"
  log "recovered in process: $(condition Recovering message)"
}

lose_a_slice() {
  local failures events recovered
  failures=$(counter sliceFailures); events=$(counter elasticEvents); recovered=$(recovered_event_count)
  watch_status "$WORK/status-watch.log"
  kill_worker 1
  expect_one_more_recovery "${failures:-0}" "${events:-0}" "$recovered"
  kill "$WATCH_PID" 2>/dev/null || true
  # The transitions, in order, among the statuses the operator wrote.
  python3 - "$WORK/status-watch.log" <<'EOF'
import sys
lines = open(sys.argv[1]).read().splitlines()
marks = [any("SliceDown=True" in l for l in lines)]
i = next((n for n, l in enumerate(lines) if "SliceDown=True" in l), None)
j = next((n for n, l in enumerate(lines) if "Recovering=True" in l and (i is None or n >= i)), None)
k = next((n for n, l in enumerate(lines) if "Recovering=False/Recovered" in l and (j is None or n > j)), None)
print("\n".join("    " + l for l in lines), file=sys.stderr)
if None in (i, j, k):
    sys.exit(f"expected SliceDown=True, then Recovering=True, then Recovered: got {i}, {j}, {k}")
EOF
  log "seen in order: SliceDown -> Recovering -> Recovered; trainer: $(trainer_identity)"
}

# --- restart in place ---------------------------------------------------------------------------
pod_uid_of() { kubectl get -n "$NS" "$1" -o jsonpath='{.metadata.uid}'; }
restarts_of() {  # restarts_of POD CONTAINER: its restartCount
  kubectl get -n "$NS" "$1" -o jsonpath="{.status.containerStatuses[?(@.name==\"$2\")].restartCount}"
}
worker_uids() {
  kubectl get pods -n "$NS" -l jobset.sigs.k8s.io/replicatedjob-name=worker \
    -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid} {end}'
}
seconds_since() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }
# kill_process POD CONTAINER: SIGKILL the container's process from its node (crictl), as a
# crash or the OOM killer ends it: nothing the process can catch, and the pod stays.
kill_process() {
  local pod=${1#pod/} node cid pid
  node=$(kubectl get -n "$NS" "pod/$pod" -o jsonpath='{.spec.nodeName}')
  cid=$(docker exec "$node" crictl ps -q --state running --name "^$2\$" \
    --label "io.kubernetes.pod.name=$pod" --label "io.kubernetes.pod.namespace=$NS" | head -n 1)
  [ -n "$cid" ] || die "no running container $2 in pod $pod on $node"
  pid=$(docker exec "$node" crictl inspect --output go-template --template '{{.info.pid}}' "$cid")
  log "killing $2 of $pod (pid $pid on node $node) with SIGKILL"
  docker exec "$node" kill -9 "$pid"
}
slice_field() { job_field ".status.slices[$1].$2"; }
ready_again_in_place() {  # ready_again_in_place SLICE RESTARTS
  [ "$(slice_field "$1" state)" = Ready ] && [ "$(slice_field "$1" restarts)" = "$2" ] \
    && [ "$(slice_field "$1" lastReplacement.action)" = RestartInPlace ]
}

# A worker's process killed on its healthy node: the kubelet runs it again in its pod (the
# same uid, restartCount + 1), the operator deletes nothing, and the trainer recovers in
# its process.
restart_a_worker_in_place() {
  local pod uid restarts slice_restarts failures events recovered t0
  pod=$(worker_pod 1); uid=$(pod_uid_of "$pod"); restarts=$(restarts_of "$pod" slice-agent)
  slice_restarts=$(slice_field 1 restarts)
  failures=$(counter sliceFailures); events=$(counter elasticEvents); recovered=$(recovered_event_count)
  t0=$(date +%s.%N)
  kill_process "$pod" slice-agent
  wait_for "slice 1 Ready again in place" ready_again_in_place 1 $(( ${slice_restarts:-0} + 1 ))
  log "slice 1 Ready again in place $(seconds_since "$t0") s after the kill (decision to Ready: $(slice_field 1 lastReplacement.seconds) s)"
  [ "$(pod_uid_of "$pod")" = "$uid" ] || die "$pod was replaced (uid $uid -> $(pod_uid_of "$pod")), not restarted in place"
  [ "$(restarts_of "$pod" slice-agent)" = $(( restarts + 1 )) ] \
    || die "$pod's restartCount went $restarts -> $(restarts_of "$pod" slice-agent), not +1"
  [ "$(slice_field 1 lastReplacement.blame)" = Job ] || die "the evidence blamed $(slice_field 1 lastReplacement.blame), not the job"
  expect_one_more_recovery "${failures:-0}" "${events:-0}" "$recovered"
  log "restarted in place: $pod (uid unchanged, restartCount $restarts -> $(( restarts + 1 ))), the trainer in its process"
}

# main killed: the head pod restarts main in place (its container restart rule); no
# worker pod is touched, the JobSet does not restart, and the new trainer resumes from the
# newest committed checkpoint.
has_committed_checkpoint() { [ -n "$(job_field .status.training.lastCommittedCheckpointStep)" ]; }
new_trainer_resumed() {  # new_trainer_resumed BEFORE_IDENTITY BEFORE_STEP
  [ "$(trainer_identity)" != "$1" ] && step_at_least $(( $2 + 1 )) \
    && [ -n "$(job_field .status.training.lastRestore.source)" ]
}
crash_main_in_place() {
  local head uid restarts workers jobset before step committed trainer_restarts t0
  head=$(head_pod); uid=$(pod_uid_of "$head"); restarts=$(restarts_of "$head" main)
  workers=$(worker_uids); jobset=$(jobset_restarts); before=$(trainer_identity)
  trainer_restarts=$(counter trainerRestarts)
  wait_for "a committed checkpoint to resume from" has_committed_checkpoint
  t0=$(date +%s.%N)
  kill_process "$head" main
  committed=$(job_field .status.training.lastCommittedCheckpointStep)
  step=$(job_field .status.training.step)
  wait_for "a new trainer process in the head pod, past step $step" new_trainer_resumed "$before" "$step"
  log "main restarted in place and training again $(seconds_since "$t0") s after the kill"
  [ "$(pod_uid_of "$head")" = "$uid" ] || die "the head pod was replaced, not restarted in place"
  [ "$(restarts_of "$head" main)" = $(( restarts + 1 )) ] || die "main's restartCount went $restarts -> $(restarts_of "$head" main)"
  [ "$(worker_uids)" = "$workers" ] || die "worker pods changed: $workers -> $(worker_uids)"
  [ "$(jobset_restarts)" = "$jobset" ] || die "the JobSet restarted ($jobset -> $(jobset_restarts))"
  [ "$(counter trainerRestarts)" = $(( ${trainer_restarts:-0} + 1 )) ] || die "trainerRestarts went ${trainer_restarts:-0} -> $(counter trainerRestarts)"
  [ "$(job_field .status.training.lastRestore.source)" = checkpoint ] \
    || die "the new trainer restored from $(job_field .status.training.lastRestore.source), not the newest committed checkpoint"
  local restored; restored=$(job_field .status.training.lastRestore.step)
  [ "$restored" -ge "${committed:-0}" ] || die "restored step $restored, older than the newest committed ($committed)"
  TRAINER_BEFORE=$(trainer_identity)  # the trainer the next phases recover in its process
  TRAINER_RESTARTS=$(counter trainerRestarts)
  log "main restarted in place: head pod uid unchanged, workers unchanged, JobSet restarts $jobset; resumed from committed step $restored"
}

# The node made NotReady (its kubelet stopped, the host otherwise alive): the evidence is
# against the node, so the slice is recreated (new pods), not restarted in place. One node
# here: the new pods wait for it, and run there once its kubelet is back.
kubelet() { docker exec "$CLUSTER_NAME-control-plane" systemctl "$1" kubelet; }
node_ready_status() { kubectl get node "$CLUSTER_NAME-control-plane" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'; }
node_not_ready() { [ "$(node_ready_status)" != True ]; }
node_ready() { [ "$(node_ready_status)" = True ]; }
slice_recreated() {  # slice_recreated SLICE OLD_UIDS
  [ "$(slice_field "$1" state)" = Ready ] && [ "$(slice_field "$1" lastReplacement.action)" = Replace ] \
    && [ -n "$(worker_pod "$1")" ] && ! grep -qw -- "$(pod_uid_of "$(worker_pod "$1")")" <<<"$2"
}
recreate_on_node_not_ready() {
  local old restarts
  old=$(worker_uids); restarts=$(slice_field 0 restarts)
  log "stopping the node's kubelet"
  kubelet stop
  wait_for "the node NotReady" node_not_ready
  wait_for "slice 0 recorded for recreation (NodeNotReady)" recorded_replace 0
  log "slice 0: $(slice_field 0 replacement.evidence)"
  kubelet start
  wait_for "the node Ready again" node_ready
  wait_for "slice 0 Ready again on new pods" slice_recreated 0 "$old"
  [ "$(slice_field 0 restarts)" = $(( ${restarts:-0} + 1 )) ] || die "slice 0's restarts went $restarts -> $(slice_field 0 restarts)"
  [ "$(slice_field 0 lastReplacement.blame)" = Node ] || die "the evidence blamed $(slice_field 0 lastReplacement.blame), not the node"
  wait_for "training to go on" step_at_least $(( $(job_field .status.training.step) + 5 ))
  TRAINER_BEFORE=$(trainer_identity)
  log "slice 0 recreated on new pods: $(worker_pod 0)"
}
recorded_replace() {
  [ "$(slice_field "$1" replacement.action)" = Replace ] || [ "$(slice_field "$1" lastReplacement.action)" = Replace ]
}

# --- helm upgrade -----------------------------------------------------------------------------
operator_pod_uid() {
  kubectl get pods -n "$OPERATOR_NS" -l app.kubernetes.io/instance=$RELEASE -o jsonpath='{.items[*].metadata.uid}'
}
helm_upgrade() {  # a changed pod annotation: the Deployment replaces the operator pod
  "$HELM" upgrade "$RELEASE" "$ROOT/charts/elastic-operator" --namespace "$OPERATOR_NS" \
    --reuse-values --set-string "podAnnotations.e2e/upgrade=$1" --wait --timeout "${TIMEOUT_S}s" >/dev/null
}
upgrade_during_recovery() {
  local failures events recovered last old step
  # 1. Upgraded while training: the new operator rebuilds its state from the cluster, and
  #    counts nothing again.
  failures=$(counter sliceFailures); events=$(counter elasticEvents); recovered=$(recovered_event_count)
  last=$(job_field .status.lastRecovery.detectedAt); old=$(operator_pod_uid)
  helm_upgrade 1
  [ "$(operator_pod_uid)" != "$old" ] || die "helm upgrade did not replace the operator pod"
  step=$(job_field .status.training.step)
  wait_for "training to go on under the new operator (step > $((step + 10)))" step_at_least $((step + 11))
  [ "$(counter sliceFailures)/$(counter elasticEvents)/$(recovered_event_count)" = "$failures/$events/$recovered" ] \
    || die "the upgrade changed the counts: $failures/$events/$recovered -> $(counter sliceFailures)/$(counter elasticEvents)/$(recovered_event_count)"
  [ "$(job_field .status.lastRecovery.detectedAt)" = "$last" ] || die "the upgrade rewrote lastRecovery"
  log "upgraded while training: nothing counted twice"
  # 2. Upgraded in the middle of a recovery: the new operator finishes it, once.
  old=$(operator_pod_uid)
  kill_worker 0
  helm_upgrade 2
  [ "$(operator_pod_uid)" != "$old" ] || die "helm upgrade did not replace the operator pod"
  expect_one_more_recovery "$failures" "$events" "$recovered"
}

# --- metrics, uninstall -------------------------------------------------------------------------
# From a pod, as Prometheus scrapes: HTTPS (the self-signed certificate not verified) with
# the token of a ServiceAccount bound to the chart's <release>-metrics-reader; first without
# a token (401). Through the Service's cluster DNS name and virtual IP, then the leader's
# own pod IP (the API server's pod proxy would not pass the scraper's token on).
SCRAPE_PY='
import ssl, sys, urllib.error, urllib.request
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
token = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read().strip()
def get(url, auth):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token} if auth else {})
    try:
        with urllib.request.urlopen(req, timeout=20, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
print("no-token", get(sys.argv[1], False)[0])
for url in sys.argv[1:]:
    code, body = get(url, True)
    print("=== " + url, code); print(body)
'
scrape_metrics() {
  local url=https://$RELEASE-metrics.$OPERATOR_NS.svc:9090/metrics
  local leader; leader=$(lease_holder)
  local leader_url="https://$(kubectl get pod -n "$OPERATOR_NS" "$leader" -o jsonpath='{.status.podIP}'):9090/metrics"
  kubectl create serviceaccount metrics-scraper -n default >/dev/null
  kubectl create clusterrolebinding etj-e2e-metrics-scraper --clusterrole="$RELEASE-metrics-reader" \
    --serviceaccount=default:metrics-scraper >/dev/null
  kubectl run metrics-scrape -n default --image="elastic-trainer:$E2E_TAG" --image-pull-policy=Never \
    --restart=Never --overrides='{"apiVersion": "v1", "spec": {"serviceAccountName": "metrics-scraper"}}' \
    --command -- python3 -c "$SCRAPE_PY" "$url" "$leader_url" >/dev/null
  wait_for "the scrape pod to finish" pod_succeeded default metrics-scrape
  kubectl logs -n default metrics-scrape >"$WORK/scrape.txt"
  kubectl delete pod -n default metrics-scrape --wait=false >/dev/null
  kubectl delete clusterrolebinding etj-e2e-metrics-scraper >/dev/null
  grep -qx "no-token 401" "$WORK/scrape.txt" || die "$url answered without a token: $(head -n 1 "$WORK/scrape.txt")"
  grep -qx "=== $url 200" "$WORK/scrape.txt" || die "the metrics reader's scrape of $url: $(grep '^===' "$WORK/scrape.txt")"
  grep -qx "=== $leader_url 200" "$WORK/scrape.txt" || die "the metrics reader's scrape of $leader_url: $(grep '^===' "$WORK/scrape.txt")"
  sed -n "\|^=== $url |,\|^=== $leader_url |p" "$WORK/scrape.txt" >"$WORK/metrics.txt"
  sed -n "\|^=== $leader_url |,\$p" "$WORK/scrape.txt" >"$WORK/leader-metrics.txt"
  # The Service reaches either replica: the metric families are there on both.
  local line
  for line in "# TYPE etj_slice_failures_total counter" "# TYPE etj_recovery_duration_seconds histogram" \
              "# TYPE etj_leader gauge"; do
    grep -qF "$line" "$WORK/metrics.txt" || { grep etj_ "$WORK/metrics.txt" | head -n 40 >&2; die "no '$line' in $url"; }
  done
  # The job's gauges come from the leader, which reconciled it after the recovery (the
  # standby reconciles nothing); Prometheus scrapes each pod, so read the leader's own.
  for line in "etj_desired_slices{job=\"$JOB\",namespace=\"$NS\"} 2.0" \
              "etj_ready_slices{job=\"$JOB\",namespace=\"$NS\"} 2.0" \
              "etj_leader{identity=\"$leader\"} 1.0"; do
    grep -qF "$line" "$WORK/leader-metrics.txt" || { grep etj_ "$WORK/leader-metrics.txt" | head -n 40 >&2; die "no '$line' in the leader's ($leader) metrics"; }
  done
  log "scraped $url with a reader's token (401 without): $(grep -c '^etj_' "$WORK/metrics.txt") etj_ samples; the leader $leader: $(grep -c '^etj_' "$WORK/leader-metrics.txt")"
}
pod_succeeded() { [ "$(kubectl get pod -n "$1" "$2" -o jsonpath='{.status.phase}')" = Succeeded ]; }

uninstall_operator() {
  # Its log, kept for a look after the run (the pod goes with the chart).
  kubectl logs -n "$OPERATOR_NS" -l app.kubernetes.io/instance=$RELEASE --prefix --tail=-1 \
    >"$LOGS/e2e-operator.log" 2>&1 || true
  log "the operator's log: $LOGS/e2e-operator.log ($(grep -c . "$LOGS/e2e-operator.log") lines)"
  local restarts
  restarts=$(kubectl get pods -n "$OPERATOR_NS" -l app.kubernetes.io/instance=$RELEASE \
    -o jsonpath='{.items[*].status.containerStatuses[*].restartCount}')
  [ -n "$restarts" ] && [ -z "$(tr ' ' '\n' <<<"$restarts" | grep -v '^0$')" ] \
    || die "an operator container restarted ($restarts): its liveness probe failed?"
  "$HELM" uninstall "$RELEASE" --namespace "$OPERATOR_NS" --wait --timeout "${TIMEOUT_S}s"
  local left
  left=$(kubectl get deploy,svc,sa,role,rolebinding -n "$OPERATOR_NS" -l app.kubernetes.io/instance=$RELEASE -o name)
  left+=$(kubectl get clusterrole,clusterrolebinding -l app.kubernetes.io/instance=$RELEASE -o name)
  [ -z "$left" ] || die "helm uninstall left: $left"
  wait_for "the operator pod to be gone" no_operator_pod
  kubectl get crd elastictrainingjobs.elastic.pathways.dev >/dev/null || die "the CRD went with the chart"
  kubectl get etj "$JOB" -n "$NS" >/dev/null || die "the job went with the chart"
  log "uninstalled: no chart object left; the CRD and the job remain"
}
no_operator_pod() { [ -z "$(kubectl get pods -n "$OPERATOR_NS" -l app.kubernetes.io/instance=$RELEASE -o name)" ]; }
