"""The operator's pure core: no I/O, no clock (`now` is passed in), no randomness.

Every module of the core, one concern each, lowest first: a module imports only modules
listed above it (tests/unit/test_operator_layers.py checks both), so the list is also
the order to read them in.

- wording: wording helpers shared by the messages of conditions and Events
- status_events: the Kubernetes Events a status change implies, and their outbox in the status
- setter: one condition found, or set with its transition rule (ConditionSetter)
- server_features: whether the API server keeps main's container restart rules, and the
  MainRestartsInPlace condition that says which recovery the cluster allows
- refused_jobs: the Jobs JobSet has not created, when to dry-run them, and the
  JobsCreated condition naming a refused Job's field and the server's words
- parsing: the job and its stored status, read leniently
- provenance: whether the records read back from the status are the operator's own
- reported: the trainer's report, its figures held where they went back unexplained
- patch: the one status write of a reconcile, an RFC 7386 merge patch
- schema: whether the served CRD is the operator's own schema revision (SchemaCurrent)
- api_support: whether the cluster serves the JobSet and Kueue API versions we speak
- ownership: what the operator's objects carry to say they are its own
- redispatch: whether a MultiKueue job whose worker cluster was lost may run elsewhere
- counting: exactly once: a slice failure counted from its worker Job's own count
- blame: who is to blame for a slice failure (its node pool or the job), on what evidence
- wakes: which pod changes wake a job at once, and which wait for its progress interval
- pools: node pools: where a slice runs, the spares, quarantine verdicts and releases
- sliceview: one slice as every policy reads it (its newest pods, pool, Job, evidence)
- inplace: restart in place or recreate: the table of what a slice failure's evidence
  calls for
- slices: slice health (Ready, Down, Restarting, Pending) and how it changed
- hung: the trainer's requests to replace a hung or slow slice
- failure: whether the job finished (Failed, Succeeded)
- podsready: a MultiKueue job's PodsReady condition on the manager's Workload
- plan: what a reconcile changes in the cluster, as typed actions
- replacement: slice replacement: its records in the status, then its actions
- trainer_restarts: main restarts in its pod (a crash, a stall), and the head pod it runs in
- budget_tracking: the restart budgets in the status (main's restarts in place charged to the
  JobSet's), and the JobSet ended once its own is spent
- maintenance: maintenance ahead of time: notices, the checkpoint request, the move
- topology: slices Kueue places by Topology-Aware Scheduling
- unreported: the recovery of a trainer that reports no elastic events
- recovery: the recovery record and the trainer process
- goodput_status: what failures cost, from the trainer's accounting and our timeline
- stall_rule: which rule judges progress (the trainer's phase, or its steps), its verdict
- stall_text: the words of Progressing and its Event for what that rule saw
- progressing: whether training advances (Progressing), and the restart a stall calls for
- admission: where a queued job stands with Kueue (Admitted, status.admission)
- eviction: Kueue's waitForPodsReady clock (EvictionPending)
- dispatch: a job MultiKueue dispatches, as the manager cluster's operator sees it
- checkpoint_status: what a checkpoint scan changes in status.checkpoint
- restore_at_risk: RestoreAtRisk: whether a restore can outgrow the Pathways proxy's memory
- image_drift: ImageDrift: a Pathways container running another build than its peers
- condition_rules: one function per condition
- ready: the Ready condition and the phase (a cascade)
- pacing: which status writes may wait (progress only) and which are written at once
- startover: when a reconcile in progress starts over instead of finishing
- status: compute_status, which assembles all of the above

May import: model (the cluster's objects as read; elastic_api, pydantic and the standard
library beside).
"""
