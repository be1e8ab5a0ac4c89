"""Text typed into the sweep form or given to ``manage.py sweep`` as the grid's JSON values.

The API's grid validation (:func:`benchmarks.sweeps.grid_validate`) is the one judge of a grid:
the form and the command read their text into the values a JSON body would carry, without judging
them, and leave every refusal, and its words, to it. So ``abc`` typed as a concurrency is refused
as the API refuses ``"abc"`` (``must be an integer 1..4096, got the string "abc"``), never turned
into a number first."""
from __future__ import annotations

import math
import re

from controlplane.drf_defaults import NonFiniteNumber

# A number as typed: ASCII digits with an optional sign (``int()`` also takes ``1_000``, ``١``
# and surrounding spaces), or a decimal with a point and/or an exponent (``2.5``, ``1e3``, ``.5``).
_INTEGER_RE = re.compile(r"[+-]?[0-9]+")
_DECIMAL_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def grid_value(text: str) -> int | float | str:
    """``text`` as the JSON value a grid field would hold: a whole number written without a point
    or exponent as an integer (``8``, ``-1``), another number as a float (``2.5``, ``1e3``;
    ``1e400``, ``inf`` as infinity and ``nan``, each keeping how it was typed for the grid's
    validation to name it as not finite: :class:`controlplane.drf_defaults.NonFiniteNumber`),
    anything else as the text itself
    (``abc``, ``64-32``, ``256:256``), for the grid's validation to take or quote. A number keeps
    the spelling the user chose: ``10001`` is quoted ``got 10001``, ``1e3`` is told to be written
    without its exponent, as the API tells a JSON body."""
    if _INTEGER_RE.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # more digits than int() reads from text: quoted as typed
            return text
    if _DECIMAL_RE.fullmatch(text) or text.lower().lstrip("+-") in ("inf", "infinity", "nan"):
        number = float(text)
        # inf and nan too, and 1e400 (infinity): the grid's validation names a number that is not
        # finite as it was typed (benchmarks.sweeps.non_finite_text), as the API names 1e400 in a body
        return number if math.isfinite(number) else NonFiniteNumber(number, text)
    return text


def sweep_name_read(text: str) -> tuple[str, list[str]]:
    """A sweep's name as typed into the sweep form or given to ``manage.py sweep --name``, judged
    by the API's own ``name`` field (:class:`benchmarks.api.serializers.SweepCreateSerializer`: at
    most 200 characters, no control or text-direction characters, tab and newline included
    (:func:`deployments.services.one_line_text_validator`), spaces around it trimmed).
    Returns ``(name, [])``, or ``("", messages)`` in the API's words when it is refused; a blank
    name is ``""``, which :func:`benchmarks.services.sweep_create` makes up from the grid."""
    from rest_framework.exceptions import ValidationError

    from benchmarks.api.serializers import SweepCreateSerializer

    try:
        return SweepCreateSerializer().fields["name"].run_validation(text), []
    except ValidationError as exc:
        return "", [str(m) for m in exc.detail]
