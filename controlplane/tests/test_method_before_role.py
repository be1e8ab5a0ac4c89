"""A method an endpoint never answers is a 405 with its ``Allow`` header for every signed-in user,
whatever the role: ``POST /api/nodes/`` is 405 to a viewer as to an admin, since no role could make
it (controlplane.permissions.method_allowed, and role_page's ``methods`` for the pages). A 403 is
only for a method the endpoint has that the role may not use; a request with no user is still
asked to sign in first."""
from __future__ import annotations

import pytest
from django.test import Client

ROLES = ["outsider_api", "viewer_api", "operator_api", "admin_api"]

#: API endpoints and a method none of them takes, with the Allow header they answer with.
NEVER = [
    ("post", "/api/nodes/", "GET, HEAD, OPTIONS"),
    ("put", "/api/nodes/{node}/", "GET, DELETE, HEAD, OPTIONS"),
    ("delete", "/api/nodes/{node}/telemetry/", "GET, HEAD, OPTIONS"),
    ("post", "/api/runs/", "GET, HEAD, OPTIONS"),
    ("delete", "/api/runs/{run}/", "GET, HEAD, OPTIONS"),
    ("patch", "/api/sweeps/{sweep}/", "GET, HEAD, OPTIONS"),
    ("delete", "/api/deployments/{deployment}/", "GET, HEAD, OPTIONS"),
    ("post", "/api/processes/", "GET, HEAD, OPTIONS"),
    ("post", "/api/kernel-best/", "GET, HEAD, OPTIONS"),
    ("post", "/api/kernel-packages/", "GET, HEAD, OPTIONS"),
    ("post", "/api/kernel-whatif/", "GET, HEAD, OPTIONS"),
    ("put", "/api/secrets/", "GET, POST, HEAD, OPTIONS"),
    ("post", "/api/recipes/{recipe}/versions/", "GET, HEAD, OPTIONS"),
    ("get", "/api/deployments/{deployment}/stop/", "POST, OPTIONS"),
    ("post", "/api/schema/", "GET, HEAD, OPTIONS"),
]


@pytest.mark.parametrize("method, url, allow", NEVER)
@pytest.mark.parametrize("who", ROLES)
def test_a_method_the_endpoint_never_takes_is_405_for_every_role(request, rows, who, method, url, allow):
    answer = getattr(request.getfixturevalue(who), method)(url.format(**rows))
    assert answer.status_code == 405, (who, method, url, answer.content)
    assert answer["Allow"] == allow
    assert answer.json() == {"detail": f'Method "{method.upper()}" not allowed; this endpoint takes {allow}.'}


def test_post_of_the_nodes_list_is_405_to_a_viewer_as_to_an_admin(viewer_api, admin_api, rows):
    for api in (viewer_api, admin_api):
        answer = api.post("/api/nodes/", {"name": "n2"}, format="json")
        assert (answer.status_code, answer["Allow"]) == (405, "GET, HEAD, OPTIONS")


def test_a_method_the_endpoint_takes_is_still_refused_by_role(viewer_api, operator_api, admin_api, rows):
    node = f"/api/nodes/{rows['node']}/"
    # deleting a node is the admin's: 403 below, and the admin's answer is about the node (409: in use)
    for api in (viewer_api, operator_api):
        answer = api.delete(node)
        assert answer.status_code == 403 and answer.json()["detail"].startswith("This needs the admin role")
    assert admin_api.delete(node).status_code == 409
    # creating a recipe is the operator's
    assert viewer_api.post("/api/recipes/", {}, format="json").status_code == 403
    assert operator_api.post("/api/recipes/", {}, format="json").status_code == 400


def test_a_request_with_no_user_is_asked_to_sign_in_first(anon_api, rows):
    assert anon_api.post("/api/nodes/").status_code == 401


def test_a_path_that_is_no_endpoint_is_still_a_404_for_any_method(viewer_api):
    for method in ("get", "post", "delete"):
        assert getattr(viewer_api, method)("/api/nope/").status_code == 404


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("method, url, allow", [
    ("post", "/nodes/", "GET, HEAD, OPTIONS"),
    ("delete", "/recipes/{recipe}/", "GET, HEAD, OPTIONS"),
    ("post", "/benchmarks/runs/", "GET, HEAD, OPTIONS"),
    ("post", "/kernels/whatif/", "GET, HEAD, OPTIONS"),
    ("put", "/benchmarks/import/", "GET, HEAD, POST, OPTIONS"),
    ("put", "/benchmarks/sweeps/{sweep}/cancel/", "GET, HEAD, POST, OPTIONS"),
    ("delete", "/deployments/{deployment}/stop/", "GET, HEAD, POST, OPTIONS"),
    ("patch", "/recipes/new/", "GET, HEAD, POST, OPTIONS"),
    ("post", "/api/docs/", "GET, HEAD, OPTIONS"),
])
@pytest.mark.parametrize("who", ["outsider", "viewer", "operator", "admin_user"])
def test_a_page_answers_a_method_it_never_takes_405_for_every_role(request, rows, who, method, url, allow):
    answer = getattr(_client(request.getfixturevalue(who)), method)(url.format(**rows))
    assert (answer.status_code, answer["Allow"]) == (405, allow), (who, method, url)


def test_a_page_refuses_a_method_it_takes_by_role_and_names_its_methods_on_options(viewer, operator, rows):
    # a viewer may not send the recipe form (403); an operator gets the form's answer
    assert _client(viewer).post("/recipes/new/").status_code == 403
    assert _client(operator).post("/recipes/new/").status_code == 400
    answer = _client(viewer).options("/nodes/")
    assert (answer.status_code, answer["Allow"], answer.content) == (200, "GET, HEAD, OPTIONS", b"")
    assert _client(viewer).get("/nodes/").status_code == 200
    anonymous = Client().post("/nodes/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
