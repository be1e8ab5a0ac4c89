"""``manage.py sweep --name``: the sweep gets the name the API would give it for the same text
(judged by the API's own ``name`` field, trimmed), the line printed on creation quotes it, and a
name the API refuses is refused in the API's words, beside every problem of the grid, with status
2 and no sweep made."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def starting():
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="named-sim")


def _sweep(*args: str) -> str:
    out = io.StringIO()
    call_command("sweep", "named-sim", "--concurrency", "1", "--lengths", "8:8", "--requests", "4", *args, stdout=out)
    return out.getvalue()


def _refused(*args: str) -> CommandError:
    with pytest.raises(CommandError) as exc:
        _sweep(*args)
    return exc.value


def test_the_sweep_gets_the_name_the_api_gives_and_the_output_quotes_it(
        starting, operator_api, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        out = _sweep("--name", "  warm chat  ")
    sweep = BenchmarkSweep.objects.get()
    assert sweep.name == "warm chat"
    assert out == f"sweep #{sweep.pk} 'warm chat' created: 1 point, 4 requests\n"
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.CANCELLED)

    with django_capture_on_commit_callbacks(execute=False):
        api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "name": "  warm chat  ",
                                                 "grid": {"concurrency": [1], "lengths": "8:8", "requests": 4}},
                                format="json")
    assert api.status_code == 201 and api.json()["name"] == sweep.name


def test_without_a_name_or_with_a_blank_one_the_sweep_is_named_as_the_api_names_it(
        starting, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        out = _sweep("--name", "   ")
    sweep = BenchmarkSweep.objects.get()
    assert sweep.name == "named-sim c=1 8/8"
    assert out == f"sweep #{sweep.pk} created: 1 point, 4 requests\n"


@pytest.mark.parametrize("typed", ["n" * 201, "bad\x1b[31m", "left\u202eright"])
def test_a_name_the_api_refuses_is_refused_in_its_words(starting, operator_api, typed) -> None:
    api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "name": typed,
                                             "grid": {"concurrency": [1], "lengths": "8:8", "requests": 4}},
                            format="json")
    assert api.status_code == 400
    said = api.json()["name"]

    err = _refused("--name", typed)
    assert str(err).split("\n") == ["the sweep is refused:", *(f"  --name (name): {m}" for m in said)]
    assert err.returncode == 2 and not BenchmarkSweep.objects.exists()


def test_a_refused_name_is_named_beside_the_grids_problems(starting) -> None:
    err = _refused("--name", "n" * 201, "--seed", "-1")
    assert str(err).split("\n") == [
        "the sweep is refused:",
        "  --name (name): Use at most 200 characters; got 201.",
        "  --seed (grid.seed): must be an integer 0..2^31-1, got -1"]
    assert err.returncode == 2 and not BenchmarkSweep.objects.exists()
