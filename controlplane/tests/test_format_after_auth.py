"""A ``?format=`` no renderer answers in is judged after the role: an anonymous request gets the
401 and a role-less or under-privileged one the 403 it gets without the format; a request the
role allows gets the 400 naming the formats offered."""
import pytest

CSV_REFUSED = {"format": ["must be one of json, api; got 'csv'"]}


@pytest.mark.django_db
def test_an_anonymous_or_unauthorised_request_gets_its_401_or_403_whatever_the_format(anon_api, outsider_api,
                                                                                       viewer_api):
    for url in ("/api/recipes/", "/api/deployments/", "/api/nodes/"):
        plain = anon_api.get(url)
        assert plain.status_code == 401, url
        for asked in (f"{url}?format=csv", url.rstrip("/") + ".csv"):
            answer = anon_api.get(asked)
            assert (answer.status_code, answer.json()) == (401, plain.json()), asked
            assert answer["Content-Type"] == "application/json"
    role_less = outsider_api.get("/api/recipes/?format=csv")
    assert (role_less.status_code, role_less.json()) == (403, outsider_api.get("/api/recipes/").json())
    # a viewer may not write a recipe: the 403 of the write comes before the format's 400
    write = viewer_api.post("/api/recipes/?format=csv", {}, format="json")
    assert (write.status_code, write.json()) == (403, viewer_api.post("/api/recipes/", {}, format="json").json())
    # the schema too
    assert anon_api.get("/api/schema/?format=csv").status_code == 401


@pytest.mark.django_db
def test_a_request_the_role_allows_still_gets_the_400_naming_the_formats(viewer_api, operator_api):
    for url in ("/api/recipes/?format=csv", "/api/recipes.csv"):
        answer = viewer_api.get(url)
        assert (answer.status_code, answer.json()) == (400, CSV_REFUSED), url
        assert answer["Content-Type"] == "application/json"
    # a write the role allows is refused before anything is created
    write = operator_api.post("/api/recipes/?format=csv", {"name": "never", "spec": {}}, format="json")
    assert (write.status_code, write.json()) == (400, CSV_REFUSED)
    assert operator_api.get("/api/recipes/").json()["count"] == 0
    # with another parameter given twice, both at once
    both = viewer_api.get("/api/recipes/?format=csv&limit=1&limit=2")
    assert both.status_code == 400 and both.json() == {**CSV_REFUSED,
                                                       "limit": ["is given 2 times (1, 2): give it once"]}
    # an export still serves its own format
    assert viewer_api.get("/api/recipes/?format=json").status_code == 200


@pytest.mark.django_db
def test_a_view_that_answers_whatever_the_format_keeps_its_own_answer(viewer_api, anon_api):
    # a path that is no endpoint is the 404, whatever format is asked for
    missing = viewer_api.get("/api/nothing/?format=csv")
    assert (missing.status_code, missing.json()) == (404, {"detail": "no API endpoint at /api/nothing/"})
    assert anon_api.get("/api/nothing/?format=csv").status_code == 401
