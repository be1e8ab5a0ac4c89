"""``{% load benchmark_numbers %}``: ``{{ r.ttft.p99|metric_places:"ttft_ms" }}`` prints a metric
with the decimal places :data:`benchmarks.views.common.ROW_DECIMALS` gives it and thousands
separated (``5,222.3``) through :func:`benchmarks.views.common.metric_text`, the one rule the
results table, the runs list, the run page and the comparison's rows share (``""`` for None or a
value that is no number, as ``floatformat`` gives it). ``{{ value|metric_places:2 }}`` prints a
fact no table shares with that many places, by the same rule. ``{{ flag|breaks_at_underscores }}``
prints a flag name (``output_length_mismatch``) escaped, with a line-break opportunity after each
underscore, so a narrow column wraps it between its words rather than inside one."""
from __future__ import annotations

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from benchmarks.views.common import metric_text

register = template.Library()


@register.filter
def metric_places(value, stem) -> str:
    if isinstance(stem, str) and stem.isdigit():
        stem = int(stem)
    return metric_text(value, stem)


@register.filter
def breaks_at_underscores(value) -> SafeString:
    return mark_safe(escape(str(value)).replace("_", "_<wbr>"))
