"""The new-recipe form in a real browser (the Debian ``chromium`` package driven by Playwright)
against Django's live test server: Create refused for JSON that does not parse puts the
``spec: invalid JSON ...`` error under the Spec box; once the JSON is fixed, Validate replaces
it with what is wrong now (a GPU the node lacks), and once the recipe is valid, clears it and the
box's red mark, so the errors under the fields always follow the latest validation."""
from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from controlplane.tests.browser.conftest import sign_in_to
from deployments.examples import example_recipe
from deployments.nodes import node_register, seed_node_facts

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


@pytest.fixture
def node(transactional_db):
    """The seed node, registered before the browser starts (no database calls beside its loop)."""
    return node_register(facts=seed_node_facts())


def test_validate_replaces_the_invalid_json_error_create_left_under_the_spec(live_server, node, operator, browser):
    ex = example_recipe("seed-v4-flash-pd")
    good = json.dumps(ex["spec"])
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    sign_in_to(page, live_server.url, operator, "/recipes/new/")
    page.fill("#id_name", ex["name"])
    page.select_option("#id_engine", ex["engine"])
    page.select_option("#id_topology", ex["topology"])
    page.select_option("#id_node", str(node.pk))
    page.fill("#id_spec", good[:-1] + ",}")
    page.click("#recipe-form button[type=submit]")
    page.wait_for_load_state("domcontentloaded")
    spec_errors = page.locator("#errors-spec")
    expect(spec_errors).to_contain_text(f"spec: invalid JSON at line 1 column {len(good) + 1}")
    expect(page.locator("#field-spec")).to_have_class("field has-error")

    ex["spec"]["roles"]["prefill"]["gpus"] = [0, 1, 2, 99]
    page.fill("#id_spec", json.dumps(ex["spec"]))
    page.click("#recipe-form button:has-text('Validate')")
    expect(page.locator("#validate-errors")).to_contain_text("spec.roles.prefill.gpus")
    expect(spec_errors).to_contain_text("spec.roles.prefill.gpus")
    expect(spec_errors).not_to_contain_text("invalid JSON")
    expect(page.locator("#field-spec")).to_have_class("field has-error")

    page.fill("#id_spec", good)
    page.click("#recipe-form button:has-text('Validate')")
    expect(page.locator("#validate-ok")).to_be_visible()
    expect(spec_errors).to_have_text("")
    expect(page.locator("#field-spec")).to_have_class("field")
    assert page.locator("#recipe-form .has-error").count() == 0
    assert errors == []
