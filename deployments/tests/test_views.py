"""Server-rendered pages: login, recipes (list, create/edit, validate partial, history, diff,
revert, dry-run), deployments and nodes, seen by each persona."""
from __future__ import annotations

import re

import json
import shlex

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from deployments.examples import example_recipe, local_node_facts_example
from deployments.models import Recipe
from deployments.nodes import node_register, seed_node_facts
from deployments.services import recipe_create, recipe_plan, recipe_update, secret_create
from deployments.tests.factories import deployment_row_create

SECRET_VALUE = "hf_ViewsTestSecretValue0123456789"


@pytest.fixture
def seed_node(db):
    return node_register(facts=seed_node_facts())


@pytest.fixture
def local_node(db):
    return node_register(facts=local_node_facts_example(cpu_count=4))


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator_client(operator) -> Client:
    return _client(operator)


@pytest.fixture
def viewer_client(viewer) -> Client:
    return _client(viewer)


@pytest.fixture
def outsider_client(outsider) -> Client:
    return _client(outsider)


def _example_create(name: str, *, user, node) -> Recipe:
    ex = example_recipe(name)
    return recipe_create(
        user=user,
        name=ex["name"],
        description=ex["description"],
        engine=ex["engine"],
        topology=ex["topology"],
        node=node,
        spec=ex["spec"],
    )


@pytest.fixture
def seed_pd(seed_node, operator) -> Recipe:
    return _example_create("seed-v4-flash-pd", user=operator, node=seed_node)


def _form_data(recipe_like: dict, node, **extra) -> dict:
    data = {
        "name": recipe_like["name"],
        "description": recipe_like.get("description", ""),
        "engine": recipe_like["engine"],
        "topology": recipe_like["topology"],
        "node": str(node.pk),
        "spec": json.dumps(recipe_like["spec"], indent=2),
    }
    data.update(extra)
    return data


def _html(response) -> str:
    return response.content.decode()


# --- login and roles ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url_name,kwargs",
    [
        ("deployments:recipe-list", {}),
        ("deployments:recipe-create", {}),
        ("deployments:deployment-list", {}),
        ("deployments:node-list", {}),
        ("deployments:node-detail", {"name": "seed-8gpu"}),
    ],
)
def test_it_redirects_anonymous_visitors_to_login(client, seed_node, url_name, kwargs):
    url = reverse(url_name, kwargs=kwargs)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


def test_it_sends_home_to_login_then_to_recipes(client, operator):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    login_page = client.get(response["Location"])
    assert login_page.status_code == 200
    assert 'name="csrfmiddlewaretoken"' in _html(login_page)
    response = client.post("/login/", {"username": "oscar-operator", "password": "correct-horse-battery"})
    assert response.status_code == 302
    assert client.get("/").headers["Location"] == "/recipes/"


def test_it_rejects_a_wrong_password(client, operator):
    response = client.post("/login/", {"username": "oscar-operator", "password": "wrong-password-123"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in _html(response)


def test_it_refuses_outsiders_everywhere(outsider_client, seed_pd):
    for url in [
        reverse("deployments:recipe-list"),
        reverse("deployments:recipe-detail", args=[seed_pd.pk]),
        reverse("deployments:recipe-dry-run", args=[seed_pd.pk]),
        reverse("deployments:recipe-history", args=[seed_pd.pk]),
        reverse("deployments:deployment-list"),
        reverse("deployments:node-list"),
    ]:
        assert outsider_client.get(url).status_code == 403, url


def test_it_shows_viewers_recipes_without_edit_buttons(viewer_client, seed_pd):
    listing = _html(viewer_client.get(reverse("deployments:recipe-list")))
    assert "seed-v4-flash-pd" in listing
    assert reverse("deployments:recipe-create") not in listing
    assert reverse("deployments:recipe-edit", args=[seed_pd.pk]) not in listing
    detail = viewer_client.get(reverse("deployments:recipe-detail", args=[seed_pd.pk]))
    assert detail.status_code == 200
    assert reverse("deployments:recipe-edit", args=[seed_pd.pk]) not in _html(detail)
    assert reverse("deployments:recipe-dry-run", args=[seed_pd.pk]) in _html(detail)
    history = _html(viewer_client.get(reverse("deployments:recipe-history", args=[seed_pd.pk])))
    assert "Revert to this version" not in history


def test_it_refuses_viewer_writes_with_403(viewer_client, seed_pd, seed_node):
    ex = example_recipe("seed-v4-flash-tp4")
    assert viewer_client.get(reverse("deployments:recipe-create")).status_code == 403
    assert viewer_client.post(reverse("deployments:recipe-create"), _form_data(ex, seed_node)).status_code == 403
    assert viewer_client.get(reverse("deployments:recipe-edit", args=[seed_pd.pk])).status_code == 403
    edit = _form_data(example_recipe("seed-v4-flash-pd"), seed_node, description="changed by a viewer")
    assert viewer_client.post(reverse("deployments:recipe-edit", args=[seed_pd.pk]), edit).status_code == 403
    assert viewer_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node)).status_code == 403
    assert viewer_client.post(reverse("deployments:recipe-revert", args=[seed_pd.pk, 1])).status_code == 403
    assert not Recipe.objects.filter(name="seed-v4-flash-tp4").exists()
    seed_pd.refresh_from_db()
    assert seed_pd.version == 1


def test_it_enforces_csrf_on_forms(operator, seed_node):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post(reverse("deployments:recipe-create"), _form_data(example_recipe("seed-v4-flash-tp4"), seed_node))
    assert response.status_code == 403
    assert not Recipe.objects.exists()


def test_it_shows_role_and_admin_link_to_every_role(viewer_client, outsider, admin_user):
    page = _html(viewer_client.get(reverse("deployments:recipe-list")))
    assert "vera-viewer" in page and ">viewer<" in page
    assert 'href="/admin/"' in page
    # Admin follows the role: a viewer reads recipes there but cannot add one or see secrets.
    assert viewer_client.get("/admin/").status_code == 200
    assert viewer_client.get("/admin/deployments/recipe/").status_code == 200
    assert viewer_client.get("/admin/deployments/recipe/add/").status_code == 403
    assert viewer_client.get("/admin/deployments/secret/").status_code == 403
    # A signed-in user without a role is sent to the admin login, never shown admin.
    response = _client(outsider).get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    # The admin role needs no is_staff flag.
    assert admin_user.is_staff is False
    assert _client(admin_user).get("/admin/deployments/secret/add/").status_code == 200


# --- create and edit ------------------------------------------------------------------------


def test_it_lets_an_operator_create_and_edit_a_recipe(operator_client, operator, seed_node):
    ex = example_recipe("seed-v4-flash-tp4")
    form = operator_client.get(reverse("deployments:recipe-create"))
    assert form.status_code == 200
    assert 'name="csrfmiddlewaretoken"' in _html(form)

    response = operator_client.post(reverse("deployments:recipe-create"), _form_data(ex, seed_node))
    recipe = Recipe.objects.get(name="seed-v4-flash-tp4")
    assert response.status_code == 302
    assert response["Location"] == reverse("deployments:recipe-detail", args=[recipe.pk])
    assert recipe.version == 1
    assert recipe.created_by == operator
    assert recipe.spec["roles"]["single"]["gpus"] == [0, 1, 2, 3]

    edit_page = _html(operator_client.get(reverse("deployments:recipe-edit", args=[recipe.pk])))
    assert "&quot;gpus&quot;: [" in edit_page  # the spec textarea holds pretty-printed JSON
    assert 'name="change_reason"' in edit_page

    spec = dict(ex["spec"], startup_timeout_s=2400)
    data = _form_data(dict(ex, spec=spec), seed_node, change_reason="longer start-up for cold caches",
                      expected_version="1")
    response = operator_client.post(reverse("deployments:recipe-edit", args=[recipe.pk]), data)
    assert response.status_code == 302
    recipe.refresh_from_db()
    assert recipe.version == 2
    assert recipe.spec["startup_timeout_s"] == 2400
    latest = recipe.history.order_by("-history_date").first()
    assert latest.history_change_reason == "longer start-up for cold caches"
    assert latest.history_user == operator
    detail = _html(operator_client.get(response["Location"]))
    assert "v2" in detail and "2400" in detail


def test_it_prefills_the_new_recipe_form_from_a_copy_and_refuses_a_malformed_source(operator_client, seed_pd):
    url = reverse("deployments:recipe-create")
    copy = _html(operator_client.get(url, {"from": seed_pd.pk}))
    assert f'value="{seed_pd.name}-copy"' in copy
    # "²".isdigit() is true, but int("²") raises: refused like any other malformed id, never a 500
    for raw, quoted in (("\u00b2", "'²'"), ("x", "'x'")):
        response = operator_client.get(url, {"from": raw})
        assert response.status_code == 400, raw
        assert escape(f"from must be a whole number between 1 and 2147483647, got {quoted}") in _html(response)
        assert "-copy" not in _html(response)


def test_it_reports_bad_json_with_line_and_column(operator_client, seed_node):
    ex = example_recipe("seed-v4-flash-tp4")
    data = _form_data(ex, seed_node, spec='{\n  "model": {"path": "/models/x"},\n}')
    response = operator_client.post(reverse("deployments:recipe-create"), data)
    assert response.status_code == 400
    assert "spec: invalid JSON at line 3 column 1" in _html(response)
    assert not Recipe.objects.exists()

    response = operator_client.post(reverse("deployments:recipe-create"), dict(data, spec="[1, 2]"))
    assert response.status_code == 400
    assert "must be a JSON object" in _html(response)

    response = operator_client.post(reverse("deployments:recipe-create"), dict(data, spec="[" * 100_000))
    assert response.status_code == 400
    assert "nested too deeply" in _html(response)

    huge = '{"model": {"path": "/models/x"}, "n": ' + "9" * 5000 + "}"
    for name, status in (("deployments:recipe-create", 400), ("deployments:recipe-validate", 200)):
        response = operator_client.post(reverse(name), dict(data, spec=huge))
        assert response.status_code == status, name
        assert "invalid JSON: Exceeds the limit (4300 digits)" in _html(response)
    assert not Recipe.objects.exists()

    deep = '{"model": ' * 40 + "1" + "}" * 40
    response = operator_client.post(reverse("deployments:recipe-create"), dict(data, spec=deep))
    assert response.status_code == 400
    assert "Nested more than 16 levels deep." in _html(response)


def test_it_shows_spec_errors_next_to_their_path(operator_client, seed_node):
    ex = example_recipe("seed-v4-flash-pd")
    ex["spec"]["roles"]["decode"]["gpus"] = [3, 4, 5, 6]  # GPU 3 is already prefill's
    ex["spec"]["roles"]["prefill"]["numa_node"] = 7
    response = operator_client.post(reverse("deployments:recipe-create"), _form_data(ex, seed_node))
    assert response.status_code == 400
    html = _html(response)
    assert "<code>spec.roles.prefill.numa_node</code>" in html
    assert "spec.roles.decode.gpus" in html or "spec.roles.prefill.gpus" in html
    assert not Recipe.objects.exists()


def test_it_puts_field_errors_on_the_field(operator_client, seed_pd, seed_node):
    ex = example_recipe("seed-v4-flash-pd")
    response = operator_client.post(reverse("deployments:recipe-create"), _form_data(ex, seed_node))
    assert response.status_code == 400
    assert "name: A recipe named &#x27;seed-v4-flash-pd&#x27; already exists." in _html(response)
    response = operator_client.post(reverse("deployments:recipe-create"), _form_data(ex, seed_node, name="Bad Name"))
    assert response.status_code == 400
    assert 'id="field-name"' in _html(response) and "has-error" in _html(response)


def test_it_refuses_an_edit_based_on_a_stale_version(operator_client, operator, seed_pd, seed_node):
    edit_page = _html(operator_client.get(reverse("deployments:recipe-edit", args=[seed_pd.pk])))
    assert 'name="expected_version" value="1"' in edit_page
    recipe_update(recipe=seed_pd, user=operator, description="someone else's edit")
    data = _form_data(example_recipe("seed-v4-flash-pd"), seed_node, description="mine", expected_version="1")
    response = operator_client.post(reverse("deployments:recipe-edit", args=[seed_pd.pk]), data)
    assert response.status_code == 409
    page = _html(response)
    assert "is at version 2, not 1" in page
    seed_pd.refresh_from_db()
    assert (seed_pd.version, seed_pd.description) == (2, "someone else's edit")
    # The refused form keeps what was typed but offers no save that would be refused again: the diff
    # from the version it holds to the current one, and a fresh edit of the current one.
    assert re.search(r'id="id_description">\s*mine</textarea>', page)
    assert re.search(r'<button type="submit" disabled[^>]*>Save as v3</button>', page), page
    history = reverse("deployments:recipe-history", args=[seed_pd.pk])
    assert f'href="{history}?a=1&amp;b=2">See what changed (v1 → v2)</a>' in page
    assert f'href="{reverse("deployments:recipe-edit", args=[seed_pd.pk])}">edit version 2</a>' in page


@pytest.mark.parametrize("sent,shown", [
    ("", 'expected_version &quot;&quot; is not a version number'),
    ("abc", 'expected_version &quot;abc&quot; is not a version number'),
    ("0", 'expected_version &quot;0&quot; is not a version number'),
    (" 1", 'expected_version &quot; 1&quot; is not a version number'),
    (None, "expected_version is missing"),
])
def test_it_refuses_an_edit_whose_expected_version_is_not_a_version_number(operator_client, seed_pd, seed_node,
                                                                            sent, shown):
    extra = {} if sent is None else {"expected_version": sent}
    data = _form_data(example_recipe("seed-v4-flash-pd"), seed_node, description="typed by me", **extra)
    response = operator_client.post(reverse("deployments:recipe-edit", args=[seed_pd.pk]), data)
    assert response.status_code == 400
    html = _html(response)
    errors = html.split('id="form-errors"', 1)[1].split("</ul>", 1)[0]
    assert shown in errors
    assert "reload the page to edit the current version; nothing was saved." in errors
    assert "typed by me</textarea>" in html  # what was typed is kept
    seed_pd.refresh_from_db()
    assert seed_pd.version == 1 and seed_pd.description != "typed by me"


def test_it_does_not_bump_the_version_of_an_unchanged_save(operator_client, seed_pd, seed_node):
    data = _form_data(example_recipe("seed-v4-flash-pd"), seed_node, expected_version="1")
    response = operator_client.post(reverse("deployments:recipe-edit", args=[seed_pd.pk]), data)
    assert response.status_code == 302
    seed_pd.refresh_from_db()
    assert seed_pd.version == 1


# --- the htmx validate partial --------------------------------------------------------------


def test_it_validates_and_previews_the_plan(operator_client, seed_node):
    ex = example_recipe("seed-v4-flash-pd")
    response = operator_client.post(
        reverse("deployments:recipe-validate"), _form_data(ex, seed_node), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    html = _html(response)
    assert "<html" not in html  # a fragment for htmx to swap in
    assert 'id="validate-ok"' in html
    for role in ("prefill", "decode", "router"):
        assert f'id="process-{role}-0"' in html
    assert "--base-gpu-id" in html or "CUDA_VISIBLE_DEVICES" in html
    assert not Recipe.objects.exists()  # validating never saves


def test_it_validates_and_lists_errors_per_path(operator_client, seed_node):
    ex = example_recipe("seed-v4-flash-pd")
    ex["spec"]["roles"]["prefill"]["gpus"] = [0, 1, 2, 99]
    response = operator_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node))
    assert response.status_code == 200
    html = _html(response)
    assert 'id="validate-errors"' in html
    assert "<code>spec.roles.prefill.gpus</code>" in html
    assert "99" in html

    response = operator_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node, spec="{"))
    assert response.status_code == 200
    assert "invalid JSON at line 1 column 2" in _html(response)


def test_validate_says_what_create_would_refuse_all_at_once(operator_client, operator, seed_node):
    ex = example_recipe("seed-v4-flash-pd")
    bad_name = _html(operator_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node, name="Bad Name!")))
    assert 'id="validate-ok"' not in bad_name
    assert "Use 1-63 lowercase letters" in bad_name
    # A bad name and a broken spec are both reported, by Validate and by Create.
    for url in ("deployments:recipe-validate", "deployments:recipe-create"):
        html = _html(operator_client.post(reverse(url), _form_data(ex, seed_node, name="Bad Name!", spec="{bad")))
        assert "Use 1-63 lowercase letters" in html and "invalid JSON at line 1 column 2" in html, url
    # A bad name and a spec error found by the recipe rules, too.
    ex["spec"]["roles"]["prefill"]["gpus"] = [0, 1, 2, 99]
    html = _html(operator_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node, name="Bad Name!")))
    assert "Use 1-63 lowercase letters" in html and "<code>spec.roles.prefill.gpus</code>" in html
    # A name another recipe has: Validate says so, as Create would; an edit keeps its own name.
    ex = example_recipe("seed-v4-flash-pd")
    recipe_create(user=operator, name=ex["name"], engine=ex["engine"], topology=ex["topology"], node=seed_node,
                  spec=ex["spec"])
    taken = _html(operator_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node)))
    assert f"A recipe named &#x27;{ex['name']}&#x27; already exists." in taken and 'id="validate-ok"' not in taken
    editing = _html(operator_client.post(reverse("deployments:recipe-validate"),
                                         _form_data(ex, seed_node, expected_version="1")))
    assert 'id="validate-ok"' in editing


# --- history, diff, revert ------------------------------------------------------------------


def _edit_twice(recipe: Recipe, user) -> Recipe:
    spec = dict(recipe.spec, startup_timeout_s=2400)
    recipe = recipe_update(recipe=recipe, user=user, change_reason="slower disks", spec=spec)
    decode = dict(recipe.spec["roles"]["decode"], port=30011)
    spec = dict(recipe.spec, roles=dict(recipe.spec["roles"], decode=decode))
    return recipe_update(recipe=recipe, user=user, change_reason="move decode port", spec=spec)


def test_it_lists_versions_and_diffs_v1_against_v3(viewer_client, seed_pd, operator):
    recipe = _edit_twice(seed_pd, operator)
    assert recipe.version == 3
    history = viewer_client.get(reverse("deployments:recipe-history", args=[recipe.pk]))
    html = _html(history)
    assert history.status_code == 200
    for text in ("v1", "v2", "v3", "slower disks", "move decode port", "oscar-operator"):
        assert text in html

    diff = viewer_client.get(
        reverse("deployments:recipe-diff", args=[recipe.pk]), {"a": 1, "b": 3}, HTTP_HX_REQUEST="true"
    )
    assert diff.status_code == 200
    html = _html(diff)
    assert "<html" not in html
    assert "spec.roles.decode.port" in html
    assert "spec.startup_timeout_s" in html
    assert "<code>30001</code>" in html and "<code>30011</code>" in html
    assert "spec.roles.prefill" not in html

    # Without htmx the same diff is part of the full history page.
    page = viewer_client.get(reverse("deployments:recipe-diff", args=[recipe.pk]), {"a": 1, "b": 3}, follow=True)
    assert "spec.roles.decode.port" in _html(page)
    assert "<html" in _html(page)


def test_it_answers_404_for_a_missing_version_and_400_for_a_malformed_one(viewer_client, seed_pd):
    url = reverse("deployments:recipe-diff", args=[seed_pd.pk])
    assert viewer_client.get(url, {"a": 1, "b": 9}, HTTP_HX_REQUEST="true").status_code == 404
    assert viewer_client.get(url, {"a": "x", "b": 1}, HTTP_HX_REQUEST="true").status_code == 400
    dry_run = reverse("deployments:recipe-dry-run", args=[seed_pd.pk])
    assert viewer_client.get(dry_run, {"version": 5}).status_code == 404


def test_it_reverts_after_confirmation(operator_client, seed_pd, operator):
    recipe = _edit_twice(seed_pd, operator)
    url = reverse("deployments:recipe-revert", args=[recipe.pk, 1])
    confirm = operator_client.get(url)
    assert confirm.status_code == 200
    html = _html(confirm)
    assert "Revert to v1" in html and 'method="post"' in html
    assert "spec.roles.decode.port" in html
    recipe.refresh_from_db()
    assert recipe.version == 3  # GET changes nothing

    assert 'name="expected_version" value="3"' in html
    response = operator_client.post(url, {"expected_version": "3"})
    assert response.status_code == 302
    recipe.refresh_from_db()
    assert recipe.version == 4
    assert recipe.spec == recipe.history.get(version=1).spec
    history = _html(operator_client.get(response["Location"]))
    assert "Reverted to version 1" in history
    assert "reverted to version 1 (now version 4)" in history

    # Confirming a page that is out of date (the recipe is now v4) changes nothing.
    response = operator_client.post(url, {"expected_version": "3"}, follow=True)
    assert "is at version 4, not 3" in _html(response)
    recipe.refresh_from_db()
    assert recipe.version == 4


def test_a_revert_with_its_version_given_twice_restores_nothing_and_says_why(operator_client, seed_pd, operator):
    recipe = _edit_twice(seed_pd, operator)
    url = reverse("deployments:recipe-revert", args=[recipe.pk, 1])

    # a hand-made form that repeats the field: its last value used to be taken silently
    response = operator_client.post(url, {"expected_version": ["2", "3"]}, follow=True)

    assert response.redirect_chain == [(reverse("deployments:recipe-history", args=[recipe.pk]), 302)]
    assert "Version 1 cannot be restored: expected_version: is given 2 times (2, 3): give it once" in _html(response)
    recipe.refresh_from_db()
    assert recipe.version == 3
    assert operator_client.post(url, {"expected_version": "3"}).status_code == 302
    recipe.refresh_from_db()
    assert recipe.version == 4


# --- dry-run --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["seed-v4-flash-pd", "seed-v4-flash-tp4", "local-sim-pd"])
def test_it_shows_the_exact_argv_of_the_plan(viewer_client, operator, seed_node, local_node, name):
    node = seed_node if example_recipe(name)["node"] == "seed-8gpu" else local_node
    recipe = _example_create(name, user=operator, node=node)
    plan = recipe_plan(recipe=recipe)
    response = viewer_client.get(reverse("deployments:recipe-dry-run", args=[recipe.pk]))
    assert response.status_code == 200
    html = _html(response)
    assert plan.processes
    for process in plan.processes:
        assert escape(shlex.join(process.argv)) in html
        for item in process.argv:
            assert f"<li><code>{escape(item)}</code></li>" in html
        assert escape(process.health_url) in html
        for key, value in process.env_redacted.items():
            assert f'<td class="mono">{escape(key)}</td><td class="mono">{escape(value)}' in html
    assert f"/api/recipes/{recipe.pk}/dry-run/" in html


def test_it_shows_pinning_and_gpus_of_each_process(viewer_client, seed_pd):
    html = _html(viewer_client.get(reverse("deployments:recipe-dry-run", args=[seed_pd.pk])))
    plan = recipe_plan(recipe=seed_pd)
    prefill, decode = plan.process("prefill"), plan.process("decode")
    assert prefill.gpu_ids == [0, 1, 2, 3] and decode.gpu_ids == [4, 5, 6, 7]
    assert '<td class="mono">0, 1, 2, 3</td>' in html
    assert '<td class="mono">4, 5, 6, 7</td>' in html
    assert f'<td class="mono">{prefill.cpus} <span class="muted small">(32 CPUs)</span>' in html
    assert f'<td class="mono">{decode.cpus} <span class="muted small">(32 CPUs)</span>' in html
    assert prefill.pin_method == "numactl"
    assert f"127.0.0.1:{prefill.ports['http']}" in html or f"{prefill.host}:{prefill.ports['http']}" in html


def test_it_renders_an_older_version_on_request(viewer_client, seed_pd, operator):
    recipe = _edit_twice(seed_pd, operator)
    v1 = _html(viewer_client.get(reverse("deployments:recipe-dry-run", args=[recipe.pk]), {"version": 1}))
    v3 = _html(viewer_client.get(reverse("deployments:recipe-dry-run", args=[recipe.pk])))
    assert escape(shlex.join(recipe_plan(recipe=recipe, version=1).process("decode").argv)) in v1
    assert escape(shlex.join(recipe_plan(recipe=recipe).process("decode").argv)) in v3
    assert "30011" in v3 and "30011" not in v1


def test_it_shows_secret_names_but_never_secret_values(operator_client, admin_user, seed_node, operator):
    secret_create(user=admin_user, name="hf-token", value=SECRET_VALUE)
    ex = example_recipe("seed-v4-flash-pd")
    ex["spec"]["secrets"] = {"HF_TOKEN": "hf-token"}
    response = operator_client.post(reverse("deployments:recipe-create"), _form_data(ex, seed_node))
    assert response.status_code == 302, _html(response)
    recipe = Recipe.objects.get(name=ex["name"])
    deployment_row_create(recipe=recipe)
    pages = [
        reverse("deployments:recipe-list"),
        reverse("deployments:recipe-detail", args=[recipe.pk]),
        reverse("deployments:recipe-edit", args=[recipe.pk]),
        reverse("deployments:recipe-history", args=[recipe.pk]),
        reverse("deployments:recipe-dry-run", args=[recipe.pk]),
        reverse("deployments:deployment-list"),
        reverse("deployments:node-detail", args=[seed_node.name]),
    ]
    for url in pages:
        response = operator_client.get(url)
        assert response.status_code == 200, url
        assert SECRET_VALUE not in _html(response), url
    dry_run = _html(operator_client.get(reverse("deployments:recipe-dry-run", args=[recipe.pk])))
    assert "HF_TOKEN" in dry_run and "***redacted***" in dry_run and "from secret hf-token" in dry_run
    preview = operator_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node, name="other"))
    assert "HF_TOKEN" in _html(preview) and SECRET_VALUE not in _html(preview)


def test_it_explains_a_plan_that_no_longer_fits_the_node(viewer_client, seed_pd, seed_node):
    seed_node.gpus.filter(index__gte=4).delete()
    response = viewer_client.get(reverse("deployments:recipe-dry-run", args=[seed_pd.pk]))
    assert response.status_code == 200
    html = _html(response)
    assert 'id="plan-errors"' in html
    assert "spec.roles.decode.gpus" in html


# --- deployments and nodes ------------------------------------------------------------------


def test_it_explains_the_empty_deployment_list(viewer_client):
    response = viewer_client.get(reverse("deployments:deployment-list"))
    assert response.status_code == 200
    assert "No deployments yet." in _html(response)
    assert "node agent" in _html(response)


def test_it_lists_deployment_rows(viewer_client, seed_pd):
    deployment = deployment_row_create(recipe=seed_pd)
    html = _html(viewer_client.get(reverse("deployments:deployment-list")))
    assert "seed-v4-flash-pd" in html
    assert f"<td>{deployment.pk}</td>" in html
    assert '<span class="tag ok" data-status data-stale-label="{text} (as last seen {at})">ready</span>' in html


def test_it_lists_nodes_with_queue_and_agent_status(viewer_client, seed_node):
    html = _html(viewer_client.get(reverse("deployments:node-list")))
    assert "seed-8gpu" in html
    assert "node.seed-8gpu" in html
    assert "offline" in html
    assert '<td class="num" data-gpu-status="found">8</td>' in html  # GPUs
    assert '<td class="num">503.3</td>' in html  # 540460679168 bytes in GiB


def test_it_shows_gpus_numa_nodes_and_tools_of_a_node(viewer_client, seed_node):
    from deployments.nodes import node_heartbeat

    node_heartbeat(name="seed-8gpu", pid=4242)
    response = viewer_client.get(reverse("deployments:node-detail", args=["seed-8gpu"]))
    assert response.status_code == 200
    html = _html(response)
    assert "Memory (GiB)" in html
    assert "NVIDIA RTX PRO 6000 Blackwell Server Edition" in html
    assert '<td class="num">95.6</td>' in html  # 102641958912 bytes = 95.6 GiB
    assert "00000000:18:00.0" in html
    assert '<td class="mono">0-31</td>' in html and '<td class="mono">32-63</td>' in html
    assert '<td class="mono">0, 1, 2, 3</td>' in html  # GPUs attached to NUMA node 0
    assert "/usr/bin/numactl" in html
    assert "node.seed-8gpu" in html
    assert "agent online" in html and "pid 4242" in html
    assert viewer_client.get(reverse("deployments:node-detail", args=["nope"])).status_code == 404


def test_it_never_shows_tokens_or_users_to_a_viewer_in_admin(viewer_client, admin_user):
    from rest_framework.authtoken.models import Token

    key = Token.objects.create(user=admin_user).key
    assert viewer_client.get("/admin/authtoken/tokenproxy/").status_code == 403
    for url in ("/admin/authtoken/tokenproxy/", "/admin/authtoken/token/", "/admin/auth/user/",
                f"/admin/auth/user/{admin_user.pk}/change/", "/admin/auth/group/"):
        response = viewer_client.get(url)
        assert response.status_code in (403, 404), url
        assert key not in response.content.decode()
    index = viewer_client.get("/admin/").content.decode()
    assert "authtoken" not in index and "/admin/auth/" not in index


# --- recipe form: examples and reference ------------------------------------------------------


def test_it_offers_the_example_recipes_on_the_new_recipe_form(operator_client, seed_node):
    response = operator_client.get(reverse("deployments:recipe-create"))
    html = _html(response)
    assert response.status_code == 200
    assert '<select id="example-pick">' in html
    assert '<option value="seed-v4-flash-pd">seed-v4-flash-pd (sglang, pd, node seed-8gpu)</option>' in html
    start = html.index('<script id="recipe-examples" type="application/json">') + len(
        '<script id="recipe-examples" type="application/json">')
    examples = {e["name"]: e for e in json.loads(html[start:html.index("</script>", start)])}
    assert list(examples) == ["seed-v4-flash-pd", "seed-v4-flash-tp4", "local-sim-pd", "local-llamacpp", "local-sim-single"]
    seed = examples["seed-v4-flash-pd"]
    assert (seed["engine"], seed["topology"], seed["node"], seed["node_name"]) == ("sglang", "pd", seed_node.pk, "seed-8gpu")
    assert json.loads(seed["spec"]) == example_recipe("seed-v4-flash-pd")["spec"]
    # No "local" node is registered in this test: the page says so instead of guessing one.
    assert examples["local-sim-pd"]["node"] is None
    assert "docs/recipes.md" in html


def test_it_puts_the_key_rules_and_the_reference_in_the_spec_help(operator_client, seed_node, settings):
    settings.CEILING_MODEL_ROOTS = ["/models", "/srv/weights"]
    html = _html(operator_client.get(reverse("deployments:recipe-create")))
    help_start = html.index('id="field-spec"')
    help_text = html[help_start:html.index("</div>", html.index('class="help"', help_start))]
    assert "under a model root (/models, /srv/weights)" in help_text
    assert escape('"allow_cross_numa": true') in help_text
    assert escape('{"ENV_NAME": "secret-name"}') in help_text
    assert "docs/recipes.md" in help_text


def test_it_does_not_offer_examples_when_editing(operator_client, seed_pd):
    html = _html(operator_client.get(reverse("deployments:recipe-edit", args=[seed_pd.pk])))
    assert "example-pick" not in html and "recipe-examples" not in html


# --- request logging ----------------------------------------------------------------------------


def _console_handler():
    """The console handler settings.LOGGING installs on the root logger (the one web.log gets)."""
    import logging

    from controlplane.logging import RedactSecretsFilter

    return next(h for h in logging.getLogger().handlers if any(isinstance(f, RedactSecretsFilter) for f in h.filters))


def test_it_logs_a_403_as_one_line_without_a_traceback(viewer_client, seed_node, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="django.request")
    response = viewer_client.post(reverse("deployments:recipe-create"), {"name": "x"})
    assert response.status_code == 403
    records = [r for r in caplog.records if r.name == "django.request"]
    assert [(r.levelname, r.status_code, r.exc_info) for r in records] == [("WARNING", 403, None)]
    assert records[0].getMessage() == (
        "Forbidden (Permission denied): /recipes/new/ [PermissionDenied: This needs the operator role; you are a viewer.]")
    formatted = _console_handler().format(records[0])
    assert "\n" not in formatted and "Traceback" not in formatted


def test_it_keeps_the_traceback_of_a_server_error(rf, caplog):
    import logging

    from django.http import HttpResponse
    from django.utils.log import log_response

    caplog.set_level(logging.INFO, logger="django.request")
    try:
        raise RuntimeError("engine table corrupt")
    except RuntimeError as exc:
        log_response("Internal Server Error: %s", "/x/", response=HttpResponse(status=500),
                     request=rf.get("/x/"), exception=exc)
    record = next(r for r in caplog.records if r.name == "django.request")
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    formatted = _console_handler().format(record)
    assert "Traceback (most recent call last)" in formatted and "RuntimeError: engine table corrupt" in formatted


def test_the_name_box_says_how_long_a_name_may_be(operator_client):
    # The box stops taking characters at 63 (its maxlength); its help says so, so nothing is cut unseen.
    page = _html(operator_client.get(reverse("deployments:recipe-create")))
    assert 'maxlength="63"' in page
    assert ("1–63 lowercase letters, digits, &#x27;.&#x27;, &#x27;_&#x27; or &#x27;-&#x27;, starting with a letter "
            "or digit (the box stops at 63)") in page
