"""The ElasticTrainingJob itself: metadata, spec, status.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from elastic_api.models.base import ApiModel
from elastic_api.models.spec import ElasticTrainingJobSpec
from elastic_api.models.status import ElasticTrainingJobStatus


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ElasticTrainingJob(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
    api_version: str = "elastic.pathways.dev/v1alpha1"
    kind: Literal["ElasticTrainingJob"] = "ElasticTrainingJob"
    metadata: ObjectMeta
    spec: ElasticTrainingJobSpec
    status: ElasticTrainingJobStatus | None = None
