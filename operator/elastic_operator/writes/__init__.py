"""The operator's writes to the cluster other than the status write: a plan's actions
(executor), the Events of a status change (outbox), the slice replacement planned after
the write and its writes (replacement_followups, replacement_writes): the work after the
write comes back in the reconcile's Result (model/result.py `FollowUp`), run by the work
queue's worker; the rate limit on node actions
(node_actions) and the pool warden that ends quarantines (pool_warden).

May import: client, core, metrics, model, watch.
"""
