"""One kernel job per node at a time: a second job of a busy node stays pending, says why, and
starts when the running one ends (done, failed, cancelled or reaped); the database refuses a second
running row of a node; a waiting job can be cancelled; other nodes are not held back; the migration
that added the rule fails all but one running job of a node.

The runner is replaced by the stand-in of conftest (``runner``) that returns build facts for every
variant and can run code while its job is "building", so a second delivery lands while the first
job really holds the node. Task messages are captured instead of published (``sent``)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from kernels.models import KernelJob
from kernels.services import (
    kernel_job_cancel,
    kernel_job_create,
    kernel_job_execute,
    kernel_job_waiting_reason,
    kernel_jobs_reap,
)
from kernels.services.jobs import NODE_BUSY_RETRY_S
from kernels.services.progress import _transition
from kernels.tasks import kernel_job_run_task


def _waiting(running: int, node: str = "cpu-box") -> str:
    return (f"waiting for kernel job #{running} on node {node} to finish (one kernel job per node at a time: "
            "builds use every core and timings need the GPU alone)")


@pytest.fixture
def gpu_online(h200_node):
    """h200-box (GPUs of compute capability 9.0) with a fresh agent heartbeat: its jobs are created
    without a note, so the note of one that waits for the node says so."""
    h200_node.agent_heartbeat_at = timezone.now()
    h200_node.save(update_fields=["agent_heartbeat_at"])
    return h200_node


def _builds_only(node: str = "cpu-box") -> str:
    """What the note of a job created for a node without a GPU of its target starts with."""
    return f"no GPU on node {node}: builds only: 7 variants are built for compute capability 9.0 "


def _job(package, node, **kw) -> KernelJob:
    # dispatch=True, as for a job started from the UI, API or command (the test's transaction never
    # commits, so nothing is sent by the create itself); its note says up front that the node (a
    # CPU box) has no GPU for it: builds only. Its waiting shows in waiting_reason.
    return kernel_job_create(package=package, node=node, cc="9.0", **kw)


def _deliver(message: dict) -> str:
    """Run a captured message as the node agent's worker would."""
    return kernel_job_run_task(*message["args"], **message["kwargs"])


def test_a_second_job_on_a_busy_node_waits_with_the_reason_and_starts_when_the_first_ends(
        toy_package, online, runner, sent, operator_api):
    first, second, third = (_job(toy_package, online) for _ in range(3))
    seen: dict = {}

    def while_first_builds():
        first.refresh_from_db()
        seen["first"] = first.status
        seen["second"] = kernel_job_run_task(second.pk)  # delivered while the first holds the node
        seen["third"] = kernel_job_run_task(third.pk)
        second.refresh_from_db()
        seen["row"] = (second.status, second.started_at, second.phase, second.note)
        seen["reason"] = kernel_job_waiting_reason(job=KernelJob.objects.select_related("node").get(pk=second.pk))
        seen["api"] = operator_api.get(f"/api/kernel-jobs/{second.pk}/").json()
        seen["resent"] = list(sent)
        sent.clear()

    runner.during[first.pk] = while_first_builds
    assert kernel_job_run_task(first.pk) == "done"

    assert seen["first"] == "building"
    assert seen["second"] == "pending" and seen["third"] == "pending"
    assert seen["row"][:3] == ("pending", None, "")  # not claimed
    assert seen["row"][3].startswith(_builds_only())  # the "builds only" note stays while it waits ...
    assert seen["reason"] == _waiting(first.pk)  # ... and the waiting is said here
    assert seen["api"]["status"] == "pending" and seen["api"]["waiting_reason"] == _waiting(first.pk)
    assert seen["api"]["note"] == seen["row"][3]
    # each waiting task sends itself again to the node's queue, later
    assert seen["resent"] == [
        {"args": [second.pk], "kwargs": {}, "queue": "node.cpu-box", "countdown": NODE_BUSY_RETRY_S},
        {"args": [third.pk], "kwargs": {}, "queue": "node.cpu-box", "countdown": NODE_BUSY_RETRY_S},
    ]
    assert runner.ran == [first.pk]  # nothing but the first was built meanwhile

    # the first ended: the oldest waiting job is sent at once, the newer one keeps waiting
    assert sent == [{"args": [second.pk], "kwargs": {"retry_when_busy": False}, "queue": "node.cpu-box",
                     "countdown": None}]
    sent.clear()

    def while_second_builds():
        second.refresh_from_db()
        seen["second_running"] = (second.status, second.note)
        seen["third_now"] = kernel_job_execute(job_id=third.pk)
        seen["third_reason"] = kernel_job_waiting_reason(job=KernelJob.objects.select_related("node").get(pk=third.pk))

    runner.during[second.pk] = while_second_builds
    assert _deliver({"args": [second.pk], "kwargs": {"retry_when_busy": False}}) == "done"
    assert seen["second_running"][0] == "building" and seen["second_running"][1].startswith(_builds_only())
    assert seen["third_now"] == "pending"
    third.refresh_from_db()
    assert third.note.startswith(_builds_only())
    assert seen["third_reason"] == _waiting(second.pk)  # now held by the second
    second.refresh_from_db()
    assert second.status == "done" and second.note == "no GPU on node cpu-box: builds only" and second.builds_ok
    # the late resend of the second finds it done and does nothing
    assert kernel_job_run_task(second.pk) == "done"
    assert sent == [{"args": [third.pk], "kwargs": {"retry_when_busy": False}, "queue": "node.cpu-box",
                     "countdown": None}]
    sent.clear()
    assert _deliver({"args": [third.pk], "kwargs": {}}) == "done"
    assert runner.ran == [first.pk, second.pk, third.pk] and sent == []


def test_a_message_that_starts_the_next_job_sends_nothing_more_when_the_node_is_busy_again(
        toy_package, gpu_online, runner, sent):
    running, waiting = _job(toy_package, gpu_online), _job(toy_package, gpu_online)
    assert waiting.note == ""  # the node has a GPU of the target
    KernelJob.objects.filter(pk=running.pk).update(status="benchmarking")
    assert kernel_job_run_task(waiting.pk, retry_when_busy=False) == "pending"
    assert sent == []  # the waiting job's own resend is already on its way
    waiting.refresh_from_db()
    assert waiting.status == "pending" and waiting.note == _waiting(running.pk, node="h200-box")


def test_the_database_refuses_a_second_running_job_on_a_node(toy_package, cpu_node):
    a, b = _job(toy_package, cpu_node), _job(toy_package, cpu_node)
    KernelJob.objects.filter(pk=a.pk).update(status="building")
    for status in ("building", "benchmarking"):
        with pytest.raises(IntegrityError), transaction.atomic():
            KernelJob.objects.filter(pk=b.pk).update(status=status)
    assert KernelJob.objects.get(pk=b.pk).status == "pending"
    # the claim transition of an ingest refuses without an error
    assert _transition(b.pk, {"pending"}, "building") is False
    # ended and pending jobs do not hold the node
    KernelJob.objects.filter(pk=a.pk).update(status="done")
    KernelJob.objects.filter(pk=b.pk).update(status="benchmarking")
    # jobs without a node (results measured elsewhere) never collide
    x, y = (kernel_job_create(package=toy_package, node=None, cc="9.0", dispatch=False) for _ in range(2))
    KernelJob.objects.filter(pk__in=[x.pk, y.pk]).update(status="building")
    assert KernelJob.objects.filter(node__isnull=True, status="building").count() == 2


def test_a_claim_refused_by_the_constraint_leaves_the_job_pending_and_waiting(
        toy_package, gpu_online, runner, sent, monkeypatch):
    """Two claims race: this one's check saw a free node, the other's UPDATE won. The
    IntegrityError is the answer "busy": the job stays pending, unclaimed, with the reason."""
    import kernels.services.jobs as jobs

    winner, loser = _job(toy_package, gpu_online), _job(toy_package, gpu_online)
    KernelJob.objects.filter(pk=winner.pk).update(status="building")
    real = jobs.running_job_on_node
    checks = {"n": 0}

    def stale_first_check(**kw):
        checks["n"] += 1
        return None if checks["n"] == 1 else real(**kw)

    monkeypatch.setattr(jobs, "running_job_on_node", stale_first_check)
    assert kernel_job_run_task(loser.pk) == "pending"
    loser.refresh_from_db()
    assert (loser.status, loser.started_at, loser.note) == ("pending", None, _waiting(winner.pk, node="h200-box"))
    assert runner.ran == [] and [m["args"] for m in sent] == [[loser.pk]]
    assert KernelJob.objects.get(pk=winner.pk).status == "building"


def test_cancelling_a_waiting_job_ends_it_and_the_next_job_gets_the_node(toy_package, online, runner, sent):
    """The reaper fails the stuck job holding the node; the cancelled waiting job is skipped and
    the next waiting one is sent."""
    stuck, cancelled, nxt = (_job(toy_package, online) for _ in range(3))
    KernelJob.objects.filter(pk=stuck.pk).update(status="building", started_at=timezone.now())
    assert kernel_job_execute(job_id=cancelled.pk) == "pending"
    assert kernel_job_execute(job_id=nxt.pk) == "pending"
    job = kernel_job_cancel(job=KernelJob.objects.get(pk=cancelled.pk))
    assert job.status == "cancelled" and job.reason == "cancelled before it started" and job.cancel_requested
    assert job.note == "" and job.ended_at is not None  # nothing was built: the "builds only" note is dropped
    assert kernel_job_waiting_reason(job=job) == ""
    # its pending resend arrives later: nothing runs, nothing is sent again
    assert kernel_job_run_task(cancelled.pk) == "cancelled" and sent == [] and runner.ran == []

    assert kernel_jobs_reap(stale_after_s=0) == 1
    stuck.refresh_from_db()
    assert stuck.status == "failed" and "the node agent running it stopped" in stuck.reason
    assert sent == [{"args": [nxt.pk], "kwargs": {"retry_when_busy": False}, "queue": "node.cpu-box",
                     "countdown": None}]
    assert _deliver(sent[0]) == "done"
    assert KernelJob.objects.get(pk=cancelled.pk).status == "cancelled"


def test_a_cancelled_running_job_frees_the_node_for_the_waiting_one(toy_package, online, runner, sent):
    first, second = _job(toy_package, online), _job(toy_package, online)

    def while_first_builds():
        assert kernel_job_execute(job_id=second.pk) == "pending"
        kernel_job_cancel(job=KernelJob.objects.get(pk=first.pk))

    runner.during[first.pk] = while_first_builds
    assert kernel_job_execute(job_id=first.pk) == "cancelled"
    assert [(m["args"], m["kwargs"]) for m in sent] == [([second.pk], {"retry_when_busy": False})]
    assert _deliver(sent[0]) == "done"


def test_a_job_on_another_node_is_not_held_back(toy_package, online, runner, sent):
    from deployments.tests.factories import cpu_node_create

    other_node = cpu_node_create(name="cpu-box-2")
    here, there = _job(toy_package, online), _job(toy_package, other_node)
    seen = {}

    def while_here_builds():
        seen["there"] = kernel_job_run_task(there.pk)
        seen["here"] = KernelJob.objects.get(pk=here.pk).status

    runner.during[here.pk] = while_here_builds
    assert kernel_job_run_task(here.pk) == "done"
    assert seen == {"there": "done", "here": "building"}
    assert runner.ran == [here.pk, there.pk] and sent == []
    there.refresh_from_db()
    assert there.note == "no GPU on node cpu-box-2: builds only"


def test_a_job_waiting_for_results_measured_elsewhere_is_not_started_when_the_node_frees(
        toy_package, online, runner, sent):
    external = kernel_job_create(package=toy_package, node=online, cc="9.0", dispatch=False)
    job = _job(toy_package, online)
    assert kernel_job_execute(job_id=job.pk) == "done"
    assert sent == [] and KernelJob.objects.get(pk=external.pk).status == "pending"


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_one_running_job_per_node_and_fails_the_others(toy_package, cpu_node):
    """On a database that already has two running jobs on one node, the migration keeps the one
    whose row changed last, fails the other with the reason and its cancel flag, then adds the
    constraint."""
    from django.db.migrations.executor import MigrationExecutor

    from deployments.tests.factories import cpu_node_create

    before, after = ("kernels", "0004_job_source_results"), ("kernels", "0005_one_running_job_per_node")
    # The rows are made with today's models, then the schema goes back (updates name only their columns).
    other_node = cpu_node_create(name="cpu-box-2")
    older, newer, alone = (kernel_job_create(package=toy_package, node=n, cc="9.0", dispatch=False)
                           for n in (cpu_node, cpu_node, other_node))
    MigrationExecutor(connection).migrate([before])
    try:
        early = timezone.now() - timedelta(minutes=5)
        KernelJob.objects.filter(pk=older.pk).update(status="building", updated_at=early)
        KernelJob.objects.filter(pk=newer.pk).update(status="benchmarking", updated_at=timezone.now())
        KernelJob.objects.filter(pk=alone.pk).update(status="building")
    finally:
        MigrationExecutor(connection).migrate([after])
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())  # back to today's schema
    older.refresh_from_db()
    assert older.status == "failed" and older.cancel_requested and older.ended_at is not None
    assert older.reason.startswith(f"kernel job #{newer.pk} was running on node cpu-box at the same time")
    assert KernelJob.objects.get(pk=newer.pk).status == "benchmarking"
    assert KernelJob.objects.get(pk=alone.pk).status == "building"
    with pytest.raises(IntegrityError), transaction.atomic():
        KernelJob.objects.filter(pk=older.pk).update(status="building")
