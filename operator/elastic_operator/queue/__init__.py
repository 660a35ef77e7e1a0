"""The one work queue and who may run it: every source names a job in `WorkQueue`
(work_queue: per-job dedup, never two workers on one job, retries, delayed and paced
looks), and only the leader reconciles (election: the Lease, `ReconcileGate`).

May import: client, model.
"""
