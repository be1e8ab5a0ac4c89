"""One active sweep per deployment, held by the database: concurrent ``POST /api/sweeps/`` against
the live server create exactly one sweep and answer the others 409 naming it, and a create that
loses the race after its check (the partial unique index refuses its insert) gets the same 409."""
from __future__ import annotations

import threading
from datetime import timedelta

import httpx
import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_create, sweeps_reconcile
from benchmarks.services import sweeps as sweep_services
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.errors import Conflict
from deployments.choices import DeploymentStatus

GRID = {"concurrency": [1], "lengths": "64:16", "requests": 4}


def _busy_message(sweep_id: int, deployment_id: int) -> str:
    return (f"sweep #{sweep_id} is already pending on deployment #{deployment_id} (queued for a benchmark worker); "
            "wait for it or cancel it first (concurrent sweeps would skew each other)")


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_concurrent_creates_through_the_api_make_exactly_one_sweep(live_server, operator) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    token = Token.objects.create(user=operator).key
    clients = 8
    start = threading.Barrier(clients)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def post() -> None:
        with httpx.Client(base_url=live_server.url, headers={"Authorization": f"Token {token}"},
                          timeout=60) as client:
            start.wait()
            response = client.post("/api/sweeps/", json={"deployment": deployment.pk, "grid": GRID})
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=post) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert len(answers) == clients
    codes = sorted(r.status_code for r in answers)
    assert codes == [201] + [409] * (clients - 1), [r.text for r in answers]
    [created] = [r.json() for r in answers if r.status_code == 201]
    assert list(BenchmarkSweep.objects.filter(deployment=deployment).values_list("pk", flat=True)) == [created["id"]]
    for refused in (r.json() for r in answers if r.status_code == 409):
        assert refused == {"detail": _busy_message(created["id"], deployment.pk), "code": "conflict"}


@pytest.mark.django_db
def test_a_create_that_loses_the_race_after_its_check_gets_the_same_409(operator, monkeypatch,
                                                                         django_capture_on_commit_callbacks) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    real_check = sweep_services._refuse_if_busy
    rival: list[BenchmarkSweep] = []

    def check_then_lose(dep) -> None:
        real_check(dep)  # nothing active yet: passes
        if not rival:  # another request inserts its sweep between this check and our insert
            rival.append(BenchmarkSweep.objects.create(deployment=dep, grid=GRID, name="rival"))
            monkeypatch.setattr(sweep_services, "_refuse_if_busy", real_check)

    monkeypatch.setattr(sweep_services, "_refuse_if_busy", check_then_lose)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with pytest.raises(Conflict) as refused:
            sweep_create(deployment=deployment, user=operator, grid=GRID)
    assert str(refused.value) == _busy_message(rival[0].pk, deployment.pk)
    assert list(BenchmarkSweep.objects.values_list("pk", flat=True)) == [rival[0].pk]
    assert callbacks == []  # nothing was sent to the worker


@pytest.mark.django_db
def test_the_database_allows_one_active_sweep_per_deployment_and_any_number_of_ended_ones() -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    other = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                  recipe_name="sim-other")
    for status in (SweepStatus.DONE, SweepStatus.FAILED, SweepStatus.CANCELLED, SweepStatus.DONE):
        BenchmarkSweep.objects.create(deployment=deployment, status=status)
    running = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.RUNNING)
    BenchmarkSweep.objects.create(deployment=other, status=SweepStatus.PENDING)  # another deployment
    BenchmarkSweep.objects.create(deployment=None, status=SweepStatus.PENDING)  # imported runs' sweeps
    BenchmarkSweep.objects.create(deployment=None, status=SweepStatus.PENDING)
    for status in (SweepStatus.PENDING, SweepStatus.WAITING, SweepStatus.RUNNING):
        with pytest.raises(IntegrityError), transaction.atomic():
            BenchmarkSweep.objects.create(deployment=deployment, status=status)
    # Once the active one ends, the deployment can be swept again.
    BenchmarkSweep.objects.filter(pk=running.pk).update(status=SweepStatus.DONE)
    BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.PENDING)
    assert BenchmarkSweep.objects.filter(deployment=deployment).count() == 6


@pytest.mark.django_db
def test_a_sweep_that_ends_keeps_no_current_rate_in_its_row_or_the_api(viewer_api) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    long_ago = timezone.now() - timedelta(hours=1)
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.RUNNING, current_tok_s=334.6,
                                          current_point="c=1 64/16", started_at=long_ago, heartbeat_at=long_ago,
                                          worker="elsewhere:1")
    run = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=1,
                                      input_len=64, output_len=16)
    assert viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()["current_tok_s"] == 334.6  # running: the rate now
    assert sweeps_reconcile() == 1  # its worker has been silent for an hour
    sweep.refresh_from_db()
    run.refresh_from_db()
    assert (sweep.status, sweep.current_tok_s, sweep.current_point) == (SweepStatus.FAILED, None, "")
    assert run.status == RunStatus.FAILED
    body = viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert body["status"] == "failed" and body["current_tok_s"] is None
    # A finished row that still holds a rate (stored before ends cleared it) reads null too.
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.DONE, current_tok_s=334.6)
    assert viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()["current_tok_s"] is None
    listed = viewer_api.get(f"/api/sweeps/?deployment={deployment.pk}").json()["results"]
    assert [(s["id"], s["current_tok_s"]) for s in listed] == [(sweep.pk, None)]


@pytest.mark.django_db(transaction=True)
def test_the_migration_fails_every_active_sweep_of_a_deployment_but_its_oldest() -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [("benchmarks", "0004_sweep_worker_heartbeat")]
    after = [("benchmarks", "0005_one_active_sweep_per_deployment")]
    MigrationExecutor(connection).migrate(before)
    try:
        old = MigrationExecutor(connection).loader.project_state(before).apps
        Sweep, Run = old.get_model("benchmarks", "BenchmarkSweep"), old.get_model("benchmarks", "BenchmarkRun")
        deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
        other = sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name="sim-other")
        first = Sweep.objects.create(deployment_id=deployment.pk, status="running", current_tok_s=463.7)
        second = Sweep.objects.create(deployment_id=deployment.pk, status="running", current_tok_s=235.7)
        third = Sweep.objects.create(deployment_id=deployment.pk, status="pending")
        ended = Sweep.objects.create(deployment_id=deployment.pk, status="done")
        alone = Sweep.objects.create(deployment_id=other.pk, status="waiting")
        point = Run.objects.create(sweep_id=second.pk, ordinal=0, status="running")
        kept_point = Run.objects.create(sweep_id=first.pk, ordinal=0, status="running")
    finally:
        MigrationExecutor(connection).migrate(after)
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())  # back to today's schema
    rows = {s.pk: s for s in BenchmarkSweep.objects.all()}
    assert [rows[pk].status for pk in (first.pk, second.pk, third.pk, ended.pk, alone.pk)] == [
        "running", "failed", "failed", "done", "waiting"]
    reason = (f"sweep #{first.pk} was already active on deployment #{deployment.pk}: concurrent sweeps skew "
              "each other's numbers, so this one was stopped when one active sweep per deployment became the rule")
    for pk in (second.pk, third.pk):
        assert (rows[pk].reason, rows[pk].cancel_requested, rows[pk].current_tok_s) == (reason, True, None)
        assert rows[pk].ended_at is not None
    assert rows[first.pk].current_tok_s == 463.7 and not rows[first.pk].cancel_requested
    assert BenchmarkRun.objects.get(pk=point.pk).status == RunStatus.FAILED
    assert BenchmarkRun.objects.get(pk=point.pk).reason == reason
    assert BenchmarkRun.objects.get(pk=kept_point.pk).status == RunStatus.RUNNING


@pytest.mark.django_db
def test_the_refusal_names_the_active_sweep_s_own_state_pending_waiting_or_running(operator) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    busy = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.PENDING)
    for status in (SweepStatus.PENDING, SweepStatus.WAITING, SweepStatus.RUNNING):
        BenchmarkSweep.objects.filter(pk=busy.pk).update(status=status)
        with pytest.raises(Conflict) as refused:
            sweep_create(deployment=deployment, user=operator, grid=GRID)
        note = {SweepStatus.PENDING: " (queued for a benchmark worker)",
                SweepStatus.WAITING: " (waiting for the deployment to be ready: "
                                     f"deployment #{deployment.pk} is starting)",
                SweepStatus.RUNNING: ""}[status]
        assert str(refused.value).startswith(f"sweep #{busy.pk} is already {status} on deployment #{deployment.pk}"
                                             f"{note}; ")
