{{/*
The operator's alert rules: one Prometheus rule group, rendered into the PrometheusRule
(prometheusrule.yaml) and, by hack/render-manifests with the default values, into
manifests/prometheus-rules.yaml for a Prometheus without the operator's CRDs. Each alert
has a runbook section in docs/operations.md ("Alerts"); tests/prometheus/alerts-test.yaml
tests every one with `promtool test rules`.

Two replicas (docs/metrics.md): the per-job gauges are kept by the leader only, and a
replica that lost the lead keeps its last values, so each per-job rule keeps the series
of the replica that says it leads (`and on(instance) etj_leader == 1`) and takes the max
over the replicas (one alert per job or slice across a handover). A job that Succeeded
or Failed alerts no more. Prometheus must keep the operator's `namespace` and `job`
labels (honor_labels: the ServiceMonitor sets honorLabels).
Prometheus' own templates ({{ $labels.job }}) are quoted from Helm with {{` `}}.
*/}}
{{- define "elastic-operator.alertGroups" -}}
{{- $a := .Values.alerts -}}
{{- $leader := "and on(instance) etj_leader == 1" -}}
{{- $active := "unless on(namespace, job) (etj_job_phase{phase=~\"Succeeded|Failed\"} == 1 and on(instance) etj_leader == 1)" -}}
{{- $job := "{{ $labels.namespace }}/{{ $labels.job }}" -}}
groups:
  - name: elastic-training-operator
    rules:
      - alert: ElasticTrainingSliceDown
        expr: |-
          max by (namespace, job, slice) (etj_slice_down == 1 {{ $leader }})
          {{ $active }}
        for: {{ $a.sliceDown.for }}
        labels:
          severity: {{ $a.sliceDown.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "Slice {{ $labels.slice }} of job %s has been down for more than %s" $job $a.sliceDown.for | quote }}
          description: {{ printf "Slice {{ $labels.slice }} of ElasticTrainingJob %s is Down or Restarting and has not come back: the job trains on fewer slices or waits. See `kubectl describe etj -n {{ $labels.namespace }} {{ $labels.job }}` (the SliceDown condition says why)." $job | quote }}
          runbook_url: {{ printf "%s#elastictrainingslicedown" $a.runbookUrl | quote }}
      - alert: ElasticTrainingRecoveryNotClosing
        expr: |-
          max by (namespace, job) (etj_recovering == 1 {{ $leader }})
          {{ $active }}
        for: {{ $a.recoveryNotClosing.for }}
        labels:
          severity: {{ $a.recoveryNotClosing.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "Job %s has been recovering for more than %s" $job $a.recoveryNotClosing.for | quote }}
          description: {{ printf "The Recovering condition of ElasticTrainingJob %s is still True: training has not resumed since a slice failed (or the trainer does not report it resuming)." $job | quote }}
          runbook_url: {{ printf "%s#elastictrainingrecoverynotclosing" $a.runbookUrl | quote }}
      - alert: ElasticTrainingStalled
        expr: |-
          max by (namespace, job) (etj_stalled == 1 {{ $leader }})
          {{ $active }}
        for: {{ $a.stalled.for }}
        labels:
          severity: {{ $a.stalled.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "Job %s makes no training steps" $job | quote }}
          description: {{ printf "The Progressing condition of ElasticTrainingJob %s is False (ProgressDeadlineExceeded): no new step for its progress deadline, with every slice Ready and nothing holding it. Its message says whether the trainer is frozen, hung or blames a slice; with spec.elastic.onStall Recover the operator restarts the trainer." $job | quote }}
          runbook_url: {{ printf "%s#elastictrainingstalled" $a.runbookUrl | quote }}
      - alert: ElasticTrainingSliceRestartBudgetLow
        expr: |-
          max by (namespace, job) (
            (etj_restart_budget_used{budget="sliceRestarts"} > 0)
              / etj_restart_budget_allowed{budget="sliceRestarts"}
            >= {{ $a.sliceRestartBudget.spentFraction }}
            {{ $leader }}
          )
          {{ $active }}
        for: {{ $a.sliceRestartBudget.for }}
        labels:
          severity: {{ $a.sliceRestartBudget.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "A slice of job %s has spent {{ $value | humanizePercentage }} of its restart budget" $job | quote }}
          description: {{ printf "A slice of ElasticTrainingJob %s failed often: status.budgets.sliceRestarts (used against allowed, within its window; slice names the slice). Once spent, its next failure restarts the whole JobSet (status.budgets.jobSetRestarts)." $job | quote }}
          runbook_url: {{ printf "%s#elastictrainingslicerestartbudgetlow" $a.runbookUrl | quote }}
      - alert: ElasticTrainingMaxRestartsNearlySpent
        expr: |-
          max by (namespace, job) (
            etj_restart_budget_allowed{budget="jobSetRestarts"}
              - etj_restart_budget_used{budget="jobSetRestarts"} <= {{ $a.maxRestarts.left }}
            and etj_restart_budget_used{budget="jobSetRestarts"} > 0
            {{ $leader }}
          )
          {{ $active }}
        for: {{ $a.maxRestarts.for }}
        labels:
          severity: {{ $a.maxRestarts.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "Job %s has {{ $value }} JobSet restart(s) left" $job | quote }}
          description: {{ printf "The JobSet of ElasticTrainingJob %s restarted as a whole and is near its budget (status.budgets.jobSetRestarts: spec.maxRestarts within its window, or over the run): at the limit, the next restart fails the job." $job | quote }}
          runbook_url: {{ printf "%s#elastictrainingmaxrestartsnearlyspent" $a.runbookUrl | quote }}
      {{- $w := printf "[%ds]" (int $a.goodputLow.windowSeconds) }}
      {{- $productive := printf "sum by (namespace, job) (increase(etj_productive_seconds_total%s))" $w }}
      {{- $badput := printf "sum by (namespace, job) (increase(etj_badput_seconds_total%s))" $w }}
      - alert: ElasticTrainingGoodputLow
        expr: |-
          {{ $productive }}
            / ({{ $productive }} + {{ $badput }})
            < {{ $a.goodputLow.threshold }}
          and ({{ $productive }} + {{ $badput }})
            >= {{ div (int $a.goodputLow.windowSeconds) 2 }}
          {{ $active }}
        for: {{ $a.goodputLow.for }}
        labels:
          severity: {{ $a.goodputLow.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "Goodput of job %s was {{ $value | humanizePercentage }} over the last %ds" $job (int $a.goodputLow.windowSeconds) | quote }}
          description: {{ printf "ElasticTrainingJob %s kept less than %v of its time for productive steps over the window (etj_productive_seconds_total against etj_badput_seconds_total by cause)." $job $a.goodputLow.threshold | quote }}
          runbook_url: {{ printf "%s#elastictraininggoodputlow" $a.runbookUrl | quote }}
      - alert: ElasticTrainingPoolQuarantinedLong
        expr: |-
          time() - max by (pool, reason) (etj_pool_quarantined_timestamp_seconds)
            > {{ int $a.poolQuarantined.olderThanSeconds }}
        for: {{ $a.poolQuarantined.for }}
        labels:
          severity: {{ $a.poolQuarantined.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ "Node pool {{ $labels.pool }} has been quarantined ({{ $labels.reason }}) for {{ $value | humanizeDuration }}" | quote }}
          description: {{ "Replacement slices avoid node pool {{ $labels.pool }} (node label elastic.pathways.dev/quarantined) and it is not healthy again: one hot spare fewer for every job of its TPU shape." | quote }}
          runbook_url: {{ printf "%s#elastictrainingpoolquarantinedlong" $a.runbookUrl | quote }}
      - alert: ElasticTrainingOperatorNoLeader
        expr: |-
          max(etj_leader) < 1 or absent(etj_leader)
        for: {{ $a.noLeader.for }}
        labels:
          severity: {{ $a.noLeader.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "No elastic-operator replica has led for %s" $a.noLeader.for | quote }}
          description: "No replica holds the leader Lease (or none is scraped): no slice failure is reported or replaced, no status is written. Training goes on without it."
          runbook_url: {{ printf "%s#elastictrainingoperatornoleader" $a.runbookUrl | quote }}
      - alert: ElasticTrainingCRDOutdated
        expr: |-
          max(etj_crd_schema_state{state="outdated"} == 1 {{ $leader }})
        for: {{ $a.crdOutdated.for }}
        labels:
          severity: {{ $a.crdOutdated.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: "The ElasticTrainingJob CRD is older than the operator: its jobs are not served"
          description: "The CRD the API server serves lacks status fields the leading operator writes (etj_crd_schema_revision: served below own), which the API server would drop from every write: the operator writes no status but each job's SchemaCurrent condition, and creates, deletes or replaces nothing (a failed slice stays down). Training goes on. Upgrade the CRD: helm upgrade with the operator's chart, or kubectl apply --server-side -f crds/elastictrainingjobs.yaml of its release."
          runbook_url: {{ printf "%s#elastictrainingcrdoutdated" $a.runbookUrl | quote }}
      - alert: ElasticTrainingReconcileErrors
        expr: |-
          sum(increase(etj_reconcile_errors_total[{{ $a.reconcileErrors.window }}])) > {{ $a.reconcileErrors.threshold }}
        for: {{ $a.reconcileErrors.for }}
        labels:
          severity: {{ $a.reconcileErrors.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "{{ $value | humanize }} reconciles failed in the last %s" $a.reconcileErrors.window | quote }}
          description: "The operator's reconciles fail (each is retried with backoff): an API error, a refused permission, or a bug. Its log names the job and the error."
          runbook_url: {{ printf "%s#elastictrainingreconcileerrors" $a.runbookUrl | quote }}
      - alert: ElasticTrainingCheckpointScanFailing
        expr: |-
          max by (namespace, job) (etj_checkpoint_scan_failing == 1 {{ $leader }})
          {{ $active }}
        for: {{ $a.checkpointScanFailing.for }}
        labels:
          severity: {{ $a.checkpointScanFailing.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "The checkpoint directory of job %s cannot be listed" $job | quote }}
          description: {{ printf "The operator fails to list spec.checkpoint.directory of ElasticTrainingJob %s (status.checkpoint.error): status.checkpoint no longer follows the checkpoints." $job | quote }}
          runbook_url: {{ printf "%s#elastictrainingcheckpointscanfailing" $a.runbookUrl | quote }}
      - alert: ElasticTrainingCheckpointStale
        expr: |-
          max by (namespace, job) (
            etj_training_step - etj_checkpoint_latest_committed_step
              > {{ $a.checkpointStale.periods }} * etj_checkpoint_period_steps
            {{ $leader }}
          )
          {{ $active }}
        for: {{ $a.checkpointStale.for }}
        labels:
          severity: {{ $a.checkpointStale.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "Job %s is {{ $value }} steps past its newest committed checkpoint" $job | quote }}
          description: {{ printf "ElasticTrainingJob %s saves a checkpoint every spec.checkpoint.periodSteps steps, yet the newest committed one (status.checkpoint.latestCommittedStep) is more than %v periods behind the trainer's step: a failure of every slice would lose those steps." $job $a.checkpointStale.periods | quote }}
          runbook_url: {{ printf "%s#elastictrainingcheckpointstale" $a.runbookUrl | quote }}
      - alert: ElasticTrainingRestoreAtRisk
        expr: |-
          max by (namespace, job) (etj_restore_at_risk == 1 {{ $leader }})
          {{ $active }}
        for: {{ $a.restoreAtRisk.for }}
        labels:
          severity: {{ $a.restoreAtRisk.severity }}
          {{- with $a.labels }}{{ toYaml . | nindent 10 }}{{ end }}
        annotations:
          summary: {{ printf "A restore of job %s can get the pathways-proxy OOM-killed" $job | quote }}
          description: {{ printf "ElasticTrainingJob %s restores its checkpoints through the controller and the pathways-proxy, and its newest checkpoint (status.checkpoint.latestCommittedBytes, or the spec's estimate) is larger than the share of the proxy's memory limit a restore may take: its next recovery from a checkpoint can fail. The RestoreAtRisk condition names the numbers and the fix." $job | quote }}
          runbook_url: {{ printf "%s#elastictrainingrestoreatrisk" $a.runbookUrl | quote }}
{{- end -}}
