#!/usr/bin/env bash
# The kind node image for KUBERNETES_VERSION; prints the image to use on its last line.
# Where kindest/node:$KUBERNETES_VERSION can be pulled, that. Else it is built here with
# kind's own `kind build node-image --type file`, from:
#   - a base image (what kindest/base is) from Debian packages, with containerd and crictl
#     built from the Go module proxy (node/Dockerfile.base);
#   - a kubernetes-server tarball assembled here: kubeadm, kubelet, kubectl, and the images
#     of kube-apiserver, -controller-manager, -scheduler and kube-proxy, all built at the
#     pinned Kubernetes version; kube-proxy.tar also carries the add-on images kubeadm and
#     kind deploy (pause, etcd, CoreDNS, kindnetd, local-path-provisioner and its helper),
#     built here too, so kind side-loads them instead of pulling them from registries that
#     cannot be reached (it pulls every image it was not given).
# kindnetd is not on the Go module proxy: node/kindnet-single-node.sh stands in for it,
# which limits a built node image to one-node clusters.
# The result is cached: in Docker, and saved under $CACHE/images for a fresh engine.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
DEBIAN_IMAGE=${1:?usage: $0 DEBIAN_BASE_IMAGE (from python-base.sh)}
HERE=$(cd "$(dirname "$0")" && pwd)
KIND=$BIN/kind-$KIND_VERSION
PUBLIC=kindest/node:$KUBERNETES_VERSION
NODE_IMAGE=etj-local/kind-node:$KUBERNETES_VERSION-kind-$KIND_VERSION
BASE_IMAGE=etj-local/kind-base:$KIND_VERSION-containerd-$KIND_CONTAINERD_VERSION

if have_or_pull "$PUBLIC"; then
  echo "$PUBLIC"
  exit 0
fi
log "cannot pull $PUBLIC: using the node image built here, $NODE_IMAGE"

# image_from_debian TAG DOCKERFILE_LINES [FILE...]: FROM the Debian base, with FILEs in the context.
image_from_debian() {
  local tag=$1 lines=$2; shift 2
  image_exists "$tag" && return 0
  local ctx; ctx=$(mktemp -d)
  [ $# -eq 0 ] || cp "$@" "$ctx/"
  printf 'FROM %s\n%s\n' "$DEBIAN_IMAGE" "$lines" | classic_build -t "$tag" -f - "$ctx"
  rm -rf "$ctx"
}

build_node_base() {
  local ctx; ctx=$(mktemp -d)
  cp -r "$KIND_SRC/images/base/files" "$ctx/files"
  # kind's modes: scripts 0755, everything else 0644 (the module cache is read-only).
  chmod -R u+w "$ctx/files" && find "$ctx/files" -type d -exec chmod 0755 {} + \
    && find "$ctx/files" -type f -exec chmod 0644 {} + \
    && chmod 0755 "$ctx"/files/usr/local/bin/* "$ctx"/files/kind/bin/*
  mkdir "$ctx/bin"
  for b in containerd ctr containerd-shim-runc-v2; do
    install -m 0755 "$BIN/$b-$KIND_CONTAINERD_VERSION" "$ctx/bin/$b"
  done
  install -m 0755 "$BIN/crictl-$KIND_CRICTL_VERSION" "$ctx/bin/crictl"
  run_logged "building the node base $BASE_IMAGE" "$LOGS/kind-base.log" \
    env DOCKER_BUILDKIT=0 docker build --network host --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" \
    --build-arg PAUSE_IMAGE="$PAUSE_IMAGE" -t "$BASE_IMAGE" -f "$HERE/node/Dockerfile.base" "$ctx"
  rm -rf "$ctx"
}

# The images kubeadm (at the pinned version) and kind's manifests name.
kind_const() { sed -nE "s/^const $1 = \"(.*)\"/\1/p" "$KIND_SRC/pkg/build/nodeimage/$2"; }
resolve_image_names() {
  local kubeadm_images
  kubeadm_images=$("$BIN/kubeadm-$KUBERNETES_VERSION" config images list --kubernetes-version "$KUBERNETES_VERSION")
  PAUSE_IMAGE=$(grep '/pause:' <<<"$kubeadm_images")
  ETCD_IMAGE=$(grep '/etcd:' <<<"$kubeadm_images")
  COREDNS_IMAGE=$(grep '/coredns:' <<<"$kubeadm_images")
  KINDNETD_IMAGE=$(kind_const kindnetdImage const_cni.go)
  PROVISIONER_IMAGE=$(kind_const storageProvisionerImage const_storage.go)
  HELPER_IMAGE=$(kind_const storageHelperImage const_storage.go)
  # kubeadm names the add-on versions pinned in versions.env; stop if they drift apart.
  [ "${PAUSE_IMAGE##*:}" = "$KIND_PAUSE_VERSION" ] || die "kubeadm wants $PAUSE_IMAGE, versions.env pins pause $KIND_PAUSE_VERSION"
  [ "${ETCD_IMAGE##*:}" = "${KIND_ETCD_VERSION#v}-0" ] || die "kubeadm wants $ETCD_IMAGE, versions.env pins etcd $KIND_ETCD_VERSION"
  [ "${COREDNS_IMAGE##*:}" = "$KIND_COREDNS_VERSION" ] || die "kubeadm wants $COREDNS_IMAGE, versions.env pins CoreDNS $KIND_COREDNS_VERSION"
}

build_component_images() {
  local k=$KUBERNETES_VERSION
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    image_from_binary "registry.k8s.io/$c:$k" "$BIN/$c-$k" "/usr/local/bin/$c"
  done
  image_from_debian "registry.k8s.io/kube-proxy:$k" \
    "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables conntrack nftables && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY kube-proxy-$k /usr/local/bin/kube-proxy" "$BIN/kube-proxy-$k"
  image_from_binary "$PAUSE_IMAGE" "$BIN/pause-$KIND_PAUSE_VERSION" /pause 65535:65535
  image_from_binary "$ETCD_IMAGE" "$BIN/etcd-$KIND_ETCD_VERSION" /usr/local/bin/etcd
  image_from_binary "$COREDNS_IMAGE" "$BIN/coredns-$KIND_COREDNS_VERSION" /coredns
  image_from_binary "$PROVISIONER_IMAGE" "$BIN/local-path-provisioner-$KIND_LOCAL_PATH_PROVISIONER_VERSION" \
    /usr/local/bin/local-path-provisioner
  # The helper pod runs `sh` scripts that mkdir and rm volume directories.
  image_from_debian "$HELPER_IMAGE" ""
  image_from_debian "$KINDNETD_IMAGE" "COPY kindnet-single-node.sh /usr/local/bin/
ENTRYPOINT [\"/usr/local/bin/kindnet-single-node.sh\"]" "$HERE/node/kindnet-single-node.sh"
}

# save_archive OUT IMAGE...: `docker save`, with two changes kind needs to see every image
# as side-loaded: the legacy `repositories` index first (kind reads the first index it
# finds, and only `repositories` lists every image), and full names (Docker writes
# docker.io/kindest/x as kindest/x; kind compares them with the full names it wants).
save_archive() {
  local out=$1; shift
  local dir; dir=$(mktemp -d)
  docker save "$@" | tar -C "$dir" -x
  local full='def full: split("/") as $p
    | if ($p | length) == 1 then "docker.io/library/" + .
      elif ($p[0] | test("[.:]")) or $p[0] == "localhost" then .
      else "docker.io/" + . end;'
  jq -c "$full with_entries(.key |= full)" "$dir/repositories" >"$dir/repositories.new"
  jq -c "$full map(.RepoTags |= map(full))" "$dir/manifest.json" >"$dir/manifest.json.new"
  mv "$dir/repositories.new" "$dir/repositories" && mv "$dir/manifest.json.new" "$dir/manifest.json"
  (cd "$dir" && tar -cf "$out" repositories manifest.json $(ls | grep -vx -e repositories -e manifest.json))
  rm -rf "$dir"
}

assemble_server_tarball() {
  local out=$1 k=$KUBERNETES_VERSION
  local dir; dir=$(mktemp -d)
  local bin=$dir/kubernetes/server/bin
  mkdir -p "$bin"
  echo "$k" >"$dir/kubernetes/version"
  for b in kubeadm kubelet kubectl; do install -m 0755 "$BIN/$b-$k" "$bin/$b"; done
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    save_archive "$bin/$c.tar" "registry.k8s.io/$c:$k"
  done
  save_archive "$bin/kube-proxy.tar" "registry.k8s.io/kube-proxy:$k" "$PAUSE_IMAGE" "$ETCD_IMAGE" \
    "$COREDNS_IMAGE" "$KINDNETD_IMAGE" "$PROVISIONER_IMAGE" "$HELPER_IMAGE"
  tar -C "$dir" -czf "$out" kubernetes
  rm -rf "$dir"
}

build_node_image() {
  "$HERE/go-binaries.sh" node
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    [ -x "$BIN/$c-$KUBERNETES_VERSION" ] || die "$BIN/$c-$KUBERNETES_VERSION is missing: run hack/build-control-plane.sh"
  done
  resolve_image_names
  ensure_static_base "$DEBIAN_IMAGE"
  ensure_image "$BASE_IMAGE" build_node_base
  log "building the add-on and control-plane images"
  build_component_images
  local tarball=$CACHE/work/kubernetes-server-$KUBERNETES_VERSION-linux-amd64.tar.gz
  log "assembling $tarball"
  assemble_server_tarball "$tarball"
  run_logged "kind build node-image $NODE_IMAGE" "$LOGS/kind-node-image.log" \
    "$KIND" build node-image --type file --base-image "$BASE_IMAGE" --image "$NODE_IMAGE" "$tarball"
  rm -f "$tarball"
}

KIND_SRC=$(go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p')
[ -d "$KIND_SRC/images/base/files" ] || die "kind $KIND_VERSION's source is missing from the Go module cache"
ensure_image "$NODE_IMAGE" build_node_image
echo "$NODE_IMAGE"
