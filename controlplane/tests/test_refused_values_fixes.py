"""Refused values say what was sent: the token endpoint names a username of the wrong type with its
value and a password by its type alone (never its text); a list or an object is quoted with its
contents; ``/api`` itself gets the JSON 400 of a host outside ALLOWED_HOSTS; a ``?format=`` no
renderer answers in is a 400 naming the formats the endpoint offers, not a bare 404."""
from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlplane.api import shown_value

TOKEN = "/api/auth/token/"
SECRET = "correct-horse-battery"   # the personas' password (conftest)


# --- the token endpoint ------------------------------------------------------------------------


@pytest.mark.parametrize("value, shown", [(5, "the number 5"), (True, "the boolean true"), (None, "null"),
                                          (["vera-viewer"], 'the list ["vera-viewer"]'),
                                          ({"name": "vera"}, 'the object {"name": "vera"}')])
def test_a_username_of_the_wrong_type_is_named_with_what_was_sent(viewer, value, shown):
    response = APIClient().post(TOKEN, {"username": value, "password": SECRET}, format="json")

    assert response.status_code == 400
    assert response.json() == {"username": [f"must be a string, got {shown}"]}


@pytest.mark.parametrize("value, kind", [("5", "a number"), ("1e400", "a number"), ("false", "a boolean"),
                                         ("null", "null"), (f'["{SECRET}"]', "a list"),
                                         (f'{{"text": "{SECRET}"}}', "an object")])
def test_a_password_of_the_wrong_type_is_named_by_its_type_alone(viewer, value, kind):
    response = APIClient().post(TOKEN, f'{{"username": "vera-viewer", "password": {value}}}',
                                content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {"password": [f"must be a string, got {kind}"]}
    assert SECRET not in response.content.decode()


def test_no_message_quotes_a_password_given_as_text(viewer):
    client = APIClient()
    answers = [
        # a JSON key given twice, a form field given twice
        client.post(TOKEN, '{"username": "vera-viewer", "password": "%s", "password": "x"}' % SECRET,
                    content_type="application/json"),
        client.post(TOKEN, f"username=vera-viewer&password={SECRET}&password=x",
                    content_type="application/x-www-form-urlencoded"),
        # inside a list or an object, a NaN beside it, a key given twice inside it
        client.post(TOKEN, '{"username": "vera-viewer", "password": ["%s", NaN]}' % SECRET,
                    content_type="application/json"),
        client.post(TOKEN, '{"username": "vera-viewer", "password": {"a": "%s", "a": "y"}}' % SECRET,
                    content_type="application/json"),
        # a character no encoding writes, which DRF's field would name by its code point
        client.post(TOKEN, '{"username": "vera-viewer", "password": "ab\\udbffcd"}', content_type="application/json"),
    ]
    bodies = [answer.json() for answer in answers]

    assert [answer.status_code for answer in answers] == [400] * 5
    assert bodies == [{"password": ["is given 2 times: give it once"]},
                      {"password": ["is given 2 times: give it once"]},
                      {"password": ["must be a string, got a list"]},
                      {"password": ["must be a string, got an object"]},
                      {"password": ["Surrogate characters are not allowed."]}]
    assert not any(SECRET in json.dumps(body) or "DBFF" in json.dumps(body).upper() for body in bodies)


def test_every_problem_of_a_token_body_is_named_at_once(viewer):
    response = APIClient().post(TOKEN, '{"username": 5, "password": 7, "extra": 1, "extra": 2}',
                                content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {"extra": ["is given 2 times (1, 2): give it once"],
                               "username": ["must be a string, got the number 5"],
                               "password": ["must be a string, got a number"]}
    # the username given twice is quoted, as any other key given twice
    twice = APIClient().post(TOKEN, '{"username": "a", "username": "b", "password": 7}',
                             content_type="application/json")
    assert twice.json() == {"username": ['is given 2 times ("a", "b"): give it once'],
                            "password": ["must be a string, got a number"]}
    ok = APIClient().post(TOKEN, {"username": "vera-viewer", "password": SECRET}, format="json")
    assert ok.status_code == 200 and len(ok.json()["token"]) == 40


# --- a list or an object is quoted with its contents ------------------------------------------------


def test_a_list_or_an_object_is_quoted_in_json_spelling_cut_like_a_scalar():
    assert shown_value([8, 8, 8]) == "the list [8, 8, 8]"
    assert shown_value({"a": 1}) == 'the object {"a": 1}'
    assert shown_value([True, None, "é"]) == 'the list [true, null, "é"]'
    assert shown_value(list(range(50))) == "the list " + json.dumps(list(range(50)))[:39] + "…"
    assert shown_value({"k": "v" * 60}) == 'the object {"k": "' + "v" * 32 + "…"
    assert shown_value(5) == "the number 5" and shown_value("x" * 50) == 'the string "' + "x" * 38 + "…"


def test_a_refused_recipe_field_quotes_the_list_sent(operator_api):
    response = operator_api.post("/api/recipes/", {"name": ["a", "b"]}, format="json")

    assert response.status_code == 400
    assert response.json()["name"] == ['must be a string (e.g. "seed-v4-flash-pd"), got the list ["a", "b"]']


# --- a host outside ALLOWED_HOSTS at /api -----------------------------------------------------------


def test_api_itself_gets_the_json_400_of_a_host_outside_allowed_hosts_and_apiary_the_page():
    client = Client(HTTP_HOST="evil.example.com")
    detail = ("The Host header names a host this server does not answer to (set the ALLOWED_HOSTS environment "
              "variable to add one).")
    for path in ("/api", "/api?x", "/api/"):
        response = client.get(path)
        assert response.status_code == 400 and response["Content-Type"] == "application/json", path
        assert response.json() == {"detail": detail}
    for path in ("/apiary", "/apiary/", "/api-docs"):
        response = client.get(path)
        assert response.status_code == 400 and response["Content-Type"].startswith("text/html"), path
        assert "<h1>Bad request</h1>" in response.content.decode()


# --- a format no renderer answers in --------------------------------------------------------------


@pytest.mark.django_db
def test_a_format_no_renderer_answers_in_is_a_400_naming_the_formats_offered(viewer_api):
    for url in ("/api/recipes/?format=csv", "/api/recipes.csv", "/api/deployments/?format=xml"):
        response = viewer_api.get(url)
        assert response.status_code == 400, url
        assert response["Content-Type"] == "application/json"
    assert viewer_api.get("/api/recipes/?format=csv").json() == {"format": ["must be one of json, api; got 'csv'"]}
    assert viewer_api.get("/api/recipes.csv").json() == {"format": ["must be one of json, api; got 'csv'"]}
    long = viewer_api.get("/api/recipes/", {"format": "y" * 100}).json()
    assert long == {"format": [f"must be one of json, api; got {'y' * 40!r}"]}
    # the schema names its own formats; a refusal of it is JSON, as every refusal of the schema
    schema = viewer_api.get("/api/schema/?format=csv")
    assert schema.status_code == 400 and schema["Content-Type"] == "application/json"
    assert schema.json() == {"format": ["must be one of yaml, json; got 'csv'"]}
    # a format given twice is the rule of a repeated parameter
    twice = viewer_api.get("/api/recipes/?format=json&format=csv")
    assert twice.status_code == 400 and twice.json() == {"format": ["is given 2 times (json, csv): give it once"]}
    # the formats an endpoint offers answer as before
    assert viewer_api.get("/api/recipes/?format=json").status_code == 200
    assert viewer_api.get("/api/recipes.json").status_code == 200
    assert viewer_api.get("/api/recipes/?format=api", HTTP_ACCEPT="text/html")["Content-Type"].startswith("text/html")
    assert viewer_api.get("/api/schema/?format=json").status_code == 200


@pytest.mark.django_db
def test_an_export_still_serves_its_own_csv(viewer_api):
    from benchmarks.choices import RunStatus, SweepStatus
    from benchmarks.models import BenchmarkRun, BenchmarkSweep

    sweep = BenchmarkSweep.objects.create(name="closed", status=SweepStatus.DONE, grid={"concurrency": [1]})
    run = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.DONE, concurrency=1, input_len=8,
                                      output_len=8, summary={"requests": 4, "successes": 4, "failures": 0})
    for url in (f"/api/runs/{run.pk}/export/?format=csv", f"/api/sweeps/{sweep.pk}/export/?format=csv"):
        export = viewer_api.get(url)
        assert export.status_code == 200 and export["Content-Type"].startswith("text/csv"), url
    # the export judges its own format: the same message, naming the formats it serves
    refused = viewer_api.get(f"/api/runs/{run.pk}/export/?format=xml")
    assert refused.status_code == 400 and list(refused.json()) == ["format"]
