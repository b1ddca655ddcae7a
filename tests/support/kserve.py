"""KServe request parameters as the tests set them on raw protobuf requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def set_params(parameters: Any, values: Mapping[str, object]) -> None:
    """Each value into its InferParameter field by its Python type (a
    `parameters` map of a ModelInferRequest)."""
    for name, value in values.items():
        p = parameters[name]
        if isinstance(value, bool):
            p.bool_param = value
        elif isinstance(value, int):
            p.int64_param = value
        elif isinstance(value, float):
            p.double_param = value
        else:
            p.string_param = value
