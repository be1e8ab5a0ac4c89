"""A default computed from another field of the spec follows that field: a worker's ``tp``
(``len(gpus) // dp``), a role's ``membind`` (from ``numa_node`` and ``cpus``) and the router's
``prometheus-port`` (the first free port above the router's) are not stored when the recipe leaves
them out, so a later change of the field they come from (API PATCH, the edit form) changes them
too, and the dry-run shows the new value; one the recipe gives is kept as given. Recipes stored
before keep a value other than the default their own fields give and lose one equal to it
(migration 0012). Run on the seed node (8 GPUs; GPU0-3 + CPUs 0-31 on NUMA node 0, numactl)."""
from __future__ import annotations

import importlib
import json

import pytest
from django.apps import apps
from django.urls import reverse

from deployments import services
from deployments.models import Recipe
from deployments.recipes import recipe_validate
from deployments.tests.factories import recipe_row_create, seed_node_create
from deployments.topology import node_facts_from_row

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_roots")]


def _gpu_spec(**role) -> dict:
    return {"model": {"path": "/models/x"}, "roles": {"single": {"gpus": [0, 1], "port": 31500, **role}}}


def _sim_spec(**role) -> dict:
    return {"model": {"name": "a/b"}, "roles": {"single": {"cpus": "0-3", "port": 31500, **role}},
            "sim": {"profile": "demo-fast"}}


def _sim_pd_spec(router: dict | None = None) -> dict:
    return {"model": {"name": "a/b"}, "sim": {"profile": "demo-fast"},
            "roles": {"prefill": {"cpus": "0", "port": 31000, "bootstrap_port": 31998},
                      "decode": {"cpus": "1", "port": 31001},
                      "router": {"port": 31080, **(router or {})}}}


def _created(api, *, engine: str, topology: str, spec: dict, name: str = "derived") -> dict:
    node = seed_node_create()
    response = api.post("/api/recipes/", {"name": name, "engine": engine, "topology": topology, "node": node.name,
                                          "spec": spec}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _patched(api, pk: int, spec_patch: dict) -> dict:
    response = api.patch(f"/api/recipes/{pk}/", {"spec": spec_patch}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def _process(api, pk: int, role: str) -> dict:
    """The dry-run's process of ``role``."""
    response = api.get(f"/api/recipes/{pk}/dry-run/")
    assert response.status_code == 200, response.json()
    [process] = [p for p in response.json()["plan"]["processes"] if p["role"] == role]
    return process


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _validated(pk: int) -> dict:
    """The recipe's spec as every validation (the dry-run, a deploy's snapshot) fills it."""
    recipe = Recipe.objects.get(pk=pk)
    return services.recipe_spec_validate(engine=recipe.engine, topology=recipe.topology, spec=recipe.spec,
                                         node=recipe.node)


def _form_saved(client, pk: int, edit) -> None:
    """Save the recipe's edit form with its spec changed by ``edit`` (a function of the spec it shows)."""
    url = reverse("deployments:recipe-edit", args=[pk])
    form = client.get(url).context["form"]
    values = {bf.html_name: bf.value() for bf in form if bf.value() is not None}
    values["spec"] = json.dumps(edit(json.loads(values["spec"])))
    response = client.post(url, values)
    assert response.status_code == 302, response.content.decode()[:3000]


# --- tp follows gpus ------------------------------------------------------------------------

def test_a_default_tp_follows_the_gpus_through_a_patch(operator_api):
    created = _created(operator_api, engine="sglang", topology="single", spec=_gpu_spec())
    assert "tp" not in created["spec"]["roles"]["single"]
    assert _arg(_process(operator_api, created["id"], "single")["argv"], "--tp-size") == "2"

    patched = _patched(operator_api, created["id"], {"roles": {"single": {"gpus": [0, 1, 2, 3]}}})

    assert "tp" not in patched["spec"]["roles"]["single"]
    assert _validated(created["id"])["roles"]["single"]["tp"] == 4
    process = _process(operator_api, created["id"], "single")
    assert (_arg(process["argv"], "--tp-size"), process["gpu_ids"]) == ("4", [0, 1, 2, 3])


def test_a_default_tp_follows_the_gpus_through_the_edit_form(operator_client, operator_api):
    created = _created(operator_api, engine="sglang", topology="single", spec=_gpu_spec())

    def grown(spec: dict) -> dict:
        assert "tp" not in spec["roles"]["single"]   # the form shows no default to send back
        spec["roles"]["single"]["gpus"] = [0, 1, 2, 3]
        return spec

    _form_saved(operator_client, created["id"], grown)

    recipe = Recipe.objects.get(pk=created["id"])
    assert recipe.version == 2 and "tp" not in recipe.spec["roles"]["single"]
    assert _arg(_process(operator_api, created["id"], "single")["argv"], "--tp-size") == "4"


def test_a_tp_the_recipe_gives_is_kept_and_judged_against_new_gpus(operator_api):
    created = _created(operator_api, engine="sglang", topology="single", spec=_gpu_spec(tp=2))
    assert created["spec"]["roles"]["single"]["tp"] == 2

    moved = _patched(operator_api, created["id"], {"roles": {"single": {"gpus": [2, 3]}}})
    assert moved["spec"]["roles"]["single"]["tp"] == 2
    refused = operator_api.patch(f"/api/recipes/{created['id']}/",
                                 {"spec": {"roles": {"single": {"gpus": [0, 1, 2, 3]}}}}, format="json")

    assert refused.status_code == 400
    assert refused.json()["spec.roles.single.tp"] == [
        "tp × dp = 2 × 1 = 2 GPUs expected, but spec.roles.single.gpus lists 4 (0,1,2,3): give a tp that fits, or leave tp out (\"tp\": null in a PATCH) to have it follow gpus"]
    # null takes it out: the default applies and follows the gpus
    _patched(operator_api, created["id"], {"roles": {"single": {"gpus": [0, 1, 2, 3], "tp": None}}})
    assert _arg(_process(operator_api, created["id"], "single")["argv"], "--tp-size") == "4"


# --- membind follows numa_node and cpus ----------------------------------------------------

def test_a_default_membind_follows_the_numa_node_through_a_patch(operator_api):
    created = _created(operator_api, engine="sim", topology="single", spec=_sim_spec())
    assert "membind" not in created["spec"]["roles"]["single"]
    assert "--localalloc" in _process(operator_api, created["id"], "single")["wrapper"]

    patched = _patched(operator_api, created["id"], {"roles": {"single": {"numa_node": 0}}})

    assert "membind" not in patched["spec"]["roles"]["single"]
    assert _validated(created["id"])["roles"]["single"]["membind"] == "numa"
    wrapper = _process(operator_api, created["id"], "single")["wrapper"]
    assert "--membind=0" in wrapper and "--localalloc" not in wrapper


def test_a_default_membind_follows_the_numa_node_through_the_edit_form(operator_client, operator_api):
    created = _created(operator_api, engine="sim", topology="single", spec=_sim_spec())

    def bound(spec: dict) -> dict:
        assert "membind" not in spec["roles"]["single"]
        spec["roles"]["single"]["numa_node"] = 0
        return spec

    _form_saved(operator_client, created["id"], bound)

    recipe = Recipe.objects.get(pk=created["id"])
    assert recipe.version == 2 and "membind" not in recipe.spec["roles"]["single"]
    assert "--membind=0" in _process(operator_api, created["id"], "single")["wrapper"]


def test_a_default_membind_follows_a_role_that_is_unpinned_again(operator_api):
    created = _created(operator_api, engine="sim", topology="single", spec=_sim_spec(numa_node=0))
    assert "--membind=0" in _process(operator_api, created["id"], "single")["wrapper"]

    _patched(operator_api, created["id"], {"roles": {"single": {"numa_node": None, "cpus": None}}})

    assert _validated(created["id"])["roles"]["single"]["membind"] == "none"
    assert _process(operator_api, created["id"], "single")["wrapper"] == []


def test_a_membind_the_recipe_gives_stays_when_the_numa_node_changes(operator_api):
    created = _created(operator_api, engine="sim", topology="single", spec=_sim_spec(membind="local"))
    assert created["spec"]["roles"]["single"]["membind"] == "local"

    patched = _patched(operator_api, created["id"], {"roles": {"single": {"numa_node": 0}}})

    assert patched["spec"]["roles"]["single"]["membind"] == "local"
    wrapper = _process(operator_api, created["id"], "single")["wrapper"]
    assert "--localalloc" in wrapper and "--membind=0" not in wrapper


# --- prometheus-port follows the router's port ---------------------------------------------

def test_a_default_metrics_port_follows_the_router_port_through_a_patch(operator_api):
    created = _created(operator_api, engine="sim", topology="pd", spec=_sim_pd_spec())
    assert created["spec"]["roles"]["router"]["flags"] == {}
    assert _process(operator_api, created["id"], "router")["ports"] == {"http": 31080, "metrics": 31081}

    patched = _patched(operator_api, created["id"], {"roles": {"router": {"port": 32080}}})

    assert patched["spec"]["roles"]["router"]["flags"] == {}
    assert _validated(created["id"])["roles"]["router"]["flags"] == {"prometheus-port": 32081}
    process = _process(operator_api, created["id"], "router")
    assert process["ports"] == {"http": 32080, "metrics": 32081}
    assert _arg(process["argv"], "--prometheus-port") == "32081"


def test_a_default_metrics_port_follows_the_router_port_through_the_edit_form(operator_client, operator_api):
    created = _created(operator_api, engine="sim", topology="pd", spec=_sim_pd_spec())

    def moved(spec: dict) -> dict:
        assert "prometheus-port" not in spec["roles"]["router"]["flags"]
        spec["roles"]["router"]["port"] = 32080
        return spec

    _form_saved(operator_client, created["id"], moved)

    recipe = Recipe.objects.get(pk=created["id"])
    assert recipe.version == 2 and recipe.spec["roles"]["router"]["flags"] == {}
    assert _process(operator_api, created["id"], "router")["ports"] == {"http": 32080, "metrics": 32081}


def test_a_metrics_port_the_recipe_gives_stays_when_the_router_port_moves(operator_api):
    created = _created(operator_api, engine="sim", topology="pd",
                       spec=_sim_pd_spec({"flags": {"--prometheus-port": 31090}}))
    assert created["spec"]["roles"]["router"]["flags"] == {"prometheus-port": 31090}

    patched = _patched(operator_api, created["id"], {"roles": {"router": {"port": 32080}}})

    assert patched["spec"]["roles"]["router"]["flags"] == {"prometheus-port": 31090}
    assert _process(operator_api, created["id"], "router")["ports"] == {"http": 32080, "metrics": 31090}


# --- the form and the API store the same -----------------------------------------------------

def test_the_form_and_the_api_store_the_same_spec(operator_client, operator_api):
    by_api = _created(operator_api, engine="sim", topology="pd", spec=_sim_pd_spec(), name="by-api")
    response = operator_client.post(reverse("deployments:recipe-create"), {
        "name": "by-form", "description": "", "engine": "sim", "topology": "pd",
        "node": Recipe.objects.get(pk=by_api["id"]).node_id, "spec": json.dumps(_sim_pd_spec()),
    })

    assert response.status_code == 302, response.content.decode()[:2000]
    stored = Recipe.objects.get(name="by-form").spec
    assert stored == Recipe.objects.get(name="by-api").spec
    assert all("membind" not in role for role in stored["roles"].values())
    assert all("tp" not in role for role in stored["roles"].values())


# --- migration 0012 ---------------------------------------------------------------------------

def _as_stored_before(*, engine: str, topology: str, spec: dict, node) -> dict:
    """What a recipe stored before 0012: the spec with every default filled in."""
    return recipe_validate(engine=engine, topology=topology, spec=spec, node=node_facts_from_row(node))


def test_the_migration_drops_only_stored_defaults(operator):
    node = seed_node_create()
    gpu_before = _as_stored_before(engine="sglang", topology="single", spec=_gpu_spec(numa_node=0), node=node)
    pd_before = _as_stored_before(engine="sim", topology="pd", spec=_sim_pd_spec(), node=node)
    assert (gpu_before["roles"]["single"]["tp"], gpu_before["roles"]["single"]["membind"]) == (2, "numa")
    assert pd_before["roles"]["router"]["flags"] == {"prometheus-port": 31081}
    gpu = recipe_row_create(node=node, name="old-gpu", engine="sglang", spec=gpu_before)
    pd = recipe_row_create(node=node, name="old-pd", topology="pd", spec=pd_before)
    given_spec = _as_stored_before(engine="sim", topology="pd", node=node, spec={
        **_sim_pd_spec({"flags": {"prometheus-port": 31090}}),
        "roles": {**_sim_pd_spec()["roles"], "prefill": {"cpus": "0", "port": 31000, "bootstrap_port": 31998,
                                                         "numa_node": 0, "membind": "local"},
                  "router": {"port": 31080, "flags": {"prometheus-port": 31090}}}})
    given = recipe_row_create(node=node, name="old-given", topology="pd", spec=given_spec)
    services.recipe_update(recipe=given, user=operator, description="a history row holding the given values")
    validated_before = {r.pk: _validated(r.pk) for r in (gpu, pd, given)}
    migration = importlib.import_module("deployments.migrations.0012_derived_defaults_follow_their_field")

    migration.drop_stored_defaults(apps, None)

    gpu_role = Recipe.objects.get(pk=gpu.pk).spec["roles"]["single"]
    assert "tp" not in gpu_role and "membind" not in gpu_role and gpu_role["dp"] == 1
    assert [row.spec["roles"]["single"].get("tp") for row in gpu.history.all()] == [None]
    pd_roles = Recipe.objects.get(pk=pd.pk).spec["roles"]
    assert pd_roles["router"]["flags"] == {}
    assert all("membind" not in role for role in pd_roles.values())
    assert all("tp" not in pd_roles[name] for name in ("prefill", "decode"))
    given_roles = Recipe.objects.get(pk=given.pk).spec["roles"]
    assert given_roles["router"]["flags"] == {"prometheus-port": 31090}
    assert given_roles["prefill"]["membind"] == "local" and "membind" not in given_roles["decode"]
    assert [row.spec["roles"]["router"]["flags"] for row in given.history.all()] == [{"prometheus-port": 31090}] * 2
    # what runs is the same as before
    assert {r.pk: _validated(r.pk) for r in (gpu, pd, given)} == validated_before


def test_the_migration_keeps_a_tp_other_than_the_gpus_give(operator):
    node = seed_node_create()
    spec = {**_gpu_spec(), "roles": {"single": {"gpus": [0, 1], "tp": 1, "dp": 1, "port": 31500}}}
    kept = recipe_row_create(node=node, name="tp-one", engine="sglang", spec=spec)
    taken_port = _as_stored_before(engine="sim", topology="pd", node=node, spec={
        **_sim_pd_spec(), "roles": {**_sim_pd_spec()["roles"], "decode": {"cpus": "1", "port": 31081}}})
    assert taken_port["roles"]["router"]["flags"] == {"prometheus-port": 31082}
    next_free = recipe_row_create(node=node, name="next-free", topology="pd", spec=taken_port)
    migration = importlib.import_module("deployments.migrations.0012_derived_defaults_follow_their_field")

    migration.drop_stored_defaults(apps, None)

    assert Recipe.objects.get(pk=kept.pk).spec == spec
    assert Recipe.objects.get(pk=next_free.pk).spec["roles"]["router"]["flags"] == {}
