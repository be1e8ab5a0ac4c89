"""Filters for free text the deployments pages show."""
from __future__ import annotations

from django import template

from deployments.services import direction_controls_visible

register = template.Library()


@register.filter
def direction_visible(text):
    """Text-direction controls in ``text`` written as their code points (``<U+202E>``), so stored
    text cannot display differently from what it says (:func:`deployments.services.direction_controls_visible`)."""
    return direction_controls_visible(str(text)) if text else text
