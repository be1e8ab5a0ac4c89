"""Forms of the deployments pages and admin.

The forms only parse what a person typed (JSON syntax, choices, the node row); every domain
rule lives in :mod:`deployments.recipes` and :mod:`deployments.services`, which the views call.
"""
from __future__ import annotations

import json

from django import forms

from controlplane.errors import InvalidInput
from deployments.choices import Engine, Topology
from deployments.models import Node, Recipe, Secret


def spec_parse(text: str) -> dict:
    """Parse the spec textarea into a dict.

    Raises ``forms.ValidationError`` with ``"invalid JSON at line L column C (reason)"`` on a
    syntax error (line and column are 1-based, from :class:`json.JSONDecodeError`), or when the
    top level is not an object, or nesting deep enough to exhaust Python's recursion limit.
    """
    try:
        value = json.loads(text or "")
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            f"invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})", code="invalid_json"
        ) from None
    except RecursionError:
        # json's decoder recurses once per nesting level; thousands of "[" exhaust the stack.
        raise forms.ValidationError("invalid JSON: nested too deeply", code="too_deep") from None
    if not isinstance(value, dict):
        raise forms.ValidationError("must be a JSON object ({...})", code="not_object")
    return value


def spec_pretty(spec: dict | None) -> str:
    """Render a spec for the textarea: two-space indented JSON, keys in their stored order."""
    return json.dumps(spec or {}, indent=2, ensure_ascii=False)


class RecipeForm(forms.Form):
    """Create/edit form of a recipe. ``cleaned_data["spec"]`` is a dict, ``["node"]`` a Node.

    Pass ``editing=True`` to add the optional change reason recorded in the recipe's history
    and the hidden ``expected_version`` the edit is based on.
    """

    name = forms.CharField(max_length=63, help_text="lowercase letters, digits, '.', '_' or '-'")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    engine = forms.ChoiceField(choices=Engine.choices)
    topology = forms.ChoiceField(choices=Topology.choices)
    node = forms.ModelChoiceField(queryset=Node.objects.all(), empty_label=None)
    spec = forms.CharField(
        widget=forms.Textarea(attrs={"class": "spec", "rows": 28, "spellcheck": "false"}),
        help_text="JSON object; its schema depends on engine and topology",
    )

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if editing:
            self.fields["change_reason"] = forms.CharField(
                max_length=100, required=False, help_text="shown in the version history"
            )
            # The version the edit started from: saving over a newer version is refused
            # (HTTP 409) instead of silently discarding someone else's change.
            self.fields["expected_version"] = forms.IntegerField(min_value=1, required=False, widget=forms.HiddenInput)

    def clean_spec(self) -> dict:
        return spec_parse(self.cleaned_data.get("spec", ""))


class RecipeAdminForm(forms.ModelForm):
    """Admin form of a recipe: the spec is edited as pretty JSON, with the same parse errors
    as the recipe pages."""

    spec = forms.CharField(widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "class": "vLargeTextField"}))

    class Meta:
        model = Recipe
        fields = ["name", "description", "engine", "topology", "node", "spec"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance is not None and self.instance.pk:
            self.initial["spec"] = spec_pretty(self.instance.spec)
        elif not isinstance(self.initial.get("spec"), str):
            self.initial["spec"] = spec_pretty(self.initial.get("spec") or {})

    def clean_spec(self) -> dict:
        return spec_parse(self.cleaned_data.get("spec", ""))

    def clean(self) -> dict:
        """Check the spec against the chosen node with :func:`deployments.recipes.recipe_validate`
        (the rule the services apply on save), so problems appear on the form, each prefixed
        with its dotted path."""
        from deployments.recipes import recipe_validate
        from deployments.services import secret_names
        from deployments.topology import node_facts_from_row

        data = super().clean()
        if self.errors or not all(data.get(k) for k in ("engine", "topology", "node")) or "spec" not in data:
            return data
        try:
            data["spec"] = recipe_validate(
                engine=data["engine"],
                topology=data["topology"],
                spec=data["spec"],
                node=node_facts_from_row(data["node"]),
                secret_names=secret_names(),
            )
        except InvalidInput as exc:
            for path, msgs in exc.errors.items():
                field = path if path in self.fields and path != "spec" else "spec"
                for msg in msgs:
                    self.add_error(field, msg if field == path else f"{path}: {msg}")
        return data


class SecretAdminForm(forms.ModelForm):
    """Admin form of a secret. The value is write-only: it is not a model field of the form,
    so the stored value is never put into the form's initial data or HTML; it is required
    when adding, and leaving it blank on edit keeps the stored value."""

    value = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only: the stored value is never shown. Leave blank to keep it.",
    )

    class Meta:
        model = Secret
        fields = ["name", "description"]

    def clean_value(self) -> str:
        value = self.cleaned_data.get("value") or ""
        if not value and not self.instance.pk:
            raise forms.ValidationError("A value is required for a new secret.")
        return value

    def _post_clean(self) -> None:
        super()._post_clean()
        value = self.cleaned_data.get("value") if hasattr(self, "cleaned_data") else None
        if value:
            self.instance.value = value
