"""A recipe saved before a stored secret's value was refused in plain values still holds it:
every read path shows it masked, and the recipe is flagged so its owner references the secret
instead."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.redaction import REDACTED
from deployments.examples import seed_node_facts_example
from deployments.launch import launch_plan_render
from deployments.tests.factories import STORED_BEFORE_VALUE, deployment_row_create, recipe_stored_before_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_roots")]

VALUE = STORED_BEFORE_VALUE


@pytest.fixture
def stored(admin_api):
    return recipe_stored_before_create(admin_api)


def test_the_api_masks_the_value_and_names_where_it_is(viewer_api, stored):
    detail = viewer_api.get(f"/api/recipes/{stored.pk}/")
    listed = viewer_api.get("/api/recipes/")

    for body in (detail.content.decode(), listed.content.decode()):
        assert VALUE not in body
    data = detail.json()
    assert data["spec"]["env"] == {"TZ": REDACTED, "NOTE": f"pass={REDACTED};"}
    assert [(h["path"], h["secret"]) for h in data["secret_values_held"]] == [("env.TZ", "db-pass"), ("env.NOTE", "db-pass")]
    assert data["secret_values_held"][0]["message"] == ("holds the value of secret 'db-pass' in env.TZ; "
                                                        "reference it from spec.secrets instead")
    row = next(r for r in listed.json()["results"] if r["id"] == stored.pk) if "results" in listed.json() else \
        next(r for r in listed.json() if r["id"] == stored.pk)
    assert len(row["secret_values_held"]) == 2


def test_a_clean_recipe_is_not_flagged(viewer_api, stored):
    stored.spec = {**stored.spec, "env": {"TZ": "UTC"}}
    stored.save()
    assert viewer_api.get(f"/api/recipes/{stored.pk}/").json()["secret_values_held"] == []


def test_the_recipe_page_masks_the_value_and_warns(viewer, stored):
    client = Client()
    client.force_login(viewer)
    page = client.get(reverse("deployments:recipe-detail", args=[stored.pk]))

    assert page.status_code == 200
    body = page.content.decode()
    assert VALUE not in body
    assert "holds the value of secret &#x27;db-pass&#x27; in env.TZ" in body


def test_the_deployment_snapshot_masks_it(viewer_api, stored):
    deployment = deployment_row_create(recipe=stored)

    shown = viewer_api.get(f"/api/deployments/{deployment.pk}/")

    assert shown.status_code == 200
    assert VALUE not in shown.content.decode()
    assert shown.json()["spec_snapshot"]["env"]["TZ"] == REDACTED


def test_a_plan_shows_the_value_in_a_plain_flag_masked(stored):
    spec = {**stored.spec, "env": {}}
    spec["roles"]["prefill"]["flags"] = {**(spec["roles"]["prefill"].get("flags") or {}), "--chat-template": VALUE}
    plan = launch_plan_render(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example(),
                              secret_values=None)

    shown = plan.to_dict()
    assert VALUE in plan.processes[0].argv + plan.processes[1].argv
    assert VALUE not in str(shown)
    assert any(REDACTED in a for p in shown["processes"] for a in p["argv"])
