"""``manage.py sweep --wait --timeout S``: a sweep still going when the S seconds run out is left
running, not cancelled; the command says so on one line with the sweep's id, its page and API
paths and how to cancel it, and exits with status 3, neither success (0) nor a failed sweep (1)
nor a refusal (2). A ``--timeout`` that is no finite number of seconds > 0 is refused by the option's
parser (2), naming the option and its unit."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def starting(db):
    """A deployment still starting: its sweep is created and nothing runs it here."""
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="wait-timeout")


def sweep_wait_for(*args: str) -> tuple[CommandError, str]:
    out = io.StringIO()
    with pytest.raises(CommandError) as err:
        call_command("sweep", "wait-timeout", "--concurrency", "1", "--lengths", "16:8", "--requests", "2",
                     "--wait", *args, stdout=out)
    return err.value, out.getvalue()


def test_a_sweep_still_running_when_the_timeout_ends_is_left_running_and_exits_3(starting, monkeypatch):
    from benchmarks.management.commands import sweep as command

    def running_until_the_timeout(*, sweep, timeout_s, progress):
        BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.RUNNING)
        sweep.refresh_from_db()
        return sweep

    monkeypatch.setattr(command, "sweep_wait", running_until_the_timeout)
    err, out = sweep_wait_for("--timeout", "60")
    sweep = BenchmarkSweep.objects.get()
    assert str(err) == (f"sweep #{sweep.pk} is still running after --timeout 60 s and was not cancelled: follow it "
                        f"at /benchmarks/sweeps/{sweep.pk}/ or GET /api/sweeps/{sweep.pk}/; cancel it with "
                        f"POST /api/sweeps/{sweep.pk}/cancel/")
    assert err.returncode == 3 and "\n" not in str(err)
    assert out.startswith(f"sweep #{sweep.pk} created: ")
    assert BenchmarkSweep.objects.get().status == SweepStatus.RUNNING   # not cancelled


def test_a_sweep_not_yet_started_says_its_own_status(starting, client, viewer):
    err, _ = sweep_wait_for("--timeout", "0.01")
    sweep = BenchmarkSweep.objects.get()
    assert str(err).startswith(f"sweep #{sweep.pk} is still {SweepStatus(sweep.status).label} after --timeout 0.01 s "
                               "and was not cancelled: ")
    assert err.returncode == 3 and sweep.status not in (SweepStatus.CANCELLED, SweepStatus.FAILED)
    client.force_login(viewer)
    assert client.get(f"/benchmarks/sweeps/{sweep.pk}/").status_code == 200   # the paths it names exist
    assert client.get(f"/api/sweeps/{sweep.pk}/").status_code == 200


@pytest.mark.parametrize("value,why", [
    ("-1", "must be a finite number of seconds > 0, got -1"),
    ("-0.5", "must be a finite number of seconds > 0, got -0.5"),
    ("0", "must be a finite number of seconds > 0, got 0"),
    ("nan", "must be a finite number of seconds > 0 (e.g. 3600), got 'nan'"),
    ("inf", "must be a finite number of seconds > 0 (e.g. 3600), got 'inf'"),
    ("-inf", "must be a finite number of seconds > 0 (e.g. 3600), got '-inf'"),
    ("1_000", "must be a finite number of seconds > 0 (e.g. 3600), got '1_000'"),
    ("1e400", "must be a finite number of seconds > 0, got 1e400"),
    ("1e-400", "must be a finite number of seconds > 0, got 1e-400"),
    ("abc", "must be a finite number of seconds > 0 (e.g. 3600), got 'abc'"),
    ("", "must be a finite number of seconds > 0 (e.g. 3600), got ''"),
])
def test_a_timeout_that_is_no_finite_number_of_seconds_is_refused_before_a_sweep_is_made(starting, value, why):
    err, _ = sweep_wait_for("--timeout", value)
    assert str(err) == f"Error: argument --timeout: {why}"
    assert err.returncode == 2 and not BenchmarkSweep.objects.exists()


def test_a_timeout_is_taken_as_seconds_written_as_a_decimal():
    from benchmarks.management.commands.sweep import seconds_option

    assert [seconds_option(t) for t in ("60", "2.5", "1e3", " 7 ")] == [60.0, 2.5, 1000.0, 7.0]


@pytest.mark.parametrize("args", [("--timeout", "-inf"), ("--timeout=-inf",), ("--timeout", "-1e400")])
def test_a_timeout_starting_with_a_dash_is_judged_as_the_option_s_value(starting, args):
    err, _ = sweep_wait_for(*args)
    typed = args[-1].split("=")[-1]
    expected = ("must be a finite number of seconds > 0, got -1e400" if typed == "-1e400" else
                "must be a finite number of seconds > 0 (e.g. 3600), got '-inf'")
    assert str(err) == f"Error: argument --timeout: {expected}"
    assert err.returncode == 2 and not BenchmarkSweep.objects.exists()
