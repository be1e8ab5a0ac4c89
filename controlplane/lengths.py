"""The product's one wording for a text over its length limit: ``Use at most 63 characters; got
80.`` (names, change reasons, descriptions, sweep names, secret values), not Django's ``Ensure this
value has at most ...`` or DRF's ``Ensure this field has no more than ...``."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator


def length_message(limit: int, got: int) -> str:
    """``Use at most 100 characters; got 200.``"""
    return f"Use at most {limit} characters; got {got}."


class LengthLimit(MaxLengthValidator):
    """A :class:`MaxLengthValidator` (so the API schema still says ``maxLength``) whose refusal is
    :func:`length_message`; a value that is not text is left to the field's own type check."""

    def __call__(self, value: object) -> None:
        if isinstance(value, str) and len(value) > self.limit_value:
            raise ValidationError(length_message(self.limit_value, len(value)), code="max_length")
