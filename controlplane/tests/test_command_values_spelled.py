"""Every command quotes an option given twice the same way, each value as typed in quotes
(``--version is given twice ('1', then '2')``, whatever the option's type), and spells a refused
number as JSON does (``got -1``, not ``got -1.0``); ``manage.py sweep`` says "1 point"; a sim
profile's hardware names its GPUs in the plural."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("args,line", [
    (["dryrun", "x", "--version", "1", "--version", "2"], "--version is given twice ('1', then '2'): give it once"),
    (["sweep", "x", "--timeout", "1", "--timeout", "2.50"], "--timeout is given twice ('1', then '2.50'): give it once"),
    (["sweep", "x", "--concurrency", "1", "--concurrency", "2"],
     "--concurrency is given twice ('1', then '2'): give it once"),
    (["kernel_job", "toy", "--external", "--wait", "5", "--wait", "1e1"],
     "--wait is given twice ('5', then '1e1'): give it once"),
])
def test_an_option_given_twice_is_quoted_as_typed(args, line):
    with pytest.raises(CommandError) as err:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    assert line in str(err.value)


def test_a_refused_number_is_spelled_as_json_does():
    with pytest.raises(CommandError) as err:
        call_command("sweep", "x", "--timeout", "-1", stdout=io.StringIO())
    assert str(err.value) == "Error: argument --timeout: must be a finite number of seconds > 0, got -1"
    assert err.value.returncode == 2
    with pytest.raises(CommandError) as err:
        call_command("kernel_job", "toy", "--external", "--wait", "-5", stdout=io.StringIO())
    # every problem of the input on one line (the package is unknown too), the number spelled as JSON does
    assert str(err.value).startswith("the job was not created: --wait must be a finite number of seconds >= 0, "
                                     "got -5; ") and err.value.returncode == 2
    with pytest.raises(CommandError) as err:
        call_command("kernel_job", "toy", "--external", "--wait", "-0.5", stdout=io.StringIO())
    assert "--wait must be a finite number of seconds >= 0, got -0.5;" in str(err.value)


def test_one_point_is_one_point(django_capture_on_commit_callbacks):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                       recipe_name="cli-one")
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=False):
        call_command("sweep", "cli-one", "--concurrency", "2", "--lengths", "16:8", "--requests", "4", stdout=out)
    assert out.getvalue() == f"sweep #{deployment.sweeps.get().pk} created: 1 point, 4 requests\n"


def test_the_seed_profiles_name_their_gpus_in_the_plural():
    from deployments.engines.simcore.profile import profile_load

    assert profile_load("seed-sm120-fallback").hardware == "8x sm_120 GPUs, TP4 per role"
    assert profile_load("seed-sm120-fallback-tp4").hardware == "4x sm_120 GPUs, TP4, single server"
