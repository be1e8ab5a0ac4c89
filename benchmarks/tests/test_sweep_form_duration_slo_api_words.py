"""The sweep form refuses a bad time limit or SLO with the API's reason for the same input, word
for word: the form hands them to the API's grid validation (an SLO typed in ms as the same SLO in
seconds), and a blank field is not given, as a key left out of the API's grid (blank lengths are
the grid's default, 256:256, as in the API). A refused SLO is said
in the ms the field takes (``got -5 ms``, ``must be a number of ms > 0``), never in the grid's
seconds. An SLO over its bound is refused by the API with the seconds it would be in ms. A refused form
comes back with what was typed, not a value read from it."""
from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse
from django.utils.html import escape

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db

GRID = {"concurrency": [1], "lengths": "8:8", "requests": 4}
FORM = {"concurrency": "1", "lengths": "8:8", "requests": "4"}


@pytest.fixture
def starting():
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="words-sim")


# (form field, text typed, the API's grid key, the same value in a JSON body)
CASES = [
    ("duration", "0", "duration_s", 0),
    ("duration", "-3", "duration_s", -3),
    ("duration", "0.5", "duration_s", 0.5),
    ("duration", "90000", "duration_s", 90000),
    ("duration", "abc", "duration_s", "abc"),
    ("slo_ttft_ms", "0", "slo.ttft_s", 0),
    ("slo_ttft_ms", "-5", "slo.ttft_s", -0.005),
    ("slo_tpot_ms", "abc", "slo.tpot_s", "abc"),
    ("slo_e2e_ms", "-250", "slo.e2e_s", -0.25),
    ("slo_ttft_ms", "1s", "slo.ttft_s", "1s"),
    ("slo_ttft_ms", "900000", "slo.ttft_s", 900),
    ("slo_e2e_ms", "3600001", "slo.e2e_s", 3600.001),
]

# The form's own words where they differ from the API's: every SLO refusal in the field's ms.
FORM_SAID = {("slo_ttft_ms", "0"): ["must be more than 0 ms, got 0 ms"],
             ("slo_ttft_ms", "-5"): ["must be more than 0 ms, got -5 ms"],
             ("slo_e2e_ms", "-250"): ["must be more than 0 ms, got -250 ms"],
             ("slo_tpot_ms", "abc"): ['must be a number of ms > 0, got the string "abc"'],
             ("slo_ttft_ms", "1s"): ['must be a number of ms > 0, got the string "1s"'],
             ("slo_ttft_ms", "900000"): ["must be at most 600000 ms (600 s), got 900000 ms"],
             ("slo_e2e_ms", "3600001"): ["must be at most 3600000 ms (3600 s), got 3600001 ms"]}


def _body_with(key: str, value) -> dict:
    if key.startswith("slo."):
        return {**GRID, "slo": {key.split(".", 1)[1]: value}}
    return {**GRID, key: value}


@pytest.mark.parametrize("field,typed,key,value", CASES)
def test_the_form_gives_the_apis_reason_for_the_same_bad_input(operator_api, operator, starting,
                                                              field, typed, key, value) -> None:
    body = json.dumps({"deployment": starting.pk, "grid": _body_with(key, value)})
    api = operator_api.post("/api/sweeps/", body, content_type="application/json")
    assert api.status_code == 400, api.content
    said = FORM_SAID.get((field, typed), api.json()[f"grid.{key}"])

    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"),
                                           {"deployment": starting.pk, **FORM, field: typed})
    assert form.status_code == 400
    assert form.context["errors"] == {field: said}
    html = form.content.decode()
    shown = re.search(rf'<label for="id_{field}">.*?<ul class="errorlist">(.*?)</ul>', html, re.S)
    assert shown is not None and re.findall(r"<li>(.*?)</li>", shown.group(1)) == [escape(m) for m in said]
    assert f'id="id_{field}" name="{field}" value="{escape(typed)}"' in html   # what was typed, as typed
    assert not BenchmarkSweep.objects.exists()


def test_blank_fields_are_not_given_in_the_form_as_in_the_api(operator_api, operator, starting,
                                                              django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
            "deployment": starting.pk, **FORM, "duration": "  ", "slo_ttft_ms": "", "slo_tpot_ms": " ",
            "slo_e2e_ms": ""})
    assert form.status_code == 302
    sweep = BenchmarkSweep.objects.get()
    assert sweep.grid["duration_s"] is None and sweep.grid["slo"] == {}


@pytest.mark.parametrize("blank", ["", "   "])
def test_blank_lengths_take_the_documented_default_in_the_form_as_in_the_api(operator_api, operator, starting,
                                                                              django_capture_on_commit_callbacks,
                                                                              blank) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": {"concurrency": [1], "requests": 4}},
                                format="json")
    assert api.status_code == 201, api.content
    assert api.json()["grid"]["lengths"] == [[256, 256]]
    BenchmarkSweep.objects.all().delete()   # one active sweep per deployment: make room for the form's

    with django_capture_on_commit_callbacks(execute=False):
        form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
            "deployment": starting.pk, **FORM, "lengths": blank})
    assert form.status_code == 302, form.context["errors"]
    sweep = BenchmarkSweep.objects.get()
    assert sweep.grid["lengths"] == [[256, 256]]   # 256 input, 256 output tokens
    assert sweep.name == "words-sim c=1 256/256" and sweep.requests_total == 4


def test_blank_lengths_beside_a_refused_field_name_only_that_field(operator, starting) -> None:
    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": starting.pk, **FORM, "lengths": "", "duration": "0"})
    assert form.status_code == 400
    assert form.context["errors"] == {"duration": ["must be at least 1 s and at most 86400 s (24 h), got 0"]}
    assert 'id="id_lengths" name="lengths" value=""' in form.content.decode()   # left blank, as typed
    assert not BenchmarkSweep.objects.exists()


def test_a_refused_form_comes_back_with_the_text_typed_not_a_value_read_from_it(operator, starting) -> None:
    typed = {"name": "run  one", "concurrency": "1, 2 4", "lengths": "64 : 64, 32:8", "requests": "16",
             "duration": "1e1", "rates": "2.50", "slo_ttft_ms": "250.0", "slo_tpot_ms": "1e400",
             "slo_e2e_ms": "", "warmup": "007", "seed": "x"}
    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {"deployment": starting.pk, **typed})
    assert form.status_code == 400
    assert set(form.context["errors"]) == {"slo_tpot_ms", "seed"}, form.context["errors"]
    html = form.content.decode()
    for field, text in typed.items():
        assert f'id="id_{field}" name="{field}" value="{escape(text)}"' in html, field
    assert not BenchmarkSweep.objects.exists()


def test_an_slo_refused_in_the_form_is_said_in_ms_as_typed(operator_api, operator, starting) -> None:
    api = operator_api.post("/api/sweeps/", json.dumps({"deployment": starting.pk, "grid": _body_with(
        "slo.ttft_s", -0.001)}), content_type="application/json")
    assert api.json()["grid.slo.ttft_s"] == ["must be seconds > 0, got -0.001"]   # the API's seconds

    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": starting.pk, **FORM, "slo_ttft_ms": "-1", "slo_tpot_ms": "-0.5"})
    assert form.status_code == 400
    assert form.context["errors"] == {"slo_ttft_ms": ["must be more than 0 ms, got -1 ms"],
                                      "slo_tpot_ms": ["must be more than 0 ms, got -0.5 ms"]}
    html = form.content.decode()
    assert "got -1 ms" in html and "got -0.5 ms" in html
    assert "-0.001" not in html and "-0.0005" not in html
    assert not BenchmarkSweep.objects.exists()


@pytest.mark.parametrize(("slo", "said"), [
    ({"ttft_s": 800}, "must be at most 600 s, got 800; did you mean 800 ms = 0.8 s?"),
    ({"tpot_s": 601.5}, "must be at most 600 s, got 601.5; did you mean 601.5 ms = 0.6015 s?"),
    ({"e2e_s": 30000}, "must be at most 3600 s, got 30000; did you mean 30000 ms = 30 s?"),
    ({"e2e_s": 1e9}, "must be at most 3600 s, got 1000000000"),
])
def test_the_api_refuses_an_slo_of_seconds_that_look_like_ms(operator_api, starting, slo, said) -> None:
    body = json.dumps({"deployment": starting.pk, "grid": {**GRID, "slo": slo}})
    api = operator_api.post("/api/sweeps/", body, content_type="application/json")
    assert api.status_code == 400, api.content
    assert api.json() == {f"grid.slo.{next(iter(slo))}": [said]}
    assert not BenchmarkSweep.objects.exists()
