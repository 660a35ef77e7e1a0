# Shared by hack/kind-e2e.sh and the hack/kind/*.sh scripts it runs (sourced, not run).
# Versions come from versions.env; binaries, images and work files live in the cache
# directory, keyed by version, so a second run rebuilds nothing.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../../devtools/elastic_devtools/localcluster/versions.env
source "$ROOT/devtools/elastic_devtools/localcluster/versions.env"
CACHE=${ETJ_CACHE_DIR:-$HOME/.cache/elastic-training-operator}
BIN=$CACHE/bin
LOGS=$CACHE/logs
IMAGE_CACHE=$CACHE/images
mkdir -p "$BIN" "$LOGS" "$IMAGE_CACHE"

log() { echo "[kind-e2e $(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "[kind-e2e] error: $*" >&2; exit 1; }

# note_cache WHAT: record for the closing summary what was reused ("cached: ...") or
# built ("built: ..."); the file is shared by the scripts of one run.
note_cache() {
  log "$*"
  [ -z "${ETJ_E2E_REPORT:-}" ] || echo "$*" >>"$ETJ_E2E_REPORT"
}

# run_logged, debian_mirror, pip_ca_bundle.
# shellcheck source=../common.sh
source "$ROOT/hack/common.sh"

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# have_or_pull IMAGE: true where Docker has IMAGE or can pull it (and says which); false,
# quietly, where the registry cannot be reached.
have_or_pull() {
  if image_exists "$1"; then
    note_cache "cached: image $1 (in Docker)"
  elif timeout 300 docker pull -q "$1" >/dev/null 2>&1; then
    note_cache "pulled: $1"
  else
    return 1
  fi
}

# ensure_image IMAGE BUILD_FUNCTION...: use IMAGE if docker has it, else load it from the
# cache directory, else build it (BUILD_FUNCTION) and save it there for the next run
# (a fresh Docker engine, another clone).
ensure_image() {
  local image=$1; shift
  local archive; archive=$IMAGE_CACHE/$(echo "$image" | tr '/:@' '___').tar
  if image_exists "$image"; then
    note_cache "cached: image $image (in Docker)"
  elif [ -s "$archive" ]; then
    docker load -i "$archive" >/dev/null
    note_cache "cached: image $image (loaded from $archive)"
  else
    "$@"
    image_exists "$image" || die "building $image did not produce it"
    docker save -o "$archive.tmp" "$image" && mv "$archive.tmp" "$archive"
    note_cache "built: image $image ($(image_size "$image"); saved to $archive)"
  fi
}

image_size() {
  docker image inspect -f '{{.Size}}' "$1" \
    | awk '{ if ($1 < 1e6) printf "%.0f kB", $1 / 1e3; else printf "%.0f MB", $1 / 1e6 }'
}

# Docker's classic builder: BuildKit would try to pull its Dockerfile frontend.
# Quiet unless it fails (the CLI also warns that this builder is deprecated).
classic_build() {
  local out
  out=$(DOCKER_BUILDKIT=0 docker build --network host -q "$@" 2>&1) || { echo "$out" >&2; return 1; }
}

# A distroless-like base (no shell; root, nobody, nonroot 65532; /tmp; CA bundle) for the
# images made of one static Go binary, built FROM the Debian base DEBIAN_IMAGE.
STATIC_BASE=etj-local/static-base:$KIND_DEBIAN_SUITE
ensure_static_base() {
  build_static_base() {
    classic_build --build-arg DEBIAN_IMAGE="$1" -t "$STATIC_BASE" \
      -f "$ROOT/hack/kind/node/Dockerfile.static-base" "$ROOT/hack/kind/node"
  }
  ensure_image "$STATIC_BASE" build_static_base "$1"
}

# image_from_binary TAG BINARY PATH_IN_IMAGE [USER]: the static base plus one binary, its
# entrypoint.
image_from_binary() {
  local tag=$1 binary=$2 path=$3 user=${4:-}
  image_exists "$tag" && return 0
  local ctx; ctx=$(mktemp -d)
  cp "$binary" "$ctx/binary"
  printf 'FROM %s\nCOPY binary %s\n%sENTRYPOINT ["%s"]\n' "$STATIC_BASE" "$path" \
    "${user:+USER $user
}" "$path" | classic_build -t "$tag" -f - "$ctx"
  rm -rf "$ctx"
}

# Names shared by the e2e scripts.
E2E_TAG=e2e
JOBSET_IMAGE=registry.k8s.io/jobset/jobset:$JOBSET_VERSION
