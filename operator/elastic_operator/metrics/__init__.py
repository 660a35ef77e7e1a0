"""The operator's Prometheus metrics (docs/metrics.md): its own workings (metrics:
`OperatorMetrics`, which composes the rest), each job's series (job_metrics) and its own
state (state_metrics). The only folder that imports prometheus_client, beside the
process that serves them (entry/operator_cli).

May import: core, model.
"""
