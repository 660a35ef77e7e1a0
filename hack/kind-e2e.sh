#!/usr/bin/env bash
# End to end with real containers: the images and the Helm chart a user installs, on kind.
#
#   phase          what it proves
#   docker         a Docker engine (installs and starts one only as root on Debian)
#   tools          kind built from the Go module proxy (helm, JobSet: make cluster-binaries)
#   python base    the Dockerfiles' base: pulled, or built from Debian packages
#   images         elastic-operator and elastic-trainer from this checkout; JobSet's image
#   node image     kindest/node: pulled, or built with `kind build node-image`
#   cluster        a one-node kind cluster with the images loaded
#   jobset         JobSet (JOBSET_VERSION) from its module's kustomize config
#   operator       `helm install` of charts/elastic-operator (probes, read-only root, uid 65532)
#   training       a simulated ElasticTrainingJob: `etj train` in the head, slice agents in
#                  the workers, training
#   in place       a worker's process killed (SIGKILL, from its node): the slice Ready again
#                  in place (the same pod uid, restartCount + 1, lastReplacement
#                  RestartInPlace), the trainer recovering in its process
#   main crash     main's process killed: main restarts in the head pod (its container
#                  restart rule), no worker pod changed, no JobSet restart, the new
#                  trainer resuming from the newest committed checkpoint
#   slice loss     a worker pod deleted: SliceDown -> Recovering -> Recovered, and the
#                  trainer recovers in the same process (same pod, same restart count)
#   node down      the node's kubelet stopped: NotReady is evidence against the host, so
#                  the slice is recreated (new pods), not restarted in place
#   helm upgrade   the operator replaced while training (nothing counted again), then in
#                  the middle of a recovery (finished by the new one, counted once)
#   metrics        /metrics scraped through the chart's Service
#   uninstall      `helm uninstall` removes the operator, keeps the CRD and the jobs
#
# Every version is pinned in devtools/elastic_devtools/localcluster/versions.env; what is
# built is cached by version under $ETJ_CACHE_DIR (default ~/.cache/elastic-training-operator).
# Not part of `make test`: cold, it builds Kubernetes and friends (see docs/operations.md).
#
# Environment: CLUSTER_NAME (etj-e2e), KEEP_CLUSTER=1 (leave the cluster up at the end),
# TIMEOUT_S (per wait, default 600).
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/kind/lib.sh"
source "$HACK/kind/steps.sh"

ETJ_E2E_REPORT=$(mktemp)
export ETJ_E2E_REPORT
trap on_exit EXIT
trap 'exit 130' INT TERM   # so that on_exit runs (and deletes the cluster) on Ctrl-C too

phase docker        "$HACK/kind/docker-engine.sh"
phase tools         tools
phase "python base" python_base
phase images        "$HACK/kind/app-images.sh" "$PYTHON_BASE"
phase "node image"  node_image
phase cluster       create_cluster
phase jobset        install_jobset
phase operator      install_operator
phase training      start_training
phase "in place"    restart_a_worker_in_place
phase "main crash"  crash_main_in_place
phase "slice loss"  lose_a_slice
phase "node down"   recreate_on_node_not_ready
phase "helm upgrade" upgrade_during_recovery
phase metrics       scrape_metrics
phase uninstall     uninstall_operator
PASSED=1
