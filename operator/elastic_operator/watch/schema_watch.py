"""The CRD the API server serves, watched: the verdict on its schema (core/schema.py), kept
current from a list+watch of the one CustomResourceDefinition (by name), and said.

The reconciles read `verdict` at each pass (level-based): a change of the CRD names every
job again (`on_change`: the resync), so an upgraded CRD ends a refusal at once. Each new
verdict is logged (ERROR while it refuses, WARNING for a CRD that is not the operator's
own or cannot be read, INFO when it is) and recorded in the metrics.

A CRD the operator may not read (a chart whose RBAC predates the CRD watch) never stops
it: the verdict is `unknown`, the jobs are served as before, and the watch tries again.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from elastic_api.kube import Informer, Key
from elastic_api.kube.client import ApiError
from elastic_api.names import CRD_NAME
from elastic_operator.client.kube import Kube
from elastic_operator.core.schema import CURRENT, OUTDATED, SchemaVerdict, judge
from elastic_operator.metrics.metrics import OperatorMetrics

logger = logging.getLogger("elastic_operator")
PAGE_SIZE = 10  # one object, by name


class SchemaWatch:
    """`on_change()`: from the informer's thread, after each new verdict;
    `on_relist(resource, reason, objects)`: after each list (the caches' metric)."""

    def __init__(self, kube: Kube, metrics: OperatorMetrics, *, watch_timeout_s: int,
                 on_change: Callable[[], None] = lambda: None,
                 on_relist: Callable[[str, str, int], None] | None = None) -> None:
        self.metrics = metrics
        self._kube = kube
        self._on_change = on_change
        self._verdict: SchemaVerdict | None = None  # none yet: nothing is reconciled
        self._unreadable = False
        self.informer: Informer[SchemaVerdict] = Informer(
            "crd", self._list_page,
            lambda version: kube.watch_crd(version, watch_timeout_s), judge,
            keep=lambda key: key[1] == CRD_NAME, on_change=self._changed,
            on_relist=self._relisted(on_relist))

    @property
    def verdict(self) -> SchemaVerdict:
        """The verdict now (unknown before the first list)."""
        return self._verdict or judge(None)

    @property
    def settled(self) -> bool:
        """A verdict to reconcile by: the CRD listed once, or found unreadable."""
        return self.informer.synced or self._unreadable

    def start(self) -> None:
        self.informer.start()

    def stop(self) -> None:
        self.informer.stop()

    def _list_page(self, token: str | None) -> dict[str, Any]:
        try:
            page = self._kube.list_crd(limit=PAGE_SIZE, continue_token=token)
        except ApiError as e:
            if e.status in (401, 403) and not self._unreadable:
                self._unreadable = True
                self._set(judge(None))
            raise  # the informer tries again, with its backoff
        self._unreadable = False
        return page

    def _relisted(self, then: Callable[[str, str, int], None] | None
                  ) -> Callable[[str, str, int], None]:
        def relisted(resource: str, reason: str, objects: int) -> None:
            if objects == 0:  # no CRD (yet): no job either
                self._set(judge(None))
            if then is not None:
                then(resource, reason, objects)
        return relisted

    def _changed(self, key: Key, old: SchemaVerdict | None,
                 new: SchemaVerdict | None) -> None:
        self._set(new if new is not None else judge(None))

    def _set(self, verdict: SchemaVerdict) -> None:
        before, self._verdict = self._verdict, verdict
        self.metrics.schema.record(verdict)
        if before == verdict:
            return
        level = {OUTDATED: logging.ERROR, CURRENT: logging.INFO}.get(verdict.state,
                                                                     logging.WARNING)
        logger.log(level, "CRD %s: schema %s: %s", CRD_NAME, verdict.state, verdict.message)
        self._on_change()

