"""What tests share beyond the object builders (tests/builders.py, tests/kueue_builders.py):
a test module never imports another test module (tests/unit/test_layout.py checks it), so
a helper two test modules need lives here, and a fixture two need in their conftest.py.

- `article_job`: the article's job on the local control plane, submitted, read (status,
  conditions, pods, Events) and reported on as the trainer does.
- `waiting`: waits for the job's status, seen from a watch (every version, none missed).
- `leases`: the leader Lease the operator replicas of the HA tests compete for.
- `stand_in_kube`: an in-memory API server for the reconciler's unit tests.
- `merge_patch`: RFC 7386, as the API server applies a merge patch.
- `hostile_specs`: the Hypothesis strategy that mutates the shipped examples.
- `trainer_run`: what the trainer tests' `run_trainer` fixture returns.
- `import_graph`: which of our modules imports which, and the circles in that graph.
- `upgrade`, `operator_kubelet`: the releases `make test-upgrade` moves between, and the
  kubelet it plays for the chart's operator pods.
"""
