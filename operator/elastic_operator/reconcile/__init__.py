"""One reconcile of one job, the steps of a pass on a page (reconciler), and what a pass
is made of: its phases and start over (reconcile_pass), the job read as our last write
left it (own_writes), the verdict on the served CRD (schema_guard), the one status write
(status_writer) and its progress pacing (pacer), a MultiKueue job's path on the manager
(dispatched), and the ports the reconciler sees them through (ports: reads, writes). It
asks the work queue nothing: what it wants is in its Result.

May import: client, core, metrics, model, render, watch, writes.
"""
