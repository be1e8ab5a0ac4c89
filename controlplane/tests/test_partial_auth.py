"""Partial requests (htmx's ``HX-Request: true``) of a signed-out browser are answered 401 with
the login URL of the page they came from, never with a redirect to the login page that htmx
would follow and swap in; page requests still go to the login page; a signed-in user without a
role keeps the 403, marked not to be swapped (``controlplane.middleware``).

Every kind of partial endpoint of every app is covered: the deployment page's live panel, log
section and process log tails, the recipe validate and diff partials, the wall's tiles, a node
page, a sweep's progress and results, a kernel job's progress and variant table. Login (and the
role check) come before any object lookup, so the anonymous and outsider cases need no rows.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db

PAGE = "/deployments/7/"
PAGE_URL = f"http://testserver{PAGE}"

#: (URL name, args, method) of one partial endpoint per kind, in each app.
PARTIALS = [
    ("deployments:deployment-live", [7], "get"),
    ("deployments:deployment-logs", [7], "get"),
    ("deployments:deployment-sweeps", [7], "get"),
    ("deployments:deployment-list-rows", [], "get"),
    ("deployments:process-log", [7, 21], "get"),
    ("deployments:recipe-validate", [], "post"),
    ("deployments:recipe-diff", [3], "get"),
    ("deployments:wall-tiles", [], "get"),
    ("deployments:node-detail", ["local"], "get"),
    ("benchmarks:sweep-progress", [5], "get"),
    ("benchmarks:sweep-results", [5], "get"),
    ("kernels:job-progress", [4], "get"),
    ("kernels:job-variants", [4], "get"),
]
PARTIAL_IDS = [name.split(":")[1] for name, _, _ in PARTIALS]


def _partial(client: Client, name: str, args: list, method: str, **headers):
    headers = {"HX-Request": "true", "HX-Current-URL": PAGE_URL, **headers}
    return getattr(client, method)(reverse(name, args=args), headers=headers)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(("name", "args", "method"), PARTIALS, ids=PARTIAL_IDS)
def test_it_answers_a_signed_out_partial_request_401_with_the_login_url_of_the_page(client, name, args, method):
    response = _partial(client, name, args, method)

    assert response.status_code == 401
    assert not response.has_header("Location")
    assert response["Ceiling-Login-URL"] == f"/login/?next={quote(PAGE, safe='')}"
    assert response["HX-Reswap"] == "none"
    assert "HX-Request" in response["Vary"]
    assert response["Cache-Control"] == "no-store"
    body = response.content.decode()
    assert "id_username" not in body and "<form" not in body
    assert body == f"Signed out: log in again at /login/?next={quote(PAGE, safe='')}\n"


@pytest.mark.parametrize(("name", "args", "method"), PARTIALS, ids=PARTIAL_IDS)
def test_it_still_sends_a_signed_out_page_request_to_the_login_page(client, name, args, method):
    url = reverse(name, args=args)
    response = getattr(client, method)(url)

    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={quote(url, safe='/')}"
    assert "HX-Request" in response["Vary"]


def test_it_keeps_the_query_of_the_page_in_next():
    response = _partial(Client(), "deployments:deployment-live", [7], "get",
                        **{"HX-Current-URL": "http://testserver/kernels/jobs/4/?shape=a&batch=8"})
    assert response["Ceiling-Login-URL"] == "/login/?next=%2Fkernels%2Fjobs%2F4%2F%3Fshape%3Da%26batch%3D8"


@pytest.mark.parametrize("current", ["", "https://elsewhere.example/deployments/7/", "//elsewhere.example/x", "not a url"])
def test_it_leaves_out_next_when_the_page_is_unknown_or_on_another_host(current):
    response = _partial(Client(), "deployments:deployment-live", [7], "get", **{"HX-Current-URL": current})
    assert response.status_code == 401
    assert response["Ceiling-Login-URL"] == "/login/"


def test_it_answers_401_to_the_polls_of_a_page_once_its_session_logged_out(viewer):
    """As a user met it: a viewer's deployment page, then a logout from another tab of the same
    browser (the same session cookie); the page's polls get 401, its reload the login page."""
    node = cpu_node_create(name="edge-box")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node, name="edge-recipe"))
    process = deployment.processes.get()
    browser = _client(viewer)
    page = reverse("deployments:deployment-detail", args=[deployment.pk])
    live = reverse("deployments:deployment-live", args=[deployment.pk])
    log = reverse("deployments:process-log", args=[deployment.pk, process.pk])
    headers = {"HX-Request": "true", "HX-Current-URL": f"http://testserver{page}"}
    assert browser.get(page).status_code == 200
    assert browser.get(live, {"known": str(process.pk)}, headers=headers).status_code == 200
    assert browser.get(log, headers=headers).status_code == 200

    browser.post(reverse("logout"))

    for url in (live, log):
        response = browser.get(url, {"known": str(process.pk)}, headers=headers)
        assert response.status_code == 401, url
        assert response["Ceiling-Login-URL"] == f"/login/?next={quote(page, safe='')}"
    reloaded = browser.get(page)
    assert reloaded.status_code == 302 and reloaded["Location"] == f"/login/?next={quote(page, safe='/')}"


@pytest.mark.parametrize(("name", "args", "method"), PARTIALS, ids=PARTIAL_IDS)
def test_it_keeps_403_for_a_user_without_a_role_and_marks_a_partial_one_not_to_swap(outsider, name, args, method):
    browser = _client(outsider)

    partial = _partial(browser, name, args, method)
    page = getattr(browser, method)(reverse(name, args=args))

    assert partial.status_code == 403 and partial["HX-Reswap"] == "none" and "HX-Request" in partial["Vary"]
    assert page.status_code == 403 and not page.has_header("HX-Reswap")
    assert not partial.has_header("Ceiling-Login-URL")


def test_it_serves_a_signed_in_viewer_the_partial_unchanged(viewer):
    node = cpu_node_create(name="viewer-box")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node, name="viewer-recipe"))
    response = _partial(_client(viewer), "deployments:deployment-live", [deployment.pk], "get")

    assert response.status_code == 200
    assert 'id="deployment-live"' in response.content.decode()
    assert not response.has_header("HX-Reswap")


def test_it_offers_the_login_url_to_the_page_scripts(viewer):
    html = _client(viewer).get(reverse("deployments:node-list")).content.decode()
    assert '<meta name="login-url" content="/login/">' in html


def test_it_leaves_htmx_to_swap_no_error_answer():
    """htmx swaps no 4xx/5xx answer by default; nothing of ours configures it otherwise."""
    htmx = (Path(settings.BASE_DIR) / "node_modules" / "htmx.org" / "dist" / "htmx.js").read_text()
    assert "{ code: '[45]..', swap: false, error: true }" in htmx
    ours = [*(Path(settings.BASE_DIR) / "static" / "ceiling").glob("*.js"),
            *(Path(settings.BASE_DIR) / "templates").rglob("*.html"),
            *Path(settings.BASE_DIR).glob("*/templates/**/*.html")]
    for path in ours:
        text = path.read_text()
        assert not re.search(r"responseHandling\s*[=:.\[]", text), path
        assert 'name="htmx-config"' not in text, path
