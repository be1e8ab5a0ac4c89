"""A recipe name saved before a stored secret's value was refused in names still holds it: every
read that names the recipe shows the value masked, on the recipe's own reads, its deployments',
its sweeps' and runs' (name, snapshot, served model name made of it) and the wall, in the API, the
pages, the admin (a run's page included) and the demo's recipe list, for viewers as for admins.
Each read is one row of :data:`READS`; a new one is added there. A sweep named after such a recipe
is stored with the value masked, and the dry-run card's served model name masks a value too."""
from __future__ import annotations

import html
import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_create
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.redaction import REDACTED
from deployments.examples import example_recipe
from deployments.models import Deployment, Recipe, Secret
from deployments.services import secret_update
from deployments.tests.factories import deployment_row_create, recipe_row_create, secret_api_store, seed_node_create

pytestmark = pytest.mark.django_db

# A value a recipe name could hold: lowercase letters, digits and '-'.
VALUE = "k9x-prod-7c1e9a3b5d2f"
OLD_NAME = f"llm-{VALUE}"
NEW_NAME = f"llm2-{VALUE}"


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def stored(admin_api) -> dict[str, int]:
    """Rows written straight to the tables (as saved before names were checked): a recipe named
    with the value at version 1 and renamed (still holding it) at version 2, a deployment of
    version 1, a finished sweep of it named after the recipe with its snapshot and served model
    name made of the name, and a run of that sweep; then the secret holding the value."""
    node = seed_node_create()
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    recipe = recipe_row_create(node=node, name=OLD_NAME, topology="pd", engine="sglang", spec=spec)
    deployment = deployment_row_create(recipe=recipe)
    Deployment.objects.filter(pk=deployment.pk).update(recipe_name=OLD_NAME)
    recipe.name = NEW_NAME
    recipe.version = 2
    recipe.save()
    snapshot = {"deployment_id": deployment.pk, "recipe": OLD_NAME, "recipe_id": recipe.pk, "recipe_version": 1,
                "engine": "sglang", "topology": "pd"}
    sweep = BenchmarkSweep.objects.create(
        deployment=deployment, name=f"{OLD_NAME} c=1 16/16", served_model_name=OLD_NAME, snapshot=snapshot,
        status="done", grid={"concurrency": [1], "lengths": [[16, 16]]}, points_total=1, points_done=1,
        engine="sglang", topology="pd")
    run, other = (BenchmarkRun.objects.create(sweep=sweep, status="done", source="measured", concurrency=c,
                                              input_len=16, output_len=16, served_model_name=OLD_NAME,
                                              snapshot=snapshot) for c in (1, 2))
    secret_api_store(admin_api, name="stored-key", value=VALUE)
    return {"recipe": recipe.pk, "deployment": deployment.pk, "sweep": sweep.pk, "run": run.pk, "other": other.pk,
            "node": node.name}


#: (name, URL, who reads it: "viewer" or "admin"), every read that names a stored recipe.
READS = [
    ("API recipe detail", "/api/recipes/{recipe}/", "viewer"),
    ("API recipe list", "/api/recipes/", "viewer"),
    ("API recipe versions", "/api/recipes/{recipe}/versions/", "viewer"),
    ("API recipe version 1", "/api/recipes/{recipe}/versions/1/", "viewer"),
    ("API recipe version 2", "/api/recipes/{recipe}/versions/2/", "viewer"),
    ("API recipe diff", "/api/recipes/{recipe}/diff/?a=1&b=2", "viewer"),
    ("API recipe dry-run", "/api/recipes/{recipe}/dry-run/", "viewer"),
    ("API recipe dry-run of version 1", "/api/recipes/{recipe}/dry-run/?version=1", "viewer"),
    ("API recipe missing version", "/api/recipes/{recipe}/versions/9/", "viewer"),
    ("API deployment list", "/api/deployments/", "viewer"),
    ("API deployment detail", "/api/deployments/{deployment}/", "viewer"),
    ("API sweep list", "/api/sweeps/", "viewer"),
    ("API sweep detail", "/api/sweeps/{sweep}/", "viewer"),
    ("API sweep export", "/api/sweeps/{sweep}/export/", "viewer"),
    ("API run detail", "/api/runs/{run}/", "viewer"),
    ("API run export", "/api/runs/{run}/export/", "viewer"),
    ("API run comparison", "/api/runs/compare/?ids={run},{other}", "viewer"),
    ("API run comparison CSV", "/api/runs/compare/?ids={run},{other}&format=csv", "viewer"),
    ("recipe list page", "/recipes/", "viewer"),
    ("recipe page", "/recipes/{recipe}/", "viewer"),
    ("recipe page of version 1", "/recipes/{recipe}/?version=1", "viewer"),
    ("recipe history page", "/recipes/{recipe}/history/", "viewer"),
    ("recipe diff page", "/recipes/{recipe}/diff/?a=1&b=2", "viewer"),
    ("recipe dry-run page", "/recipes/{recipe}/dry-run/", "viewer"),
    ("recipe dry-run page of version 1", "/recipes/{recipe}/dry-run/?version=1", "viewer"),
    ("recipe edit page", "/recipes/{recipe}/edit/", "admin"),
    ("recipe copy page", "/recipes/new/?from={recipe}", "admin"),
    ("recipe revert page", "/recipes/{recipe}/revert/1/", "admin"),
    ("node page", "/nodes/{node}/", "viewer"),
    ("deployment list page", "/deployments/", "viewer"),
    ("deployment page", "/deployments/{deployment}/", "viewer"),
    ("deployment live part", "/deployments/{deployment}/live/", "viewer"),
    ("wall", "/wall/", "viewer"),
    ("wall tiles", "/wall/tiles/", "viewer"),
    ("benchmarks page", "/benchmarks/", "viewer"),
    ("sweep page", "/benchmarks/sweeps/{sweep}/", "viewer"),
    ("sweep export", "/benchmarks/sweeps/{sweep}/export.json", "viewer"),
    ("new sweep page of the deployment", "/benchmarks/sweeps/new/?deployment={deployment}", "admin"),
    ("run page", "/benchmarks/runs/{run}/", "viewer"),
    ("run export", "/benchmarks/runs/{run}/export.json", "viewer"),
    ("comparison page", "/benchmarks/compare/?runs={run},{other}", "viewer"),
    ("what-if sweep picker", "/kernels/whatif/", "viewer"),
    ("what-if of the sweep", "/kernels/whatif/?sweep={sweep}", "viewer"),
    ("admin recipe list", "/admin/deployments/recipe/", "admin"),
    ("admin recipe change page", "/admin/deployments/recipe/{recipe}/change/", "admin"),
    ("admin recipe history", "/admin/deployments/recipe/{recipe}/history/", "admin"),
    ("admin deployment list", "/admin/deployments/deployment/", "admin"),
    ("admin deployment page", "/admin/deployments/deployment/{deployment}/change/", "admin"),
    ("admin sweep list", "/admin/benchmarks/benchmarksweep/", "admin"),
    ("admin sweep page", "/admin/benchmarks/benchmarksweep/{sweep}/change/", "admin"),
    ("admin run list", "/admin/benchmarks/benchmarkrun/", "admin"),
    ("admin run page", "/admin/benchmarks/benchmarkrun/{run}/change/", "admin"),
]


#: Reads of :data:`READS` that do not name the recipe at all (only who changed it and when), or
#: name only why they refuse it.
NAMES_NO_RECIPE = {"API recipe versions", "admin run list", "API recipe dry-run", "API recipe dry-run of version 1"}
#: The status of a read of :data:`READS` that is not 200: a dry-run of a recipe whose name holds a
#: stored secret's value is refused (naming the field and the secret), a version it does not have
#: is not found (naming the recipe), and a sweep without measured runs cannot be projected (the
#: page still lists the sweeps to pick from).
STATUS = {"API recipe dry-run": 400, "API recipe dry-run of version 1": 400, "API recipe missing version": 404,
          "what-if of the sweep": 400}


def _browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(("name", "url", "reader"), READS, ids=[r[0] for r in READS])
def test_no_read_shows_a_stored_secret_value_in_a_recipe_name(stored, viewer, admin_user, name, url, reader):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client = _browser(viewer if reader == "viewer" else admin_user)

    response = client.get(url.format(**stored), follow=True)

    assert response.status_code == STATUS.get(name, 200), (name, response.status_code)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    text = body.decode()
    for shown in (text, html.unescape(text)):
        assert VALUE not in shown, f"{name} shows the secret's value"
    if name not in NAMES_NO_RECIPE:
        assert REDACTED in html.unescape(text), f"{name} does not name the recipe masked"


def test_the_api_names_the_recipe_masked_where_it_named_it(stored, viewer_api):
    recipe = viewer_api.get(f"/api/recipes/{stored['recipe']}/").json()
    deployment = viewer_api.get(f"/api/deployments/{stored['deployment']}/").json()
    sweep = viewer_api.get(f"/api/sweeps/{stored['sweep']}/").json()
    diff = viewer_api.get(f"/api/recipes/{stored['recipe']}/diff/?a=1&b=2").json()["changes"]

    assert recipe["name"] == f"llm2-{REDACTED}"
    assert (deployment["recipe_name"], deployment["recipe_current_name"]) == (f"llm-{REDACTED}", f"llm2-{REDACTED}")
    assert (sweep["name"], sweep["served_model_name"], sweep["snapshot"]["recipe"]) == (
        f"llm-{REDACTED} c=1 16/16", f"llm-{REDACTED}", f"llm-{REDACTED}")
    assert {"path": "name", "change": "changed", "old": f"llm-{REDACTED}", "new": f"llm2-{REDACTED}"} in diff


def test_a_sweep_named_after_such_a_recipe_is_stored_with_the_value_masked(admin_api, operator):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name=OLD_NAME)
    secret_api_store(admin_api, name="stored-key", value=VALUE)

    sweep = sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1], "lengths": "16:16",
                                                                     "requests": 4})

    stored = BenchmarkSweep.objects.get(pk=sweep.pk)
    assert stored.name == f"llm-{REDACTED} c=1 16/16"
    assert stored.served_model_name == "sim-model"   # what the engine serves is the spec's, as stored


def test_the_edit_forms_show_the_name_masked(stored, admin_user):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    recipe = Recipe.objects.get(pk=stored["recipe"])

    page = _browser(admin_user).get(f"/recipes/{recipe.pk}/edit/")
    admin_page = _browser(admin_user).get(f"/admin/deployments/recipe/{recipe.pk}/change/")

    assert f'value="llm2-{REDACTED}"' in page.content.decode()
    assert f'value="llm2-{REDACTED}"' in admin_page.content.decode()


def test_the_dryrun_command_names_the_recipe_masked(stored):
    with pytest.raises(CommandError) as refused:
        call_command("dryrun", NEW_NAME, stdout=io.StringIO())

    text = str(refused.value)
    assert text.startswith(f"recipe llm2-{REDACTED} does not render on node seed-8gpu:\n")
    assert "name: name holds the value of secret 'stored-key'" in text
    assert VALUE not in text


def test_the_admin_run_page_shows_the_snapshot_and_served_model_name_read_only_and_masked(stored, admin_user):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()

    text = html.unescape(_browser(admin_user).get(f"/admin/benchmarks/benchmarkrun/{stored['run']}/change/")
                         .content.decode())

    assert VALUE not in text
    assert f"<div class=\"readonly\">llm-{REDACTED}</div>" in text            # the served model name
    assert f"'recipe': 'llm-{REDACTED}'" in text or f'"recipe": "llm-{REDACTED}"' in text   # the snapshot
    assert 'name="served_model_name"' not in text and 'name="snapshot"' not in text


def test_the_demo_lists_the_recipe_masked(stored):
    from deployments.demo import demo_recipe_lines

    lines = demo_recipe_lines(base="http://ui")

    assert lines == [f"  llm2-{REDACTED}  sglang   pd     node=seed-8gpu  v2  "
                     f"http://ui/recipes/{stored['recipe']}/dry-run/"]


def test_the_dry_run_card_shows_a_served_model_name_holding_a_rotated_value_masked(admin_api, admin_user, viewer):
    """A spec whose ``served_model_name`` holds a secret's earlier value (rotated since: no write
    refuses it, but every read masks it): the dry-run page renders the plan, and its card names the
    served model with the value masked (the value is what the engine is given)."""
    node = seed_node_create()
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    recipe = recipe_row_create(node=node, name="clean-name", topology="pd", engine="sglang",
                               spec={**spec, "served_model_name": f"served-{VALUE}"})
    secret_api_store(admin_api, name="stored-key", value=VALUE)
    secret_update(secret=Secret.objects.get(name="stored-key"), user=admin_user, value="rotated-value-0451")

    page = _browser(viewer).get(f"/recipes/{recipe.pk}/dry-run/")

    text = html.unescape(page.content.decode())
    assert page.status_code == 200
    assert VALUE not in text
    assert f'<dt>Served model name</dt><dd class="mono">served-{REDACTED}</dd>' in text
