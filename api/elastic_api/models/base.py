"""The wire's types: what the API server admits as an integer, a number or a quantity (the
spec's integer aliases: `SpecInt`, `SpecCount`, `SpecPositive`), the string and count
bounds, and the two model bases (`ApiModel`: the spec, strict; `StatusModel`: the
status, lenient).
"""
from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# The API server takes a JSON number with a fraction part (2.0) as an integer only if it
# is whole and below 2**53 in magnitude (exact as a float64).
_MAX_WHOLE_FLOAT = 2**53


def _api_integer(value: Any) -> Any:
    """Refuse, as the API server does, what pydantic's lax `int` would turn into one: a
    bool, a numeric string, a float with a fraction or too big to be exact, anything
    outside int64. A whole float below 2**53 is that integer (the API server agrees)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _MAX_WHOLE_FLOAT:
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int) \
            or not INT64_MIN <= value <= INT64_MAX:
        raise PydanticCustomError(
            "int64_type", "Input should be an integer from -2^63 to 2^63-1 (int64)")
    return value


# A spec integer: what the API server's `type: integer` admits, no more (the CRD schema
# is the same as plain int's).
SpecInt = Annotated[int, BeforeValidator(_api_integer)]
# spec.recovery.inPlaceDeadlineSeconds unset.
DEFAULT_IN_PLACE_DEADLINE_SECONDS = 120
# A spec count that may be left unset (`SpecCount | None`): the bound sits before the
# validator, so pydantic still emits it as `minimum`.
SpecCount = Annotated[int, Field(ge=0), BeforeValidator(_api_integer)]
# A spec count of at least one that may be left unset (`SpecPositive | None`).
SpecPositive = Annotated[int, Field(ge=1), BeforeValidator(_api_integer)]


def _api_number(value: Any) -> Any:
    """Refuse, as the API server's `type: number` does, what pydantic's lax `float` would
    turn into one: a bool or a numeric string (and, in Python, a NaN or an infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        raise PydanticCustomError("number_type", "Input should be a finite number")
    return float(value)


SpecNumber = Annotated[float, BeforeValidator(_api_number)]

# The share of step time one kind of copy of the state (a snapshot, a checkpoint) may cost
# when the trainer chooses its period (spec.overheadBudgetPercent, `etj train
# --overhead-budget-percent`): admission and the trainer's flag refuse the same range.
DEFAULT_OVERHEAD_BUDGET_PERCENT = 2.0
MAX_OVERHEAD_BUDGET_PERCENT = 50.0


# A quantity written as a string: the pattern JobSet's CRD checks (controller-gen's for a
# resource.Quantity), narrowed to what resource.ParseQuantity takes too (JobSet's webhook
# decodes with it, as does every controller that reads the JobSet): the exponent is an
# integer, and of at most two digits, since a quantity's range (1e-9 to about 9e18) needs
# no more and ParseQuantity wraps a long one into an int32. An OpenAPI `pattern`, not a
# CEL rule: before Kubernetes 1.34 CEL sizes an int-or-string as a whole request, and a
# regex over that exceeds a CRD's cost budget.
QUANTITY_PATTERN = (
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?$"
)
QUANTITY_HINT = (
    "not a Kubernetes quantity; write a number with an optional suffix, e.g. 8, 0.5, 500m, "
    "32Gi or 1e3"
)


def _quantity(value: Any) -> Any:
    if isinstance(value, str):
        # fullmatch: `$` alone would let a trailing newline through (the API server's
        # RE2 does not).
        if not re.fullmatch(QUANTITY_PATTERN, value):
            raise PydanticCustomError("quantity", QUANTITY_HINT)
        return value
    # YAML turns `cpu: 8` into an int; Kubernetes quantities accept both (an int within
    # the API server's integer rules; the pattern applies to strings only).
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(_api_integer(value))
    return value


# A Kubernetes resource quantity (8, "500m", "32Gi"): int-or-string on the wire.
Quantity = Annotated[
    str,
    BeforeValidator(_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]

# Bounds keep the CRD's CEL immutability rules (`self == oldSelf`) within the API
# server's cost budget; they are generous for real jobs.
ShortStr = Annotated[str, Field(max_length=253)]
LongStr = Annotated[str, Field(max_length=4096)]
# What the trainer reports is counted from zero and stays below 2**53 (exact in JSON
# numbers; the API server reads schema bounds as floats); anything else is a bad
# report (flagged in TrainingReportValid, and refused by the API server's schema).
Count = Annotated[int, Field(ge=0, le=2**53 - 1)]


class ApiModel(BaseModel):
    """camelCase aliases on the wire, snake_case in Python; unknown fields are errors."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatusModel(ApiModel):
    # A newer trainer or operator may add fields; an older reader must not crash on them.
    # A status is read from its JSON (status_parsing.py): the parser caches the field names
    # only, never the values (a job's names, uids, times), which would otherwise fill
    # pydantic's process-wide string cache job after job.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              cache_strings="keys")
