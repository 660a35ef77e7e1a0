"""What the operator holds as data, no I/O: the cluster's objects as read (objects: one
job's are `Observed`), what was derived from them and kept while they are unchanged
(slice_memo), what the reconciles remember of each job (job_memory) and the list of
every store that keeps something per job (job_stores), a reconcile's verdict
(result), and what the API server accepts (server: one for the operator). The floor
everything else stands on.

May import: nothing (of the operator: elastic_api and the standard library only).
"""
