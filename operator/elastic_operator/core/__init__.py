"""The operator's pure core: no I/O, no clock (`now` is passed in), no randomness.

One module per concern, each importable on its own:

- parsing: the job and its stored status, read leniently
- plan: what a reconcile changes in the cluster (typed actions) and object ownership
- slices: slice health from the worker pods and their nodes
- recovery: the recovery record and the trainer process
- conditions: the set-condition helpers and one function per condition
- failure: whether the job finished (Failed, Succeeded)
- ready: the Ready condition and the phase (a cascade)
- checkpoint: what a checkpoint scan changes in status.checkpoint
- events: the Kubernetes Events a status change implies
- status: compute_status, which assembles all of the above
- patch: the RFC 7386 merge patch of the status subresource
"""
