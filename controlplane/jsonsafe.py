"""Make values storable in a JSON column on every database Ceiling supports.

JSON has no NaN or infinity (RFC 8259 §6); SQLite's ``JSON_VALID`` check and PostgreSQL's
``jsonb`` both refuse them. Measurements legitimately produce them (a ratio over an empty set,
the error-adjusted percentile of a run with failures, which is +inf by definition), so they are
stored as null, which every reader shows as "unavailable" rather than as a number.
"""
from __future__ import annotations

import math
from typing import Any


def json_safe(value: Any) -> Any:
    """Return ``value`` with NaN/±inf floats replaced by None, numpy scalars and arrays turned
    into Python numbers and lists, tuples into lists; dict keys become strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalar
    if callable(item) and getattr(value, "ndim", 0) == 0:
        return json_safe(item())
    tolist = getattr(value, "tolist", None)  # numpy array
    if callable(tolist):
        return json_safe(tolist())
    return value
