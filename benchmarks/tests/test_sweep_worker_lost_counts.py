"""A sweep whose worker process is lost mid-point (the services restarted while a point ran) counts
what it sent, finished and aborted truthfully everywhere: the requests the point had in flight when
the process died were sent and never finished, so the API, the sweep page, the run page and the
terminal report (the one ``make demo`` prints) give the same sent / finished / aborted counts, say
they are the point's last progress report's, never show a live count for a dead point, and print
the provisional findings the page shows. Where the last report did not count what was sent, every
one of them says the total is unknown instead of a total that reads as complete.

Against a real ``sim`` server and a real process running the sweep task's body
(:func:`benchmarks.services.sweep_execute`), killed with SIGKILL; the reaper of lost workers
(:func:`benchmarks.services.sweeps_reconcile`, the beat's minutely task) then ends the sweep."""
from __future__ import annotations

import datetime as dt
import html as html_lib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.utils import timezone

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_create, sweep_execute, sweep_follow_line, sweep_report_text, sweeps_reconcile
from benchmarks.tests.page_support import page_text
from benchmarks.tests.sweep_support import REPO, sim_deployment_create, sim_start
from deployments.tests.test_agent_support import database_url

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# c=1 then c=16, two requests per slot, 16 input / 128 output tokens: at the sim's demo-fast profile
# slowed 2 x, the 16 requests of c=16's first wave take about 2.6 s and its second wave as long, so
# the worker is killed with the second wave (16 requests) in flight and the first (16) finished.
GRID = {"concurrency": [1, 16], "lengths": ["16:128"], "requests_per_concurrency": 2}


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", html)))


def _worker_start(sweep_id: int, tmp_path: Path) -> subprocess.Popen:
    """A process running the sweep task's body against this test's database, as a control worker does."""
    env = {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "controlplane.settings",
           "CEILING_VAR_DIR": str(tmp_path)}
    code = ("import django; django.setup(); from benchmarks.services import sweep_execute; "
            f"sweep_execute(sweep_id={sweep_id})")
    with open(tmp_path / "worker.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.django_db(transaction=True)
def test_a_worker_lost_mid_point_leaves_sent_finished_and_aborted_counts_that_agree(
        operator, operator_api, tmp_path: Path, settings) -> None:
    settings.VAR_DIR = tmp_path
    base, sim = sim_start(tmp_path / "sim.log", time_scale=2.0)
    worker = None
    try:
        sweep = sweep_create(deployment=sim_deployment_create(base_url=base), user=operator, grid=GRID)
        worker = _worker_start(sweep.pk, tmp_path)
        deadline = time.monotonic() + 90
        while True:   # the second wave is out once the first wave's 16 are reported finished
            run = BenchmarkRun.objects.filter(sweep=sweep, ordinal=1).first()
            progress = (run.progress or {}) if run is not None else {}
            if isinstance(progress.get("done"), int) and progress["done"] >= 16:
                break
            assert worker.poll() is None and time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
            time.sleep(0.05)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        last = BenchmarkRun.objects.get(pk=run.pk).progress   # what the worker last wrote
        assert last["total"] == 32 and last["sent"] == 32 and last["done"] >= 16 and last["aborted"] == 0
        finished, failed = last["done"], last["failed"]
        in_flight = 32 - finished

        assert sweeps_reconcile() == 1
        sweep.refresh_from_db()
        run.refresh_from_db()
        stamp = last["updated_at"][:19].replace("T", " ")
        counts = (f"32 requests sent: {finished} finished, {in_flight} in flight when the worker was lost (as its last "
                  f"progress report counted them, {stamp} UTC)")
        lost = f"worker lost: process {worker.pid} on {socket.gethostname()} is gone"
        assert (sweep.status, sweep.reason) == (SweepStatus.FAILED, f"{lost} during point c=16 16/128; {counts}")
        assert (run.status, run.reason) == (RunStatus.FAILED, f"{lost}; {counts}")
        assert run.progress["ended_by"] == "worker_lost"
        assert (run.progress["requests_sent"], run.progress["lost_in_flight"], run.progress["aborted"]) == (
            32, in_flight, in_flight)

        # The API: 2 + 32 requests sent, 2 + the point's finished ones done, its in-flight ones aborted.
        api = operator_api.get(f"/api/sweeps/{sweep.pk}/").json()
        assert (api["requests_total"], api["requests_done"], api["requests_aborted"]) == (34, 2 + finished, in_flight)
        metrics = operator_api.get(f"/api/runs/{run.pk}/").json()["metrics"]
        assert (metrics["requests"], metrics["successes"], metrics["failures"], metrics["aborted"]) == (
            32, finished - failed, failed, in_flight)

        # The sweep page says the same, and that the point's counts are its last report's.
        page = _text(page_text(operator, f"/benchmarks/sweeps/{sweep.pk}/"))
        assert (f"Requests {2 + finished} finished of 34 sent , {in_flight} aborted in flight when the worker was "
                "lost (not counted as done) (the point the worker was running is counted as its last progress "
                "report counted it: the process took its per-request records with it)") in page
        assert (f"Outcome {2 + finished - failed} of 34 requests succeeded , {in_flight} aborted in flight when the "
                "worker was lost (not failures of the server)") in page
        assert f"{2 + finished} / {2 + finished}" not in page and "(live)" not in page
        assert "Provisional: the sweep failed" in page

        # The run page: what the point sent, finished and had in flight, never "finished when the point stopped".
        run_page = _text(page_text(operator, f"/benchmarks/runs/{run.pk}/"))
        assert f"Requests {counts}" in run_page
        assert f"Aborted requests ended in flight when the worker was lost: neither successes nor failures " \
               f"{in_flight} aborted in flight when the worker was lost" in run_page
        assert "finished when the point stopped" not in run_page and "while the point ran" not in run_page

        # The terminal (manage.py sweep and make demo): the follow line's last words, the table (no
        # "(live)"), the requests in the page's words and the page's provisional findings.
        assert sweep_follow_line(sweep=sweep, elapsed_s=12).endswith(
            f"failed, points 1/2 done, requests {2 + finished}/34 done, {in_flight} aborted in flight when the "
            "worker was lost")
        report = sweep_report_text(sweep=sweep)
        flat = re.sub(r"\s+", " ", report)
        [row] = [line for line in report.splitlines() if line.strip().startswith("16 !")]
        assert row.split()[:3] == ["16", "!", "32"] and "(live)" not in report
        assert f"[1] failures: {failed} (+{in_flight} aborted)" in flat
        assert (f"requests: {2 + finished} finished of 34 sent, {in_flight} aborted in flight when the worker was "
                "lost (not counted as done); the point the worker was running is counted as its last progress "
                "report counted it") in flat
        findings = _text(page_text(operator, f"/benchmarks/sweeps/{sweep.pk}/")).split("Findings ")[1]
        assert "Ceiling findings (provisional: see the first note below):" in report
        assert "One point (" in report and "One point (" in findings
        assert "note: provisional: the sweep failed (worker lost: process" in flat
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(10)
        sim.terminate()
        sim.wait(10)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=10)
    return proc.pid


def _lost_mid_point(operator, progress: dict) -> tuple[BenchmarkSweep, BenchmarkRun]:
    """A sweep of GRID running its c=16 point (``progress`` its last report, 5 of its requests
    finished), its c=1 point done (2 requests), its worker a process of this host that has ended."""
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    sweep = sweep_create(deployment=deployment, user=operator, grid=GRID)
    now = timezone.now()
    pid = _dead_pid()
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(
        status=SweepStatus.RUNNING, started_at=now, worker=f"{socket.gethostname()}:{pid}", heartbeat_at=now,
        points_done=1, requests_done=2 + 5, current_point="c=16 16/128")
    BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.DONE, concurrency=1, input_len=16,
                                output_len=128, num_requests=2,
                                summary={"requests": 2, "successes": 2, "failures": 0, "aborted": 0})
    run = BenchmarkRun.objects.create(
        sweep=sweep, ordinal=1, status=RunStatus.RUNNING, concurrency=16, input_len=16, output_len=128,
        num_requests=32, progress={**progress, "updated_at": (now - dt.timedelta(seconds=1)).isoformat()})
    return sweep, run


@pytest.mark.django_db
def test_the_redelivered_task_of_a_lost_worker_counts_the_point_as_the_reaper_does(operator, operator_api) -> None:
    sweep, run = _lost_mid_point(operator, {"done": 5, "total": 32, "failed": 1, "aborted": 0, "sent": 21,
                                            "output_tokens": 512})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED   # the task again, after WorkerLostError
    sweep.refresh_from_db()
    run.refresh_from_db()
    assert sweep.reason.endswith("during point c=16 16/128; 21 requests sent: 5 finished (1 failed), 16 in flight "
                                 "when the worker was lost (as its last progress report counted them, "
                                 f"{run.progress['counts_as_of'][:19].replace('T', ' ')} UTC)")
    api = operator_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert (api["requests_total"], api["requests_done"], api["requests_aborted"]) == (2 + 21, 7, 16)


@pytest.mark.django_db
def test_a_lost_point_whose_last_report_did_not_count_what_it_sent_reads_unknown(operator, operator_api) -> None:
    """A point whose last report came from a worker that did not count the requests sent (one
    started before that count was kept): how many it had in flight went with the process, so the
    total reads unknown everywhere, never the plan nor only what finished."""
    sweep, run = _lost_mid_point(operator, {"done": 5, "total": 32, "failed": 0, "aborted": 0, "output_tokens": 640})
    assert sweeps_reconcile() == 1
    sweep.refresh_from_db()
    run.refresh_from_db()
    assert sweep.reason.endswith("during point c=16 16/128; 5 finished (as its last progress report counted them, "
                                 f"{run.progress['counts_as_of'][:19].replace('T', ' ')} UTC); how many more were "
                                 "sent and were in flight is unknown: that report did not count the requests sent, "
                                 "and the process took the point's records with it")
    assert (run.progress["requests_sent"], run.progress["lost_in_flight"]) == (None, None)
    api = operator_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert (api["requests_total"], api["requests_done"]) == (None, 7)
    page = _text(page_text(operator, f"/benchmarks/sweeps/{sweep.pk}/"))
    assert "Requests 7 finished; how many were sent is unknown (the worker running the sweep was lost before " \
           "the point it ran counted the requests it had sent; see the reason)" in page
    assert "7 finished (sent unknown)" in _text(page_text(operator, "/benchmarks/"))
    report = re.sub(r"\s+", " ", sweep_report_text(sweep=sweep))
    assert "requests: 7 finished; how many were sent is unknown" in report
    assert "[1] requests: 5 finished, sent unknown" in report and "(live)" not in report
    assert "requests 7 finished, how many were sent is unknown (the worker was lost)" in sweep_follow_line(
        sweep=sweep, elapsed_s=3)
