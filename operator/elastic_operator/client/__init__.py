"""The operator's one holder of the Kubernetes client: every request it sends is a
method of `Kube` (kube), and what its writes carry, as pure dicts (kube_bodies). Reads
through the watches (watch/) and writes (writes/, reconcile/) all go through here.

May import: core.
"""
