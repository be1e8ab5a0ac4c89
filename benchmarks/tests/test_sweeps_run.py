"""Sweeps end to end against a real ``sim`` server process: stored runs, records files, progress,
snapshot, analysis; a deployment that never becomes ready (C14); cancellation; running twice."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import run_records, sweep_cancel, sweep_create, sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def test_it_runs_every_point_and_stores_exact_token_counts(sim_url: str, operator) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 4], "lengths": ["32:16"], "requests_per_concurrency": 2,
                               "warmup": 1, "slo": {"ttft_s": 10.0}})
    assert sweep.num_gpus == 4 and sweep.points_total == 2 and sweep.requests_total == 2 + 8
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    sweep.refresh_from_db()
    assert (sweep.points_done, sweep.requests_done) == (2, 10)
    runs = list(sweep.runs.order_by("ordinal"))
    assert [(r.concurrency, r.num_requests, r.status) for r in runs] == [(1, 2, RunStatus.DONE), (4, 8, RunStatus.DONE)]
    for run in runs:
        s = run.summary
        assert s["successes"] == run.num_requests and s["failures"] == 0
        assert s["output_tokens"] == run.num_requests * 16 and s["input_tokens"] == run.num_requests * 32
        assert s["server_generation_tokens_delta"] == run.num_requests * 16
        assert s["goodput_req_s"] is not None and s["slo_attainment"] == 1.0
        # itl_coalesced may be raised truthfully on a loaded machine (a starved client reads several
        # output events at once); every other flag would be a fault of the run
        assert set(run.flags) <= {"itl_coalesced"}, run.flags
        assert run.output_tok_s == pytest.approx(s["output_throughput_tok_s"])
        assert run.ttft_p99_ms == pytest.approx(s["ttft_s"]["p99"] * 1000)
        rec = run_records(run=run)
        assert len(rec) == run.num_requests
        assert rec.column("output_tokens").tolist() == [16] * run.num_requests
        assert Path(run.records_path).parent == Path(str(run.records_path)).parent  # a file under VAR_DIR
        assert Path(run.records_path).name == f"run-{run.pk}.npz"
    snap = runs[0].snapshot
    assert snap["recipe"] == "sim-single" and snap["recipe_version"] == 1
    assert snap["processes"][0]["env_redacted"] == {"HF_TOKEN": "***"}
    assert snap["server_info"]["entry"]["sim_profile"] == "demo-fast" and snap["server_info"]["entry"]["version"]
    assert snap["client_host"] and snap["ceiling_version"]
    assert sweep.analysis["findings"] and "1/1" not in sweep.analysis["lengths"]
    assert list(sweep.analysis["lengths"]) == ["32/16"]


def test_it_fails_the_sweep_when_its_engine_stops_answering_and_runs_no_later_point(tmp_path: Path,
                                                                                      operator) -> None:
    from benchmarks.tests.sweep_support import sim_start

    base, proc = sim_start(tmp_path / "sim.log")
    deployment = sim_deployment_create(base_url=base)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 2], "lengths": ["16:8"], "requests_per_concurrency": 2})
    proc.kill()  # the engine dies; its deployment row still says ready (the agent has not noticed yet)
    proc.wait(timeout=10)

    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    sweep.refresh_from_db()
    [run] = sweep.runs.all()  # the c=2 point never ran
    assert run.status == RunStatus.FAILED and run.summary["successes"] == 0 and run.summary["failures"] == 2
    # No agent marks the process here: the entry process is named by what its health checks saw.
    assert sweep.reason.startswith(f"single #0 stopped answering (GET {base}/health: ConnectError")
    assert "(3 checks 2 s apart)) during point c=1 16/8: 2 of 2 requests failed (commonest: 2 x cannot connect" \
        in sweep.reason
    assert sweep.reason.endswith(f"; deployment #{deployment.pk} was still marked ready at that moment; its numbers "
                                 "are not kept as a measurement and the later point was not run")
    assert run.reason in sweep.reason and sweep.points_done == 0


def test_it_stops_when_a_process_ended_though_the_deployment_is_still_marked_ready(sim_url: str,
                                                                                   operator) -> None:
    # The agent marks a dead process at once and the deployment seconds later: the sweep must not
    # measure the half-dead deployment meanwhile.
    from deployments.choices import ProcessStatus
    from deployments.models import ServerProcess

    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1], "lengths": ["16:8"], "requests_per_concurrency": 1})
    ServerProcess.objects.filter(deployment=deployment).update(
        status=ProcessStatus.FAILED, reason="killed by signal 9; restart policy is 'never'")

    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    sweep.refresh_from_db()
    assert sweep.reason == (f"single #0 is failed: killed by signal 9; restart policy is 'never' while deployment "
                            f"#{deployment.pk} was still marked ready; the sweep stopped")
    assert sweep.runs.count() == 0


def test_it_keeps_going_when_a_healthy_server_fails_every_request_of_a_point(tmp_path: Path, operator,
                                                                             monkeypatch) -> None:
    # The sim fails every generation but answers /health: a refusing engine is not a dead
    # deployment, so both points run and are kept, each failed with the server's answer (nothing
    # was measured), and the sweep that measured nothing is failed, not done.
    from benchmarks.tests.sweep_support import sim_start

    monkeypatch.setenv("CEILING_SIM_FAIL_GENERATE", "1")
    base, proc = sim_start(tmp_path / "sim.log")
    try:
        deployment = sim_deployment_create(base_url=base)
        sweep = sweep_create(deployment=deployment, user=operator,
                             grid={"concurrency": [1, 2], "lengths": ["16:8"], "requests_per_concurrency": 1})
        assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    finally:
        proc.kill()
        proc.wait(timeout=10)
    runs = list(sweep.runs.order_by("ordinal"))
    assert [(r.status, r.summary["successes"], r.summary["failures"]) for r in runs] == [
        (RunStatus.FAILED, 0, 1), (RunStatus.FAILED, 0, 2)]
    assert "simulated generation failure" in " ".join(runs[0].summary["errors"])
    assert runs[0].reason.startswith("every request failed at the server during point c=1 16/8: 1 of 1 failed "
                                     "(commonest: 1 x HTTP 500: ")
    assert runs[0].reason.endswith("); nothing was measured")
    sweep.refresh_from_db()
    assert sweep.reason == f"no point measured anything: {runs[0].reason}; {runs[1].reason}"


def test_it_fails_with_the_reason_when_the_deployment_never_becomes_ready(operator) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1], "lengths": [[8, 8]], "wait_ready_s": 1.0})
    start = time.monotonic()
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    assert time.monotonic() - start < 5
    sweep.refresh_from_db()
    assert sweep.reason == f"deployment #{deployment.pk} was not ready after 1 s of waiting (status starting)"
    assert sweep.runs.count() == 0


def test_it_fails_at_once_for_a_failed_deployment(operator) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    sweep = sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1], "lengths": [[8, 8]]})
    deployment.status, deployment.reason = DeploymentStatus.FAILED, "decode exited with code 1"
    deployment.save()
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    sweep.refresh_from_db()
    assert sweep.reason == (f"deployment #{deployment.pk} is failed: decode exited with code 1; nothing to benchmark")


def test_it_default_wait_is_the_startup_timeout_plus_a_minute(sim_url: str, operator) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1], "lengths": [[8, 8]]})
    assert sweep.grid["wait_ready_s"] == 5 + 60


def test_it_cancels_between_points_and_a_second_run_does_nothing(sim_url: str, operator) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 2, 4], "lengths": [[16, 64]], "requests": 4})
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
    thread.start()
    deadline = time.monotonic() + 30
    while not sweep.runs.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sweep_cancel(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), user=operator)
    thread.join(60)
    assert result["status"] == SweepStatus.CANCELLED
    sweep.refresh_from_db()
    # The cancel lands in whichever phase the first point is in by then; the reason names a phase
    # before the measured one (a busy host can still be building the prompts).
    assert sweep.reason in ("cancelled by oscar-operator", "cancelled by oscar-operator while preparing prompts",
                            "cancelled by oscar-operator while warming up"), sweep.reason
    assert sweep.cancel_requested
    assert sweep.runs.count() == 1 and sweep.runs.get().status == RunStatus.CANCELLED
    # a second delivery of the task finds a terminal row and leaves it alone
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.CANCELLED
    assert sweep.runs.count() == 1


def test_it_cancels_a_pending_sweep_at_once(operator) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    sweep = sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1], "lengths": [[8, 8]]})
    sweep = sweep_cancel(sweep=sweep, user=operator)
    assert sweep.status == SweepStatus.CANCELLED and sweep.reason == "cancelled by oscar-operator"
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.CANCELLED



def test_it_sweeps_from_the_command_line_and_prints_the_table_and_findings(sim_url: str) -> None:
    import io

    from django.core.management import call_command

    deployment = sim_deployment_create(base_url=sim_url, recipe_name="cli-sim")
    out = io.StringIO()
    call_command("sweep", "cli-sim", "--concurrency", "1,2,4", "--lengths", "16:8", "--requests", "4",
                 "--warmup", "1", "--here", stdout=out)
    text = out.getvalue()
    sweep = BenchmarkSweep.objects.get(deployment=deployment)
    assert sweep.status == SweepStatus.DONE
    assert f"Sweep #{sweep.pk}" in text and "p50 ms" in text and "Ceiling findings:" in text
    # findings are wrapped to the report's width: the same words, on lines of at most REPORT_WIDTH
    from benchmarks.sweeps import REPORT_WIDTH

    assert " ".join(sweep.analysis["findings"][0].split()) in " ".join(text.split())
    assert all(len(line) <= REPORT_WIDTH for line in text.splitlines())


def test_the_command_lines_table_marks_a_point_whose_numbers_are_not_kept(tmp_path: Path) -> None:
    import io

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from benchmarks.sweeps import NOT_KEPT_LEGEND
    from benchmarks.tests.sweep_support import sim_start

    base, proc = sim_start(tmp_path / "sim.log")
    sim_deployment_create(base_url=base, recipe_name="cli-down")
    proc.kill()  # the engine dies under the first point; its deployment row still says ready
    proc.wait(timeout=10)
    out = io.StringIO()
    with pytest.raises(CommandError, match="its numbers are not kept as a measurement") as exc:
        call_command("sweep", "cli-down", "--concurrency", "2,4", "--lengths", "16:8", "--requests", "4",
                     "--warmup", "0", "--here", stdout=out)
    # a sweep that ran and failed is no refusal of the input: exit status 1, not argparse's 2
    assert exc.value.returncode == 1 and str(exc.value).startswith("sweep #")
    lines = out.getvalue().splitlines()
    [row] = [line for line in lines if line.split()[:2] == ["2", "!"]]
    assert row.split()[2] == "4", row  # its requests, kept for the record beside the mark
    assert f"  {NOT_KEPT_LEGEND}" in lines and lines.index(f"  {NOT_KEPT_LEGEND}") == lines.index(row) + 1
