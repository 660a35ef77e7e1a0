#!/usr/bin/env bash
# Build the Go binaries of the kind end-to-end run from the Go module proxy, at the versions
# pinned in versions.env, into $CACHE/bin/<name>-<version> (a warm run is a few stat calls).
#   go-binaries.sh tools   kind
#   go-binaries.sh node    what a kind node image is made of when it cannot be pulled:
#                          kubeadm, kubelet, kubectl, kube-proxy (the control plane's
#                          apiserver, controller-manager and scheduler come from
#                          hack/build-control-plane.sh), containerd, crictl, and the
#                          add-ons kubeadm and kind deploy: etcd, CoreDNS,
#                          local-path-provisioner; pause is C, compiled from Kubernetes'
#                          own source.
# Each is built in a throwaway module that requires the pinned release (never `go install
# pkg@v`, which reads the version list the proxy refuses for some modules). Module and
# build caches are Go's defaults, shared with hack/build-control-plane.sh: Kubernetes'
# packages compiled for the control plane are reused.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export GOFLAGS="${GOFLAGS:-} -mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
WORK=$CACHE/work
mkdir -p "$WORK"
command -v go >/dev/null 2>&1 || die "Go is not installed: install Go >= 1.24 (https://go.dev/dl or 'apt-get install golang')"

# build NAME VERSION COMMAND...: run COMMAND unless $BIN/NAME-VERSION exists.
build() {
  local name=$1 version=$2; shift 2
  if [ -x "$BIN/$name-$version" ]; then
    note_cache "cached: $name $version ($BIN/$name-$version)"
    return 0
  fi
  local t0; t0=$(date +%s)
  run_logged "building $name $version" "$LOGS/build-$name-$version.log" "$@"
  [ -x "$BIN/$name-$version" ] || die "$name built but $BIN/$name-$version is missing"
  note_cache "built: $name $version in $(( $(date +%s) - t0 ))s"
}

# pinned_module DIR MODULE VERSION: a throwaway module in DIR that requires MODULE@VERSION.
pinned_module() {
  mkdir -p "$1"
  (cd "$1" && { [ -f go.mod ] || go mod init "etj.local/$(basename "$1")" >/dev/null 2>&1; } \
    && go mod edit -require "$2@$3")
}

# go_build_pinned NAME VERSION MODULE PKG [GO BUILD FLAGS...]
go_build_pinned() {
  local name=$1 version=$2 module=$3 pkg=$4; shift 4
  local dir=$WORK/$name-$version
  pinned_module "$dir" "$module" "$version"
  (cd "$dir" && go build -v "$@" -o "$BIN/$name-$version" "$pkg")
}

build_kind() {
  go_build_pinned kind "$KIND_VERSION" sigs.k8s.io/kind sigs.k8s.io/kind -ldflags "-s -w"
}

# The same module (same directory, same go.mod) hack/build-control-plane.sh builds the
# control plane in: Kubernetes replaces its staging modules with ./staging, which a
# consumer must point at the published releases.
kube_module() {
  local dir=$WORK/kubernetes-$KUBERNETES_VERSION
  if [ ! -f "$dir/go.mod" ]; then
    mkdir -p "$dir"
    go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null
    sed -e "s#^module .*#module etj.local/kube-build#" \
        -e "s#=> ./staging/src/\(k8s.io/[a-z0-9-]*\)#=> \1 v0.${KUBERNETES_VERSION#v1.}#" \
        "$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod" >"$dir/go.mod"
    printf '\nrequire k8s.io/kubernetes %s\n' "$KUBERNETES_VERSION" >>"$dir/go.mod"
  fi
  echo "$dir"
}

build_kube_node() {
  local dir minor out
  dir=$(kube_module)
  minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
  out=$(mktemp -d)
  (cd "$dir" && go build -v -o "$out/" -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
      -X k8s.io/component-base/version.gitTreeState=clean" \
      k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy)
  for b in kubelet kubectl kube-proxy kubeadm; do   # kubeadm last: it is the marker
    mv "$out/$b" "$BIN/$b-$KUBERNETES_VERSION"
  done
  rmdir "$out"
}

build_containerd() {
  local v=$KIND_CONTAINERD_VERSION pkg=github.com/containerd/containerd/v2
  local dir=$WORK/containerd-$v out
  pinned_module "$dir" "$pkg" "$v"
  out=$(mktemp -d)
  # Kind's own build tags: no optional snapshotters.
  (cd "$dir" && go build -v -tags "no_aufs no_zfs no_btrfs no_devmapper urfave_cli_no_docs" \
      -ldflags "-s -w -X $pkg/version.Version=$v -X $pkg/version.Package=$pkg" -o "$out/" \
      "$pkg/cmd/ctr" "$pkg/cmd/containerd-shim-runc-v2" "$pkg/cmd/containerd")
  for b in ctr containerd-shim-runc-v2 containerd; do
    mv "$out/$b" "$BIN/$b-$v"
  done
  rmdir "$out"
}

build_crictl() {
  go_build_pinned crictl "$KIND_CRICTL_VERSION" sigs.k8s.io/cri-tools sigs.k8s.io/cri-tools/cmd/crictl \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$KIND_CRICTL_VERSION"
}

build_etcd() {
  go_build_pinned etcd "$KIND_ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 -ldflags "-s -w"
}

build_coredns() {
  go_build_pinned coredns "$KIND_COREDNS_VERSION" github.com/coredns/coredns github.com/coredns/coredns -ldflags "-s -w"
}

build_local_path_provisioner() {
  go_build_pinned local-path-provisioner "$KIND_LOCAL_PATH_PROVISIONER_VERSION" \
    github.com/rancher/local-path-provisioner github.com/rancher/local-path-provisioner \
    -ldflags "-s -w -X main.VERSION=$KIND_LOCAL_PATH_PROVISIONER_VERSION"
}

# The pod sandbox's pause process: Kubernetes' build/pause/linux/pause.c, static.
build_pause() {
  command -v gcc >/dev/null 2>&1 || die "gcc is needed to compile pause (apt-get install gcc libc6-dev)"
  go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null
  local src; src=$(go env GOMODCACHE)/k8s.io/kubernetes@$KUBERNETES_VERSION/build/pause/linux/pause.c
  gcc -Os -Wall -Werror -static -DVERSION="v$KIND_PAUSE_VERSION-etj" -o "$BIN/pause-$KIND_PAUSE_VERSION" "$src"
  strip "$BIN/pause-$KIND_PAUSE_VERSION"
}

case "${1:-}" in
  tools)
    build kind "$KIND_VERSION" build_kind ;;
  node)
    build kubeadm "$KUBERNETES_VERSION" build_kube_node
    build containerd "$KIND_CONTAINERD_VERSION" build_containerd
    build crictl "$KIND_CRICTL_VERSION" build_crictl
    build pause "$KIND_PAUSE_VERSION" build_pause
    build etcd "$KIND_ETCD_VERSION" build_etcd
    build coredns "$KIND_COREDNS_VERSION" build_coredns
    build local-path-provisioner "$KIND_LOCAL_PATH_PROVISIONER_VERSION" build_local_path_provisioner ;;
  *) die "usage: $0 tools|node" ;;
esac
