"""What every page form that creates or changes something shares: a field that takes one value
and is given more than once in the POST body (``deployment=1&deployment=2``, a file field given
twice) is refused under its own name, as the API refuses it (``is given 2 times (1, 2): give it
once``). Neither value is taken: Django's ``QueryDict.get`` keeps the last one, which would act on
something the form never showed. Pages that read ``request.POST`` by hand call
:func:`repeated_field_errors`; Django forms inherit :class:`SingleValuedForm`."""
from __future__ import annotations

from collections.abc import Iterable

from django import forms
from django.http import HttpRequest

from controlplane.drf_defaults import given_more_than_once


def repeated_message(name: str, values: list[str], *, shown: bool = True) -> str | None:
    """The page's sentence for field ``name`` given ``len(values)`` times (``"concurrency is
    given 2 times (1, 2): give it once."``; with ``shown`` false the values are left out, for a
    secret), None for one value or none."""
    message = given_more_than_once(values, shown=shown)
    return f"{name} {message}." if message else None


def repeated_field_errors(request: HttpRequest, names: Iterable[str], *,
                          hidden: Iterable[str] = ()) -> dict[str, list[str]]:
    """``{field: [message]}`` for each of ``names`` that the POST body gives more than once,
    counting text values and uploaded files (a file is shown by its name); ``{}`` when each is
    given once or not at all. The values of the fields in ``hidden`` are not quoted. Reads the
    request only."""
    hidden = set(hidden)
    errors: dict[str, list[str]] = {}
    for name in names:
        values = request.POST.getlist(name) + [f.name or "" for f in request.FILES.getlist(name)]
        if message := repeated_message(name, values, shown=name not in hidden):
            errors[name] = [message]
    return errors


class SingleValuedForm(forms.Form):
    """A form whose bound data may give each single-valued field once: a field given more than
    once gets :func:`repeated_message` as its error (in place of any other, since no one value
    was chosen), or among the form's own errors for a hidden field, so the form is invalid and
    re-renders with it. Multi-valued widgets (a multiple
    select, ``allow_multiple_selected``) may repeat their field as usual."""

    def full_clean(self) -> None:
        super().full_clean()
        if not self.is_bound or not hasattr(self.data, "getlist"):
            return
        for name, field in self.fields.items():
            if getattr(field.widget, "allow_multiple_selected", False):
                continue
            key = self.add_prefix(name)
            values = list(self.data.getlist(key))
            if hasattr(self.files, "getlist"):
                values += [f.name or "" for f in self.files.getlist(key)]
            if message := repeated_message(name, values):
                self._errors.pop(name, None)
                # a hidden field has no place on the page for its errors: the form's own list shows it
                self.add_error(None if field.widget.is_hidden else name, message)
                self.cleaned_data.pop(name, None)
