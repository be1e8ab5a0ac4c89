"""The API's documented contract matches what it answers: the flat 400 body and its schema
component, the token endpoint's 400, the 400/409 answers the deployments endpoints list, the
401 and 403 every operation that needs credentials lists (real bodies checked against it), and
the page size cap of list endpoints."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from deployments.models import ProcessEvent
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(viewer_api) -> dict:
    response = viewer_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def ref(response: dict) -> str:
    return response["content"]["application/json"]["schema"]["$ref"]


def test_the_validation_error_component_is_the_flat_body_the_api_answers(schema, operator_api):
    component = schema["components"]["schemas"]["ValidationError"]
    assert component["type"] == "object"
    assert component["additionalProperties"] == {"type": "array", "items": {"type": "string"}}
    assert "properties" not in component and "required" not in component
    # A real 400 has that shape: dotted paths at the top level, no "errors" wrapper.
    cpu_node_create()
    body = operator_api.post("/api/recipes/", {"name": "x", "engine": "sim", "topology": "single",
                                               "node": "cpu-box", "spec": {"stop_grace_s": 0}},
                             format="json").json()
    assert "errors" not in body
    assert body["spec.stop_grace_s"] == ["must be between 1 and 3600, got 0"]
    assert all(isinstance(v, list) and all(isinstance(m, str) for m in v) for v in body.values())


def test_a_wrong_password_gets_the_documented_non_field_errors_body(schema, viewer):
    response = APIClient().post("/api/auth/token/", {"username": "vera-viewer", "password": "nope"}, format="json")
    missing = APIClient().post("/api/auth/token/", {"username": "vera-viewer"}, format="json")

    assert response.status_code == 400
    assert response.json() == {"non_field_errors": ["Unable to log in with provided credentials."]}
    assert missing.status_code == 400
    assert missing.json() == {"password": ["This field is required."]}
    responses = schema["paths"]["/api/auth/token/"]["post"]["responses"]
    assert ref(responses["400"]) == "#/components/schemas/ValidationError"
    assert "non_field_errors" in responses["400"]["description"]
    assert ref(responses["429"]) == "#/components/schemas/Detail"
    assert set(responses) == {"200", "400", "403", "429"}


def test_the_deployments_endpoints_list_the_400s_and_409s_they_answer(schema):
    paths = schema["paths"]
    deploy = paths["/api/deployments/"]["post"]["responses"]
    assert ref(deploy["400"]) == "#/components/schemas/ValidationError"
    assert ref(deploy["409"]) == "#/components/schemas/Detail"
    cancel = paths["/api/deployments/{id}/cancel/"]["post"]
    assert set(cancel["responses"]) == {"202", "400", "401", "403", "404", "409"}
    assert "ready" in cancel["responses"]["409"]["description"]
    assert "is ready; cancel only applies" in cancel["description"]
    stop = paths["/api/deployments/{id}/stop/"]["post"]
    assert set(stop["responses"]) == {"202", "400", "401", "403", "404"}
    for operation in (cancel, stop):  # a body with keys is refused
        assert ref(operation["responses"]["400"]) == "#/components/schemas/ValidationError"
        assert "Takes no body" in operation["description"]
    assert ref(paths["/api/recipes/{id}/"]["delete"]["responses"]["409"]) == "#/components/schemas/Detail"
    for path in ("/api/deployments/", "/api/recipes/", "/api/processes/"):
        listed = paths[path]["get"]["responses"]
        assert ref(listed["400"]) == "#/components/schemas/ValidationError", path
        assert listed["200"]["content"]["application/json"]["schema"]["$ref"].startswith(
            "#/components/schemas/Paginated"), path
    for path in ("/api/recipes/", "/api/recipes/{id}/"):
        for method in ("post",) if path.endswith("recipes/") else ("put", "patch"):
            assert ref(paths[path][method]["responses"]["400"]) == "#/components/schemas/ValidationError"
    limit = next(p for p in paths["/api/deployments/"]["get"]["parameters"] if p["name"] == "limit")
    assert "at most 500" in limit["description"]


def ref_node(response: dict) -> dict:
    return response["content"]["application/json"]["schema"]


def resolved(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def assert_documented(schema: dict, response, path: str, method: str) -> None:
    """``response``'s status is listed for the operation, and its JSON body is an object with
    every required property of the documented schema, no undocumented one, each a string."""
    responses = schema["paths"][path][method]["responses"]
    code = str(response.status_code)
    assert code in responses, f"{method} {path}: {code} is not documented"
    body, documented = response.json(), resolved(schema, ref_node(responses[code]))
    assert documented["type"] == "object"
    assert set(documented.get("required", [])) <= set(body) <= set(documented["properties"]), (body, documented)
    assert all(documented["properties"][key]["type"] == "string" and isinstance(value, str)
               for key, value in body.items())


def test_every_operation_that_needs_credentials_lists_its_401_and_403(schema):
    detail = "#/components/schemas/Detail"
    checked = 0
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if {} in operation.get("security", [{}]):
                continue  # open to anyone: the token endpoint
            checked += 1
            for code in ("401", "403"):
                assert ref(operation["responses"][code]) == detail, (method, path, code)
    assert checked > 50
    token = schema["paths"]["/api/auth/token/"]["post"]
    assert token["security"] == [{}] and "401" not in token["responses"]
    assert "Authentication credentials were not provided" in (
        schema["paths"]["/api/recipes/"]["get"]["responses"]["401"]["description"])


def test_real_401_and_403_bodies_match_the_documented_ones(schema, anon_api, outsider_api, viewer_api):
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create()))
    bad_token = APIClient()
    bad_token.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    cancel = f"/api/deployments/{deployment.pk}/cancel/"

    answers = [
        (anon_api.get("/api/deployments/"), "/api/deployments/", "get", 401),
        (bad_token.get(f"/api/processes/{deployment.processes.get().pk}/log/"), "/api/processes/{id}/log/", "get",
         401),
        (anon_api.post(cancel), "/api/deployments/{id}/cancel/", "post", 401),
        (outsider_api.get("/api/recipes/"), "/api/recipes/", "get", 403),
        (viewer_api.post(cancel), "/api/deployments/{id}/cancel/", "post", 403),
        (viewer_api.get("/api/secrets/"), "/api/secrets/", "get", 403),
    ]

    for response, path, method, code in answers:
        assert response.status_code == code, (path, response.json())
        assert_documented(schema, response, path, method)
    assert answers[0][0].json() == {"detail": "Authentication credentials were not provided."}
    assert answers[3][0].json() == {"detail": "This needs the viewer role; your account has no role."}
    assert answers[4][0].json() == {"detail": "This needs the operator role; you are a viewer."}
    assert answers[5][0].json() == {"detail": "This needs the admin role; you are a viewer."}


def test_a_list_endpoint_returns_at_most_500_rows_a_page(viewer_api):
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create()))
    ProcessEvent.objects.bulk_create([ProcessEvent(deployment=deployment, kind="note", message=str(i))
                                      for i in range(501)])

    page = viewer_api.get(f"/api/deployments/{deployment.pk}/events/?limit=1000000").json()
    rest = viewer_api.get(page["next"]).json()
    default = viewer_api.get(f"/api/deployments/{deployment.pk}/events/").json()

    assert (page["count"], len(page["results"])) == (501, 500)
    assert "limit=500" in page["next"] and "offset=500" in page["next"]
    assert [e["message"] for e in rest["results"]] == ["500"]
    assert len(default["results"]) == 100


def test_a_refused_null_is_named_null():
    from controlplane.api import shown_value

    assert shown_value(None) == "null"
    assert shown_value(True) == "the boolean true" and shown_value("1") == 'the string "1"'
