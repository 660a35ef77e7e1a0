#!/usr/bin/env bash
# Build every binary of the local control plane from the Go module proxy, at pinned
# versions, into a cache outside the work tree (keyed by version, so a warm run is a
# few stat calls). Override the cache with ETJ_CACHE_DIR.
#
# Why a throwaway module for Kubernetes: k8s.io/kubernetes replaces its ~31 staging
# modules with ./staging/..., so `go install k8s.io/kubernetes/...@v` fails. We copy its
# go.mod, point each staging replace at the published v0.Y.Z, and build from there.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../devtools/elastic_devtools/localcluster/versions.env
source "$HERE/../devtools/elastic_devtools/localcluster/versions.env"

CACHE=${ETJ_CACHE_DIR:-$HOME/.cache/elastic-training-operator}
BIN=$CACHE/bin
WORK=$CACHE/work
LOGS=$CACHE/logs
mkdir -p "$BIN" "$WORK" "$LOGS"
export GOFLAGS="${GOFLAGS:-} -mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0

if ! command -v go >/dev/null 2>&1; then
  echo "error: Go is not installed. Install Go >= 1.24 (https://go.dev/dl or 'apt-get install golang') and rerun." >&2
  exit 1
fi

start_all=$(date +%s)
step=0
total=9

# build NAME VERSION LOGFILE COMMAND... : run COMMAND unless $BIN/NAME-VERSION exists,
# printing a heartbeat with the number of packages compiled so far.
build() {
  local name=$1 version=$2; shift 2
  step=$((step + 1))
  local target=$BIN/$name-$version
  if [ -x "$target" ]; then
    echo "[$step/$total] $name $version: cached"
    return 0
  fi
  local log=$LOGS/build-$name-$version.log
  echo "[$step/$total] $name $version: building (log: $log)"
  local t0; t0=$(date +%s)
  ( "$@" ) >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 20
    if kill -0 "$pid" 2>/dev/null; then
      echo "    ... $name: $(( $(date +%s) - t0 ))s, $(grep -c . "$log" || true) packages compiled"
    fi
  done
  if ! wait "$pid"; then
    echo "error: building $name failed; last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  [ -x "$target" ] || { echo "error: $name built but $target is missing" >&2; exit 1; }
  echo "    $name done in $(( $(date +%s) - t0 ))s"
}

# go install into a temporary GOBIN, then move the binary to its versioned name.
go_install() {
  local name=$1 version=$2 pkg=$3
  local gobin; gobin=$(mktemp -d)
  GOBIN=$gobin go install -v "$pkg@$version"
  mv "$gobin/$(basename "$pkg")" "$BIN/$name-$version"
  rmdir "$gobin"
}

# Build PKG from MODULE@VERSION inside a throwaway module. Unlike `go install pkg@v`, this
# never reads the module's version list (the proxy refuses that list for some modules,
# e.g. sigs.k8s.io/jobset, which makes `go install` fail while loading deprecations).
go_build_pinned() {
  local name=$1 version=$2 module=$3 pkg=$4
  local dir=$WORK/$name-$version
  mkdir -p "$dir"
  (cd "$dir" && { [ -f go.mod ] || go mod init "etj.local/$name-build"; } \
    && go mod edit -require "$module@$version" \
    && go build -v -ldflags "-s -w" -o "$BIN/$name-$version" "$pkg")
}

build_kubernetes() {
  local dir=$WORK/kubernetes-$KUBERNETES_VERSION minor
  minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
  local staging=v0.${KUBERNETES_VERSION#v1.}
  mkdir -p "$dir"
  go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null
  local upstream
  upstream=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod
  # Same requirements as upstream (so versions match), staging replaced by releases.
  sed -e "s#^module .*#module etj.local/kube-build#" \
      -e "s#=> ./staging/src/\(k8s.io/[a-z0-9-]*\)#=> \1 $staging#" \
      "$upstream" >"$dir/go.mod"
  printf '\nrequire k8s.io/kubernetes %s\n' "$KUBERNETES_VERSION" >>"$dir/go.mod"
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  local out; out=$(mktemp -d)
  (cd "$dir" && go build -v -ldflags "$ldflags" -o "$out/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler)
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    mv "$out/$b" "$BIN/$b-$KUBERNETES_VERSION"
  done
  rmdir "$out"
  # The marker `build` checks for this step.
  ln -sf "$BIN/kube-apiserver-$KUBERNETES_VERSION" "$BIN/kubernetes-$KUBERNETES_VERSION"
}

build_etcd() {
  local dir=$WORK/etcd-$ETCD_VERSION
  mkdir -p "$dir"
  (cd "$dir" && { [ -f go.mod ] || go mod init etj.local/etcd-build; } \
    && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    && go build -v -ldflags "-s -w" -o "$BIN/etcd-$ETCD_VERSION" go.etcd.io/etcd/server/v3)
}

# JobSet manifests (CRD, webhooks) come from the same module version as the binary.
copy_jobset_manifests() {
  local src; src=$(go env GOMODCACHE)/sigs.k8s.io/jobset@$JOBSET_VERSION
  local dst=$CACHE/jobset-$JOBSET_VERSION
  mkdir -p "$dst"
  cp "$src/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$dst/crd.yaml"
  chmod u+w "$dst"/*.yaml
}

# Kueue: the binary stamped with its version, and the manifests the local cluster installs
# from the same module (CRDs, the conversion-webhook patches, the webhook registrations).
build_kueue() {
  local dir=$WORK/kueue-controller-$KUEUE_VERSION
  mkdir -p "$dir"
  (cd "$dir" && { [ -f go.mod ] || go mod init etj.local/kueue-build; } \
    && go mod edit -require "sigs.k8s.io/kueue@$KUEUE_VERSION" \
    && go build -v -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
      -o "$BIN/kueue-controller-$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue)
}

copy_kueue_manifests() {
  local src; src=$(go env GOMODCACHE)/sigs.k8s.io/kueue@$KUEUE_VERSION/config/components
  local dst=$CACHE/kueue-$KUEUE_VERSION
  mkdir -p "$dst/crd-bases" "$dst/crd-patches"
  cp "$src"/crd/bases/*.yaml "$dst/crd-bases/"
  cp "$src"/crd/kustomization.yaml "$src"/crd/patches/webhook_in_*.yaml "$dst/crd-patches/"
  cp "$src/webhook/manifests.yaml" "$dst/webhooks.yaml"
  chmod -R u+w "$dst"
}

echo "Building the local control plane into $BIN"
build kubernetes "$KUBERNETES_VERSION" build_kubernetes
step=$((step + 2)) # apiserver, controller-manager and scheduler came in one build
build etcd "$ETCD_VERSION" build_etcd
build jobset-controller "$JOBSET_VERSION" go_build_pinned jobset-controller "$JOBSET_VERSION" sigs.k8s.io/jobset sigs.k8s.io/jobset
copy_jobset_manifests
build kwok "$KWOK_VERSION" go_install kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
build helm "$HELM_VERSION" go_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
build fake-gcs-server "$FAKE_GCS_VERSION" go_install fake-gcs-server "$FAKE_GCS_VERSION" github.com/fsouza/fake-gcs-server
build kueue-controller "$KUEUE_VERSION" build_kueue
copy_kueue_manifests
echo "Control plane ready in $(( $(date +%s) - start_all ))s: $BIN"
