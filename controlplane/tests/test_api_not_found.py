"""Paths under /api/ that no route matches: a JSON 404 whatever DEBUG is, after the same
authentication and role check as any other read of the API."""
import pytest

UNMATCHED = [
    "/api/nothing/",
    "/api/nothing",
    "/api/kernel-packages/toy_attn/nothing/",  # a package has no such action
    "/api/recipes/3/versions/abc/",  # the version pattern takes digits only
    "/api/runs/1/nothing/",
]


@pytest.mark.parametrize("debug", [True, False])
def test_it_answers_an_unmatched_api_path_with_a_json_404(viewer_api, settings, debug):
    settings.DEBUG = debug
    for url in UNMATCHED:
        response = viewer_api.get(url)
        assert response.status_code == 404, url
        assert response["Content-Type"] == "application/json", url
        assert response.json() == {"detail": f"no API endpoint at {url}"}
    # a browser asking for HTML gets the JSON too, and so does every method
    assert viewer_api.get("/api/nothing/", HTTP_ACCEPT="text/html").json()["detail"] == "no API endpoint at /api/nothing/"
    for method in ("post", "put", "patch", "delete", "options"):
        response = getattr(viewer_api, method)("/api/nothing/")
        assert response.status_code == 404, method
        assert response.json() == {"detail": "no API endpoint at /api/nothing/"}, method


def test_it_checks_credentials_and_roles_first_like_any_unknown_object(anon_api, outsider_api):
    for url in ("/api/nothing/", "/api/runs/999999/"):
        anonymous = anon_api.get(url)
        assert anonymous.status_code == 401, url
        assert anonymous.json() == {"detail": "Authentication credentials were not provided."}
        assert outsider_api.get(url).status_code == 403, url
    assert anon_api.post("/api/nothing/", {}, format="json").status_code == 401


def test_it_still_adds_the_missing_slash_of_an_endpoint(viewer_api, operator_api):
    response = viewer_api.get("/api/recipes?engine=sim")
    assert response.status_code == 301
    assert response["Location"] == "/api/recipes/?engine=sim"
    # a write is not redirected (its body would be lost): the 404 names the endpoint
    response = operator_api.post("/api/recipes", {"name": "x"}, format="json")
    assert response.status_code == 404
    assert response.json() == {"detail": "no API endpoint at /api/recipes; the endpoint is /api/recipes/ "
                                         "(with a trailing slash)"}


def test_it_keeps_the_catch_all_out_of_the_schema_and_the_api_root(viewer_api):
    paths = viewer_api.get("/api/schema/?format=json").json()["paths"]
    assert "/api/recipes/" in paths
    assert not [p for p in paths if "*" in p or "^" in p or "$" in p]
    assert viewer_api.get("/api/").status_code == 200
