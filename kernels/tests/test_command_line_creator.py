"""Records made from the command line have a creator when ``--user USERNAME`` names one:
``manage.py sweep``, ``manage.py kernel_job``, ``manage.py kernel_job_ingest --new`` (and
``manage.py import_results``, for its importer) hold that
user to what the API would require (an existing, active user with the operator or admin role) and
refuse anyone else in one line naming the user and what is missing, creating nothing. A record
made without ``--user`` has no creator, and its pages say it came from the command line."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus
from kernels.models import KernelJob

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment(db):
    return sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name="cli-owner",
                                 status=DeploymentStatus.STARTING)


def sweep(*args: str) -> BenchmarkSweep:
    call_command("sweep", "cli-owner", "--concurrency", "1", "--lengths", "16:8", "--requests", "2", *args,
                 stdout=io.StringIO())
    return BenchmarkSweep.objects.latest("pk")


def kernel_job(*args: str) -> KernelJob:
    call_command("kernel_job", "toy_attn", "--external", "--cc", "9.0", *args, stdout=io.StringIO())
    return KernelJob.objects.latest("pk")


@pytest.fixture
def inactive(db) -> User:
    user = User.objects.create_user(username="ines-inactive", password="x")
    user.groups.create(name="operator")
    user.is_active = False
    user.save()
    return user


def test_a_sweep_and_a_kernel_job_record_the_user_given(deployment, toy_package, operator, admin_user):
    assert sweep("--user", "oscar-operator").created_by == operator
    assert kernel_job("--user", "alice-admin").created_by == admin_user


@pytest.mark.parametrize("who, missing", [
    ("nobody", "--user 'nobody': no such user"),
    ("vera-viewer", "--user 'vera-viewer': has the viewer role; creating {what} needs operator or admin"),
    ("otto-outsider", "--user 'otto-outsider': has no role (is in none of the groups viewer, operator, admin); "
                      "creating {what} needs operator or admin"),
    ("ines-inactive", "--user 'ines-inactive': the user is inactive; creating {what} needs an active user"),
])
def test_a_user_the_api_would_refuse_is_refused_in_one_line(deployment, toy_package, viewer, outsider, inactive,
                                                             who, missing):
    with pytest.raises(CommandError) as err:
        sweep("--user", who)
    assert str(err.value) == missing.format(what="a sweep")
    assert err.value.returncode == 2  # refused input, as argparse's refusal of a bad option
    with pytest.raises(CommandError) as err:
        kernel_job("--user", who)
    # named with every other problem of the job, of which there is none here
    assert str(err.value) == "the job was not created: " + missing.format(what="a kernel job")
    assert err.value.returncode == 2
    with pytest.raises(CommandError) as err:
        call_command("kernel_job_ingest", "--new", "toy_attn", "--variants", "/nonexistent/variants.json",
                     "/nonexistent/results.json", "--user", who, stdout=io.StringIO())
    assert str(err.value) == missing.format(what="a kernel job")
    assert err.value.returncode == 2
    with pytest.raises(CommandError) as err:
        call_command("import_results", "/nonexistent/results.json", "--user", who, stdout=io.StringIO())
    assert str(err.value) == missing.format(what="runs by import")
    assert err.value.returncode == 2
    assert not BenchmarkSweep.objects.exists() and not KernelJob.objects.exists()


def test_ingest_into_an_existing_job_refuses_a_user_it_would_not_record(toy_package, operator):
    job = kernel_job()
    with pytest.raises(CommandError) as err:
        call_command("kernel_job_ingest", str(job.pk), "/nonexistent/results.json", "--user", "oscar-operator",
                     stdout=io.StringIO())
    assert str(err.value) == ("--user records the creator of the job --new creates; without --new nothing is "
                              "created: leave --user out")
    assert err.value.returncode == 2


def test_the_command_line_exits_2_with_the_one_line_when_no_user_has_that_name(transactional_db):
    from deployments.tests.test_agent_support import database_url

    env = {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    for command in (["import_results", "/nonexistent/results.json"],
                    ["kernel_job_ingest", "--new", "toy_attn", "--variants", "/nonexistent/variants.json",
                     "/nonexistent/results.json"]):
        done = subprocess.run([sys.executable, "manage.py", *command, "--user", "nobody-at-all"], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == ["CommandError: --user 'nobody-at-all': no such user"]


def test_pages_say_a_record_without_a_creator_came_from_the_command_line(deployment, toy_package, client, viewer,
                                                                         operator):
    anonymous_sweep = sweep()
    # One sweep at a time per deployment: the first one ends before the second is made.
    BenchmarkSweep.objects.filter(pk=anonymous_sweep.pk).update(status=SweepStatus.CANCELLED)
    owned_sweep = sweep("--user", "oscar-operator")
    anonymous_job = kernel_job()
    assert anonymous_sweep.created_by is None and anonymous_job.created_by is None
    client.force_login(viewer)

    page = client.get(f"/benchmarks/sweeps/{anonymous_sweep.pk}/").content.decode()
    assert " from the command line</dd>" in page
    page = client.get(f"/benchmarks/sweeps/{owned_sweep.pk}/").content.decode()
    assert " by oscar-operator</dd>" in page and "from the command line" not in page
    index = client.get("/benchmarks/").content.decode()
    assert index.count('<span class="muted small">from the command line</span>') == 1
    assert index.count('<span class="muted small">by oscar-operator</span>') == 1
    page = client.get(f"/kernels/jobs/{anonymous_job.pk}/").content.decode()
    assert " from the command line" in page
