"""Number formats, and the wrapping of a variant's key, for the kernels pages."""
from __future__ import annotations

import math

from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

register = template.Library()


@register.filter
def sig3(value, empty: str = "—"):
    """``value`` with at least 3 significant figures and at least one decimal: 510.0, 24.5, 0.312,
    0.000512 (a figure of 10 or more keeps one decimal, as ``floatformat:1`` shows it); ``empty``
    for None or a value that is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return empty
    if value == 0:
        return "0.0"
    rounded = float(f"{value:.3g}")   # 9.996 -> 10.0: its figures count from the rounded value
    return f"{value:.{max(1, 2 - math.floor(math.log10(abs(rounded))))}f}"


@register.filter
def speedup_text(value, empty: str = "—") -> str:
    """A speedup as the kernels pages, the what-if and the ``kernel_job_ingest`` command write it:
    two decimals and the times sign, ``44.24×``; ``empty`` for None or a value that is not a
    finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return empty
    return f"{value:.2f}×"


@register.filter
def wrap_at_commas(value) -> str:
    """``value`` (a variant's key, ``impl=split_k,BLOCK_H=32,...``) escaped, with a line-break
    opportunity (``<wbr>``, which copies as nothing) after each comma: a table cell wraps the key
    between its parameters, never inside one, where the unbroken string (80 characters and more)
    ran the best-variants table off a 1400 px page."""
    return mark_safe(",<wbr>".join(escape(part) for part in str(value).split(",")))
