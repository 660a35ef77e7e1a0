{{/* Names, labels and the operator's RBAC rules, shared by the templates. */}}

{{- define "elastic-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name; a release named like the chart is not repeated. */}}
{{- define "elastic-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "elastic-operator.serviceAccountName" -}}
{{- default (include "elastic-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "elastic-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "elastic-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "elastic-operator.labels" -}}
{{ include "elastic-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: elastic-training-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "elastic-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
Rules on namespaced resources: exactly what the operator does. Its API calls are all in
operator/elastic_operator/client/kube.py (its watch-fed caches included; kopf watches nothing);
and RBAC lets it create the per-job trainer Role only if it holds every permission that
Role grants. Kept in step with the
code by tests/unit/test_packaging_rbac.py. Granted cluster-wide (ClusterRoleBinding) when
watchNamespaces is empty, else by one RoleBinding per watched namespace.
*/}}
{{- define "elastic-operator.namespacedRules" -}}
# The jobs it serves: read and watched, never written except their status and, for a
# MultiKueue job on the manager, one annotation (the cluster it was dispatched to).
- apiGroups: ["elastic.pathways.dev"]
  resources: ["elastictrainingjobs"]
  verbs: ["get", "list", "watch", "patch"]
# Conditions, slices and counters. get: the trainer Role grants it (see below).
- apiGroups: ["elastic.pathways.dev"]
  resources: ["elastictrainingjobs/status"]
  verbs: ["get", "patch"]
# One JobSet per job, owned by it; patch toggles spec.suspend. Never deleted by the
# operator: the garbage collector cascades a job's deletion.
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Slice health from the worker pods (a failed pod is seen before its Job fails), kept in
# a watch-fed cache; the simulated backend's trainer Role grants list/watch on pods too.
# delete: a pod stuck Terminating on a dead node is deleted with grace period 0; a
# stalled trainer's head pod is deleted (spec.elastic.onStall Recover; its Job makes a
# new one).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "delete"]
# Slice replacement: the worker Jobs are watched (a cache); a failed slice's worker Job
# is deleted (uid precondition; JobSet recreates it at once) or, its restart budget
# spent, its backoffLimit lowered to 0. A trainer restart reads the head Job (get) and
# raises its backoffLimit to its failures + 1 (patch), so that it replaces the pod.
# create: only a server-side dry run (nothing stored) on a 1.34 API server, to learn
# whether it keeps main's container restart rules; no power JobSets do not already give.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Kueue (where installed): a queued job's Workload, found by its JobSet's uid and watched;
# patch deactivates and reactivates it for spec.suspend (Kueue owns the JobSet's suspend).
# On a MultiKueue manager cluster the operator creates a MultiKueue job's Workload itself
# (create, and get by name), and tells Kueue its pods are Ready (status, PodsReady).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
# The per-job trainer Role and its RoleBinding (to the pods' ServiceAccount), created
# once; the Role only grants what the operator holds above, so no `bind` or `escalate`.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create"]
{{- end -}}

{{/* Cluster-scoped: a NotReady node takes its slices down; patch: the quarantine label
on the nodes of a pool a slice failed on (etj operator --quarantine-pools). On a MultiKueue
manager: whether the worker cluster a job runs in can be reached (read only). */}}
{{- define "elastic-operator.clusterRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"{{ if .Values.nodePatching.enabled }}, "patch"{{ end }}]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["multikueueclusters"]
  verbs: ["get"]
# The class a MultiKueue job's Workload is ordered and preempted by (its priority value).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloadpriorityclasses"]
  verbs: ["get"]
- apiGroups: ["scheduling.k8s.io"]
  resources: ["priorityclasses"]
  verbs: ["get"]
{{- if .Values.operator.metrics.secure }}
# Who scrapes /metrics: the API server reviews the scraper's token and whether its user
# may get /metrics (reviews store nothing).
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end }}
# The operator's own CRD alone: whether its schema is the operator's revision.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  resourceNames: ["elastictrainingjobs.elastic.pathways.dev"]
  verbs: ["list", "watch"]
{{- end -}}
