"""Filters for free text the deployments pages show."""
from __future__ import annotations

from django import template

from deployments.services import controls_visible, free_text_shown

register = template.Library()


@register.filter
def shown_controls(text):
    """Text-direction controls and control characters in ``text`` written as their code points
    (``<U+202E>``, ``<U+001B>``), so stored text cannot display differently from what it says
    (:func:`deployments.services.controls_visible`); and a stored secret's value in it, saved
    before such values were refused in free text, masked (:func:`deployments.services.free_text_shown`)."""
    return controls_visible(free_text_shown(str(text))) if text else text


@register.filter
def after_path(message, path):
    """What follows a spec path shown as code before ``message``: a message that begins with that
    path (``spec.env.TZ holds the placeholder ...``) continues it (`` holds the placeholder ...``),
    so the path is given once; any other message follows a colon (``: must be an integer``)."""
    text, path = str(message), str(path)
    if path and text.startswith(path + " "):
        return text[len(path):]
    return f": {text}"
