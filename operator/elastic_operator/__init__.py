"""The operator, in folders by role (docs/architecture.md, "Inside the operator"). Each
folder's __init__.py says what it does and, on its last line, which folders it may
import ("May import: ..."); imports run one way, and
tests/unit/test_operator_layers.py holds the code to those lines. From the top:

    entry/        the process: etj operator (kopf), /healthz, /readyz, etj render
    app.py        the one composition root: builds and wires every part
    reconcile/    one reconcile: the pass, the status write, its pacing
    writes/       the cluster writes: a plan's actions, Events, replacements, nodes
    queue/        the work queue and leader election
    watch/        the informer-fed caches, the indexes they keep, what a reconcile reads
    client/       the one holder of the Kubernetes client
    metrics/      Prometheus
    checkpoints/  checkpoint listings and their scans
    core/         the pure status core (no I/O, no clock); render.py: the JobSet a spec
                  renders to (pure)
    model/        data: the objects as read, per-job memory, a reconcile's Result
"""
