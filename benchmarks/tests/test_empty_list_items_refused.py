"""An empty item of a comma-separated list (``1,,2``, ``1,2,``) is refused, never skipped, with the
API's message for one (:func:`controlplane.drf_defaults.empty_list_item`) at its field or option,
beside every other problem: the sweep form, ``manage.py sweep`` and ``manage.py kernel_job``."""
from __future__ import annotations

import html as html_lib
import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment(db):
    node = cpu_node_create()
    node.agent_heartbeat_at = timezone.now()  # its agent online, as a ready deployment's is
    node.save(update_fields=["agent_heartbeat_at"])
    recipe = recipe_row_create(node=node, name="local-sim-single", spec={"sim": {"gpus_modelled": 4}})
    return deployment_row_create(recipe=recipe, status=DeploymentStatus.READY)


def _form(operator, deployment, **fields):
    data = {"deployment": deployment.pk, "concurrency": "1,8", "lengths": "16:8", "requests": "", "duration": "",
            "rates": "", "slo_ttft_ms": "", "slo_tpot_ms": "", "slo_e2e_ms": "", **fields}
    response = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), data)
    return response, html_lib.unescape(response.content.decode())


@pytest.mark.parametrize("field,typed,message", [
    ("concurrency", "1,,2", "item 2 is empty: give concurrency as 1,8,16"),
    ("concurrency", "1 8,", "item 3 is empty: give concurrency as 1,8,16"),
    ("concurrency", ",1", "item 1 is empty: give concurrency as 1,8,16"),
    ("lengths", "16:8, ,32:8", "item 2 is empty: give lengths as 256:256,1024:128"),
    ("rates", "2,,4", "item 2 is empty: give rates as 2,4.5"),
])
def test_the_sweep_form_refuses_an_empty_item_at_its_field(operator, deployment, field, typed, message):
    response, page = _form(operator, deployment, **{field: typed, "requests": "8"})
    assert response.status_code == 400
    assert message in response.context["errors"][field]
    assert message in page
    assert not BenchmarkSweep.objects.exists()


def test_the_sweep_form_names_an_empty_item_beside_the_other_problems(operator, deployment):
    response, _ = _form(operator, deployment, concurrency="1,,x", slo_ttft_ms="-5")
    errors = response.context["errors"]
    assert errors["concurrency"] == ["item 2 is empty: give concurrency as 1,8,16"]
    assert errors["slo_ttft_ms"] == ["must be more than 0 ms, got -5 ms"]


def test_the_sweep_form_still_takes_spaces_and_commas(operator, deployment, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response, _ = _form(operator, deployment, concurrency=" 1, 8 16 ")
    assert response.status_code == 302, response.context and response.context["errors"]
    assert BenchmarkSweep.objects.get().grid["concurrency"] == [1, 8, 16]


@pytest.fixture
def starting(db):
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="cli-empty")


def test_the_sweep_command_refuses_empty_items_with_every_other_problem(starting):
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "cli-empty", "--lengths", "64:16,,32:8", "--request-rates", "1,,2",
                     "--concurrency", "1,x,", "--seed", "-1", stdout=io.StringIO())
    assert exc.value.returncode == 2
    assert str(exc.value).split("\n") == [
        "the sweep grid is refused:",
        "  --request-rates (grid.request_rates): item 2 is empty: give --request-rates as 2,4.5",
        "  --concurrency (grid.concurrency): item 3 is empty: give --concurrency as 1,8,16",
        "  --lengths (grid.lengths): item 2 is empty: give --lengths as 256:256,1024:128",
        '  --concurrency (grid.concurrency.1): must be an integer 1..4096, got the string "x"',
        "  --requests (grid.requests): open-loop points (--request-rates) need --requests or --duration",
        "  --seed (grid.seed): must be an integer 0..2^31-1, got -1"]
    assert not starting.sweeps.exists()


def test_the_sweep_command_refuses_an_empty_item_alone(starting):
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "cli-empty", "--lengths", "8:8", "--concurrency", "1,,2", stdout=io.StringIO())
    assert str(exc.value).split("\n") == [
        "the sweep grid is refused:",
        "  --concurrency (grid.concurrency): item 2 is empty: give --concurrency as 1,8,16"]
    assert exc.value.returncode == 2 and not starting.sweeps.exists()
