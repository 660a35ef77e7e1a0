"""The one small Kubernetes access layer of the operator and the trainer.

`KubeClient` (raw REST, dicts in and out, `ApiError` with the API's Status parsed),
`Informer` (a list+watch cache: paged list, watch with bookmarks, relist on 410 or a
silent watch) and the one `Backoff`. The kubernetes client does auth, TLS and kubeconfig
underneath; it is imported only when a client is made or a watch is read.
"""
from elastic_api.kube.backoff import Backoff
from elastic_api.kube.client import (
    ApiError,
    KubeClient,
    NotLeading,
    WatchStalled,
    job_path,
    resource_path,
)
from elastic_api.kube.informer import Informer, Key, ResourceVersionExpired

__all__ = ["ApiError", "Backoff", "Informer", "Key", "KubeClient", "NotLeading",
           "ResourceVersionExpired", "WatchStalled", "job_path", "resource_path"]
