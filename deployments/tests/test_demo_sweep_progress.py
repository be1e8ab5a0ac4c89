"""``manage.py demo`` prints a progress line for every sweep from its start (phase, points
done/total, requests done, elapsed seconds), the first sweep included: a sweep whose only point is
one long request changes no count until it ends, and its phase (starting, preparing prompts,
sending) is said as it changes. Then each sweep's narrow results table. ``manage.py sweep --wait``
follows its sweep with the same lines (:func:`benchmarks.services.sweep_wait`), again while a
single long request changes nothing but the elapsed time.

Against a real ``sim`` engine process; the sweep task runs in a thread of the test as the control
worker would run it (``sweep_execute``)."""
from __future__ import annotations

import io
import re
import threading
from pathlib import Path

import pytest
from django.core.management import call_command

from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start
from deployments.management.commands import demo

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture
def sim_url(tmp_path: Path):
    base, proc = sim_start(tmp_path / "sim.log", time_scale=5.0)   # a 256-token request takes seconds
    yield base
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def control_worker(monkeypatch) -> list[threading.Thread]:
    """Each sweep task sent runs ``sweep_execute`` in a thread, as a free control worker would."""
    from benchmarks.tasks import sweep_run_task

    threads: list[threading.Thread] = []

    def run(args, **kw):
        thread = threading.Thread(target=sweep_execute, kwargs={"sweep_id": args[0]})
        thread.start()
        threads.append(thread)

    monkeypatch.setattr(sweep_run_task, "apply_async", run)
    yield threads
    for thread in threads:
        thread.join(60)


@pytest.mark.django_db(transaction=True)
def test_the_demo_prints_progress_of_each_sweep_from_its_start(sim_url: str, operator, control_worker,
                                                               monkeypatch) -> None:
    for name in ("demo-first", "demo-second"):
        sim_deployment_create(base_url=sim_url, recipe_name=name)
    # the first as the demo's first sweep: one point of one long request (no count changes until it ends)
    monkeypatch.setattr(demo, "DEMO_SWEEPS", (("demo-first", "16:256", [1], 1, 0, "one request"),
                                             ("demo-second", "16:64", [1, 2], 2, 0, "two points")))
    command = demo.Command(stdout=io.StringIO())
    failed = command._sweeps(user=operator, base="http://testserver", timeout_s=30, sweep_timeout_s=60)
    assert failed == []
    lines = command.stdout._out.getvalue().splitlines()
    first, second = BenchmarkSweep.objects.order_by("pk")
    for sweep, total in ((first, 1), (second, 6)):
        mine = [line for line in lines if line.startswith(f"  sweep #{sweep.pk} ")]
        shape = re.compile(rf"  sweep #{sweep.pk} (\d+) s: (.+), points (\d)/{sweep.points_total} done, "
                           rf"requests (\d)/{total} done")
        matches = [shape.match(line) for line in mine]
        assert all(matches), mine
        # from its start: the first line is said before the sweep runs, at 0 s
        assert matches[0].group(1) == "0" and matches[0].group(2).startswith("pending"), mine
        phases = [m.group(2) for m in matches]
        assert any(p.startswith("running, sending c=1 ") for p in phases), mine
        assert phases[-1] == "done" and matches[-1].group(3) == str(sweep.points_total)
        assert matches[-1].group(4) == str(total)
        elapsed = [int(m.group(1)) for m in matches]
        assert elapsed == sorted(elapsed)
    # the first sweep's running line says what its point does while its one request runs
    [sending] = [line for line in lines if line.startswith(f"  sweep #{first.pk} ") and "sending" in line][:1]
    assert sending.endswith(" (point 0/1)") or "(point 0/1), " in sending, sending
    # then each sweep's narrow table
    units = [line for line in lines if line.split()[:3] == ["c", "requests", "tok/s"]]
    assert len(units) == 2 and all(len(line) <= 88 for line in units)


@pytest.mark.django_db(transaction=True)
def test_sweep_wait_prints_the_same_progress_while_its_one_request_runs(sim_url: str, control_worker,
                                                                        monkeypatch) -> None:
    from benchmarks.services import sweeps as sweeps_module

    monkeypatch.setattr(sweeps_module, "PROGRESS_HEARTBEAT_S", 1.0)   # the 10 s heartbeat, shortened
    sim_deployment_create(base_url=sim_url, recipe_name="wait-one")
    out = io.StringIO()
    call_command("sweep", "wait-one", "--concurrency", "1", "--lengths", "16:256", "--requests", "1",
                 "--wait", "--timeout", "60", stdout=out)
    sweep = BenchmarkSweep.objects.get()
    assert sweep.status == "done" and (sweep.points_total, sweep.requests_done) == (1, 1)
    lines = out.getvalue().splitlines()
    mine = [line for line in lines if line.startswith(f"  sweep #{sweep.pk} ")]
    shape = re.compile(rf"  sweep #{sweep.pk} (\d+) s: (.+), points (\d)/1 done, requests (\d)/1 done(.*)")
    matches = [shape.match(line) for line in mine]
    assert all(matches), mine
    assert matches[0].group(1) == "0" and matches[0].group(2).startswith("pending"), mine
    # while the one request runs no count changes, yet a line comes every heartbeat
    sending = [m for m in matches if m.group(2).startswith("running, sending c=1 ")]
    assert len(sending) >= 2, mine
    assert all((m.group(3), m.group(4)) == ("0", "0") and m.group(5).startswith(" (point 0/1)")
               for m in sending[:-1]), mine
    # The last may be printed as the request comes back, before the sweep's status moves on.
    last = sending[-1]
    assert ((last.group(3), last.group(4)) == ("0", "0") and last.group(5).startswith(" (point 0/1)")) or (
        (last.group(3), last.group(4)) in {("0", "1"), ("1", "1")} and last.group(5).startswith(" (point 1/1)")), mine
    assert len({m.group(1) for m in sending}) == len(sending), mine   # each later than the last
    assert matches[-1].group(2) == "done" and (matches[-1].group(3), matches[-1].group(4)) == ("1", "1")
    assert [int(m.group(1)) for m in matches] == sorted(int(m.group(1)) for m in matches)
    # then the narrow table, as the demo prints it
    [units] = [line for line in lines if line.split()[:3] == ["c", "requests", "tok/s"]]
    assert len(units) <= 88


@pytest.mark.django_db(transaction=True)
def test_the_demo_skips_a_sweep_another_sweep_holds_past_its_wait_and_goes_on(sim_url: str, operator, viewer,
                                                                               control_worker, monkeypatch) -> None:
    held = sim_deployment_create(base_url=sim_url, recipe_name="demo-held")
    sim_deployment_create(base_url=sim_url, recipe_name="demo-free")
    # started from the UI meanwhile and queued (no worker has taken it): one sweep per deployment at a time
    theirs = BenchmarkSweep.objects.create(deployment=held, status="pending", name="theirs", created_by=viewer,
                                           grid={"concurrency": [1], "lengths": [[16, 64]]})
    monkeypatch.setattr(demo, "DEMO_SWEEPS", (("demo-held", "16:64", [1], 1, 0, "held"),
                                             ("demo-free", "16:64", [1], 1, 0, "free")))
    command = demo.Command(stdout=io.StringIO())
    failed = command._sweeps(user=operator, base="http://testserver", timeout_s=30, sweep_timeout_s=3)
    assert failed == []   # not a failure of the demo: the deployment was someone else's to sweep
    lines = command.stdout._out.getvalue().splitlines()
    assert (f"    sweep #{theirs.pk} by vera-viewer is already pending on deployment #{held.pk} (one sweep per "
            f"deployment at a time): waiting up to 3 s for it to end, then the demo sweeps; cancel it at "
            f"http://testserver/benchmarks/sweeps/{theirs.pk}/ or with "
            f"POST http://testserver/api/sweeps/{theirs.pk}/cancel/") in lines
    assert lines[-1] == (f"Not swept by the demo, so no results: demo-held: sweep #{theirs.pk} (theirs, pending) "
                         f"still held deployment #{held.pk} after 3 s of waiting; see "
                         f"http://testserver/benchmarks/sweeps/{theirs.pk}/")
    # the demo created no sweep of the held deployment, measured it not at all, and went on to the next
    assert list(BenchmarkSweep.objects.filter(deployment=held).values_list("pk", "status")) == [(theirs.pk, "pending")]
    [ours] = BenchmarkSweep.objects.exclude(deployment=held)
    assert ours.status == "done" and ours.deployment.recipe.name == "demo-free"
    units = [line for line in lines if line.split()[:3] == ["c", "requests", "tok/s"]]
    assert len(units) == 1   # one table: the sweep it ran
    # what it printed of theirs while it waited is their progress (still pending), no result
    followed = [line for line in lines if line.startswith(f"  sweep #{theirs.pk} ")]
    assert followed and all(re.match(rf"  sweep #{theirs.pk} \d+ s: pending", line) for line in followed), followed


@pytest.mark.django_db(transaction=True)
def test_the_demo_waits_for_another_sweep_of_its_deployment_then_runs_its_own(sim_url: str, operator, viewer,
                                                                              control_worker, monkeypatch) -> None:
    from benchmarks.services import sweep_create

    deployment = sim_deployment_create(base_url=sim_url, recipe_name="demo-busy")
    # one long request (seconds), so it still runs when the demo reaches this deployment
    theirs = sweep_create(deployment=deployment, user=viewer, grid={"concurrency": [1], "lengths": "16:256"})
    monkeypatch.setattr(demo, "DEMO_SWEEPS", (("demo-busy", "16:64", [1], 1, 0, "busy"),))
    command = demo.Command(stdout=io.StringIO())
    failed = command._sweeps(user=operator, base="http://testserver", timeout_s=30, sweep_timeout_s=60)
    assert failed == []
    lines = command.stdout._out.getvalue().splitlines()
    assert any(line.startswith(f"    sweep #{theirs.pk} by vera-viewer is already ") for line in lines), lines
    theirs.refresh_from_db()
    ours = BenchmarkSweep.objects.exclude(pk=theirs.pk).get()
    assert (theirs.status, ours.status) == ("done", "done")
    assert ours.started_at >= theirs.ended_at   # after theirs, never alongside
    [note] = [line for line in lines if "the demo waited" in line]
    assert re.fullmatch(rf"  \(the demo waited \d+ s for sweep #{theirs.pk} on deployment #{deployment.pk} to end "
                        r"before starting this one\)", note), note
    assert len([line for line in lines if line.split()[:3] == ["c", "requests", "tok/s"]]) == 1


@pytest.mark.django_db(transaction=True)
def test_a_sweep_the_product_refuses_is_one_line_and_a_failure_not_a_traceback(sim_url: str, operator,
                                                                               monkeypatch) -> None:
    from deployments.models import Deployment

    deployment = sim_deployment_create(base_url=sim_url, recipe_name="demo-stopping")
    Deployment.objects.filter(pk=deployment.pk).update(stop_requested=True)
    monkeypatch.setattr(demo, "DEMO_SWEEPS", (("demo-stopping", "16:64", [1], 1, 0, "stopping"),))
    command = demo.Command(stdout=io.StringIO())
    failed = command._sweeps(user=operator, base="http://testserver", timeout_s=30, sweep_timeout_s=5)
    reason = f"deployment #{deployment.pk} is being stopped; deploy its recipe again and sweep the new deployment"
    assert failed == [f"demo-stopping sweep (refused: {reason})"]
    assert f"  demo-stopping: sweep refused: {reason}" in command.stdout._out.getvalue().splitlines()
    assert not BenchmarkSweep.objects.exists()
