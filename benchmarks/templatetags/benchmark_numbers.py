"""``{% load benchmark_numbers %}``: ``{{ r.ttft.p99|metric_places:"ttft_ms" }}`` prints a metric
with the decimal places :data:`benchmarks.views.common.ROW_DECIMALS` gives it and thousands
separated (``5,222.3``), the one rule the results table, the runs list and the comparison's rows
share (``""`` for None or a value that is no number, as ``floatformat`` gives it)."""
from __future__ import annotations

import math

from django import template

from benchmarks.views.common import ROW_DECIMALS

register = template.Library()


@register.filter
def metric_places(value, stem: str) -> str:
    if value is None or isinstance(value, bool):
        return ""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    if not math.isfinite(number):
        return str(number)
    text = f"{number:,.{ROW_DECIMALS[stem]}f}"
    return "0" + text[2:] if text.startswith("-0") and not any(c in "123456789" for c in text) else text
