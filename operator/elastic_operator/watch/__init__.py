"""What the watches feed, and what a reconcile reads of it: the informer-fed caches of
jobs, pods, JobSets, worker Jobs, nodes and Workloads (caches), the served CRD's schema
verdict (schema_watch), the indexes the pod and node events keep (node_index: jobs by
node, failures by pool; slice_index: each slice's hosts, and as last computed), and
`JobReader`, all a reconcile sees of the cluster (job_reader), what the API server
accepts (server_probe) and whether it refuses a Job JobSet has not created (job_refusals:
a dry run).

May import: checkpoints, client, core, metrics, model.
"""
