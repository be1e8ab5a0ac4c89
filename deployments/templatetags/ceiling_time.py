"""``{% load ceiling_time %}``: ``{{ value|utc_time }}`` renders a timestamp the way every
deployments page shows one: ``<time datetime="2026-12-06T13:32:24Z" title="2026-12-06T13:32:24Z">
2026-12-06 13:32:24 UTC</time>`` (``—`` when unset)."""
from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.html import format_html

from deployments.views.common import _utc_iso, _utc_text

register = template.Library()


@register.filter
def utc_time(value: datetime | None) -> str:
    if not isinstance(value, datetime):
        return "—"
    iso = _utc_iso(value)
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, iso, _utc_text(value))
