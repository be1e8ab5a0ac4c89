"""A sweep's name is one line: tab and newline are refused by the API, the sweep form and
``manage.py sweep --name`` with one message; the sweep form names each refused item of a list
field by its position, as the API names it by index."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def starting():
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="name-sim")


@pytest.mark.parametrize("name,code,abbr,at", [("a\tb", "0009", "HT", 2), ("warm\nchat", "000A", "LF", 5),
                                               ("x\ry", "000D", "CR", 2), ("a\x1bb", "001B", "ESC", 2)])
def test_a_control_character_in_a_name_is_refused_alike_everywhere(operator_api, operator, starting,
                                                                   name, code, abbr, at):
    message = f"Must not contain control characters: U+{code} ({abbr}) at character {at}; a name is one line of text."
    api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": {"concurrency": [1], "requests": 4},
                                             "name": name}, format="json")
    assert api.status_code == 400 and api.json() == {"name": [message]}
    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": starting.pk, "concurrency": "1", "lengths": "8:8", "name": name})
    assert form.status_code == 400 and form.context["errors"]["name"] == [message]
    with pytest.raises(CommandError) as err:
        call_command("sweep", "name-sim", "--concurrency", "1", "--name", name, stdout=io.StringIO())
    assert str(err.value).split("\n") == ["the sweep is refused:", f"  --name (name): {message}"]
    assert not BenchmarkSweep.objects.exists()


def test_the_form_names_each_refused_concurrency_by_its_position(operator_api, operator, starting):
    api = operator_api.post("/api/sweeps/", '{"deployment": %d, "grid": {"concurrency": [1e400, -3, 8]}}' % starting.pk,
                            content_type="application/json")
    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": starting.pk, "concurrency": "1e400, -3, 8", "lengths": "8:8"})
    assert form.status_code == 400
    errors = form.context["errors"]["concurrency"]
    assert len(errors) == 2 and errors[0].startswith("item 1: ") and errors[1].startswith("item 2: "), errors
    assert "-3" in errors[1]
    assert api.status_code == 400 and {"grid.concurrency.0", "grid.concurrency.1"} <= set(api.json()), api.json()
    assert not BenchmarkSweep.objects.exists()
