"""Every name the operator, the trainer and the tools agree on, defined once.

The API's own identity (group, version, plural), the labels and annotations on the
objects the operator renders and reads, the names JobSet gives its Jobs, and the
well-known labels of GKE nodes. Import from here; never spell one of these again.
"""
from __future__ import annotations

# --- the ElasticTrainingJob API --------------------------------------------------------------

GROUP = "elastic.pathways.dev"
VERSION = "v1alpha1"
KIND = "ElasticTrainingJob"
PLURAL = "elastictrainingjobs"
SINGULAR = "elastictrainingjob"
SHORT_NAMES = ["etj"]
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"
# On the CRD (`etj crd`): the revision of its schema (elastic_api/schema_revisions.py) and
# the hash it was recorded under; a CRD without them is revision 0.
SCHEMA_REVISION_ANNOTATION = f"{GROUP}/schema-revision"
SCHEMA_HASH_ANNOTATION = f"{GROUP}/schema-hash"

# --- what the operator puts on its objects ----------------------------------------------------

# On the JobSet, its Jobs and pods: the ElasticTrainingJob they belong to.
JOB_NAME_LABEL = f"{GROUP}/job-name"
MANAGED_BY = "elastic-training-operator"
# On the JobSet: the job spec it was rendered from (to tell later spec changes).
APPLIED_SPEC_ANNOTATION = f"{GROUP}/applied-spec"
# On nodes: the operator keeps replacement slices off this node pool (the value says why:
# NodeNotReady, Maintenance, RepeatedFailures); worker pods require it to be absent.
QUARANTINE_LABEL = f"{GROUP}/quarantined"
# On nodes, with the label: when (RFC 3339; a label value cannot hold ':').
QUARANTINED_AT_ANNOTATION = f"{GROUP}/quarantined-at"
# On nodes, with the label: which job(s) quarantined the pool and on what evidence (JSON:
# {"jobs": [{"name": "<namespace>/<name>", "uid": "..."}], "evidence": "..."}).
QUARANTINE_CAUSE_ANNOTATION = f"{GROUP}/quarantine-cause"
# On a JobSet the operator suspended for spec.suspend, or a Workload it deactivated for
# it: the suspension is the operator's own, to lift on resume (another's is left alone).
SUSPENDED_BY_OPERATOR_ANNOTATION = f"{GROUP}/suspended-by-operator"
# On a MultiKueue job's Workload (manager cluster), with SUSPENDED_BY_OPERATOR_ANNOTATION:
# the operator deactivated it because its worker cluster was lost and
# spec.multiCluster.redispatch does not allow running it elsewhere; the value names that
# cluster ("" when the manager never learnt its name). Lifted when the user allows it.
SUSPENDED_AFTER_WORKER_LOST_ANNOTATION = f"{GROUP}/suspended-after-worker-lost"
# On a MultiKueue job on the manager cluster: the worker cluster it runs in, from its
# Workload's status.clusterName (MultiKueue copies the worker's whole status back over the
# job's, so the manager cannot say it in the status); the CRD's Cluster column.
DISPATCHED_TO_ANNOTATION = f"{GROUP}/dispatched-to"

# --- JobSet -----------------------------------------------------------------------------------

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_API_VERSION = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
JOBSET_PLURAL = "jobsets"

HEAD_REPLICATED_JOB = "pathways-head"
WORKER_REPLICATED_JOB = "worker"
# The failurePolicy rule that fails the JobSet once the operator ends the head Job for a
# JobSet restart budget spent per window (elastic_api.budgets).
JOBSET_BUDGET_RULE = "RestartBudgetSpent"

# Labels (and annotations) JobSet puts on its Jobs and pods.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"  # the slice of a worker pod
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# The Job controller's label (and annotation) for the host within a slice.
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
# The Job controller's label on a Job's pods: the uid of the Job that created them.
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def jobset_name(job_name: str) -> str:
    """The JobSet of a job is named after it (admission keeps the name short enough)."""
    return job_name


def child_job_name(jobset: str, replicated_job: str, index: int) -> str:
    """JobSet names its Jobs `<jobset>-<replicatedJob>-<index>`."""
    return f"{jobset}-{replicated_job}-{index}"


def worker_job_name(jobset: str, slice_index: int) -> str:
    return child_job_name(jobset, WORKER_REPLICATED_JOB, slice_index)


def job_pods_selector(job_name: str) -> str:
    """Label selector of every pod of an ElasticTrainingJob."""
    return f"{JOB_NAME_LABEL}={job_name}"


def worker_pods_selector(job_name: str, slice_index: int | None = None) -> str:
    """Label selector of the worker pods of a job (of one slice, if given)."""
    selector = f"{job_pods_selector(job_name)},{REPLICATED_JOB_LABEL}={WORKER_REPLICATED_JOB}"
    if slice_index is not None:
        selector += f",{JOB_INDEX_LABEL}={slice_index}"
    return selector


# --- containers of the rendered pods ----------------------------------------------------------

MAIN_CONTAINER = "main"
RM_CONTAINER = "pathways-rm"
PROXY_CONTAINER = "pathways-proxy"
WORKER_CONTAINER = "pathways-worker"
SLICE_AGENT_CONTAINER = "slice-agent"  # the worker container of backend simulated
PROGRESS_CONTAINER = "progress"  # the head's sidecar that reports a foreign trainer's progress
# Beside each Pathways worker with spec.pathways.colocatedPython (xpk's name).
COLOCATED_PYTHON_CONTAINER = "colocated-python-sidecar"
# `etj train`'s exit codes that end the run (its elastic budget spent: the job fails with
# its report), on which main is not restarted in place; 0 (done) neither. Any other exit
# of main is a crash its pod restarts it from (render.py, Kubernetes KEP-5307's container
# restart rules) within spec.maxRestarts.
TRAINER_EXIT_RETRIES_EXHAUSTED, TRAINER_EXIT_TIMEOUT = 2, 3
TRAINER_FINAL_EXIT_CODES = (0, TRAINER_EXIT_RETRIES_EXHAUSTED, TRAINER_EXIT_TIMEOUT)
# `etj train` exits with this when the operator asks it to restart (a stall,
# spec.elastic.onStall Recover: status.progress.restart.inPlace): not a final code, so its
# pod restarts main in place.
TRAINER_EXIT_RESTART_REQUESTED = 75
# What JobSet (v0.12, pkg/constants FailJobSetActionMessage) says in its Failed condition
# when a FailJobSet failure-policy rule applied, before "(first failed job: <job>)".
JOBSET_FAIL_JOBSET_MESSAGE = "applying FailJobSet failure policy action"
# The pod condition the kubelet sets while it restarts every container of a pod in place
# (Kubernetes KEP-5532, RestartAllContainersOnContainerExits: beta, on by default in 1.36).
ALL_CONTAINERS_RESTARTING = "AllContainersRestarting"

# --- GKE nodes ----------------------------------------------------------------------------------

NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
TPU_RESOURCE = "google.com/tpu"
# GKE's physical-topology labels of nodes in dense placement (reservations with blocks):
# the block, the sub-block within it, the host. Kueue Topologies on GKE name these levels.
TOPOLOGY_BLOCK_LABEL = "cloud.google.com/gce-topology-block"
TOPOLOGY_SUBBLOCK_LABEL = "cloud.google.com/gce-topology-subblock"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# On a TPU7x worker pod: the slice topology GKE's dynamic slicing builds from the cubes
# Kueue's Topology-Aware Scheduling assigned (xpk's super-slicing).
TPU_SLICE_TOPOLOGY_ANNOTATION = "cloud.google.com/gke-tpu-slice-topology"
# The kubelet's pod status reasons when admission refuses a pod on the node: a device
# plugin that could not allocate (`UnexpectedAdmissionError`), or fewer healthy TPU chips
# than the pod asks (`OutOf` + the resource name).
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
OUT_OF_TPU = f"OutOf{TPU_RESOURCE}"

# GKE's maintenance signals on nodes (docs/operations.md cites where GKE documents them).
# Label: an upcoming maintenance, value = its start in Unix epoch seconds.
SCHEDULED_MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time"
# Label, value ONGOING: the host maintenance is stopping workloads now.
ACTIVE_MAINTENANCE_LABEL = "cloud.google.com/active-node-maintenance"
# Taint (NoSchedule): GKE cordoned a node about to be terminated.
IMPENDING_TERMINATION_TAINT = "cloud.google.com/impending-node-termination"

# The node lifecycle controller's taints (and the tolerations the API server adds).
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"

# --- what GKE and the cluster autoscaler read ----------------------------------------------------

# On the head pod: the cluster autoscaler must not reclaim the controller's node (it would
# end the run; a CPU node looks idle to it).
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# GKE injects its Cloud Storage FUSE sidecar into a pod that carries this annotation.
GCSFUSE_VOLUMES_ANNOTATION = "gke-gcsfuse/volumes"
GCSFUSE_CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
# The ServiceAccount every namespace has; pods run as it unless told otherwise.
DEFAULT_SERVICE_ACCOUNT = "default"

# --- Kueue (sigs.k8s.io/kueue v0.17, v0.19) ------------------------------------------------

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_WORKLOAD_PLURAL = "workloads"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
# Kueue reads both as labels of the JobSet (never as annotations): the LocalQueue that
# admits it, and the WorkloadPriorityClass that orders and preempts it. The operator
# copies them from the ElasticTrainingJob's own labels.
KUEUE_QUEUE_NAME_LABEL = f"{KUEUE_GROUP}/queue-name"
KUEUE_PRIORITY_CLASS_LABEL = f"{KUEUE_GROUP}/priority-class"
# On the copy MultiKueue makes in a worker cluster: the Workload (MultiKueue's copy of the
# manager's) that admits it. Carried to the JobSet, so that Kueue's JobSet integration there
# takes that Workload instead of making a second one (quota counted once).
# Kueue v0.19 (WorkloadIdentifierAnnotations, on by default) writes it as an annotation of
# the same name instead, and reads either.
KUEUE_PREBUILT_WORKLOAD_LABEL = f"{KUEUE_GROUP}/prebuilt-workload-name"
KUEUE_PREBUILT_WORKLOAD_ANNOTATION = KUEUE_PREBUILT_WORKLOAD_LABEL
# What a Workload's spec.priorityClassRef names: a WorkloadPriorityClass (the job's
# KUEUE_PRIORITY_CLASS_LABEL) or, without one, the pods' PriorityClass.
WORKLOAD_PRIORITY_CLASS_KIND = "WorkloadPriorityClass"
WORKLOAD_PRIORITY_CLASS_PLURAL = "workloadpriorityclasses"
POD_PRIORITY_CLASS_GROUP = "scheduling.k8s.io"
POD_PRIORITY_CLASS_KIND = "PriorityClass"
KUEUE_JOB_LABELS = (KUEUE_QUEUE_NAME_LABEL, KUEUE_PRIORITY_CLASS_LABEL,
                    KUEUE_PREBUILT_WORKLOAD_LABEL)
# MultiKueue (Kueue's multi-cluster dispatcher): the value of spec.managedBy of a job it
# dispatches (the manager cluster's copy); the worker's copy has no managedBy. And the
# label it puts on the copies it makes (the manager's origin name).
MULTIKUEUE_CONTROLLER = f"{KUEUE_GROUP}/multikueue"
MULTIKUEUE_ORIGIN_LABEL = f"{KUEUE_GROUP}/multikueue-origin"
# On the Workload Kueue creates for a JobSet: the JobSet's uid (the Workload is also
# controller-owned by the JobSet and named jobset-<jobset>-<5 hex>).
KUEUE_JOB_UID_LABEL = f"{KUEUE_GROUP}/job-uid"
# Topology-Aware Scheduling (Kueue >= 0.14, beta, on by default), on a pod template: every
# pod of the pod set in one domain of a level; or each group ("slice") of `slice-size`
# pods (a JobSet's replicated Job: one TPU slice) in one domain of a level.
KUEUE_PODSET_REQUIRED_TOPOLOGY = f"{KUEUE_GROUP}/podset-required-topology"
KUEUE_PODSET_SLICE_REQUIRED_TOPOLOGY = f"{KUEUE_GROUP}/podset-slice-required-topology"
KUEUE_PODSET_SLICE_SIZE = f"{KUEUE_GROUP}/podset-slice-size"
