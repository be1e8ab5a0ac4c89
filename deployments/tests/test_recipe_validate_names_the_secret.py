"""The recipe form's Validate button refuses a ``***redacted***`` placeholder left where the stored
spec holds a secret's value as Save does: naming the secret, and giving the path once (the path as
code, the message continuing it), on the Validate result and on the refused form alike."""
from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from django.urls import reverse

from controlplane.redaction import REDACTED
from deployments.models import Recipe
from deployments.tests.factories import STORED_BEFORE_VALUE, recipe_stored_before_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_roots")]

SAID = (f"<code>spec.env.TZ</code> holds the placeholder {REDACTED} shown in place of a secret's value: "
        "reference the secret from spec.secrets (secret 'db-pass') or type the value")


def _form_values(response) -> dict:
    form = response.context["form"]
    return {bf.html_name: bf.value() for bf in form if bf.value() is not None}


def _items(response) -> list[str]:
    page = html_lib.unescape(response.content.decode())
    return re.findall(r"<li>(<code>spec\.env\.[A-Z]+</code>.*?)</li>", page)


@pytest.fixture
def stored(admin_api) -> Recipe:
    return recipe_stored_before_create(admin_api)


def test_validate_names_the_secret_and_gives_the_path_once(operator_client, stored):
    edit = reverse("deployments:recipe-edit", args=[stored.pk])
    opened = operator_client.get(edit)
    validate = f"{reverse('deployments:recipe-validate')}?recipe={stored.pk}"
    assert f'hx-post="{validate}"' in opened.content.decode()   # the edit form names its recipe
    values = _form_values(opened)

    checked = operator_client.post(validate, values)
    saved = operator_client.post(edit, values)

    assert checked.status_code == 200 and saved.status_code == 400
    assert SAID in _items(checked)
    # Validate says what Save says, in its panel and under the spec box (which it replaces)
    assert _items(checked) == _items(saved) * 2
    for item in _items(checked):
        assert item.count("spec.env.") == 1, item
    assert STORED_BEFORE_VALUE not in checked.content.decode()
    assert Recipe.objects.get(pk=stored.pk).version == stored.version


def test_validate_without_a_recipe_refuses_the_placeholder_without_a_name(operator_client, stored):
    values = _form_values(operator_client.get(reverse("deployments:recipe-edit", args=[stored.pk])))
    checked = operator_client.post(reverse("deployments:recipe-validate"), values)
    assert (f"<code>spec.env.TZ</code> holds the placeholder {REDACTED} shown in place of a secret's value: "
            "reference the secret from spec.secrets or type the value") in _items(checked)


def test_another_message_still_follows_its_path_after_a_colon(operator_client, stored):
    values = _form_values(operator_client.get(reverse("deployments:recipe-edit", args=[stored.pk])))
    values["spec"] = json.dumps({**json.loads(values["spec"]), "stop_grace_s": "soon"})
    checked = operator_client.post(f"{reverse('deployments:recipe-validate')}?recipe={stored.pk}", values)
    page = html_lib.unescape(checked.content.decode())
    assert re.search(r"<li><code>spec\.stop_grace_s</code>: [^<]*soon", page), page
