"""The process: `etj operator` (operator_cli), kopf's wiring and the liveness probe
(handlers), /readyz (readiness), /metrics over HTTPS to the readers RBAC allows
(metrics_server, metrics_auth, metrics_tls), both served from a thread of their own
(http_thread), and `etj render` (render_cli). The only
folder that imports kopf; app.py builds what it runs.

May import: app, checkpoints, client, core, metrics, queue, render, watch, writes.
"""
