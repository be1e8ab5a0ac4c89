"""A sweep held back for sharing a CPU or GPU whose own deployment stops meanwhile fails at its
task's next look, not once the sweep ahead of it ends; a pending sweep whose task was lost is
sent again by the periodic reconcile pass, and then runs against a real ``sim`` server once."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import F
from django.utils import timezone

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_create, sweep_execute, sweeps_reconcile
from benchmarks.services import sweeps as sweep_services
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus
from deployments.models import Deployment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]

SHORT = {"concurrency": [1], "lengths": ["16:8"], "requests": 2}


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    settings.CEILING_CONTROL_CONCURRENCY = 2


@pytest.fixture
def sent(monkeypatch) -> list[dict]:
    """Every ``sweep_run_task`` sent (args, queue, countdown) instead of going to the broker."""
    from benchmarks.tasks import sweep_run_task

    calls: list[dict] = []
    monkeypatch.setattr(sweep_run_task, "apply_async", lambda args, **kw: calls.append({"args": args, **kw}))
    return calls


@pytest.mark.parametrize(("state", "why"), [(DeploymentStatus.STOPPED, "stopped by operator"),
                                            (DeploymentStatus.STOPPING, ""),
                                            (DeploymentStatus.FAILED, "single #0 exited with code 1")])
def test_a_held_sweep_whose_deployment_stops_fails_at_its_next_look(
        sim_url: str, operator, sent, state: str, why: str) -> None:
    busy_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-a")
    mine = sim_deployment_create(base_url=sim_url, recipe_name="sim-b")  # also pinned to CPU 0 of local
    running = BenchmarkSweep.objects.create(deployment=busy_dep, status=SweepStatus.RUNNING)  # runs elsewhere
    sweep = sweep_create(deployment=mine, user=operator, grid=SHORT)
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.PENDING
    sweep.refresh_from_db()
    assert sweep.status == SweepStatus.PENDING and sweep.held_at is not None
    assert len(sent) == 2  # the create and one look again with a countdown
    Deployment.objects.filter(pk=mine.pk).update(status=state, reason=why)
    # the look sent again: the sweep ahead still runs, but this one fails now
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    sweep.refresh_from_db()
    expected = f"deployment #{mine.pk} is {state}" + (f": {why}" if why else "") + "; nothing to benchmark"
    assert (sweep.status, sweep.reason) == (SweepStatus.FAILED, expected)
    assert sweep.ended_at is not None and sweep.started_at is None
    assert len(sent) == 2  # nothing sent again
    assert not sweep.runs.exists()
    assert BenchmarkSweep.objects.get(pk=running.pk).status == SweepStatus.RUNNING


def test_a_held_sweep_whose_deployment_still_starts_stays_held(sim_url: str, operator, sent) -> None:
    busy_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-a")
    mine = sim_deployment_create(base_url=sim_url, recipe_name="sim-b")
    BenchmarkSweep.objects.create(deployment=busy_dep, status=SweepStatus.RUNNING)
    sweep = sweep_create(deployment=mine, user=operator, grid=SHORT)
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.PENDING
    Deployment.objects.filter(pk=mine.pk).update(status=DeploymentStatus.STARTING)
    # the next look comes a recheck later (its countdown): one that came sooner would find the
    # first look's mark fresh and end its chain as a duplicate
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(
        held_at=F("held_at") - timedelta(seconds=sweep_services.SHARED_RECHECK_S))
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.PENDING
    assert (BenchmarkSweep.objects.get(pk=sweep.pk).reason, len(sent)) == ("", 3)


def test_the_reconcile_pass_sends_again_the_task_of_a_pending_sweep_nobody_looked_at(
        sim_url: str, operator, sent) -> None:
    now = timezone.now()
    old = now - timedelta(seconds=sweep_services.PENDING_LOST_S + 5)
    deps = {name: sim_deployment_create(base_url=sim_url, recipe_name=name)
            for name in ("held-lost", "queued-lost", "held-fresh", "queued-fresh", "cancelling")}
    sweeps = {name: sweep_create(deployment=dep, user=operator, grid=SHORT) for name, dep in deps.items()}
    assert len(sent) == 5
    sent.clear()
    BenchmarkSweep.objects.filter(pk=sweeps["held-lost"].pk).update(held_at=old, created_at=old)
    BenchmarkSweep.objects.filter(pk=sweeps["queued-lost"].pk).update(created_at=old)
    BenchmarkSweep.objects.filter(pk=sweeps["held-fresh"].pk).update(held_at=now, created_at=old)
    BenchmarkSweep.objects.filter(pk=sweeps["cancelling"].pk).update(cancel_requested=True, created_at=old)

    # every worker slot busy: a pending task may wait in the broker for one, so nothing is sent
    busy = [BenchmarkSweep.objects.create(deployment=sim_deployment_create(base_url="http://127.0.0.1:9",
                                                                           recipe_name=f"busy-{n}"),
                                          status=SweepStatus.RUNNING, heartbeat_at=now, worker="elsewhere:1")
            for n in range(2)]
    assert sweeps_reconcile() == 0
    assert sent == []

    BenchmarkSweep.objects.filter(pk__in=[b.pk for b in busy]).update(status=SweepStatus.DONE, ended_at=now)
    assert sweeps_reconcile() == 0
    assert sent == [{"args": [sweeps["held-lost"].pk], "queue": "control"},
                    {"args": [sweeps["queued-lost"].pk], "queue": "control"}]

    # the task sent again runs the sweep; a duplicate copy (the first was not lost after all) does nothing more
    lost = sweeps["queued-lost"].pk
    assert sweep_execute(sweep_id=lost) == SweepStatus.DONE
    assert sweep_execute(sweep_id=lost) == SweepStatus.DONE
    [run] = BenchmarkRun.objects.filter(sweep_id=lost)
    assert (run.status, run.num_requests, BenchmarkSweep.objects.get(pk=lost).requests_done) == ("done", 2, 2)
    sent.clear()
    assert sweeps_reconcile() == 0
    assert [c["args"] for c in sent] == [[sweeps["held-lost"].pk]]  # still pending and not looked at


def test_held_at_is_in_the_api_its_schema_and_on_the_sweep_page(sim_url: str, operator, operator_api, sent) -> None:
    from django.test import Client
    from django.urls import reverse

    busy_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-a")
    mine = sim_deployment_create(base_url=sim_url, recipe_name="sim-b")
    BenchmarkSweep.objects.create(deployment=busy_dep, status=SweepStatus.RUNNING)
    sweep = sweep_create(deployment=mine, user=operator, grid=SHORT)
    assert operator_api.get(f"/api/sweeps/{sweep.pk}/").json()["held_at"] is None  # never held yet
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.PENDING
    held_at = BenchmarkSweep.objects.get(pk=sweep.pk).held_at
    body = operator_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert body["status"] == SweepStatus.PENDING
    assert body["held_at"] == held_at.isoformat().replace("+00:00", "Z")

    schema = operator_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    prop = schema["components"]["schemas"]["Sweep"]["properties"]["held_at"]
    assert (prop["type"], prop["format"], prop.get("readOnly"), prop.get("nullable")) == (
        "string", "date-time", True, True)
    # It says how often it moves, from the constant the task's looks use.
    assert sweep_services.SHARED_RECHECK_S == 5.0
    assert "renewed every 5 s while it stays held" in prop["description"]
    assert "less than 60 s old;" in prop["description"]
    assert "SHARED_RECHECK_S" not in prop["description"] and "HELD_STALE_S" not in prop["description"]

    client = Client()
    client.force_login(operator)
    page = client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])).content.decode()
    shown = held_at.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
    # The same instant as the API's held_at, said to move: each look renews it.
    assert ("Held back (its task looks again every 5 s; last looked at "
            f'<time datetime="{held_at.isoformat()}">{shown}</time>, the API\'s held_at):') in page
    assert "waiting for sweep #" in page

    # once the sweep ahead ends it is claimed: held_at is cleared, and the page says nothing of it
    BenchmarkSweep.objects.filter(deployment=busy_dep).update(status=SweepStatus.DONE)
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    assert operator_api.get(f"/api/sweeps/{sweep.pk}/").json()["held_at"] is None
    assert "Held back" not in client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])).content.decode()
