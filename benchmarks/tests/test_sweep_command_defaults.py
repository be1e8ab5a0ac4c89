"""``manage.py sweep`` says the defaults it takes: ``--help`` names c=1,8,16 and 4 x c requests,
and the line printed on creation names each default the sweep was given."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def starting(db):
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="cli-defaults")


def test_the_help_names_the_defaults(capsys):
    with pytest.raises(SystemExit):
        call_command("sweep", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "Without --concurrency or --request-rates the points are c=1,8,16" in text
    assert "each sends 4 x c requests" in text
    assert "(default 1,8,16; none when --request-rates is given)" in text


def test_the_creation_line_names_the_defaults_taken(starting, django_capture_on_commit_callbacks):
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=False):
        call_command("sweep", "cli-defaults", "--lengths", "64:16", stdout=out)
    sweep = starting.sweeps.get()
    assert sweep.grid["concurrency"] == [1, 8, 16] and sweep.requests_total == 4 * (1 + 8 + 16)
    assert out.getvalue() == (f"sweep #{sweep.pk} created: 3 points, 100 requests; defaults taken: --concurrency "
                              "1,8,16, --requests-per-concurrency 4 (4 x c requests per point)\n")


def test_the_creation_line_names_no_default_when_none_is_taken(starting, django_capture_on_commit_callbacks):
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=False):
        call_command("sweep", "cli-defaults", "--lengths", "64:16", "--concurrency", "2,4", "--requests", "4", stdout=out)
    sweep = starting.sweeps.get()
    assert out.getvalue() == f"sweep #{sweep.pk} created: 2 points, 8 requests\n"
