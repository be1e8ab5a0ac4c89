"""``{% load benchmark_numbers %}``: ``{{ r.ttft.p99|metric_places:"ttft_ms" }}`` prints a metric
with the decimal places :data:`benchmarks.views.common.ROW_DECIMALS` gives it, the one rule the
results table and the comparison's rows share (``""`` for None, as ``floatformat`` gives it)."""
from __future__ import annotations

from django import template
from django.template.defaultfilters import floatformat

from benchmarks.views.common import ROW_DECIMALS

register = template.Library()


@register.filter
def metric_places(value, stem: str) -> str:
    return floatformat(value, ROW_DECIMALS[stem])
