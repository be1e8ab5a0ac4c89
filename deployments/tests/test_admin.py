"""Django admin of the deployments app: every model's pages load, recipe history (with
versions, users, change reasons) is visible and saves go through the services, and a secret's
value never appears in any admin page."""
from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from deployments.examples import example_recipe
from deployments.models import Deployment, Gpu, Node, NumaNode, ProcessEvent, Recipe, Secret, ServerProcess
from deployments.nodes import node_register, seed_node_facts
from deployments.services import recipe_create, recipe_diff, recipe_revert, recipe_update, secret_create
from deployments.tests.factories import deployment_row_create

SECRET_VALUE = "hf_AdminTestSecretValue9876543210"


@pytest.fixture
def superuser(db) -> User:
    return User.objects.create_superuser("sam-super", "sam@example.test", "correct-horse-battery")


@pytest.fixture
def admin_client(superuser) -> Client:
    client = Client()
    client.force_login(superuser)
    return client


@pytest.fixture
def seed_node(db) -> Node:
    return node_register(facts=seed_node_facts())


@pytest.fixture
def recipe(seed_node, superuser) -> Recipe:
    ex = example_recipe("seed-v4-flash-pd")
    return recipe_create(
        user=superuser,
        name=ex["name"],
        description=ex["description"],
        engine=ex["engine"],
        topology=ex["topology"],
        node=seed_node,
        spec=ex["spec"],
    )


@pytest.fixture
def rows(recipe, superuser) -> dict:
    """One row of every model of the app."""
    deployment = deployment_row_create(recipe=recipe)
    process = deployment.processes.get()
    event = ProcessEvent.objects.create(deployment=deployment, process=process, kind="ready", message="health ok")
    secret = secret_create(user=superuser, name="hf-token", value=SECRET_VALUE)
    node = recipe.node
    return {
        Node: node,
        NumaNode: node.numa_nodes.first(),
        Gpu: node.gpus.first(),
        Secret: secret,
        Recipe: recipe,
        Deployment: deployment,
        ServerProcess: process,
        ProcessEvent: event,
    }


def _admin_url(model, view: str, *args) -> str:
    return reverse(f"admin:deployments_{model._meta.model_name}_{view}", args=args)


MODELS = [Node, NumaNode, Gpu, Secret, Recipe, Deployment, ServerProcess, ProcessEvent]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_it_loads_changelist_change_and_history_pages(admin_client, rows, model):
    obj = rows[model]
    for url in (
        _admin_url(model, "changelist"),
        _admin_url(model, "change", obj.pk),
        _admin_url(model, "history", obj.pk),
    ):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert SECRET_VALUE not in response.content.decode(), url


@pytest.mark.parametrize("model", [Node, Secret, Recipe], ids=lambda m: m.__name__)
def test_it_loads_the_add_page_of_editable_models(admin_client, rows, model):
    assert admin_client.get(_admin_url(model, "add")).status_code == 200


@pytest.mark.parametrize("model", [Deployment, ServerProcess, ProcessEvent], ids=lambda m: m.__name__)
def test_it_keeps_agent_owned_rows_read_only(admin_client, rows, model):
    assert admin_client.get(_admin_url(model, "add")).status_code == 403
    page = admin_client.get(_admin_url(model, "change", rows[model].pk)).content.decode()
    assert 'name="_save"' not in page


def test_it_shows_server_processes_inline_on_a_deployment(admin_client, rows):
    page = admin_client.get(_admin_url(Deployment, "change", rows[Deployment].pk)).content.decode()
    assert "Server processes" in page or "server process" in page.lower()
    assert "4242" in page  # the process's pid


def test_it_shows_gpus_and_numa_nodes_inline_on_a_node(admin_client, seed_node):
    page = admin_client.get(_admin_url(Node, "change", seed_node.pk)).content.decode()
    assert "00000000:18:00.0" in page
    assert "32-63" in page
    # discovered rows: shown, not fields to edit, and no row to add or delete by hand
    assert 'value="32-63"' not in page and 'name="gpus-0-pci_bus_id"' not in page
    assert 'name="gpus-0-DELETE"' not in page and 'name="numa_nodes-0-DELETE"' not in page
    for prefix in ("gpus", "numa_nodes"):  # no new form: admin's script offers "Add another" below this maximum
        assert f'name="{prefix}-MAX_NUM_FORMS" value="0"' in page


@pytest.mark.parametrize("model", [Gpu, NumaNode], ids=lambda m: m.__name__)
def test_it_offers_no_add_or_edit_of_discovered_gpu_and_numa_rows(admin_client, rows, model):
    changelist = admin_client.get(_admin_url(model, "changelist"))
    assert changelist.status_code == 200 and _admin_url(model, "add") not in changelist.content.decode()
    assert admin_client.get(_admin_url(model, "add")).status_code == 403
    change = admin_client.get(_admin_url(model, "change", rows[model].pk))
    assert change.status_code == 200 and 'name="_save"' not in change.content.decode()  # view only
    assert admin_client.post(_admin_url(model, "change", rows[model].pk), {"index": 99}).status_code == 403
    assert "delete_selected" not in changelist.content.decode()  # no bulk delete of hardware facts
    bulk = admin_client.post(_admin_url(model, "changelist"), {"action": "delete_selected",
                                                               "_selected_action": [rows[model].pk]})
    assert model.objects.filter(pk=rows[model].pk).exists() and bulk.status_code in (200, 302)


def test_a_node_with_its_discovered_rows_can_still_be_deleted_in_admin(admin_client, db):
    node = node_register(facts=seed_node_facts())
    assert node.gpus.exists() and node.numa_nodes.exists()
    page = admin_client.get(_admin_url(Node, "delete", node.pk)).content.decode()
    assert "permission to delete" not in page
    assert admin_client.post(_admin_url(Node, "delete", node.pk), {"post": "yes"}).status_code == 302
    assert not Node.objects.filter(pk=node.pk).exists()
    assert not Gpu.objects.filter(node_id=node.pk).exists() and not NumaNode.objects.filter(node_id=node.pk).exists()


def test_it_shows_recipe_history_edit_twice_diff_and_revert(admin_client, recipe, superuser):
    v2 = recipe_update(recipe=recipe, user=superuser, change_reason="slower disks", spec=dict(recipe.spec, startup_timeout_s=2400))
    decode = dict(v2.spec["roles"]["decode"], port=30011)
    v3 = recipe_update(
        recipe=v2, user=superuser, change_reason="move decode port", spec=dict(v2.spec, roles=dict(v2.spec["roles"], decode=decode))
    )
    paths = {row["path"] for row in recipe_diff(recipe=v3, a=1, b=3)}
    assert paths == {"spec.startup_timeout_s", "spec.roles.decode.port"}
    v4 = recipe_revert(recipe=v3, user=superuser, version=1)
    assert v4.version == 4 and v4.spec == recipe.spec

    page = admin_client.get(_admin_url(Recipe, "history", recipe.pk)).content.decode()
    for text in ("slower disks", "move decode port", "Reverted to version 1", "sam-super"):
        assert text in page
    history_ids = list(recipe.history.order_by("version").values_list("history_id", flat=True))
    assert len(history_ids) == 4
    for history_id in history_ids:
        assert reverse("admin:deployments_recipe_simple_history", args=[recipe.pk, history_id]) in page


def _recipe_post(recipe: Recipe, spec: dict, **extra) -> dict:
    data = {
        "name": recipe.name,
        "description": recipe.description,
        "engine": recipe.engine,
        "topology": recipe.topology,
        "node": str(recipe.node_id),
        "spec": json.dumps(spec),
        # the version the change form was opened at, as the page sends it
        "expected_version": str(Recipe.objects.get(pk=recipe.pk).version),
    }
    data.update(extra)
    return data


def test_it_saves_recipe_edits_in_admin_as_new_versions(admin_client, recipe, superuser):
    spec = dict(recipe.spec, startup_timeout_s=900)
    response = admin_client.post(_admin_url(Recipe, "change", recipe.pk), _recipe_post(recipe, spec))
    assert response.status_code == 302
    recipe.refresh_from_db()
    assert recipe.version == 2
    assert recipe.spec["startup_timeout_s"] == 900
    latest = recipe.history.order_by("-history_date").first()
    assert latest.history_change_reason == "Edited in admin"
    assert latest.history_user == superuser


def test_it_shows_spec_errors_in_the_admin_form(admin_client, recipe):
    spec = json.loads(json.dumps(recipe.spec))
    spec["roles"]["decode"]["gpus"] = [4, 5, 6, 42]
    response = admin_client.post(_admin_url(Recipe, "change", recipe.pk), _recipe_post(recipe, spec))
    assert response.status_code == 200
    assert "spec.roles.decode.gpus" in response.content.decode()
    response = admin_client.post(_admin_url(Recipe, "change", recipe.pk), dict(_recipe_post(recipe, spec), spec="{oops"))
    assert response.status_code == 200
    assert "invalid JSON at line 1 column 2" in response.content.decode()
    recipe.refresh_from_db()
    assert recipe.version == 1


def test_it_reverts_from_an_admin_history_entry_as_a_new_version(admin_client, recipe, superuser):
    original = json.loads(json.dumps(recipe.spec))
    recipe_update(recipe=recipe, user=superuser, spec=dict(recipe.spec, startup_timeout_s=2400))
    v1 = recipe.history.get(version=1)
    url = reverse("admin:deployments_recipe_simple_history", args=[recipe.pk, v1.history_id])
    form_page = admin_client.get(url)
    assert form_page.status_code == 200
    response = admin_client.post(url, _recipe_post(recipe, original))
    assert response.status_code == 302
    recipe.refresh_from_db()
    assert recipe.version == 3
    assert recipe.spec["startup_timeout_s"] == original["startup_timeout_s"]
    assert recipe.history.order_by("-history_date").first().history_change_reason == "Reverted to version 1 in admin"


def test_it_never_renders_a_secret_value(admin_client, rows):
    secret = rows[Secret]
    for url in (
        _admin_url(Secret, "changelist"),
        _admin_url(Secret, "change", secret.pk),
        _admin_url(Secret, "history", secret.pk),
        _admin_url(Secret, "delete", secret.pk),
        _admin_url(Secret, "add"),
        f"{_admin_url(Secret, 'changelist')}?q={SECRET_VALUE[:12]}",
    ):
        page = admin_client.get(url).content.decode()
        assert SECRET_VALUE not in page, url
        assert SECRET_VALUE[3:15] not in page, url


def test_it_treats_the_secret_value_as_write_only(admin_client, db):
    response = admin_client.post(_admin_url(Secret, "add"), {"name": "no-value", "description": ""})
    assert response.status_code == 200
    assert "A value is required for a new secret." in response.content.decode()

    response = admin_client.post(_admin_url(Secret, "add"), {"name": "hf-token", "description": "hub", "value": SECRET_VALUE})
    assert response.status_code == 302
    secret = Secret.objects.get(name="hf-token")
    assert secret.plaintext() == SECRET_VALUE

    # A blank value keeps the stored one; a new value replaces it.
    response = admin_client.post(_admin_url(Secret, "change", secret.pk), {"description": "hub token", "value": ""})
    assert response.status_code == 302
    secret.refresh_from_db()
    assert (secret.plaintext(), secret.description) == (SECRET_VALUE, "hub token")
    response = admin_client.post(_admin_url(Secret, "change", secret.pk), {"description": "hub token", "value": "hf_rotated0123456789abcdef"})
    assert response.status_code == 302
    secret.refresh_from_db()
    assert secret.plaintext() == "hf_rotated0123456789abcdef"
    history = admin_client.get(_admin_url(Secret, "history", secret.pk)).content.decode()
    assert "hf_rotated" not in history and SECRET_VALUE not in history


def test_a_viewer_may_read_a_history_entry_but_not_send_its_revert_form(client, recipe, superuser, viewer, operator):
    original = json.loads(json.dumps(recipe.spec))
    recipe_update(recipe=recipe, user=superuser, spec=dict(recipe.spec, startup_timeout_s=2400))
    url = reverse("admin:deployments_recipe_simple_history", args=[recipe.pk, recipe.history.get(version=1).history_id])
    viewer.is_staff = True
    viewer.save(update_fields=["is_staff"])
    client.force_login(viewer)
    assert client.get(url).status_code == 200
    assert client.post(url, _recipe_post(recipe, dict(original, startup_timeout_s=5))).status_code == 403
    recipe.refresh_from_db()
    assert (recipe.version, recipe.spec["startup_timeout_s"]) == (2, 2400)
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    client.force_login(operator)
    assert client.post(url, _recipe_post(recipe, original)).status_code == 302
    recipe.refresh_from_db()
    assert recipe.version == 3


def test_the_admin_history_lists_each_version_s_changes_by_path_in_json(admin_client, recipe, superuser):
    v2 = recipe_update(recipe=recipe, user=superuser, change_reason="slower disks",
                       spec=dict(recipe.spec, startup_timeout_s=2400))
    decode = dict(v2.spec["roles"]["decode"], port=30011)
    recipe_update(recipe=v2, user=superuser, change_reason="move decode port", description="décode sur 30011",
                  spec=dict(v2.spec, roles=dict(v2.spec["roles"], decode=decode)))
    page = admin_client.get(_admin_url(Recipe, "history", recipe.pk)).content.decode()
    changes = [re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", "", item))).strip()
               for item in re.findall(r"<li>\s*<strong>.*?</li>", page, flags=re.S)]
    old_timeout = json.dumps(recipe.spec.get("startup_timeout_s"))
    old_port = json.dumps(recipe.spec["roles"]["decode"]["port"])
    assert f"spec.startup_timeout_s: {old_timeout} → 2400" in changes, changes
    assert f"spec.roles.decode.port: {old_port} → 30011" in changes, changes
    assert f'description: {json.dumps(recipe.description)} → "décode sur 30011"' in changes, changes
    assert not any("{'" in c or "'roles'" in c for c in changes), changes  # no Python dict text
