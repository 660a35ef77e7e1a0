#!/usr/bin/env bash
# The images the cluster runs besides kind's own:
#   - elastic-operator:e2e and elastic-trainer:e2e, always built from this checkout
#     (Dockerfile.operator, Dockerfile.trainer) FROM the Python base given;
#   - the JobSet controller at JOBSET_VERSION: pulled where the registry answers, else
#     built from the Go module proxy (hack/build-control-plane.sh's binary) into the
#     static base, as its own Dockerfile does (the binary as /manager, user 65532).
# Usage: app-images.sh PYTHON_BASE_IMAGE
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PYTHON_BASE=${1:?usage: $0 PYTHON_BASE_IMAGE}

# The Dockerfiles refuse a base without a digest; the local Debian base (debootstrap +
# docker import, python-base.sh) has none, and is allowed by name here, for this test only.
unpinned=0
case $PYTHON_BASE in *@sha256:*) ;; *) unpinned=1 ;; esac

for app in operator trainer; do
  t0=$(date +%s)
  # Docker's layer cache makes an unchanged checkout a few seconds' work.
  run_logged "building elastic-$app:$E2E_TAG from Dockerfile.$app" "$LOGS/image-$app.log" \
    env DOCKER_BUILDKIT=0 docker build --network host --build-arg PYTHON_IMAGE="$PYTHON_BASE" \
    --build-arg ALLOW_UNPINNED_BASE="$unpinned" \
    -f "$ROOT/Dockerfile.$app" -t "elastic-$app:$E2E_TAG" "$ROOT"
  note_cache "built: image elastic-$app:$E2E_TAG ($(image_size "elastic-$app:$E2E_TAG")) in $(( $(date +%s) - t0 ))s"
done

if ! have_or_pull "$JOBSET_IMAGE"; then
  controller=$BIN/jobset-controller-$JOBSET_VERSION
  [ -x "$controller" ] || die "$controller is missing: run hack/build-control-plane.sh (make cluster-binaries)"
  ensure_static_base "$PYTHON_BASE"
  image_from_binary "$JOBSET_IMAGE" "$controller" /manager 65532:65532
  note_cache "built: image $JOBSET_IMAGE from $controller ($(image_size "$JOBSET_IMAGE"))"
fi
