"""Checkpoint listings for status.checkpoint: one listing of a checkpoint root on GCS or
a file system (listing, the only module that imports google), which roots a namespace
may list (roots), and the scans that run them off the reconcile, each job's at most once
per interval (scanner; what it keeps of a job is the job's record, model/job_memory).

May import: core, model.
"""
