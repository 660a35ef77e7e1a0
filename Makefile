# The two commands a new user needs: `make demo` and `make test`.
# Everything they need is installed by the targets below (a virtualenv from PyPI, the
# control-plane binaries into ~/.cache: official releases where versions.env pins their
# checksum and they can be downloaded, else built from the Go module proxy).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: help venv krew-archive tmux cluster-binaries cluster-binaries-core prometheus lint test test-unit test-trainer test-long test-timings test-multicluster test-compat test-upgrade demo crd golden lock manifests bench soak soak-churn chaos-repeat e2e-kind e2e-maxtext clean

help:
	@echo "make demo   - the article's experiment on this machine (local control plane, fake TPUs)"
	@echo "make test   - lint, types and every test (unit and integration, on a real control plane)"
	@echo "make test-compat - every test on Kubernetes 1.32, the oldest GKE minor (versions-compat.env)"
	@echo "make test-upgrade - the operator upgraded from the previous release and back under a running job (needs the git history)"

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python >= 3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip==26.3
	@echo "Installing Python dependencies (pinned in constraints.txt; a few minutes the first time)..."
	$(VENV)/bin/pip install --quiet --progress-bar off -c constraints.txt -e ".[operator,trainer,cli,devtools,dev]"
	@touch $@

venv: $(STAMP)

# Kubernetes, etcd, JobSet, kwok, helm, fake-gcs-server and Kueue, cached by version.
cluster-binaries:
	@hack/build-control-plane.sh

# Debian's prometheus package (prometheus, promtool) for the alert and dashboard tests;
# as root with apt, its service never started. Quick when both are there.
prometheus:
	@hack/install-prometheus.sh

# tmux, for the test that runs `kubectl etj` in a real terminal (Debian's package, as root).
tmux:
	@hack/install-tmux.sh

# Only what `etj cluster up` needs (no Kueue, helm or fake-gcs-server).
cluster-binaries-core:
	@hack/build-control-plane.sh core

lint: venv
	$(VENV)/bin/ruff check api operator trainer kubectl devtools tests bench hack
	$(VENV)/bin/mypy

# The tests run in TEST_WORKERS parallel processes (pytest-xdist), each with a control plane
# of its own; a module goes whole to one worker, the longest first (tests/support/schedule.py,
# from tests/module-seconds.json: `make test-timings` refreshes it from the last run). The
# 20 slowest tests are listed at the end; .test-results.xml keeps every test's time.
TEST_WORKERS ?= 4
PARALLEL = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 \
	--junitxml=.test-results.xml -o junit_duration_report=total

test: venv cluster-binaries prometheus tmux lint
	$(PY) -m pytest -q -ra -m "not long" $(PARALLEL)

# The tests that need neither a control plane nor a training run (tests/unit: the API,
# rendering, status, the trainer's pure rules): minutes. tests/trainer runs the bundled
# trainer's JAX training on CPU (longer): `make test-trainer`. `make test` runs both.
test-unit: venv prometheus lint
	$(PY) -m pytest -q -ra -m "not cluster and not long" $(PARALLEL) tests/unit

test-trainer: venv lint
	$(PY) -m pytest -q -ra -m "not cluster and not long" $(PARALLEL) tests/trainer

# The tests over a minute (marked long: the chaos run with every fault kind, every quick
# benchmark, ...); `make test` runs a short guard of each. Not in CI: run it before saying
# a change that reaches them is done.
test-long: venv cluster-binaries prometheus tmux
	$(PY) -m pytest -q -ra -m long $(PARALLEL)

# tests/module-seconds.json from the last `make test`'s .test-results.xml.
test-timings: venv
	$(PY) -m hack.module_seconds .test-results.xml

# MultiKueue on three local control planes (tests/multicluster; a manager, two workers):
# not in `make test`: three control planes and a 60 s worker loss (workerLostTimeout) take
# minutes. Its resume-after-suspend flake (issue 27) was the worker's operator adopting the
# old copy's JobSet (fixed: JobSetNameConflict). Timed.
test-multicluster: venv cluster-binaries lint
	ETJ_MULTICLUSTER=1 /usr/bin/time -f "test-multicluster: %e s" $(PY) -m pytest -q -ra tests/multicluster

# The operator upgraded under a running job, and downgraded again (issue 61; docs/operations.md
# "Upgrade"): the previous release (hack/upgrade/previous-release: a commit, archived from
# the git history, so not from a shallow clone) installed with its chart on the local
# control plane, the test playing the kubelet of the operator's pods; a job of the bundled
# trainer; worker slices failed before, during and after `helm upgrade` to this checkout
# and `helm rollback`. Not in `make test` (minutes); its guard is. Timed.
test-upgrade: venv cluster-binaries
	ETJ_UPGRADE=1 /usr/bin/time -f "test-upgrade: %e s" $(PY) -m pytest -q -ra -s tests/upgrade

# make test's tests again (in parallel, not the long ones) on the oldest Kubernetes minor
# GKE supports (versions-compat.env: Kubernetes 1.32, etcd 3.5; JobSet v0.12.0 and Kueue
# v0.19.2 as `make test`, which runs Kubernetes 1.37); not in CI. Binaries are cached by
# version beside the current ones.
COMPAT_VERSIONS := $(CURDIR)/devtools/elastic_devtools/localcluster/versions-compat.env
test-compat: venv prometheus tmux lint
	ETJ_VERSIONS_FILE=$(COMPAT_VERSIONS) hack/build-control-plane.sh
	ETJ_VERSIONS_FILE=$(COMPAT_VERSIONS) $(PY) -m pytest -q -ra -m "not long" $(PARALLEL)

demo: venv cluster-binaries-core
	$(VENV)/bin/etj demo --out demo-output

# Regenerate committed, generated files (tests fail when they are stale).
crd: venv
	$(VENV)/bin/etj crd > crds/elastictrainingjobs.yaml

# The CRD, the golden rendered manifests and the field table of docs/api.md.
golden: venv
	VENV=$(VENV) hack/regen-golden

# requirements/<image>.lock, what each Dockerfile installs with --require-hashes: the
# versions of constraints.txt, the sha256 of each file from PyPI (network: the index only).
# tests/unit/test_lock.py fails when pyproject.toml or constraints.txt changed without it.
lock: venv
	$(PY) -m hack.lock

# Benchmarks (docs/benchmarks.md): JSON in bench/results/, table regenerated in the docs.
# e.g. make bench BENCH_ARGS="--only recovery"  or  BENCH_ARGS="--jobs 50"
bench: venv cluster-binaries
	$(PY) -m bench $(BENCH_ARGS)

# The long chaos run: random faults for SOAK_SECONDS (default 30 min) on the local control
# plane. Replay a failure with ETJ_CHAOS_SEED=<the seed the run prints>. SOAK_JOBS=K (issue
# 33): K jobs of two teams under Kueue; 1, the default, is the single-job soak.
SOAK_SECONDS ?= 1800
SOAK_JOBS ?= 1
# K >= 2: tests/integration/test_soak_tenants.py on 3K + 1 one-host TPU pools.
SOAK_MODULE = $(if $(filter 1,$(SOAK_JOBS)),test_chaos.py,test_soak_tenants.py)
SOAK_POOLS = $(if $(filter 1,$(SOAK_JOBS)),,v6e:2x2:$(shell echo $$((3 * $(SOAK_JOBS) + 1))))
soak: venv cluster-binaries
	ETJ_SOAK_SECONDS=$(SOAK_SECONDS) ETJ_SOAK_JOBS=$(SOAK_JOBS) ETJ_TEST_TPU_POOLS=$(SOAK_POOLS) \
		ETJ_SOAK_SUMMARY=$(CURDIR)/soak-summary.json \
		$(PY) -m pytest -ra -s tests/integration/$(SOAK_MODULE)

# The job-churn soak (issue 61): short jobs created and deleted for SOAK_SECONDS (here an
# hour unless given) on the local control plane, the operator's RSS and the entries of
# each of its per-job stores sampled; fails if a store grows with the jobs ever created
# rather than alive. Its summary (the slopes after warm-up) goes to soak-churn.json
# (docs/benchmarks.md, "Job churn"). Its cheap guard (24 jobs) runs in `make test`.
CHURN_SECONDS = $(if $(filter command line environment,$(origin SOAK_SECONDS)),$(SOAK_SECONDS),3600)
soak-churn: venv cluster-binaries
	ETJ_CHURN_SECONDS=$(CHURN_SECONDS) ETJ_CHURN_SUMMARY=$(CURDIR)/soak-churn.json \
		$(PY) -m pytest -ra -s tests/integration/test_soak_churn.py

# The short chaos run (every fault kind once, as `make test-long` runs it) CHAOS_RUNS times
# in a row, each a fresh pytest session (its own control plane) and a fresh random seed;
# stops at the first failure, whose output names the seed to replay (ETJ_CHAOS_SEED).
# Issue 33 asks ten in a row.
CHAOS_RUNS ?= 10
chaos-repeat: venv cluster-binaries
	@for i in $$(seq $(CHAOS_RUNS)); do echo "chaos run $$i of $(CHAOS_RUNS)"; \
		$(PY) -m pytest -q -ra -s -m long tests/integration/test_chaos.py || exit 1; done

# Regenerate manifests/install.yaml and the chart's copy of the CRD (pinned helm).
manifests: crd cluster-binaries
	hack/render-manifests

# End to end on kind with real containers, the images and the chart (docs/operations.md; not
# in `make test`). Uses the Docker engine that is there; as root on Debian, starts one.
e2e-kind: cluster-binaries
	hack/kind-e2e.sh

# Real MaxText 0.2.5 on CPU, run as a job's head pod runs it (docs/operations.md; not in
# `make test`; as root): its own Python 3.13 environment (hack/maxtext-env.sh, cached by
# version), then runs into the head's /tmp and into gs:// (fake-gcs-server), checked
# against the checkpoint scan and the progress sidecar's follower; then the scenario on
# the local control plane (a worker slice failed mid-run, a SIGKILL during a save).
# e.g. make e2e-maxtext MAXTEXT_E2E_ARGS="--record tests/fixtures/maxtext-0.2.5"
e2e-maxtext: venv cluster-binaries
	hack/maxtext-env.sh
	$(VENV)/bin/etj maxtext e2e $(MAXTEXT_E2E_ARGS)

# The archive of kubectl/krew/etj.yaml (its launcher) and the sha256 that the manifest names.
krew-archive:
	tar -C kubectl/krew -czf kubectl-etj.tar.gz kubectl-etj
	sha256sum kubectl-etj.tar.gz

clean:
	-$(VENV)/bin/etj cluster down
	rm -rf $(VENV) demo-output
