#!/usr/bin/env bash
# End to end on kind, with real containers (needs a running Docker engine):
#   1. create a kind cluster (one control plane, two workers);
#   2. install JobSet (the release pinned in versions.env);
#   3. build both images (Dockerfile.operator, Dockerfile.trainer) and load them into kind;
#   4. install the chart (charts/elastic-operator) with those images;
#   5. run a `simulated` ElasticTrainingJob (2 slices, real trainer and slice agents);
#   6. once it trains, delete a worker pod of slice 1, and wait for the slice failure (its
#      counter and SliceDown event) and then Recovering=False with reason Recovered.
# Not part of `make test` (these machines have no Docker). Without a reachable Docker
# engine it says so and exits 1; it never pretends to have run.
#
# Environment: KIND (a kind binary; default: built into the cache at KIND_VERSION),
# KIND_NODE_IMAGE (default: kind's own), CLUSTER_NAME (etj-e2e), KEEP_CLUSTER=1 (do not
# delete the cluster at the end), TIMEOUT_S (per wait, default 900).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../devtools/elastic_devtools/localcluster/versions.env
source "$ROOT/devtools/elastic_devtools/localcluster/versions.env"
CACHE=${ETJ_CACHE_DIR:-$HOME/.cache/elastic-training-operator}
KIND_VERSION=${KIND_VERSION:-v0.30.0}
KIND=${KIND:-$CACHE/bin/kind-$KIND_VERSION}
HELM=${HELM:-$CACHE/bin/helm-$HELM_VERSION}
CLUSTER_NAME=${CLUSTER_NAME:-etj-e2e}
TIMEOUT_S=${TIMEOUT_S:-900}
TAG=e2e
OPERATOR_IMAGE=elastic-operator:$TAG
TRAINER_IMAGE=elastic-trainer:$TAG
NS=etj-e2e
JOB=kind-e2e
OPERATOR_NS=elastic-operator-system

log() { echo "[kind-e2e $(date -u +%H:%M:%S)] $*"; }
die() { echo "[kind-e2e] error: $*" >&2; exit 1; }

# --- prerequisites ------------------------------------------------------------------------
command -v docker >/dev/null 2>&1 \
  || die "Docker is not installed. This end-to-end test builds images and runs kind, which need a Docker engine. Nothing was run."
if ! docker_info=$(docker info 2>&1); then
  echo "$docker_info" | tail -n 5 >&2
  die "the docker client cannot reach a Docker engine ('docker info' failed). Start Docker (or set DOCKER_HOST) and rerun. Nothing was run."
fi
command -v kubectl >/dev/null 2>&1 || die "kubectl is not installed."
[ -x "$HELM" ] || die "helm $HELM_VERSION not found at $HELM: run hack/build-control-plane.sh (make cluster-binaries) or set HELM."
if [ ! -x "$KIND" ]; then
  command -v go >/dev/null 2>&1 || die "kind not found at $KIND and Go is missing to build it: install kind $KIND_VERSION and set KIND."
  log "building kind $KIND_VERSION into $KIND"
  gobin=$(mktemp -d)
  GOBIN=$gobin GOFLAGS=-mod=mod go install "sigs.k8s.io/kind@$KIND_VERSION"
  mkdir -p "$(dirname "$KIND")"
  mv "$gobin/kind" "$KIND"
  rmdir "$gobin"
fi

work=$(mktemp -d)
export KUBECONFIG=$work/kubeconfig
cleanup() {
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "[kind-e2e] FAILED (exit $rc); diagnostics:" >&2
    kubectl get etj,jobsets,jobs,pods -n "$NS" -o wide >&2 || true
    kubectl describe etj "$JOB" -n "$NS" >&2 || true
    kubectl logs -n "$OPERATOR_NS" deploy/elastic-operator --tail=200 >&2 || true
  fi
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    log "keeping cluster $CLUSTER_NAME (KUBECONFIG=$KUBECONFIG)"
  else
    "$KIND" delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT

# wait_for DESCRIPTION COMMAND...: poll COMMAND (every 2 s) until it succeeds or TIMEOUT_S.
wait_for() {
  local what=$1; shift
  local deadline=$(( $(date +%s) + TIMEOUT_S ))
  log "waiting for $what"
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${TIMEOUT_S}s waiting for $what"
    sleep 2
  done
  log "ok: $what"
}
condition() {  # condition TYPE FIELD: print a field of the job's condition TYPE
  kubectl get etj "$JOB" -n "$NS" \
    -o jsonpath="{.status.conditions[?(@.type==\"$1\")].$2}"
}
condition_is() { [ "$(condition "$1" "$2")" = "$3" ]; }
slice_failures() {
  kubectl get etj "$JOB" -n "$NS" -o jsonpath='{.status.counters.sliceFailures}'
}
slice_failures_above() { local n; n=$(slice_failures); [ "${n:-0}" -gt "$1" ]; }
slice_down_event() {
  [ -n "$(kubectl get events -n "$NS" --field-selector reason=SliceDown -o name)" ]
}
training_step_at_least() {
  local step; step=$(kubectl get etj "$JOB" -n "$NS" -o jsonpath='{.status.training.step}')
  [ -n "$step" ] && [ "$step" -ge "$1" ]
}

# --- 1. cluster ---------------------------------------------------------------------------
# The simulated backend renders no TPU selectors, tolerations or host networking, so plain
# worker nodes hold the head and both slices.
cat >"$work/kind.yaml" <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
EOF
log "creating kind cluster $CLUSTER_NAME"
"$KIND" create cluster --name "$CLUSTER_NAME" --config "$work/kind.yaml" \
  --kubeconfig "$KUBECONFIG" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 5m

# --- 2. JobSet ----------------------------------------------------------------------------
log "installing JobSet $JOBSET_VERSION"
kubectl apply --server-side -f \
  "https://github.com/kubernetes-sigs/jobset/releases/download/$JOBSET_VERSION/manifests.yaml"
kubectl -n jobset-system rollout status deployment/jobset-controller-manager --timeout="${TIMEOUT_S}s"

# --- 3. images ----------------------------------------------------------------------------
log "building $OPERATOR_IMAGE and $TRAINER_IMAGE"
docker build -f "$ROOT/Dockerfile.operator" -t "$OPERATOR_IMAGE" "$ROOT"
docker build -f "$ROOT/Dockerfile.trainer" -t "$TRAINER_IMAGE" "$ROOT"
"$KIND" load docker-image --name "$CLUSTER_NAME" "$OPERATOR_IMAGE" "$TRAINER_IMAGE"

# --- 4. the chart -------------------------------------------------------------------------
log "installing charts/elastic-operator"
"$HELM" install elastic-operator "$ROOT/charts/elastic-operator" \
  --namespace "$OPERATOR_NS" --create-namespace \
  --set image.repository="${OPERATOR_IMAGE%:*}" --set image.tag="$TAG" \
  --set image.pullPolicy=Never --set operator.logFormat=text \
  --wait --timeout "${TIMEOUT_S}s"
kubectl -n "$OPERATOR_NS" rollout status deployment/elastic-operator --timeout="${TIMEOUT_S}s"

# --- 5. a simulated job -------------------------------------------------------------------
kubectl create namespace "$NS"
cat >"$work/job.yaml" <<EOF
apiVersion: elastic.pathways.dev/v1alpha1
kind: ElasticTrainingJob
metadata:
  name: $JOB
  namespace: $NS
spec:
  backend: simulated
  tpu: {type: v6e, topology: 2x2, numSlices: 2}
  elastic: {timeoutSeconds: 600, maxRetries: 5}
  checkpoint: {directory: /tmp/checkpoints, periodSteps: 20}
  snapshot: {periodSteps: 5}
  trainer:
    image: $TRAINER_IMAGE
    model: tiny
    steps: 100000
EOF
kubectl apply -f "$work/job.yaml"
wait_for "the job to train (status.training.step >= 10)" training_step_at_least 10

# --- 6. kill a worker pod of slice 1 and wait for the recovery ----------------------------
victim=$(kubectl get pods -n "$NS" -o name \
  -l "jobset.sigs.k8s.io/replicatedjob-name=worker,jobset.sigs.k8s.io/job-index=1" | head -n 1)
[ -n "$victim" ] || die "no worker pod of slice 1 found"
restarts_before=$(kubectl get jobset -n "$NS" -o jsonpath='{.items[0].status.restarts}')
failures_before=$(slice_failures)
log "deleting $victim"
kubectl delete -n "$NS" "$victim" --grace-period=0 --wait=false
# SliceDown may last only seconds (the replacement pod starts fast): look for its durable
# traces, the counter and the Event, rather than the transient condition.
wait_for "the slice failure to be counted" slice_failures_above "${failures_before:-0}"
wait_for "a SliceDown event" slice_down_event
wait_for "Recovering=False reason Recovered" condition_is Recovering reason Recovered
condition_is Recovering status False || die "Recovering has reason Recovered but is not False"
restarts_after=$(kubectl get jobset -n "$NS" -o jsonpath='{.items[0].status.restarts}')
[ "${restarts_before:-0}" = "${restarts_after:-0}" ] \
  || die "the JobSet restarted ($restarts_before -> $restarts_after): the slice failure was not kept local"
log "Recovered: $(condition Recovering message)"
log "PASS"
