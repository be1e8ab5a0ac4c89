"""A number of thousands of digits (Python's int() refuses more than 4300) gets the field's own
refusal, never a 500: the sweep form's ``?deployment=`` and ``lengths``, the API's grid lengths,
and ``manage.py sweep``'s deployment id and ``--lengths``."""
from __future__ import annotations

import html
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus
from deployments.tests.factories import LONG_DIGITS, LONG_DIGITS_SHOWN, signed_in_client

pytestmark = pytest.mark.django_db

LONG, SHOWN = LONG_DIGITS, LONG_DIGITS_SHOWN


def _client(user=None) -> Client:
    return signed_in_client(user, raise_request_exception=False)


@pytest.fixture
def starting():
    """A deployment still starting: a sweep of it could be created (nothing runs here)."""
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="long-sim")


@pytest.mark.parametrize("raw, shown", [(LONG, SHOWN), ("9" * 30, "9" * 30), ("0" * 5000 + "999", "999")],
                         ids=["5000-digits", "30-digits", "zeros-then-999"])
def test_the_sweep_form_of_a_deployment_id_of_too_many_digits_is_not_found(operator, raw, shown):
    response = _client(operator).get("/benchmarks/sweeps/new/", {"deployment": raw})
    assert response.status_code == 404
    assert f"No deployment #{shown}." in html.unescape(response.content.decode())


def test_the_sweep_form_posted_for_a_deployment_id_of_thousands_of_digits_names_it(operator):
    response = _client(operator).post("/benchmarks/sweeps/new/", {"deployment": LONG, "concurrency": "1",
                                                                  "lengths": "64:64"})
    assert response.status_code == 400 and not BenchmarkSweep.objects.exists()
    assert "no deployment with id 999" in html.unescape(response.content.decode())


@pytest.mark.parametrize("lengths", [f"{LONG}:64", f"64:{LONG}"], ids=["input", "output"])
def test_a_length_of_thousands_of_digits_is_refused_as_any_length_out_of_range(operator, operator_api, starting,
                                                                               lengths):
    page = _client(operator).post("/benchmarks/sweeps/new/", {"deployment": str(starting.pk), "concurrency": "1",
                                                              "lengths": lengths})
    assert page.status_code == 400
    assert "with 1..1000000 tokens" in html.unescape(page.content.decode())
    api = operator_api.post("/api/sweeps/", json.dumps({"deployment": starting.pk,
                                                        "grid": {"concurrency": [1], "lengths": [lengths]}}),
                            content_type="application/json")
    assert api.status_code == 400
    [message] = api.json()["grid.lengths.0"]
    assert message.startswith("must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, got the string")
    assert not BenchmarkSweep.objects.exists()


def test_manage_sweep_refuses_a_deployment_id_of_thousands_of_digits(operator):
    with pytest.raises(CommandError) as err:
        call_command("sweep", LONG, "--user", operator.username, stdout=io.StringIO(), stderr=io.StringIO())
    assert str(err.value).startswith("no deployment '999")
    assert not BenchmarkSweep.objects.exists()


def test_manage_sweep_refuses_a_length_of_thousands_of_digits(starting):
    with pytest.raises(CommandError) as err:
        call_command("sweep", "long-sim", "--lengths", f"{LONG}:8", "--concurrency", "1", stdout=io.StringIO())
    assert err.value.returncode == 2
    assert str(err.value).split("\n")[0] == "the sweep grid is refused:"
    assert "with 1..1000000 tokens" in str(err.value)
    assert not BenchmarkSweep.objects.exists()
