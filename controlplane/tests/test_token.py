"""The token endpoint: a person gets a token with their password and uses it on the API."""
from rest_framework.test import APIClient


def test_it_exchanges_a_password_for_a_token_that_works(viewer):
    client = APIClient()
    response = client.post("/api/auth/token/", {"username": "vera-viewer", "password": "correct-horse-battery"}, format="json")
    assert response.status_code == 200
    token = response.json()["token"]
    assert len(token) == 40
    again = client.post("/api/auth/token/", {"username": "vera-viewer", "password": "correct-horse-battery"}, format="json")
    assert again.json()["token"] == token
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.get("/api/recipes/").status_code == 200


def test_it_refuses_a_wrong_password_with_400_and_no_token(viewer):
    response = APIClient().post("/api/auth/token/", {"username": "vera-viewer", "password": "nope"}, format="json")
    assert response.status_code == 400
    assert "token" not in response.json()


def test_it_refuses_an_unknown_query_key_as_every_other_write_does_and_never_quotes_a_password(viewer):
    client = APIClient()
    body = {"username": "vera-viewer", "password": "correct-horse-battery"}
    refused = client.post("/api/auth/token/?x=1", body, format="json")
    assert refused.status_code == 400
    assert refused.json() == {"x": ["unknown field 'x'; allowed: format"]}
    secret = client.post("/api/auth/token/?password=correct-horse-battery&x=2", body, format="json")
    assert secret.status_code == 400
    assert secret.json() == {"password": ["unknown field 'password'; allowed: format"],
                             "x": ["unknown field 'x'; allowed: format"]}
    assert "correct-horse-battery" not in secret.content.decode()
    assert client.post("/api/auth/token/?format=json", body, format="json").status_code == 200


def test_it_parses_bodies_as_every_other_endpoint_does(viewer):
    client = APIClient()
    nested = client.post("/api/auth/token/", data="[" * 50000 + "]" * 50000, content_type="application/json")
    assert nested.status_code == 400
    assert nested.json() == {"non_field_errors": ["the request body is nested too deeply to read: JSON arrays and "
                                                  "objects may nest fewer than 1000 levels"]}
    huge = client.post("/api/auth/token/", data=b'{"username": "' + b"v" * (2 << 20) + b'"}',
                       content_type="application/json")
    assert huge.status_code == 413
    # ...and a well-formed one still gets the token.
    ok = client.post("/api/auth/token/", {"username": "vera-viewer", "password": "correct-horse-battery"}, format="json")
    assert ok.status_code == 200 and len(ok.json()["token"]) == 40


def test_it_serves_the_api_docs_from_local_static_files_to_signed_in_users(viewer, client):
    assert client.get("/api/docs/").status_code == 302  # to the login page, not a bare 401
    client.force_login(viewer)
    page = client.get("/api/docs/").content.decode()
    assert "cdn.jsdelivr.net" not in page
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page


def test_it_refuses_a_token_to_a_user_in_no_role_group_with_403_and_creates_none(outsider):
    from rest_framework.authtoken.models import Token

    response = APIClient().post("/api/auth/token/", {"username": "otto-outsider", "password": "correct-horse-battery"}, format="json")
    assert response.status_code == 403
    body = response.json()
    assert "token" not in body
    assert body["code"] == "no_role"
    assert body["detail"].startswith("User 'otto-outsider' has no role")
    assert not Token.objects.filter(user=outsider).exists()


def test_it_still_answers_a_wrong_password_of_a_user_in_no_role_group_with_400(outsider):
    response = APIClient().post("/api/auth/token/", {"username": "otto-outsider", "password": "nope"}, format="json")
    assert response.status_code == 400


def test_it_refuses_the_api_docs_and_schema_to_a_user_in_no_role_group(outsider, client, outsider_api):
    client.force_login(outsider)
    docs = client.get("/api/docs/")
    assert docs.status_code == 403
    assert "swagger-ui-bundle.js" not in docs.content.decode()
    assert client.get("/api/schema/").status_code == 403
    assert outsider_api.get("/api/schema/").status_code == 403


def test_it_keeps_the_schema_at_401_without_credentials_and_serves_it_to_a_viewer(anon_api, viewer_api):
    assert anon_api.get("/api/schema/").status_code == 401
    # A browser that opens the schema signed out sees why, as JSON, instead of saving an
    # "OpenAPI document" that holds the error.
    for accept in ("text/html,application/xhtml+xml,*/*;q=0.8", "application/vnd.oai.openapi"):
        refused = anon_api.get("/api/schema/", HTTP_ACCEPT=accept)
        assert refused.status_code == 401 and refused["Content-Type"] == "application/json"
        assert "Content-Disposition" not in refused
        assert refused.json()["detail"] == "Authentication credentials were not provided."
    yaml = viewer_api.get("/api/schema/")
    assert yaml.status_code == 200 and yaml["Content-Type"].startswith("application/vnd.oai.openapi")
    assert viewer_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").status_code == 200
