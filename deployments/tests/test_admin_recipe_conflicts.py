"""Recipe edits in the Django admin are never lost: a change form opened before someone else
saved the recipe is refused (naming the current version, who and when) instead of silently
putting the old values back, through the real admin forms."""
from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from django.urls import reverse

from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.services import recipe_create, recipe_update
from deployments.tests.test_admin import admin_client, seed_node, superuser  # noqa: F401 - fixtures


@pytest.fixture
def recipe(seed_node, superuser) -> Recipe:
    ex = example_recipe("seed-v4-flash-pd")
    return recipe_create(user=superuser, name=ex["name"], description=ex["description"], engine=ex["engine"],
                         topology=ex["topology"], node=seed_node, spec=ex["spec"])


def _change_url(recipe: Recipe) -> str:
    return reverse("admin:deployments_recipe_change", args=[recipe.pk])


def _page_form(page: str) -> dict[str, str]:
    """The values a browser would send from the admin page's form: every input and textarea
    that is not disabled, selects at their selected option."""
    data: dict[str, str] = {}
    for tag in re.findall(r"<input[^>]*>", page):
        name = re.search(r'name="([^"]+)"', tag)
        if not name or " disabled" in tag or re.search(r'type="(submit|checkbox)"', tag):
            continue
        value = re.search(r'value="([^"]*)"', tag)
        data[name.group(1)] = html_lib.unescape(value.group(1)) if value else ""
    for attrs, text in re.findall(r"<textarea([^>]*)>(.*?)</textarea>", page, flags=re.S):
        if " disabled" not in attrs:
            data[re.search(r'name="([^"]+)"', attrs).group(1)] = html_lib.unescape(text).lstrip("\n")
    for attrs, options in re.findall(r"<select([^>]*)>(.*?)</select>", page, flags=re.S):
        selected = re.search(r'<option value="([^"]*)"[^>]*selected', options)
        if " disabled" not in attrs and selected:
            data[re.search(r'name="([^"]+)"', attrs).group(1)] = selected.group(1)
    return data


def _errors(page: str) -> str:
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", page)))


def test_a_change_form_opened_before_another_save_is_refused_and_saves_nothing(admin_client, recipe, superuser):
    tab1 = _page_form(admin_client.get(_change_url(recipe)).content.decode())
    tab2 = _page_form(admin_client.get(_change_url(recipe)).content.decode())
    assert tab1["expected_version"] == tab2["expected_version"] == "1"

    spec1 = dict(json.loads(tab1["spec"]), stop_grace_s=90)
    response = admin_client.post(_change_url(recipe), dict(tab1, spec=json.dumps(spec1)), follow=True)
    assert response.redirect_chain[0][1] == 302
    assert "changed successfully" in response.content.decode()
    recipe.refresh_from_db()
    assert (recipe.version, recipe.spec["stop_grace_s"]) == (2, 90)
    saved_at = recipe.history.get(version=2).history_date

    spec2 = json.loads(tab2["spec"])
    spec2["roles"]["decode"]["port"] = 30011
    response = admin_client.post(_change_url(recipe), dict(tab2, spec=json.dumps(spec2)))
    assert response.status_code == 200
    text = _errors(response.content.decode())
    assert (
        "Recipe 'seed-v4-flash-pd' is at version 2, not 1: it was changed since you opened this page "
        f"(by sam-super at {saved_at:%Y-%m-%d %H:%M:%S} UTC); reload it to edit the current version."
    ) in text, text
    assert "changed successfully" not in text
    recipe.refresh_from_db()
    assert recipe.version == 2
    assert recipe.spec["stop_grace_s"] == 90
    assert recipe.spec["roles"]["decode"]["port"] == 30001
    assert recipe.history.count() == 2

    # Reloading gives a form of version 2, which saves the port change on top of the grace.
    tab2 = _page_form(admin_client.get(_change_url(recipe)).content.decode())
    assert tab2["expected_version"] == "2"
    spec2 = json.loads(tab2["spec"])
    spec2["roles"]["decode"]["port"] = 30011
    assert admin_client.post(_change_url(recipe), dict(tab2, spec=json.dumps(spec2))).status_code == 302
    recipe.refresh_from_db()
    assert (recipe.version, recipe.spec["stop_grace_s"], recipe.spec["roles"]["decode"]["port"]) == (3, 90, 30011)


def test_a_change_form_is_refused_after_a_save_through_the_services(admin_client, recipe, operator):
    tab = _page_form(admin_client.get(_change_url(recipe)).content.decode())
    recipe_update(recipe=recipe, user=operator, description="edited elsewhere")
    response = admin_client.post(_change_url(recipe), dict(tab, name="renamed-in-admin"))
    assert response.status_code == 200
    assert "is at version 2, not 1: it was changed since you opened this page (by oscar-operator at " in _errors(
        response.content.decode()
    )
    recipe.refresh_from_db()
    assert (recipe.name, recipe.description, recipe.version) == ("seed-v4-flash-pd", "edited elsewhere", 2)


def _history_url(recipe: Recipe, version: int) -> str:
    return reverse("admin:deployments_recipe_simple_history", args=[recipe.pk, recipe.history.get(version=version).history_id])


@pytest.fixture
def two_versions(recipe, superuser) -> Recipe:
    """The seed recipe with version 2 changing the startup timeout and the stop grace."""
    return recipe_update(recipe=recipe, user=superuser, spec=dict(recipe.spec, startup_timeout_s=2400, stop_grace_s=90))


def test_a_history_entry_shows_its_fields_disabled_and_the_current_version(admin_client, two_versions):
    page = admin_client.get(_history_url(two_versions, 1)).content.decode()
    for name in ("name", "description", "spec"):
        tag = re.search(rf'<(?:input|textarea)[^>]*name="{name}"[^>]*>', page).group(0)
        assert " disabled" in tag, tag
        assert re.search(r'class="[^"]*\bversion-value\b', tag), tag  # drawn as a read-only value
    for name in ("engine", "topology", "node"):
        tag = re.search(rf'<select[^>]*name="{name}"[^>]*>', page).group(0)
        assert " disabled" in tag, tag
        assert re.search(r'class="[^"]*\bversion-value\b', tag), tag
    assert _page_form(page)["expected_version"] == "2"
    assert ("The fields below are this version's values, shown read-only: Revert saves them as a new "
            "version of the recipe.") in _errors(page)
    css = re.search(r'<link rel="stylesheet" href="([^"]*admin-version\.css)"', page).group(1)
    assert "textarea.version-value:disabled" in b"".join(admin_client.get(css).streaming_content).decode()
    # the recipe's own change page keeps ordinary inputs
    change = admin_client.get(_change_url(two_versions)).content.decode()
    assert "version-value" not in change and "admin-version.css" not in change


def test_a_revert_in_admin_restores_exactly_the_version_whatever_fields_are_sent(admin_client, recipe, two_versions):
    v1 = recipe.history.get(version=1)
    url = _history_url(two_versions, 1)
    form = _page_form(admin_client.get(url).content.decode())
    edited = dict(v1.spec, startup_timeout_s=5)
    edited["roles"] = dict(edited["roles"], decode=dict(edited["roles"]["decode"], port=30011))
    response = admin_client.post(url, dict(form, name="sneaky-name", description="edited before revert",
                                           spec=json.dumps(edited), engine="vllm"))
    assert response.status_code == 302
    two_versions.refresh_from_db()
    assert two_versions.version == 3
    assert (two_versions.name, two_versions.description, two_versions.engine) == (v1.name, v1.description, v1.engine)
    assert two_versions.spec == v1.spec
    assert (two_versions.spec["stop_grace_s"], two_versions.spec["roles"]["decode"]["port"]) == (30, 30001)
    assert two_versions.history.get(version=3).history_change_reason == "Reverted to version 1 in admin"


def test_a_revert_page_opened_before_another_save_is_refused_and_saves_nothing(admin_client, two_versions, operator):
    url = _history_url(two_versions, 1)
    form = _page_form(admin_client.get(url).content.decode())
    recipe_update(recipe=two_versions, user=operator, description="edited elsewhere")
    response = admin_client.post(url, form)
    assert response.status_code == 200
    text = _errors(response.content.decode())
    assert ("Recipe 'seed-v4-flash-pd' is at version 3, not 2: it was changed since you opened this page "
            "(by oscar-operator at ") in text, text
    two_versions.refresh_from_db()
    assert (two_versions.version, two_versions.description, two_versions.spec["stop_grace_s"]) == (3, "edited elsewhere", 90)


def test_a_revert_whose_name_another_recipe_holds_now_names_the_way_out(admin_client, recipe, superuser):
    v1_name = recipe.name
    renamed = recipe_update(recipe=recipe, user=superuser, name="tp4-renamed", spec=dict(recipe.spec, stop_grace_s=90))
    ex = example_recipe("seed-v4-flash-pd")
    recipe_create(user=superuser, name=v1_name, description="", engine=ex["engine"], topology=ex["topology"],
                  node=renamed.node, spec=ex["spec"])
    url = _history_url(renamed, 1)
    response = admin_client.post(url, _page_form(admin_client.get(url).content.decode()))

    assert response.status_code == 200
    text = _errors(response.content.decode())
    assert (f"A recipe named '{v1_name}' already exists, so version 1 cannot be restored under its name here. "
            f"Restore it with the current name 'tp4-renamed' on the recipe's revert page, "
            f"/recipes/{renamed.pk}/revert/1/ (tick \"keep the current name\"), or with keep_name in the API.") in text
    renamed.refresh_from_db()
    assert (renamed.version, renamed.name) == (2, "tp4-renamed")
    # the way out it names works
    way_out = admin_client.post(f"/recipes/{renamed.pk}/revert/1/", {"expected_version": "2", "keep_name": "on"},
                                follow=True)
    assert "reverted to version 1 (now version 3)" in _errors(way_out.content.decode())
    renamed.refresh_from_db()
    assert (renamed.version, renamed.name, renamed.spec) == (3, "tp4-renamed", recipe.history.get(version=1).spec)


def test_a_version_page_shows_when_that_version_was_saved(admin_client, two_versions):
    from django.utils import formats, timezone

    v1 = two_versions.history.get(version=1)
    type(two_versions).objects.filter(pk=two_versions.pk).update(updated_at=v1.history_date.replace(year=2031))
    page = admin_client.get(_history_url(two_versions, 1)).content.decode()
    text = _errors(page)
    assert "Version saved at" in text and "Updated at" not in text
    saved = re.search(r'Version saved at:</label>\s*<div class="readonly">([^<]*)</div>', page).group(1)
    assert saved == formats.localize(timezone.template_localtime(v1.history_date))  # "Dec. 8, 2026, 12:24 a.m."
    assert re.fullmatch(r"[A-Z][a-z]+\.? \d{1,2}, \d{4}, \d{1,2}(:\d\d)? [ap]\.m\.|[A-Z][a-z]+\.? \d{1,2}, \d{4}, (noon|midnight)",
                        saved), saved
    created = re.search(r'Created at:</label>\s*<div class="readonly">([^<]*)</div>', page).group(1)
    assert created == formats.localize(timezone.template_localtime(two_versions.created_at))  # the same style
    assert "2031" not in text
    # the recipe's own change page keeps its "Updated at"
    assert "Updated at" in _errors(admin_client.get(_change_url(two_versions)).content.decode())


def test_a_version_of_a_deleted_recipe_refuses_to_revert_without_an_error_page(admin_client, two_versions):
    from deployments.models import Recipe as RecipeModel
    pk = two_versions.pk
    newest = RecipeModel.history.filter(id=pk).order_by("-history_date").first()
    delete = admin_client.post(reverse("admin:deployments_recipe_delete", args=[pk]), {"post": "yes"})
    assert delete.status_code == 302 and not RecipeModel.objects.filter(pk=pk).exists()
    for history_id in (RecipeModel.history.filter(id=pk).order_by("-history_date").first().history_id,
                       newest.history_id):
        url = reverse("admin:deployments_recipe_simple_history", args=[pk, history_id])
        page = admin_client.get(url)
        assert page.status_code == 200
        text = _errors(page.content.decode())
        assert ("This recipe was deleted: a deleted recipe cannot be brought back from its versions; "
                "create it anew.") in text
        assert 'name="_save"' not in page.content.decode() and "Press the 'Revert' button" not in text
        form = _page_form(page.content.decode())
        refused = admin_client.post(url, form)
        assert refused.status_code == 302
        assert refused["Location"] == reverse("admin:deployments_recipe_history", args=[pk])
        shown = _errors(admin_client.get(refused["Location"]).content.decode())
        assert "Not reverted: This recipe was deleted" in shown
        assert not RecipeModel.objects.filter(pk=pk).exists()
        assert RecipeModel.history.filter(id=pk).count() == 3


def _related_actions(page: str) -> list[str]:
    """The ids of the node widget's related-object links (add, change, delete, view) on ``page``."""
    return re.findall(r'id="((?:add|change|delete|view)_id_node)"', page)


def test_a_version_of_a_deleted_recipe_offers_no_node_actions(admin_client, two_versions):
    from deployments.models import Recipe as RecipeModel
    pk = two_versions.pk
    # the recipe's own change page offers them: the node can be edited from there
    assert {"add_id_node", "change_id_node", "delete_id_node"} <= set(
        _related_actions(admin_client.get(_change_url(two_versions)).content.decode()))
    assert admin_client.post(reverse("admin:deployments_recipe_delete", args=[pk]), {"post": "yes"}).status_code == 302
    for history_id in RecipeModel.history.filter(id=pk).values_list("history_id", flat=True):
        page = admin_client.get(reverse("admin:deployments_recipe_simple_history", args=[pk, history_id]))
        assert page.status_code == 200
        html = page.content.decode()
        assert _related_actions(html) == ["view_id_node"], history_id  # read-only: it may be looked at, no more
        assert re.search(r'<select[^>]*name="node"[^>]*disabled', html)


def test_a_version_of_a_live_recipe_offers_no_node_actions_either(admin_client, two_versions):
    # every version page is read-only (its form is a revert of exactly that version)
    assert _related_actions(admin_client.get(_history_url(two_versions, 1)).content.decode()) == ["view_id_node"]


@pytest.mark.parametrize("sent,shown", [
    ("", 'expected_version "" is not a version number (a whole number from 1)'),
    ("abc", 'expected_version "abc" is not a version number (a whole number from 1)'),
    ("0", 'expected_version "0" is not a version number (a whole number from 1)'),
    (None, "expected_version is missing: the edit form sends the version it was opened at"),
])
def test_a_change_form_without_a_version_number_is_refused_on_the_page(admin_client, recipe, sent, shown):
    form = _page_form(admin_client.get(_change_url(recipe)).content.decode())
    form.pop("expected_version")
    if sent is not None:
        form["expected_version"] = sent
    response = admin_client.post(_change_url(recipe), dict(form, description="typed in admin"))
    assert response.status_code == 200
    page = response.content.decode()
    errors = _errors(page.split('class="errorlist nonfield"', 1)[1].split("</ul>", 1)[0])
    assert shown in errors and "reload the page to edit the current version; nothing was saved." in errors
    assert "typed in admin" in page  # what was typed is kept
    recipe.refresh_from_db()
    assert (recipe.version, recipe.description) == (1, example_recipe("seed-v4-flash-pd")["description"])


def test_a_revert_form_without_a_version_number_is_refused_on_the_page(admin_client, two_versions):
    url = _history_url(two_versions, 1)
    form = _page_form(admin_client.get(url).content.decode())
    response = admin_client.post(url, dict(form, expected_version=""))
    assert response.status_code == 200
    assert 'expected_version "" is not a version number' in _errors(response.content.decode())
    two_versions.refresh_from_db()
    assert two_versions.version == 2
