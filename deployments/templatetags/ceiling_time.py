"""``{% load ceiling_time %}``: ``{{ value|utc_time }}`` renders a timestamp the way every
deployments page shows one: ``<time datetime="2026-12-06T13:32:24Z" title="2026-12-06T13:32:24Z">
2026-12-06 13:32:24 UTC</time>`` (``—`` when unset). ``{{ value|utc_time:"compact" }}``, for
places short of room (the wall), leaves the date out when it is today's (UTC): ``13:32:24 UTC``,
the full date and time still in the attribute and the tooltip."""
from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone

from django import template
from django.utils import timezone
from django.utils.html import format_html

from deployments.views.common import _utc_iso, _utc_text

register = template.Library()


@register.filter
def utc_time(value: datetime | None, form: str = "") -> str:
    if not isinstance(value, datetime):
        return "—"
    iso = _utc_iso(value)
    text = _utc_text(value)
    if form == "compact" and value.astimezone(dt_timezone.utc).date() == timezone.now().astimezone(dt_timezone.utc).date():
        text = text.split(" ", 1)[1]
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, iso, text)
