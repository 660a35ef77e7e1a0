#!/usr/bin/env bash
# Put every binary of the local control plane into a cache outside the work tree, at the
# versions pinned in versions.env, keyed by version (a warm run is a few stat calls).
#
#   hack/build-control-plane.sh [COMPONENT|GROUP ...]
#     components: kubernetes etcd jobset-controller kwok helm fake-gcs-server kueue-controller
#     groups:     core = kubernetes etcd jobset-controller kwok (`etj cluster up`, `make demo`)
#                 all  = every component (the default; `make test`)
#
# Each piece comes the fastest way that is there, and the output says which:
#  1. the official release artifact, where versions.env pins its published checksum for
#     this platform (e.g. KUBERNETES_SERVER_LINUX_AMD64_SHA512): downloaded, checked, and
#     refused unless the checksum matches. An empty checksum means: no download, build.
#  2. else (no checksum, no network, a refused download, no release binary at all, as for
#     the JobSet and Kueue controllers) built from the Go module proxy.
#
# Environment:
#   ETJ_CACHE_DIR       the cache (default ~/.cache/elastic-training-operator)
#   ETJ_VERSIONS_FILE   another versions file, e.g. versions-compat.env (`make test-compat`)
#   ETJ_RELEASE_MIRROR  a base URL standing in for the release hosts: https://HOST/PATH is
#                       fetched as $ETJ_RELEASE_MIRROR/HOST/PATH (tests, a local mirror)
#   ETJ_NO_DOWNLOAD=1   always build
#
# Why a throwaway module for Kubernetes: k8s.io/kubernetes replaces its ~31 staging
# modules with ./staging/..., so `go install k8s.io/kubernetes/...@v` fails. We copy its
# go.mod, point each staging replace at the published v0.Y.Z, and build from there.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
VERSIONS_FILE=${ETJ_VERSIONS_FILE:-$HERE/../devtools/elastic_devtools/localcluster/versions.env}
[ -f "$VERSIONS_FILE" ] || { echo "error: versions file $VERSIONS_FILE not found (ETJ_VERSIONS_FILE)" >&2; exit 1; }
# shellcheck source=../devtools/elastic_devtools/localcluster/versions.env
source "$VERSIONS_FILE"

CACHE=${ETJ_CACHE_DIR:-$HOME/.cache/elastic-training-operator}
BIN=$CACHE/bin
WORK=$CACHE/work
LOGS=$CACHE/logs
DOWNLOADS=$CACHE/downloads
mkdir -p "$BIN" "$WORK" "$LOGS" "$DOWNLOADS"
export GOFLAGS="${GOFLAGS:-} -mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0

ALL=(kubernetes etcd jobset-controller kwok helm fake-gcs-server kueue-controller)
CORE=(kubernetes etcd jobset-controller kwok)

# ---------------------------------------------------------------- what to build

selected=()
for arg in "${@:-all}"; do
  case $arg in
    all) selected+=("${ALL[@]}") ;;
    core) selected+=("${CORE[@]}") ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *)
      case " ${ALL[*]} " in
        *" $arg "*) selected+=("$arg") ;;
        *) echo "error: unknown component '$arg'; one of: ${ALL[*]}, core, all" >&2; exit 2 ;;
      esac ;;
  esac
done
wanted() { case " ${selected[*]} " in *" $1 "*) return 0 ;; esac; return 1; }
plan=()
for c in "${ALL[@]}"; do wanted "$c" && plan+=("$c"); done

# The platform the checksums are pinned for (<NAME>_<OS>_<ARCH>_SHA...).
os=$(uname -s | tr '[:upper:]' '[:lower:]')
case $(uname -m) in x86_64|amd64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
PLATFORM=${os^^}_${arch^^}

# ------------------------------------------------------------------- downloads

FETCH_REASON=""
FETCH_URL=""

# pinned NAME ALGO: the checksum versions.env pins for NAME on this platform, or "".
pinned() { local var="${1}_${PLATFORM}_${2^^}"; echo "${!var:-}"; }

# fetch HOST/PATH ALGO SUM OUT: download https://HOST/PATH (or from ETJ_RELEASE_MIRROR)
# into OUT if its checksum is SUM; else leave OUT absent, say why in FETCH_REASON, fail.
fetch() {
  local path=$1 algo=$2 want=$3 out=$4
  FETCH_URL=${ETJ_RELEASE_MIRROR:+${ETJ_RELEASE_MIRROR%/}/$path}
  FETCH_URL=${FETCH_URL:-https://$path}
  if [ -z "$want" ]; then
    FETCH_REASON="no published $algo checksum pinned for $os/$arch"; return 1
  fi
  if [ -n "${ETJ_NO_DOWNLOAD:-}" ]; then FETCH_REASON="ETJ_NO_DOWNLOAD is set"; return 1; fi
  command -v curl >/dev/null 2>&1 || { FETCH_REASON="curl is not installed"; return 1; }
  local part=$out.part err
  rm -f "$part"
  # Fail fast without a network; give up on a transfer that stalls for a minute.
  if ! err=$(curl -fsSL --connect-timeout 15 --speed-limit 1024 --speed-time 60 \
      -o "$part" "$FETCH_URL" 2>&1); then
    rm -f "$part"
    FETCH_REASON="download of $FETCH_URL failed: ${err:-curl failed}"; return 1
  fi
  local got; got=$("${algo}sum" "$part" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    rm -f "$part"
    FETCH_REASON="$FETCH_URL refused: its $algo is $got, versions.env pins $want"; return 1
  fi
  mv "$part" "$out"
}

# untar ARCHIVE MEMBER DEST: extract one file of a .tar.gz to DEST (executable).
untar() {
  local tmp; tmp=$(mktemp -d)
  tar -xzf "$1" -C "$tmp" "$2"
  install -m 0755 "$tmp/$2" "$3"
  rm -rf "$tmp"
}

download_kubernetes() {
  local tarball=$DOWNLOADS/kubernetes-server-$KUBERNETES_VERSION-$os-$arch.tar.gz
  fetch "dl.k8s.io/$KUBERNETES_VERSION/kubernetes-server-$os-$arch.tar.gz" sha512 \
    "$(pinned KUBERNETES_SERVER sha512)" "$tarball" || return 1
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    untar "$tarball" "kubernetes/server/bin/$b" "$BIN/$b-$KUBERNETES_VERSION"
  done
  rm -f "$tarball"
  ln -sf "$BIN/kube-apiserver-$KUBERNETES_VERSION" "$BIN/kubernetes-$KUBERNETES_VERSION"
}

download_etcd() {
  local name=etcd-$ETCD_VERSION-$os-$arch tarball
  tarball=$DOWNLOADS/$name.tar.gz
  fetch "github.com/etcd-io/etcd/releases/download/$ETCD_VERSION/$name.tar.gz" sha256 \
    "$(pinned ETCD sha256)" "$tarball" || return 1
  untar "$tarball" "$name/etcd" "$BIN/etcd-$ETCD_VERSION"
  rm -f "$tarball"
}

download_kwok() {
  local out=$DOWNLOADS/kwok-$KWOK_VERSION-$os-$arch
  fetch "github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION/kwok-$os-$arch" sha256 \
    "$(pinned KWOK sha256)" "$out" || return 1
  install -m 0755 "$out" "$BIN/kwok-$KWOK_VERSION"
  rm -f "$out"
}

download_helm() {
  local tarball=$DOWNLOADS/helm-$HELM_VERSION-$os-$arch.tar.gz
  fetch "get.helm.sh/helm-$HELM_VERSION-$os-$arch.tar.gz" sha256 \
    "$(pinned HELM sha256)" "$tarball" || return 1
  untar "$tarball" "$os-$arch/helm" "$BIN/helm-$HELM_VERSION"
  rm -f "$tarball"
}

download_fake_gcs_server() {
  local v=${FAKE_GCS_VERSION#v} tarball
  tarball=$DOWNLOADS/fake-gcs-server-$FAKE_GCS_VERSION-$os-$arch.tar.gz
  fetch "github.com/fsouza/fake-gcs-server/releases/download/$FAKE_GCS_VERSION/fake-gcs-server_${v}_${os^}_$arch.tar.gz" \
    sha256 "$(pinned FAKE_GCS sha256)" "$tarball" || return 1
  untar "$tarball" fake-gcs-server "$BIN/fake-gcs-server-$FAKE_GCS_VERSION"
  rm -f "$tarball"
}

# ---------------------------------------------------------------------- builds

# Go, at least GO_MIN_VERSION (the highest `go` directive of the modules pinned), checked
# once, only when something is built (a download needs no Go).
GO_CHECKED=""
need_go() {
  [ -n "$GO_CHECKED" ] && return 0
  local want=${GO_MIN_VERSION:-1.24}
  if ! command -v go >/dev/null 2>&1; then
    echo "error: Go is not installed. Install Go >= $want (https://go.dev/dl) and rerun." >&2
    exit 1
  fi
  local have; have=$(go env GOVERSION); have=${have#go}
  if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" != "$want" ]; then
    echo "error: Go $have is too old: the pinned modules need Go >= $want (https://go.dev/dl)." >&2
    exit 1
  fi
  GO_CHECKED=1
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
  # The marker the cache check looks for.
  ln -sf "$BIN/kube-apiserver-$KUBERNETES_VERSION" "$BIN/kubernetes-$KUBERNETES_VERSION"
}

build_etcd() {
  local dir=$WORK/etcd-$ETCD_VERSION
  mkdir -p "$dir"
  (cd "$dir" && { [ -f go.mod ] || go mod init etj.local/etcd-build; } \
    && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    && go build -v -ldflags "-s -w" -o "$BIN/etcd-$ETCD_VERSION" go.etcd.io/etcd/server/v3)
}

build_jobset() {
  go_build_pinned jobset-controller "$JOBSET_VERSION" sigs.k8s.io/jobset sigs.k8s.io/jobset
}
build_kwok() { go_install kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok; }
build_helm() { go_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm; }
build_fake_gcs_server() {
  go_install fake-gcs-server "$FAKE_GCS_VERSION" github.com/fsouza/fake-gcs-server
}

# Kueue: the binary stamped with its version.
build_kueue() {
  local dir=$WORK/kueue-controller-$KUEUE_VERSION
  mkdir -p "$dir"
  (cd "$dir" && { [ -f go.mod ] || go mod init etj.local/kueue-build; } \
    && go mod edit -require "sigs.k8s.io/kueue@$KUEUE_VERSION" \
    && go build -v -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
      -o "$BIN/kueue-controller-$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue)
}

# ------------------------------------------------------- files from the modules

# The module's source in Go's module cache (downloaded if missing; no build).
module_dir() {
  need_go
  go mod download -json "$1@$2" | sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p'
}

# JobSet's CRD comes from the same module version as the binary.
copy_jobset_manifests() {
  local src; src=$(module_dir sigs.k8s.io/jobset "$JOBSET_VERSION")
  local dst=$CACHE/jobset-$JOBSET_VERSION
  mkdir -p "$dst"
  cp "$src/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$dst/crd.yaml"
  chmod u+w "$dst"/*.yaml
}

# kwok's stage files (kustomize/stage) are read from the module cache by the cluster.
kwok_stages() { module_dir sigs.k8s.io/kwok "$KWOK_VERSION" >/dev/null; }

# The manifests the local cluster installs from Kueue's module (CRDs, the
# conversion-webhook patches, the webhook registrations).
copy_kueue_manifests() {
  local src; src=$(module_dir sigs.k8s.io/kueue "$KUEUE_VERSION")/config/components
  local dst=$CACHE/kueue-$KUEUE_VERSION
  mkdir -p "$dst/crd-bases" "$dst/crd-patches"
  cp "$src"/crd/bases/*.yaml "$dst/crd-bases/"
  cp "$src"/crd/kustomization.yaml "$src"/crd/patches/webhook_in_*.yaml "$dst/crd-patches/"
  cp "$src/webhook/manifests.yaml" "$dst/webhooks.yaml"
  chmod -R u+w "$dst"
}

# ---------------------------------------------------------------------- driver

step=0
total=${#plan[@]}
declare -A took=()

# obtain NAME VERSION DOWNLOAD BUILD: $BIN/NAME-VERSION from the cache, else from
# DOWNLOAD (a function, or "-" where the project ships no binary), else from BUILD,
# printing which, with a heartbeat (packages compiled so far) while it builds.
obtain() {
  local name=$1 version=$2 download=$3 build=$4
  step=$((step + 1))
  local target=$BIN/$name-$version
  if [ -x "$target" ]; then
    echo "[$step/$total] $name $version: cached"
    took[$name]="cached"
    return 0
  fi
  local t0; t0=$(date +%s)
  if [ "$download" = - ]; then
    FETCH_REASON="the project publishes no release binary (only a container image)"
  else
    echo "[$step/$total] $name $version: downloading the release"
    if "$download"; then
      [ -x "$target" ] || { echo "error: $name downloaded but $target is missing" >&2; exit 1; }
      echo "    $name: downloaded $FETCH_URL, checksum verified, in $(( $(date +%s) - t0 ))s"
      took[$name]="downloaded in $(( $(date +%s) - t0 ))s"
      return 0
    fi
  fi
  need_go
  local log=$LOGS/build-$name-$version.log
  echo "[$step/$total] $name $version: building from the Go module proxy ($FETCH_REASON; log: $log)"
  ( "$build" ) >"$log" 2>&1 &
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
  echo "    $name: built in $(( $(date +%s) - t0 ))s"
  took[$name]="built in $(( $(date +%s) - t0 ))s"
}

start_all=$(date +%s)
echo "Local control plane ($(basename "$VERSIONS_FILE"): ${plan[*]}) into $BIN"
for c in "${plan[@]}"; do
  case $c in
    kubernetes) obtain kubernetes "$KUBERNETES_VERSION" download_kubernetes build_kubernetes ;;
    etcd) obtain etcd "$ETCD_VERSION" download_etcd build_etcd ;;
    jobset-controller) obtain jobset-controller "$JOBSET_VERSION" - build_jobset
                       copy_jobset_manifests ;;
    kwok) obtain kwok "$KWOK_VERSION" download_kwok build_kwok
          kwok_stages ;;
    helm) obtain helm "$HELM_VERSION" download_helm build_helm ;;
    fake-gcs-server) obtain fake-gcs-server "$FAKE_GCS_VERSION" download_fake_gcs_server \
                       build_fake_gcs_server ;;
    kueue-controller) obtain kueue-controller "$KUEUE_VERSION" - build_kueue
                      copy_kueue_manifests ;;
  esac
done
summary=""
for c in "${plan[@]}"; do summary+="${summary:+, }$c ${took[$c]}"; done
echo "Control plane ready in $(( $(date +%s) - start_all ))s ($summary): $BIN"
