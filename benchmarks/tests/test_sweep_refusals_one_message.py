"""The same bad grid value gets the same message from the sweep form, the API and ``manage.py
sweep``: the API's grid validation (:func:`benchmarks.sweeps.grid_validate`) judges what the form
and the command read from the typed text (:func:`benchmarks.forms.grid_value`), so ``abc`` is
quoted as the string "abc" everywhere, never turned into 0 or refused by argparse first."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from benchmarks.forms import grid_value
from benchmarks.models import BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import form_words, sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db

LENGTHS_RULE = "must be [input_len, output_len] or 'in:out' with 1..1000000 tokens"


@pytest.fixture
def starting():
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="one-message-sim")


# (form field, command option, grid key, typed text, the JSON value the API gets, grid path, message)
ROWS = [
    ("concurrency", "--concurrency", "concurrency", "abc", ["abc"], "grid.concurrency.0",
     'must be an integer 1..4096, got the string "abc"'),
    ("requests", "--requests", "requests", "2.5", 2.5, "grid.requests",
     "must be an integer 1..100000, got 2.5"),
    ("lengths", "--lengths", "lengths", "64-32", ["64-32"], "grid.lengths.0",
     f'{LENGTHS_RULE}, got the string "64-32"'),
]


@pytest.mark.parametrize("field, option, key, typed, json_value, path, message", ROWS,
                         ids=[row[0] for row in ROWS])
def test_form_api_and_command_refuse_a_value_with_one_message(operator, operator_api, starting, field, option, key,
                                                              typed, json_value, path, message) -> None:
    base = {"concurrency": "1", "lengths": "8:8", "requests": "4"}

    grid = {"concurrency": [1], "lengths": [[8, 8]], "requests": 4, key: json_value}
    api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": grid}, format="json")
    assert api.status_code == 400
    assert api.json() == {path: [message]}

    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"),
                                           {"deployment": starting.pk, **base, field: typed})
    assert form.status_code == 400
    assert form.context["errors"] == {field: [form_words(path, message)]}

    args = [arg for name, value in {**base, field: typed}.items() for arg in (f"--{name}", value)]
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "one-message-sim", *args, stdout=io.StringIO())
    assert exc.value.returncode == 2
    assert str(exc.value).split("\n") == ["the sweep grid is refused:", f"  {option} ({path}): {message}"]

    assert not BenchmarkSweep.objects.exists()


def test_the_form_and_the_command_read_typed_text_as_a_json_body_would_carry_it() -> None:
    assert grid_value("8") == 8 and isinstance(grid_value("8"), int)
    assert grid_value("-1") == -1
    assert grid_value("2.5") == 2.5 and grid_value("1e3") == 1000.0 and isinstance(grid_value("1e3"), float)
    for text in ("abc", "64-32", "256:256", "\u00b2", "1_000", ""):
        assert grid_value(text) == text
    assert grid_value("1e400") == float("inf")


def test_the_command_takes_every_number_option_as_text(starting) -> None:
    # no argparse "invalid int value": the grid's validation names each, in the API's words
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "one-message-sim", "--concurrency", "1", "--lengths", "8:8", "--requests", "x",
                     "--warmup", "1.5", "--seed", "s", stdout=io.StringIO())
    assert str(exc.value).split("\n") == [
        "the sweep grid is refused:",
        '  --requests (grid.requests): must be an integer 1..100000, got the string "x"',
        "  --warmup (grid.warmup): must be an integer 0..10000, got 1.5",
        '  --seed (grid.seed): must be an integer 0..2^31-1, got the string "s"']
    assert not BenchmarkSweep.objects.exists()
