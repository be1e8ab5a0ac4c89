"""Sweeps of two deployments whose processes share a CPU or a GPU on one node run one at a time,
against a real ``sim`` server: the second waits, pending, with a queue note naming the running
sweep and what they share, its task sent again with a countdown (no worker slot held); it runs
once the first has ended, and of two that become ready at once exactly one runs. Held sweeps
start in the order they were created, whichever task looks first, and one held on its task's
first look is never claimed, so it never shows ``waiting``."""
from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.selectors import sweep_queue_note, sweep_sharing_blocker
from benchmarks.services import sweep_cancel, sweep_create, sweep_execute
from benchmarks.services import sweeps as sweep_services
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import ProcessStatus, Role
from deployments.models import Node, ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]

SHORT = {"concurrency": [1], "lengths": ["16:8"], "requests": 2}


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture
def sent(monkeypatch) -> list[dict]:
    """Every ``sweep_run_task`` sent (args, queue, countdown) instead of going to the broker."""
    from benchmarks.tasks import sweep_run_task

    calls: list[dict] = []
    monkeypatch.setattr(sweep_run_task, "apply_async", lambda args, **kw: calls.append({"args": args, **kw}))
    return calls


@contextlib.contextmanager
def _running_in_background(sweep_id: int, started):
    """Run ``sweep_execute(sweep_id)`` in a thread; enter once ``started()`` holds (the thread
    still alive), and on leaving wait for the thread. Yields a dict whose ``status`` is the sweep's
    final status once left."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep_id)))
    thread.start()
    try:
        while not started():
            assert thread.is_alive()
            time.sleep(0.05)
        yield result
    finally:
        thread.join(60)


def _note(sweep_id: int, deployment_id: int, shares: str = "CPU 0") -> str:
    return (f"waiting for sweep #{sweep_id} on deployment #{deployment_id}, which shares {shares} on node local; "
            "sweeps of deployments that share a CPU or GPU run one at a time, and this one starts when that one ends")


def test_a_sweep_waits_pending_for_the_sweep_of_a_deployment_sharing_its_cpu_then_runs(
        sim_url: str, operator, sent) -> None:
    first_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-a")
    second_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-b")  # also pinned to CPU 0 of local
    first = sweep_create(deployment=first_dep, user=operator,
                         grid={"concurrency": [1], "lengths": ["16:8"], "duration_s": 3.0})
    second = sweep_create(deployment=second_dep, user=operator, grid=SHORT)
    with _running_in_background(
            first.pk, lambda: BenchmarkSweep.objects.get(pk=first.pk).status == SweepStatus.RUNNING) as result:
        assert sweep_execute(sweep_id=second.pk) == SweepStatus.PENDING
        second.refresh_from_db()
        assert (second.status, second.worker, second.started_at, second.reason) == (SweepStatus.PENDING, "", None, "")
        assert sweep_queue_note(sweep=second) == _note(first.pk, first_dep.pk)
        assert not second.runs.exists()
        # the task was sent again with a countdown, so no worker slot waits meanwhile
        assert sent[-1] == {"args": [second.pk], "queue": "control", "countdown": sweep_services.SHARED_RECHECK_S}
    assert result["status"] == SweepStatus.DONE
    assert sweep_queue_note(sweep=BenchmarkSweep.objects.get(pk=second.pk)) == "queued for a benchmark worker"
    assert sweep_execute(sweep_id=second.pk) == SweepStatus.DONE  # the task sent again, once the first ended
    [a] = BenchmarkRun.objects.filter(sweep=first)
    [b] = BenchmarkRun.objects.filter(sweep=second)
    assert a.ended_at <= b.started_at and b.num_requests == 2
    assert len(sent) == 3  # two creates and one sending again


def test_of_two_sweeps_sharing_a_cpu_that_become_ready_at_once_exactly_one_runs(
        sim_url: str, operator, sent, monkeypatch) -> None:
    deployments = [sim_deployment_create(base_url=sim_url, recipe_name=f"sim-{n}") for n in "ab"]
    sweeps = [sweep_create(deployment=d, user=operator, grid=SHORT) for d in deployments]
    both_ready = threading.Barrier(2)
    real_wait = sweep_services._wait_ready

    def wait_then_meet(sweep, watch=None):
        deployment = real_wait(sweep, watch)
        both_ready.wait(30)  # both reach the check and the move to running together
        return deployment

    monkeypatch.setattr(sweep_services, "_wait_ready", wait_then_meet)
    results: dict[int, str] = {}
    threads = [threading.Thread(target=lambda pk=s.pk: results.__setitem__(pk, sweep_execute(sweep_id=pk)))
               for s in sweeps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results.values()) == [SweepStatus.DONE, SweepStatus.PENDING], results
    [held] = [pk for pk, status in results.items() if status == SweepStatus.PENDING]
    [ran] = [s for s in sweeps if s.pk != held]
    assert sent[-1]["args"] == [held]
    monkeypatch.setattr(sweep_services, "_wait_ready", real_wait)
    assert sweep_execute(sweep_id=held) == SweepStatus.DONE
    [a] = BenchmarkRun.objects.filter(sweep=ran)
    [b] = BenchmarkRun.objects.filter(sweep_id=held)
    assert a.ended_at <= b.started_at


def test_a_cancel_ends_a_held_sweep_at_once(sim_url: str, operator, sent) -> None:
    node_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-a")
    other_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-b")
    BenchmarkSweep.objects.create(deployment=node_dep, status=SweepStatus.RUNNING)  # runs elsewhere
    sweep = sweep_create(deployment=other_dep, user=operator, grid=SHORT)
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.PENDING
    sweep = sweep_cancel(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), user=operator)
    assert (sweep.status, sweep.reason) == (SweepStatus.CANCELLED, f"cancelled by {operator.username}")
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.CANCELLED  # the task sent again does nothing


def test_only_a_running_sweep_sharing_a_cpu_or_gpu_on_the_same_node_holds_a_sweep_back() -> None:
    base = "http://127.0.0.1:9"
    mine = sim_deployment_create(base_url=base, recipe_name="mine")
    sweep = BenchmarkSweep.objects.create(deployment=mine, status=SweepStatus.PENDING)
    cpu1 = sim_deployment_create(base_url=base, recipe_name="on-cpu-1")
    ServerProcess.objects.filter(deployment=cpu1).update(cpus="1", effective_cpus="1")
    BenchmarkSweep.objects.create(deployment=cpu1, status=SweepStatus.RUNNING)
    elsewhere = sim_deployment_create(base_url=base, recipe_name="other-node")
    far = Node.objects.create(name="far", hostname="far", cpu_count=2)
    type(elsewhere).objects.filter(pk=elsewhere.pk).update(node=far)
    BenchmarkSweep.objects.create(deployment=elsewhere, status=SweepStatus.RUNNING)
    waiting = sim_deployment_create(base_url=base, recipe_name="waiting-only")
    BenchmarkSweep.objects.create(deployment=waiting, status=SweepStatus.WAITING)  # not measuring yet
    assert sweep_sharing_blocker(sweep=sweep) is None

    # a GPU in common holds it back too, named with the CPUs they share
    gpu = sim_deployment_create(base_url=base, recipe_name="gpu-sharer")
    ServerProcess.objects.filter(deployment=gpu).update(cpus="0-1", effective_cpus="0-1", gpu_ids=[3])
    ServerProcess.objects.filter(deployment=mine).update(gpu_ids=[2, 3])
    ServerProcess.objects.create(deployment=gpu, role=Role.ROUTER, status=ProcessStatus.READY)  # unpinned
    running = BenchmarkSweep.objects.create(deployment=gpu, status=SweepStatus.RUNNING)
    held = sweep_sharing_blocker(sweep=sweep)
    assert held is not None and held[0].pk == running.pk
    assert held[1] == _note(running.pk, gpu.pk, shares="CPU 0 and GPU 3")
    assert sweep_queue_note(sweep=sweep) == held[1]


def test_runs_that_overlapped_a_sharing_deployments_run_are_flagged_and_never_ranked_or_analysed(
        sim_url: str, operator, sent, monkeypatch) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from benchmarks import selectors
    from benchmarks.services import runs_compare

    # A sweep started without the rule (by an older Ceiling, or by hand) overlaps the other.
    monkeypatch.setattr(selectors, "sweep_sharing_blocker", lambda **kw: None)
    long_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-a")
    short_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-b")
    long = sweep_create(deployment=long_dep, user=operator,
                        grid={"concurrency": [1], "lengths": ["16:8"], "duration_s": 3.0})
    short = sweep_create(deployment=short_dep, user=operator, grid=SHORT)
    with _running_in_background(
            long.pk, lambda: BenchmarkRun.objects.filter(sweep=long, status="running").exists()) as result:
        assert sweep_execute(sweep_id=short.pk) == SweepStatus.DONE
        # An older row of a done sweep on the same CPU that ended while the long point ran, unflagged.
        [long_run] = BenchmarkRun.objects.filter(sweep=long)
        old_sweep = BenchmarkSweep.objects.create(deployment=short_dep, status=SweepStatus.DONE, analysis={"old": 1})
        old = BenchmarkRun.objects.create(
            sweep=old_sweep, status="done", snapshot=long_run.snapshot, concurrency=1, input_len=16, output_len=8,
            summary={"flags": {}}, started_at=long_run.started_at - timedelta(seconds=1), ended_at=timezone.now())
    assert result["status"] == SweepStatus.DONE
    [a] = BenchmarkRun.objects.filter(sweep=long)
    [b] = BenchmarkRun.objects.filter(sweep=short)
    old.refresh_from_db()
    assert "shared_load" in a.flags and "shared_load" in b.flags and "shared_load" in old.flags
    assert b.summary["shared_load"] == [{"run_id": a.pk, "sweep_id": long.pk, "deployment_id": long_dep.pk,
                                         "shares": "CPU 0 on node local"}]
    assert [e["run_id"] for e in a.summary["shared_load"]] == [b.pk, old.pk]
    assert old.summary["shared_load"] == [{"run_id": a.pk, "sweep_id": long.pk, "deployment_id": long_dep.pk,
                                           "shares": "CPU 0 on node local"}]
    assert "old" not in BenchmarkSweep.objects.get(pk=old_sweep.pk).analysis  # its report made again
    # never ranked: each says which run of which sweep shared its CPU
    compared = runs_compare(runs=[a, b])
    assert [e["rankable"] for e in compared["runs"]] == [False, False]
    assert compared["runs"][1]["refusal"] == (
        f"run #{b.pk} is not ranked: shared load — while it ran, run #{a.pk} of sweep #{long.pk} (deployment "
        f"#{long_dep.pk}, which shares CPU 0 on node local) ran too, so its tok/s and latencies include that load "
        "and cannot be compared with any other run's")
    # and the ceiling analysis leaves the point out
    analysis = BenchmarkSweep.objects.get(pk=short.pk).analysis
    assert "shared load" in json.dumps(analysis), analysis


def _ahead_note(sweep_id: int, deployment_id: int, shares: str = "CPU 0") -> str:
    return (f"waiting for sweep #{sweep_id} on deployment #{deployment_id}, which shares {shares} on node local and "
            "is ahead of it in line; sweeps of deployments that share a CPU or GPU run one at a time, in the order "
            "they were created, and this one starts after that one")


def test_sweeps_held_for_sharing_a_cpu_start_in_the_order_they_were_created(
        sim_url: str, operator, sent, monkeypatch) -> None:
    # Sweep #15 runs on deployment 3; #16 (deployment 2) and then #17 (deployment 1) wait for it.
    # When it ends, #17's countdown fires first: it must wait for #16, not start before it.
    deps = [sim_deployment_create(base_url=sim_url, recipe_name=f"sim-{n}") for n in (3, 2, 1)]
    running = BenchmarkSweep.objects.create(deployment=deps[0], status=SweepStatus.RUNNING)  # runs elsewhere
    older = sweep_create(deployment=deps[1], user=operator, grid=SHORT)
    newer = sweep_create(deployment=deps[2], user=operator, grid=SHORT)
    waits: list[int] = []
    real_wait = sweep_services._wait_ready

    def wait_ready(sweep, watch=None):
        waits.append(sweep.pk)
        return real_wait(sweep, watch)

    monkeypatch.setattr(sweep_services, "_wait_ready", wait_ready)
    assert sweep_execute(sweep_id=older.pk) == SweepStatus.PENDING
    assert sweep_execute(sweep_id=newer.pk) == SweepStatus.PENDING
    # held before the claim: neither was ever waiting, nor waited for its deployment
    assert waits == []
    rows = {s.pk: s for s in BenchmarkSweep.objects.filter(pk__in=[older.pk, newer.pk])}
    assert all((r.status, r.worker, r.started_at) == (SweepStatus.PENDING, "", None) for r in rows.values())
    assert all(r.held_at is not None for r in rows.values())
    assert sweep_queue_note(sweep=rows[older.pk]) == _note(running.pk, deps[0].pk)
    assert sweep_queue_note(sweep=rows[newer.pk]) == _ahead_note(older.pk, deps[1].pk)

    BenchmarkSweep.objects.filter(pk=running.pk).update(status=SweepStatus.DONE)
    # Each chain's next look comes a whole recheck after its mark (a look sooner ends its chain).
    from datetime import timedelta

    from django.db.models import F
    BenchmarkSweep.objects.filter(pk__in=[older.pk, newer.pk]).update(
        held_at=F("held_at") - timedelta(seconds=sweep_services.SHARED_RECHECK_S))
    assert sweep_execute(sweep_id=newer.pk) == SweepStatus.PENDING  # its look came first: still behind #16
    assert waits == []
    assert sweep_queue_note(sweep=BenchmarkSweep.objects.get(pk=newer.pk)) == _ahead_note(older.pk, deps[1].pk)
    assert sweep_execute(sweep_id=older.pk) == SweepStatus.DONE
    assert BenchmarkSweep.objects.get(pk=older.pk).held_at is None  # cleared by the claim
    assert sweep_execute(sweep_id=newer.pk) == SweepStatus.DONE
    assert waits == [older.pk, newer.pk]
    [a] = BenchmarkRun.objects.filter(sweep=older)
    [b] = BenchmarkRun.objects.filter(sweep=newer)
    assert a.ended_at <= b.started_at
    assert [c["args"] for c in sent] == [[older.pk], [newer.pk], [older.pk], [newer.pk], [newer.pk]]


def test_only_an_older_sweep_held_recently_for_sharing_keeps_a_newer_one_in_line() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from benchmarks import selectors

    base = "http://127.0.0.1:9"
    now = timezone.now()
    older_dep = sim_deployment_create(base_url=base, recipe_name="older")
    mine = sim_deployment_create(base_url=base, recipe_name="mine")
    newer_dep = sim_deployment_create(base_url=base, recipe_name="newer")
    older = BenchmarkSweep.objects.create(deployment=older_dep, status=SweepStatus.PENDING)
    sweep = BenchmarkSweep.objects.create(deployment=mine, status=SweepStatus.PENDING)
    newer = BenchmarkSweep.objects.create(deployment=newer_dep, status=SweepStatus.PENDING, held_at=now)
    # queued for a worker slot but never found held: no line; a newer held one never holds an older one
    assert sweep_sharing_blocker(sweep=sweep, now=now) is None
    # held, but its task has not looked for longer than HELD_STALE_S (lost): no line either
    stale = now - timedelta(seconds=selectors.HELD_STALE_S + 1)
    BenchmarkSweep.objects.filter(pk=older.pk).update(held_at=stale)
    assert sweep_sharing_blocker(sweep=sweep, now=now) is None
    # claimed and waiting for its deployment, or cancel-requested: no line
    BenchmarkSweep.objects.filter(pk=older.pk).update(held_at=now, status=SweepStatus.WAITING)
    assert sweep_sharing_blocker(sweep=sweep, now=now) is None
    BenchmarkSweep.objects.filter(pk=older.pk).update(status=SweepStatus.PENDING, cancel_requested=True)
    assert sweep_sharing_blocker(sweep=sweep, now=now) is None
    # on another CPU: no line
    BenchmarkSweep.objects.filter(pk=older.pk).update(cancel_requested=False)
    ServerProcess.objects.filter(deployment=older_dep).update(cpus="1", effective_cpus="1")
    assert sweep_sharing_blocker(sweep=sweep, now=now) is None
    # older, held a moment ago, sharing CPU 0: ahead in line, and it waits for nobody newer
    ServerProcess.objects.filter(deployment=older_dep).update(cpus="0", effective_cpus="0")
    held = sweep_sharing_blocker(sweep=sweep, now=now)
    assert held is not None and held[0].pk == older.pk and held[1] == _ahead_note(older.pk, older_dep.pk)
    assert sweep_sharing_blocker(sweep=older, now=now) is None
    # ahead of a newer one, the nearest older held sweep is named
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(held_at=now)
    held = sweep_sharing_blocker(sweep=newer, now=now)
    assert held is not None and held[0].pk == sweep.pk


def test_a_sweep_held_on_its_first_look_answers_pending_never_waiting(
        sim_url: str, operator_api, monkeypatch) -> None:
    """The task looks for a sweep to wait for before it claims the sweep: a worker that picks the
    task up before the 201 is written leaves it pending, so the answer, the next read and the
    first ``sweep --wait`` line say ``pending`` with the note, never ``waiting``."""
    from benchmarks.tasks import sweep_run_task

    busy_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-a")
    mine = sim_deployment_create(base_url=sim_url, recipe_name="sim-b")
    running = BenchmarkSweep.objects.create(deployment=busy_dep, status=SweepStatus.RUNNING)  # runs elsewhere
    statuses: list[str] = []
    claims: list[int] = []
    real_claim = sweep_services._claim_or_hold

    def claim(sweep_id, now):
        claimed, why = real_claim(sweep_id, now)
        claims.append(claimed)
        statuses.append(BenchmarkSweep.objects.get(pk=sweep_id).status)
        return claimed, why

    monkeypatch.setattr(sweep_services, "_claim_or_hold", claim)
    resent: list[dict] = []

    def worker(args, **kw):  # the first delivery runs at once, as a free worker would; a resend is kept
        if kw.get("countdown"):
            resent.append({"args": args, **kw})
        else:
            sweep_execute(sweep_id=args[0])

    monkeypatch.setattr(sweep_run_task, "apply_async", worker)
    response = operator_api.post("/api/sweeps/", {"deployment": mine.pk, "grid": SHORT}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (claims, statuses) == ([False], [SweepStatus.PENDING])
    assert (body["status"], body["queue_note"]) == (SweepStatus.PENDING, _note(running.pk, busy_dep.pk))
    again = operator_api.get(f"/api/sweeps/{body['id']}/").json()
    assert (again["status"], again["queue_note"], again["worker"]) == (SweepStatus.PENDING, body["queue_note"], None)
    assert resent == [{"args": [body["id"]], "queue": "control", "countdown": sweep_services.SHARED_RECHECK_S}]


def test_the_sweep_command_run_here_waits_held_and_then_runs_the_sweep_itself(
        sim_url: str, operator, sent, monkeypatch) -> None:
    """``manage.py sweep --here`` whose sweep is held back by another one sharing its CPU prints
    the queue note, looks again itself (no task sent with a countdown), then runs the sweep in its
    own process once the other has ended, and exits 0: it used to stop at once with ``sweep #N
    pending:`` and status 1 while a worker ran it later."""
    import io

    from django.core.management import call_command

    from benchmarks.management.commands import sweep as sweep_command

    monkeypatch.setattr(sweep_command, "SHARED_RECHECK_S", 0.2)
    first_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-a")
    second_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-b")  # also pinned to CPU 0 of local
    first = sweep_create(deployment=first_dep, user=operator,
                         grid={"concurrency": [1], "lengths": ["16:8"], "duration_s": 2.0})
    with _running_in_background(
            first.pk, lambda: BenchmarkSweep.objects.get(pk=first.pk).status == SweepStatus.RUNNING):
        out = io.StringIO()
        call_command("sweep", str(second_dep.pk), "--concurrency", "1", "--lengths", "16:8", "--requests", "2",
                     "--warmup", "0", "--here", stdout=out)
    second = BenchmarkSweep.objects.exclude(pk=first.pk).get()
    assert second.status == SweepStatus.DONE
    text = out.getvalue()
    assert f"sweep #{second.pk} pending: waiting for sweep #{first.pk} on deployment #{first_dep.pk}" in text
    assert not [c for c in sent if c["args"] == [second.pk] and c.get("countdown")]
    [a] = BenchmarkRun.objects.filter(sweep=first)
    [b] = BenchmarkRun.objects.filter(sweep=second)
    assert a.ended_at <= b.started_at


def test_of_two_looks_at_once_at_a_held_sweep_exactly_one_chain_goes_on(sim_url: str, operator, sent,
                                                                        monkeypatch) -> None:
    """A resent copy of a held sweep's task and the original look at once: the look that marks
    ``held_at`` first sends itself again; the other finds that mark less than half a recheck old
    and ends its chain, sending nothing. A look a whole recheck later goes on."""
    from datetime import timedelta

    from django.utils import timezone

    busy_dep = sim_deployment_create(base_url=sim_url, recipe_name="sim-a")
    mine = sim_deployment_create(base_url=sim_url, recipe_name="sim-b")
    BenchmarkSweep.objects.create(deployment=busy_dep, status=SweepStatus.RUNNING)  # runs elsewhere
    sweep = sweep_create(deployment=mine, user=operator, grid=SHORT)
    earlier = timezone.now() - timedelta(seconds=sweep_services.SHARED_RECHECK_S)
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(held_at=earlier)  # a chain already looking
    sent.clear()
    both = threading.Barrier(2)
    real_claim = sweep_services._claim_or_hold
    answers: list[tuple[bool, str]] = []

    def claim(sweep_id, now, **kw):
        both.wait(30)  # both looks reach the check together
        answer = real_claim(sweep_id, now, **kw)
        answers.append(answer)
        return answer

    monkeypatch.setattr(sweep_services, "_claim_or_hold", claim)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(sweep_execute(sweep_id=sweep.pk))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [SweepStatus.PENDING, SweepStatus.PENDING]
    assert sorted(why == sweep_services.LOOK_DUPLICATE for _claimed, why in answers) == [False, True]
    assert sent == [{"args": [sweep.pk], "queue": "control", "countdown": sweep_services.SHARED_RECHECK_S}]
    row = BenchmarkSweep.objects.get(pk=sweep.pk)
    assert row.status == SweepStatus.PENDING and row.held_at > earlier  # marked once, by the look that goes on

    monkeypatch.setattr(sweep_services, "_claim_or_hold", real_claim)
    # The surviving chain's next look, a whole recheck later, goes on and sends itself again.
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(held_at=earlier)
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.PENDING
    assert len(sent) == 2
    # A look right after it (a third copy) ends.
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.PENDING
    assert len(sent) == 2
