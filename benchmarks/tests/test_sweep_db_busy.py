"""A transiently locked database neither fails a sweep nor shows raw: heartbeat and progress
writes are tried again, a sweep that must fail says so in plain words, the reconciler does not
fail a sweep whose worker wrote a heartbeat meanwhile, and following a sweep outlasts a locked
read."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.db.models.query import QuerySet
from django.utils import timezone

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_create, sweep_execute, sweep_wait, sweeps_reconcile
from benchmarks.services import sweeps as sweeps_module
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.dbbusy import busy_timeout_s

pytestmark = pytest.mark.django_db


def test_it_fails_a_sweep_on_a_locked_database_in_plain_words(operator, monkeypatch):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    sweep = sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1], "lengths": ["16:16"]})

    def locked(*args, **kwargs):
        raise OperationalError("database is locked")
    monkeypatch.setattr(sweeps_module, "_wait_ready", locked)
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    sweep.refresh_from_db()
    assert sweep.reason == (f"the database was busy (locked) for more than {busy_timeout_s():.0f} s while the sweep ran; "
                            "the sweep stopped")


@pytest.mark.django_db(transaction=True)  # retries happen outside a transaction, as in the worker
def test_a_heartbeat_the_locked_database_kept_out_does_not_stop_the_sweep(operator, monkeypatch):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.RUNNING)
    watch = sweeps_module._Watch(sweep.pk, None)
    watch._beat -= sweeps_module.HEARTBEAT_S
    monkeypatch.setattr(sweeps_module, "BEST_EFFORT_RETRY_DELAYS_S", (0.0, 0.0))
    attempts = {"n": 0}
    real_update = QuerySet.update

    def update(self, **kwargs):
        if "heartbeat_at" in kwargs:
            attempts["n"] += 1
            if attempts["n"] < 3:  # locked twice, then written
                raise OperationalError("database is locked")
        return real_update(self, **kwargs)
    monkeypatch.setattr(QuerySet, "update", update)
    watch.check(force=True)
    assert attempts["n"] == 3
    assert BenchmarkSweep.objects.get(pk=sweep.pk).heartbeat_at is not None
    # Locked every time: skipped with a warning; the sweep goes on.
    attempts["n"] = -100
    watch._beat -= sweeps_module.HEARTBEAT_S
    watch.check(force=True)


def test_the_reconciler_leaves_a_sweep_whose_worker_wrote_a_heartbeat_meanwhile(monkeypatch):
    long_ago = timezone.now() - timedelta(minutes=10)
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, started_at=long_ago, heartbeat_at=long_ago,
                                          worker="elsewhere:1")
    real = sweeps_module.sweep_worker_lost

    def lost_then_beat(*, sweep):
        reason = real(sweep=sweep)
        # The worker, kept from writing until now, writes its heartbeat after the row was read.
        BenchmarkSweep.objects.filter(pk=sweep.pk).update(heartbeat_at=timezone.now())
        return reason
    monkeypatch.setattr(sweeps_module, "sweep_worker_lost", lost_then_beat)
    assert sweeps_reconcile() == 0
    assert BenchmarkSweep.objects.get(pk=sweep.pk).status == SweepStatus.RUNNING
    monkeypatch.setattr(sweeps_module, "sweep_worker_lost", real)
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(heartbeat_at=long_ago)
    assert sweeps_reconcile() == 1
    assert BenchmarkSweep.objects.get(pk=sweep.pk).reason.startswith("worker lost: no heartbeat from elsewhere:1 for ")


def test_following_a_sweep_outlasts_a_locked_read(monkeypatch):
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.DONE)
    real = BenchmarkSweep.refresh_from_db
    calls = {"n": 0}

    def refresh(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("database is locked")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(BenchmarkSweep, "refresh_from_db", refresh)
    lines: list[str] = []
    assert sweep_wait(sweep=sweep, timeout_s=30, progress=lines.append, poll_s=0.01).status == SweepStatus.DONE
    assert lines[0] == (f"sweep #{sweep.pk}: the database was busy (locked) for more than {busy_timeout_s():.0f} s while reading its "
                        "progress; still waiting")
