"""Forms of the deployments pages and admin.

The forms only parse what a person typed (JSON syntax, choices, the node row); every domain
rule lives in :mod:`deployments.recipes` and :mod:`deployments.services`, which the views call.
"""
from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.core.validators import MaxLengthValidator
from django.utils.functional import cached_property

from controlplane.drf_defaults import BOM, json_loads, nonfinite_number_errors, repeated_key_errors
from controlplane.errors import InvalidInput
from controlplane.forms import SingleValuedForm
from controlplane.lengths import LengthLimit
from controlplane.numbers import whole_number
from controlplane.redaction import MIN_VALUE_LENGTH, credential_mask_json
from deployments.choices import Engine, Topology
from deployments.examples import example_recipes
from deployments.models import (
    CHANGE_REASON_MAX_LENGTH,
    NAME_MAX_LENGTH,
    Node,
    Recipe,
    Secret,
    change_reason_validator,
    name_validator,
    recipe_name_shown,
)
from deployments.recipes import RECIPE_DOC_PATH
from deployments.services import (
    DESCRIPTION_MAX_LENGTH, free_text_shown, recipe_description_validator, recipe_name_validator, secret_description_validator, secret_value_validator, text_control_validator,
)


def spec_parse(text: str) -> dict:
    """Parse the spec textarea into a dict.

    Raises ``forms.ValidationError`` with ``"invalid JSON at line L column C (reason)"`` on a
    syntax error (line and column are 1-based, from :class:`json.JSONDecodeError`), or when the
    top level is not an object, nesting deep enough to exhaust Python's recursion limit, or an
    integer longer than Python parses; and with one message per key given more than once in an
    object (``spec.roles.decode.port is given 2 times (8001, 8002): give it once``), as the API
    refuses such a body (:func:`controlplane.drf_defaults.repeated_key_errors`): the last value
    would be taken silently; and with one message per number that is not finite
    (``spec.stop_grace_s: 1e400 is not a finite number``, also ``NaN``, ``Infinity``), as the
    API refuses it in a body. A byte order mark (U+FEFF) at the start is skipped, as the API skips
    it in a request body: text saved as "UTF-8 with BOM" is the same JSON.
    """
    value = spec_read(text)
    problems = spec_marks(value)
    if problems:
        raise forms.ValidationError([problem for problems_at in problems.values() for problem in problems_at])
    return value


def spec_read(text: str) -> dict:
    """:func:`spec_parse` less its refusal of keys given more than once and numbers that are not
    finite (:func:`spec_marks` names them)."""
    try:
        value = json_loads((text or "").removeprefix(BOM))
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            f"invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})", code="invalid_json"
        ) from None
    except RecursionError:
        # json's decoder recurses once per nesting level; thousands of "[" exhaust the stack.
        raise forms.ValidationError("invalid JSON: nested too deeply", code="too_deep") from None
    except ValueError as exc:
        # Python refuses integers of more than sys.get_int_max_str_digits() digits (4300 by
        # default, CVE-2020-10735) with a plain ValueError.
        raise forms.ValidationError(f"invalid JSON: {exc}", code="invalid_json") from None
    if not isinstance(value, dict):
        raise forms.ValidationError("must be a JSON object ({...})", code="not_object")
    return value


def spec_marks(value: dict) -> dict[str, list[forms.ValidationError]]:
    """The keys given more than once and the numbers that are not finite of a spec read by
    :func:`spec_parse`, each path (``spec.stop_grace_s``) with its messages as the spec box shows
    them; empty when there is none."""
    problems: dict[str, list[forms.ValidationError]] = {}
    for path, messages in repeated_key_errors(value, "spec").items():
        problems.setdefault(path, []).extend(
            forms.ValidationError(f"{path} {message}", code="repeated_key") for message in messages)
    for path, messages in nonfinite_number_errors(value, "spec").items():
        problems.setdefault(path, []).extend(
            forms.ValidationError(f"{path}: {message}", code="nonfinite") for message in messages)
    return problems


def spec_pretty(spec: dict | None) -> str:
    """Render a spec for the textarea: two-space indented JSON, keys in their stored order; a
    well-known credential stored in it (from before such values were refused) shows shortened
    only (:func:`controlplane.redaction.credential_mask_json`)."""
    return json.dumps(credential_mask_json(spec or {}), indent=2, ensure_ascii=False)


def sent_values(form: forms.Form, name: str) -> list[str]:
    """What the request sent for ``form``'s field ``name``: every value of a query dict, the one
    value of a plain dict, none when it was not sent."""
    key = form.add_prefix(name)
    if hasattr(form.data, "getlist"):
        return form.data.getlist(key)
    return [form.data[key]] if key in form.data else []


def judge_expected_version(form: forms.Form, data: dict, values: list[str]) -> None:
    """Put the edit's ``expected_version`` in ``data`` as an int, from ``values`` (what the
    request sent for it). The edit forms always send it, so none, a blank or anything but a whole
    number from 1 means a broken form: it is refused among ``form``'s own errors (a hidden field
    has no place for them), quoting what came in JSON's spelling, and nothing is saved; so is a
    number of more digits than any version has (:func:`controlplane.numbers.whole_number`: never
    read, ``int()`` refuses more than 4300)."""
    reload = "reload the page to edit the current version; nothing was saved."
    data.pop("expected_version", None)
    if not values:
        form.add_error(None, forms.ValidationError(
            "expected_version is missing: the edit form sends the version it was opened at; " + reload,
            code="expected_version"))
    elif (version := whole_number(values[-1])) is None or version < 1:
        shown = json.dumps(str(values[-1])[:40], ensure_ascii=False)
        form.add_error(None, forms.ValidationError(
            f"expected_version {shown} is not a version number (a whole number from 1): " + reload,
            code="expected_version"))
    else:
        data["expected_version"] = version


class SpecTextMixin:
    """The ``spec`` field of the recipe page's and the admin's form, read from its JSON text."""

    spec_refused: dict | None = None
    spec_marked_paths: list[str] = []

    def clean_spec(self) -> dict:
        """The spec as a dict (:func:`spec_parse`). One holding a key given more than once or a
        number that is not finite is refused, and kept in :attr:`spec_refused` with those paths
        in :attr:`spec_marked_paths`, so that the page still judges the rest of it."""
        value = spec_read(self.cleaned_data.get("spec", ""))
        problems = spec_marks(value)
        if problems:
            self.spec_refused, self.spec_marked_paths = value, list(problems)
            raise forms.ValidationError([problem for problems_at in problems.values() for problem in problems_at])
        return value


class RecipeForm(SpecTextMixin, SingleValuedForm):
    """Create/edit form of a recipe. ``cleaned_data["spec"]`` is a dict, ``["node"]`` a Node.

    Pass ``editing=True`` to add the optional change reason recorded in the recipe's history
    and the hidden ``expected_version`` the edit is based on (required: see :meth:`clean`).
    """

    # The length is judged by name_validator (one message per problem); the browser still stops
    # typing at the limit.
    name = forms.CharField(validators=[recipe_name_validator], widget=forms.TextInput(attrs={"maxlength": NAME_MAX_LENGTH}),
                           help_text=f"1–{NAME_MAX_LENGTH} lowercase letters, digits, '.', '_' or '-', starting with a "
                                     f"letter or digit (the box stops at {NAME_MAX_LENGTH})")
    # The length is judged here as the save judges it (one message, the product's wording), so a
    # form refused for its spec names a description too long in the same answer.
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                  validators=[LengthLimit(DESCRIPTION_MAX_LENGTH), recipe_description_validator])
    engine = forms.ChoiceField(choices=Engine.choices)
    topology = forms.ChoiceField(choices=Topology.choices)
    node = forms.ModelChoiceField(queryset=Node.objects.all(), empty_label=None)
    spec = forms.CharField(
        widget=forms.Textarea(attrs={"class": "spec", "rows": 28, "spellcheck": "false"}),
        help_text="JSON object; its schema depends on engine and topology",
    )

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.spec_refused: dict | None = None
        self.spec_marked_paths: list[str] = []
        self.fields["spec"].help_text = spec_help_text()
        if editing:
            # The length is judged by change_reason_validator (the product's wording); the browser
            # still stops typing at the limit.
            self.fields["change_reason"] = forms.CharField(
                required=False, validators=[change_reason_validator, text_control_validator,
                            secret_value_validator("change_reason")],
                help_text="shown in the version history",
                widget=forms.TextInput(attrs={"maxlength": CHANGE_REASON_MAX_LENGTH}),
            )
            # The version the edit started from: saving over a newer version is refused
            # (HTTP 409) instead of silently discarding someone else's change. Read as text:
            # clean() judges it and names what came.
            self.fields["expected_version"] = forms.CharField(required=False, strip=False, widget=forms.HiddenInput)

    def clean(self) -> dict:
        """An edit's ``expected_version`` becomes an int. The page always sends it, so one that is
        missing, blank or not a whole number from 1 means a broken form: it is refused among the
        form's own errors (a hidden field has no place for them), quoting what came in JSON's
        spelling (``expected_version "abc" is not a version number ...``), and nothing is saved.
        One given more than once is left to :class:`SingleValuedForm`'s message."""
        data = super().clean()
        if "expected_version" not in self.fields:
            return data
        values = sent_values(self, "expected_version")
        if len(values) > 1:
            return data
        judge_expected_version(self, data, values)
        return data

    @cached_property
    def examples(self) -> list[dict]:
        """The example recipes the page offers as starting points, see :func:`recipe_examples_for_form`."""
        return recipe_examples_for_form()


def spec_help_text() -> str:
    """The spec field's help: the rules a new recipe trips over first, and where the full
    reference lives (:data:`deployments.recipes.RECIPE_DOC_PATH`). Model roots come from the
    current settings."""
    roots = ", ".join(str(r) for r in settings.CEILING_MODEL_ROOTS) or "none configured"
    return (
        'JSON object. Key rules: "model" is {"path": ...} under a model root (' + roots + ') or '
        '{"name": "org/Model"}; "roles" holds "single", or "prefill", "decode" and "router" for pd; '
        'a GPU role lists its "gpus" (tp × dp of them, none shared) and, to pin it, the "numa_node" '
        'those GPUs sit on ("allow_cross_numa": true to pin elsewhere anyway); ports are 1024-65535 '
        'and unique; "flags" come from the engine\'s allowlist (choices, names, or paths under a model '
        'root); secrets are {"ENV_NAME": "secret-name"} in "secrets". Every field, default and flag: '
        + RECIPE_DOC_PATH + " in the repository."
    )


def recipe_examples_for_form() -> list[dict]:
    """The example recipes of :func:`deployments.examples.example_recipes` as the recipe form's
    "start from an example" select uses them: ``{name, description, engine, topology,
    node_name, node (the Node's pk, or None when no node of that name is registered), spec
    (pretty JSON text)}``, in the examples' order. One query."""
    examples = example_recipes()
    pks = dict(Node.objects.filter(name__in={e["node"] for e in examples}).values_list("name", "pk"))
    return [
        {
            "name": e["name"],
            "description": e["description"],
            "engine": e["engine"],
            "topology": e["topology"],
            "node_name": e["node"],
            "node": pks.get(e["node"]),
            "spec": spec_pretty(e["spec"]),
        }
        for e in examples
    ]


def name_judged_once(form: forms.ModelForm, validator=name_validator) -> None:
    """Make ``form``'s model-made ``name`` field judge a name by :func:`name_validator` alone, as
    the API and the recipe form do: an 80-character name gets one message (``Use at most 63
    characters; got 80.``), not the model field's length message beside (or instead of) it. The
    model's own check of the field is skipped once the field has an error; a name that passes
    :func:`name_validator` passes the model's slug rule too. The browser still stops typing at the
    limit (the widget keeps ``maxlength``). A recipe's form passes
    :func:`deployments.services.recipe_name_validator` as ``validator``, which also refuses a
    stored secret's value."""
    field = form.fields.get("name")
    if field is not None:
        field.validators = [validator]


class RecipeAdminForm(SpecTextMixin, forms.ModelForm):
    """Admin form of a recipe: the spec is edited as pretty JSON, with the same parse errors
    as the recipe pages.

    An existing recipe's form carries the hidden ``expected_version``: the recipe's version as
    stored when the page was opened (also on a history entry's page, whose fields show an older
    version). Saving after the recipe moved on is refused with a form error naming the current
    version, who changed it and when (:func:`deployments.services.recipe_stale_message`), so an
    edit never silently puts back what someone else changed meanwhile. One that is missing, blank
    or not a version number is refused as on the recipe edit page (:func:`judge_expected_version`)."""

    spec = forms.CharField(widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "class": "vLargeTextField"}))
    # Read as text: clean() judges it and names what came.
    expected_version = forms.CharField(required=False, strip=False, widget=forms.HiddenInput)

    class Meta:
        model = Recipe
        fields = ["name", "description", "engine", "topology", "node", "spec"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        name_judged_once(self, recipe_name_validator)
        # Judged on the form as the recipe pages judge it (its length too: the model's text field
        # has no limit), so a refusal is shown beside the field with every other one. A user who
        # may only view recipes gets a form without the field (Django shows it read-only).
        if "description" in self.fields:
            self.fields["description"].validators += [LengthLimit(DESCRIPTION_MAX_LENGTH),
                                                      recipe_description_validator]
        if self.instance is not None and self.instance.pk:
            self.initial["spec"] = spec_pretty(self.instance.spec)
            self.initial["description"] = free_text_shown(self.instance.description)
            # a stored secret's value in a name saved before it was refused there shows masked;
            # saved unchanged, the placeholder is refused by the name's character rule
            self.initial["name"] = self.instance.name_shown
            self.initial["expected_version"] = (
                Recipe.objects.filter(pk=self.instance.pk).values_list("version", flat=True).first()
            )
        elif not isinstance(self.initial.get("spec"), str):
            self.initial["spec"] = spec_pretty(self.initial.get("spec") or {})

    def clean(self) -> dict:
        """Refuse a stale ``expected_version`` (a form error, nothing else judged), then judge the
        content by :func:`deployments.services.recipe_content_validate`, the rule the services
        apply on save, so that every problem appears on the form at once, beside the field it
        names (a spec path's under the spec, prefixed with its dotted path), and Django's admin
        re-renders the form with what was typed instead of saving. The spec is judged also when
        another field is refused (a description too long, a node not chosen: then all but its
        hardware references), and so is one the spec box refused for a key given twice or a
        number that is not finite, less those paths (:attr:`spec_marked_paths`). A field already
        refused by its own check keeps that message alone."""
        from deployments.services import recipe_content_validate

        data = super().clean()
        data.pop("expected_version", None)
        if self.instance is not None and self.instance.pk and self.is_bound:
            judge_expected_version(self, data, sent_values(self, "expected_version"))
        expected = data.get("expected_version")
        if expected is not None and self.instance is not None and self.instance.pk:
            from deployments.services import recipe_stale_message

            stale = recipe_stale_message(recipe=self.instance, expected_version=expected)
            if stale:
                # Nothing else is worth judging: the fields show a version that is no longer current.
                raise forms.ValidationError(stale, code="stale_version")
        spec = data.get("spec", self.spec_refused)
        if not (data.get("engine") and data.get("topology") and isinstance(spec, dict)):
            return data
        content = {"name": data.get("name", ""), "description": data.get("description", ""),
                   "engine": data["engine"], "topology": data["topology"], "node": data.get("node"), "spec": spec}
        try:
            stored = self.instance.spec if self.instance is not None and self.instance.pk else None
            validated = recipe_content_validate(content, stored_spec=stored)
        except InvalidInput as exc:
            for path, msgs in exc.errors.items():
                if any(path == p or path.startswith(p + ".") for p in self.spec_marked_paths):
                    continue
                field = path if path in self.fields and path != "spec" else "spec"
                if field != "spec" and field in self.errors:
                    continue  # refused by the field's own check already, in the same words or its own
                for msg in msgs:
                    self.add_error(field, msg if field == path else f"{path}: {msg}")
        else:
            if "spec" in data:
                data["spec"] = validated["spec"]
        return data

    def _post_clean(self) -> None:
        super()._post_clean()
        self._refused_masked()

    def _refused_masked(self) -> None:
        """Show a refused form's name, description and spec as typed except for what may not be
        stored in clear (:func:`deployments.recipes.secret_text_masked`: a well-known credential
        shortened, a stored secret's value masked), as the recipe pages show them: the page naming
        the refusal never repeats the value."""
        from deployments.recipes import secret_text_masked
        from deployments.services import secret_values

        shown = [key for key in ("name", "description", "spec") if key in self.data]
        if not (self.is_bound and self.errors and shown):
            return
        data = self.data.copy()
        values = secret_values()
        for key in shown:
            if hasattr(data, "setlist"):
                data.setlist(key, [secret_text_masked(text, values) for text in self.data.getlist(key)])
            elif isinstance(data[key], str):
                data[key] = secret_text_masked(data[key], values)
        self.data = data


class RecipeRevertAdminForm(RecipeAdminForm):
    """The admin's form of one history entry (simple-history's "Revert"): every content field
    is shown disabled, so what a revert saves is exactly that version's content (Django takes a
    disabled field's value from the entry, never from the request). Only ``expected_version``
    is read from the request: the recipe's version when the page was opened."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # RecipeAdminForm's own list: the admin's form class lists expected_version as well.
        for name in RecipeAdminForm.Meta.fields:
            if name in self.fields:
                self.fields[name].disabled = True
                # drawn as a read-only value (static/ceiling/admin-version.css), not as an input
                widget = self.fields[name].widget
                widget = getattr(widget, "widget", widget)  # the select inside the admin's related-object wrapper
                widget.attrs["class"] = " ".join(filter(None, [widget.attrs.get("class"), "version-value"]))
                widget.attrs["title"] = "This version's value; Revert saves it as a new version"

    def validate_unique(self) -> None:
        """A version whose name another recipe holds now cannot be restored here (its fields
        cannot be edited): the error names that recipe and the way out, the recipe's revert page
        with "keep the current name"."""
        super().validate_unique()
        recipe = self.instance
        if "name" not in self.errors or not recipe.pk:
            return
        if not Recipe.objects.filter(name=recipe.name).exclude(pk=recipe.pk).exists():
            return
        from django.urls import reverse

        current = Recipe.objects.filter(pk=recipe.pk).values_list("name", flat=True).first()
        url = reverse("deployments:recipe-revert", args=[recipe.pk, recipe.version])
        self.errors["name"] = self.error_class([
            f"A recipe named '{recipe.name_shown}' already exists, so version {recipe.version} cannot be restored "
            f"under its name here. Restore it with the current name '{recipe_name_shown(current or '')}' on the "
            f"recipe's revert page, {url} "
            "(tick \"keep the current name\"), or with keep_name in the API."])


class SecretAdminForm(forms.ModelForm):
    """Admin form of a secret. The value is write-only: it is not a model field of the form,
    so the stored value is never put into the form's initial data or HTML; it is required
    when adding, and leaving it blank on edit keeps the stored value."""

    value = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=f"Write-only: the stored value is never shown. At least {MIN_VALUE_LENGTH} characters. "
                  "Leave blank to keep it.",
    )

    class Meta:
        model = Secret
        fields = ["name", "description"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        name_judged_once(self)
        # A text over its limit is refused in the product's one wording, as the API refuses it
        # (controlplane.lengths), not Django's "Ensure this value has at most ...".
        for field in self.fields.values():
            field.validators = [LengthLimit(v.limit_value) if type(v) is MaxLengthValidator else v
                                for v in field.validators]
        # Everyone who lists the secrets reads the description: refused as the API refuses it.
        self.fields["description"].validators += [text_control_validator, secret_description_validator]
        if self.instance is not None and self.instance.pk:
            # a stored secret's value or a credential in a description saved before it was refused
            # there shows masked, as the list shows it; saved unchanged, the placeholder is refused
            self.initial["description"] = free_text_shown(self.instance.description)

    def clean_value(self) -> str:
        value = self.cleaned_data.get("value") or ""
        if not value and not self.instance.pk:
            raise forms.ValidationError("A value is required for a new secret.")
        from deployments.services import secret_value_problem

        problem = secret_value_problem(value) if value else None
        if problem:
            raise forms.ValidationError(problem)
        return value

    def clean(self) -> dict:
        cleaned = super().clean()
        from deployments.services import secret_description_problem

        # The description may not hold the value this same form gives the secret.
        if cleaned.get("value") and "description" in cleaned:
            problem = secret_description_problem(cleaned["description"], value=cleaned["value"])
            if problem:
                self.add_error("description", problem)
        if self.has_error("description") and "description" in self.data:
            # shown again as the refusal says it: a secret's value or a credential never repeated
            from controlplane.redaction import secret_value_masked
            from deployments.recipes import secret_text_masked
            from deployments.services import secret_values

            values = secret_values()
            data = self.data.copy()
            data["description"] = secret_value_masked(secret_text_masked(self.data["description"], values),
                                                      [cleaned.get("value") or ""])
            self.data = data
        return cleaned

    def _post_clean(self) -> None:
        super()._post_clean()
        value = self.cleaned_data.get("value") if hasattr(self, "cleaned_data") else None
        if value:
            self.instance.value = value
