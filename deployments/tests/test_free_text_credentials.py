"""Free text stored and shown in clear (a recipe's name, description and change reason, a sweep's
name, a secret's description, an imported result file's shown fields) refuses a well-known
credential format on every write path, naming the field and the kind of credential, never quoting
it; text stored before that shows it shortened on every read. Every problem of a recipe write
comes back in one 400, and a secret's description refuses its own value and any other secret's."""
from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.redaction import REDACTED, credential_kind_said
from deployments.examples import example_recipe
from deployments.models import Recipe, Secret
from deployments.tests.factories import recipe_row_create, secret_api_store, seed_node_create

pytestmark = pytest.mark.django_db

HF = "hf_abcdefghijklmnopqrstuvwxyz0123456789AB"  # 41 characters
# (text, kind, head): what a message names in place of the text
CREDENTIALS = [
    (HF, "Hugging Face token", "hf_…"),
    ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "GitHub token", "ghp_…"),
    ("sk-abcdefghijklmnopqrstuvwxyz012345", "OpenAI-style API key", "sk-…"),
    ("AKIAIOSFODNN7EXAMPLE", "AWS access key id", "AKIA…"),
    ("xoxb-123456789012-abcdefghij", "Slack token", "xoxb-…"),
]
CREDENTIAL_IDS = [kind for _text, kind, _head in CREDENTIALS]
RUN_DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "tests" / "data" / "vllm-bench-serve.json"


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


def _create_body(node, **over):
    example = example_recipe("seed-v4-flash-pd")
    return {"name": "r1", "engine": example["engine"], "topology": example["topology"], "node": node.name,
            "spec": example["spec"], **over}


def _recipe(operator_api) -> int:
    made = operator_api.post("/api/recipes/", _create_body(seed_node_create()), format="json")
    assert made.status_code == 201, made.json()
    return made.json()["id"]


def _message(field: str, kind: str, head: str) -> str:
    return (f"{field} holds what looks like {credential_kind_said(kind)} ({head}): store it as a secret and reference it; "
            f"{field} is stored and shown in clear")


# (write, field as named in the answer, where the message is in the answer)
def _recipe_create(api, text, field):
    return api.post("/api/recipes/", _create_body(seed_node_create(), **{field: text}), format="json")


def _recipe_patch(api, text, field):
    return api.patch(f"/api/recipes/{_recipe(api)}/", {field: text}, format="json")


def _sweep_create(api, text, field):
    return api.post("/api/sweeps/", {"deployment": 1, "grid": {}, "name": text}, format="json")


def _secret_create(api, text, field):
    return api.post("/api/secrets/", {"name": "s-new", "value": "a-value-0123", "description": text}, format="json")


def _secret_patch(api, text, field):
    secret_api_store(api, name="s-old", value="old-value-0123")
    pk = Secret.objects.get(name="s-old").pk
    return api.patch(f"/api/secrets/{pk}/", {"description": text}, format="json")


def _run_import(api, text, field):
    obj = json.loads(RUN_DATA.read_text())
    obj["model_id"] = f"/models/{text}"
    return api.post("/api/runs/import/", {"text": json.dumps(obj), "filename": "bench.json"}, format="json")


WRITES = [
    ("recipe name", _recipe_create, "name", "name", "name"),
    ("recipe description", _recipe_create, "description", "description", "description"),
    ("recipe change reason", _recipe_create, "change_reason", "change_reason", "change_reason"),
    ("recipe description edited", _recipe_patch, "description", "description", "description"),
    ("recipe change reason edited", _recipe_patch, "change_reason", "change_reason", "change_reason"),
    ("sweep name", _sweep_create, "name", "name", "name"),
    ("secret description", _secret_create, "description", "description", "description"),
    ("secret description edited", _secret_patch, "description", "description", "description"),
    ("imported model_id", _run_import, "model_id", "model_id", "text.model_id"),
]


@pytest.mark.parametrize(("text", "kind", "head"), CREDENTIALS, ids=CREDENTIAL_IDS)
@pytest.mark.parametrize(("what", "write", "field", "named", "key"), WRITES, ids=[w[0] for w in WRITES])
def test_every_api_write_refuses_a_credential_naming_the_field_and_kind(admin_api, what, write, field, named, key,
                                                                        text, kind, head):
    answer = write(admin_api, f"see {text} here", field)

    assert answer.status_code == 400, answer.content
    body = answer.content.decode()
    assert _message(named, kind, head) in answer.json()[key][0]
    assert text not in body
    stored = [*Recipe.objects.values_list("name", "description"), *Recipe.history.values_list("history_change_reason"),
              *BenchmarkSweep.objects.values_list("name"), *Secret.objects.values_list("description")]
    assert not any(text in (field or "") for row in stored for field in row)
    assert not BenchmarkRun.objects.exists()


def test_the_recipe_form_the_secret_admin_and_the_sweep_command_refuse_it(admin_user, operator):
    node = seed_node_create()
    client = Client()
    client.force_login(operator)
    example = example_recipe("seed-v4-flash-pd")
    page = client.post(reverse("deployments:recipe-create"), {
        "name": "r1", "description": f"token {HF}", "engine": example["engine"], "topology": example["topology"],
        "node": node.pk, "spec": json.dumps(example["spec"])})
    assert page.status_code in (200, 400)
    assert "description holds what looks like a Hugging Face token (hf_…)" in page.content.decode()
    assert HF not in page.content.decode() and not Recipe.objects.exists()

    admin = Client()
    admin.force_login(admin_user)
    page = admin.post(reverse("admin:deployments_secret_add"),
                      {"name": "s-admin", "value": "admin-value-0123", "description": f"token {HF}"})
    assert "description holds what looks like a Hugging Face token (hf_…)" in page.content.decode()
    assert HF not in page.content.decode() and not Secret.objects.filter(name="s-admin").exists()

    with pytest.raises((CommandError, SystemExit)) as refused:
        call_command("sweep", "--deployment", "1", "--name", HF)
    assert HF not in str(refused.value)


def test_rows_stored_before_show_the_credential_shortened(admin_api, viewer_api, viewer, admin_user):
    recipe = recipe_row_create(node=seed_node_create(), name="stored-before", description=f"token {HF}")
    sweep = BenchmarkSweep.objects.create(deployment=sim_deployment_create(base_url="http://127.0.0.1:9"),
                                          grid={"concurrency": [1]}, points_total=1, status="done", name=HF)
    secret = Secret.objects.create(name="s-before", value="before-value-0123", description=f"token {HF}")
    shortened = "hf_…(41 chars)"
    client = Client()
    client.force_login(viewer)
    admin = Client()
    admin.force_login(admin_user)

    reads = {
        "GET /api/recipes/<id>/": viewer_api.get(f"/api/recipes/{recipe.pk}/"),
        "GET /api/recipes/": viewer_api.get("/api/recipes/"),
        "/recipes/<id>/": client.get(reverse("deployments:recipe-detail", args=[recipe.pk])),
        "/recipes/": client.get(reverse("deployments:recipe-list")),
        "GET /api/sweeps/<id>/": viewer_api.get(f"/api/sweeps/{sweep.pk}/"),
        "/benchmarks/": client.get(reverse("benchmarks:index")),
        "GET /api/secrets/<id>/": admin_api.get(f"/api/secrets/{secret.pk}/"),
        "admin secrets": admin.get(reverse("admin:deployments_secret_changelist")),
    }

    for where, answer in reads.items():
        assert answer.status_code == 200, where
        body = answer.content.decode()
        assert HF not in body, where
        assert shortened in body, where
    assert viewer_api.get(f"/api/recipes/{recipe.pk}/").json()["description"] == f"token {shortened}"
    assert admin_api.get(f"/api/secrets/{secret.pk}/").json()["description"] == f"token {shortened}"


# --- every problem of a recipe write at once ---------------------------------------------------

VALUE = "pw-Value-0123456"


@pytest.mark.parametrize(("body", "keys"), [
    ({"description": f"pw {VALUE} here", "change_reason": f"reason {VALUE}"}, {"description", "change_reason"}),
    ({"description": f"pw {VALUE} here", "spec": {"stop_grace_s": 0}}, {"description", "spec.stop_grace_s"}),
    ({"description": f"token {HF}", "change_reason": f"reason {VALUE}", "spec": {"stop_grace_s": 0}},
     {"description", "change_reason", "spec.stop_grace_s"}),
], ids=["description and change reason", "description and spec", "all three"])
def test_a_recipe_patch_reports_every_problem_in_one_answer(admin_api, body, keys):
    pk = _recipe(admin_api)
    secret_api_store(admin_api, name="pw", value=VALUE)
    version = Recipe.objects.get(pk=pk).version

    answer = admin_api.patch(f"/api/recipes/{pk}/", body, format="json")

    assert answer.status_code == 400, answer.content
    assert set(answer.json()) == keys
    for key in keys - {"spec.stop_grace_s"}:
        assert answer.json()[key][0].startswith(f"{key} holds ")
    assert VALUE not in answer.content.decode() and HF not in answer.content.decode()
    assert Recipe.objects.get(pk=pk).version == version


def test_the_service_reports_the_change_reason_beside_the_content(admin_api, operator):
    from controlplane.errors import InvalidInput
    from deployments.services import recipe_update

    pk = _recipe(admin_api)
    secret_api_store(admin_api, name="pw", value=VALUE)

    with pytest.raises(InvalidInput) as refused:
        recipe_update(recipe=Recipe.objects.get(pk=pk), user=operator, change_reason=f"reason {VALUE}",
                      description=f"pw {VALUE}")

    assert set(refused.value.errors) == {"description", "change_reason"}


def test_the_recipe_edit_form_reports_the_description_and_change_reason_at_once(admin_api, operator):
    pk = _recipe(admin_api)
    secret_api_store(admin_api, name="pw", value=VALUE)
    client = Client()
    client.force_login(operator)
    url = reverse("deployments:recipe-edit", args=[pk])
    form = client.get(url).context["form"]
    values = {bf.html_name: bf.value() for bf in form if bf.value() is not None}
    values.update(description=f"pw {VALUE} here", change_reason=f"reason {VALUE}")

    page = client.post(url, values)

    body = page.content.decode()
    assert page.status_code == 400
    assert "description holds the value of secret &#x27;pw&#x27;" in body
    assert "change_reason holds the value of secret &#x27;pw&#x27;" in body
    assert VALUE not in body and Recipe.objects.get(pk=pk).version == 1


# --- a secret's description and secret values ----------------------------------------------------

OWN = "own-Value-0123456"
OTHER = "other-Value-0123456"


@pytest.mark.parametrize(("description", "named"), [
    (f"my value is {OWN}", "own"),
    (f"theirs is {OTHER}", "other"),
], ids=["its own value", "another secret's value"])
def test_a_secret_description_holding_a_value_is_refused(admin_api, description, named):
    secret_api_store(admin_api, name="own", value=OWN)
    secret_api_store(admin_api, name="other", value=OTHER)
    pk = Secret.objects.get(name="own").pk

    answer = admin_api.patch(f"/api/secrets/{pk}/", {"description": description}, format="json")

    assert answer.status_code == 400, answer.content
    assert answer.json() == {"description": [
        f"description holds the value of secret '{named}': refer to the secret by its name '{named}' instead; "
        "description is stored and shown in clear"]}
    assert OWN not in answer.content.decode() and OTHER not in answer.content.decode()
    assert Secret.objects.get(pk=pk).description == ""


def test_a_secret_description_holding_the_value_the_same_write_gives_is_refused(admin_api):
    created = admin_api.post("/api/secrets/", {"name": "fresh", "value": OWN, "description": f"it is {OWN}"},
                             format="json")
    secret_api_store(admin_api, name="kept", value=OTHER)
    pk = Secret.objects.get(name="kept").pk
    rotated = admin_api.patch(f"/api/secrets/{pk}/", {"value": OWN, "description": f"now {OWN}"}, format="json")

    for answer in (created, rotated):
        assert answer.status_code == 400, answer.content
        assert answer.json() == {"description": [
            "description holds the value of this secret: the value is write-only and never shown, while "
            "description is stored and shown in clear"]}
        assert OWN not in answer.content.decode()
    assert not Secret.objects.filter(name="fresh").exists()
    assert Secret.objects.get(pk=pk).description == ""


def test_a_secret_description_stored_before_shows_values_masked(admin_api):
    secret_api_store(admin_api, name="other", value=OTHER)
    secret = Secret.objects.create(name="before", value=OWN, description=f"mine {OWN}, theirs {OTHER}")

    read = admin_api.get(f"/api/secrets/{secret.pk}/")
    listed = admin_api.get("/api/secrets/")

    assert read.json()["description"] == f"mine {REDACTED}, theirs {REDACTED}"
    for answer in (read, listed):
        assert OWN not in answer.content.decode() and OTHER not in answer.content.decode()


IMPORTED_READS = ["/api/runs/{run}/", "/api/runs/", "/api/runs/{run}/export/", "/api/runs/{run}/export/?format=csv",
                  "/benchmarks/runs/{run}/", "/benchmarks/runs/{run}/export.json", "/benchmarks/runs/{run}/export.csv",
                  "/benchmarks/"]


@pytest.mark.parametrize("url", IMPORTED_READS)
def test_a_run_imported_before_shows_the_credential_shortened(operator_api, viewer, url):
    made = operator_api.post("/api/runs/import/", {"text": RUN_DATA.read_text(), "filename": "bench.json"},
                             format="json")
    assert made.status_code == 201, made.content
    run = BenchmarkRun.objects.get(pk=made.json()["created"][0]["id"])
    run.original_filename = f"bench-{HF}.json"
    run.served_model_name = f"m/{HF}"
    run.summary = {**run.summary, "model_id": f"m/{HF}", "tokenizer_id": f"t/{HF}", "label": f"run {HF}"}
    run.save()
    client = Client()
    client.force_login(viewer)

    answer = client.get(url.format(run=run.pk))

    assert answer.status_code == 200
    assert HF not in answer.content.decode()
    if url == "/api/runs/{run}/":
        data = answer.json()
        assert (data["original_filename"], data["served_model_name"], data["summary"]["label"]) == (
            "bench-hf_…(41 chars).json", "m/hf_…(41 chars)", "run hf_…(41 chars)")


PLACEHOLDER_REFUSED = ("description holds the placeholder ***redacted*** shown in place of a secret's value: "
                       "remove it, or refer to the secret by its name")


def test_the_secret_admin_edit_form_shows_a_description_stored_before_masked(admin_api, admin_user):
    secret_api_store(admin_api, name="other", value=OTHER)
    secret = Secret.objects.create(name="before", value=OWN, description=f"theirs {OTHER} and {HF}")
    admin = Client()
    admin.force_login(admin_user)
    url = reverse("admin:deployments_secret_change", args=[secret.pk])

    form = admin.get(url)

    body = form.content.decode()
    assert form.status_code == 200
    assert OTHER not in body and HF not in body
    assert f'value="theirs {REDACTED} and hf_…(41 chars)"' in body

    unchanged = admin.post(url, {"description": f"theirs {REDACTED} and hf_…(41 chars)", "value": ""})

    assert unchanged.status_code == 200
    assert html.escape(PLACEHOLDER_REFUSED) in unchanged.content.decode()
    assert Secret.objects.get(pk=secret.pk).description == f"theirs {OTHER} and {HF}"

    shortened = admin.post(url, {"description": "theirs and hf_…(41 chars)", "value": ""})

    assert shortened.status_code == 200
    assert "description holds hf_…(41 chars), shown in place of a credential" in shortened.content.decode()
    assert Secret.objects.get(pk=secret.pk).description == f"theirs {OTHER} and {HF}"

    edited = admin.post(url, {"description": "theirs, rotated", "value": ""})

    assert edited.status_code == 302
    assert Secret.objects.get(pk=secret.pk).description == "theirs, rotated"


def test_the_api_refuses_the_placeholder_in_a_secret_description(admin_api):
    secret_api_store(admin_api, name="own", value=OWN)
    pk = Secret.objects.get(name="own").pk

    answer = admin_api.patch(f"/api/secrets/{pk}/", {"description": f"was {REDACTED}"}, format="json")

    assert answer.status_code == 400, answer.content
    assert answer.json() == {"description": [PLACEHOLDER_REFUSED]}
    assert Secret.objects.get(pk=pk).description == ""



@pytest.mark.parametrize(("field", "refusal"), [
    ("name", _message("name", "Hugging Face token", "hf_…")),
    ("description", _message("description", "Hugging Face token", "hf_…")),
    ("spec", "spec.env.HUB: spec.env.HUB looks like a Hugging Face token (hf_…(41 chars)): store it as a secret"),
])
def test_the_recipe_admin_form_refuses_a_credential_and_shows_it_shortened(admin_user, operator_api, field, refusal):
    pk = _recipe(operator_api)
    recipe = Recipe.objects.get(pk=pk)
    admin = Client()
    admin.force_login(admin_user)
    sent = {"name": "r1", "description": recipe.description, "spec": json.dumps(recipe.spec)}
    sent[field] = {"name": f"r-{HF}", "description": f"token {HF}",
                   "spec": json.dumps(dict(recipe.spec, env={**recipe.spec["env"], "HUB": HF}))}[field]

    page = admin.post(reverse("admin:deployments_recipe_change", args=[pk]), {
        **sent, "engine": recipe.engine, "topology": recipe.topology, "node": recipe.node_id,
        "expected_version": str(recipe.version)})

    body = html.unescape(page.content.decode())
    assert page.status_code == 200
    assert refusal in body
    assert HF not in body
    assert "hf_…(41 chars)" in body   # what was typed, shown again shortened
    stored = Recipe.objects.get(pk=pk)
    assert (stored.name, stored.description, stored.version, stored.spec) == ("r1", recipe.description, 1, recipe.spec)
