"""Points stopped part way keep what they sent, and the words about them stay true.

* The load generator stopped by its caller hands back the partial run in every mode (closed loop,
  open loop, time-limited, two worker processes): the finished requests, the ones in flight
  aborted as failures with the caller's reason, and what was never sent. Against a real ``sim``.
* A sweep whose engine is killed (kill -9, the node agent's own monitor pass marking it) while an
  open-loop point runs stores that point failed with its records, summary and ``not_sent``, and
  fails with the counts and the commonest error.
* A closed-loop point whose engine dies keeps its planned request count (run, pages); the failed
  sweep counts what it sent.
* The reason's words about the deployment's status are true when they are written.
* No token-accuracy flag for a run without one successful request (real sim, cut-off streams).
* A failures cell never shows the same text twice.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from array import array
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils.html import escape

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen import (
    Api, LoadConfig, LoadgenStopped, RecordStore, RequestOutcome, RunResult, WorkerStats, loadgen_run,
    random_dataset, run_summary,
)
from benchmarks.loadgen.driver import STOP_LOOP_GRACE_S, STOP_RESULTS_S
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import run_not_measured, sweep_create, sweep_execute
from benchmarks.tests.sweep_support import agent_watched_deployment, sim_deployment_create, sim_start
from deployments.models import Deployment, ServerProcess
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import sim_single_recipe, wait_for
from benchmarks.tests.page_support import logged_in_client as _client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

MS = 1_000_000
STOP = "single #0 killed by signal 9 (SIGKILL)"  # what a sweep would pass as the reason


# ------------------------------------------------------------------------------------ load generator


MODES = {
    # name: (LoadConfig fields, requests planned)
    "closed loop": ({"concurrency": 4}, 200),
    "closed loop over aiohttp": ({"concurrency": 4, "transport": "aiohttp"}, 200),
    "open loop": ({"rate": 20.0}, 200),
    "time-limited with a cap": ({"concurrency": 4, "duration_s": 60.0, "max_requests": 150}, 150),
    "two worker processes": ({"concurrency": 4, "workers": 2}, 200),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_it_hands_back_what_was_sent_when_its_caller_stops_it(sim_url: str, mode: str) -> None:
    fields, planned = MODES[mode]
    # 64 output tokens (32 to 96) take the sim about half a second: requests are in flight at any
    # moment. Their lengths differ, so the slots are out of step and a request in flight has
    # already streamed when the stop comes (with one length every slot would wait for its first
    # token at the same instant, each cycle).
    specs = random_dataset(num=200, input_len=16, output_len=64, output_range_ratio=0.5, seed=4, token_ids=True)
    cfg = LoadConfig(base_url=sim_url, api=Api.GENERATE, model="sim-model", ignore_eos=True, fixed_output=True,
                     **fields)
    asked: list[str] = []
    taken: list[float] = []  # when the load generator first read the stop

    def progress(info: dict) -> None:
        if info["done"] >= 4 and not asked:
            asked.append(STOP)

    def should_stop() -> str | None:
        if asked and not taken:
            taken.append(time.monotonic())
        return asked[0] if asked else None

    with pytest.raises(LoadgenStopped) as stopped:
        loadgen_run(config=cfg, specs=specs, progress=progress, should_stop=should_stop)
    # Timed from the stop, not from the call: starting two worker processes takes 5 s on an idle
    # 2-core host and over 12 s on a busy one, none of it the stop's doing.
    assert time.monotonic() - taken[0] < STOP_RESULTS_S + STOP_LOOP_GRACE_S
    result = stopped.value.result
    assert result is not None and result.halted == STOP and result.stopped_early == STOP
    rec = result.records
    sent = len(rec)
    aborted = [i for i, m in rec.errors.items() if m.startswith(f"aborted: {STOP}")]
    assert aborted, "a request was in flight when the run stopped"
    assert rec.column("ok").sum() >= 4  # what finished before the stop is kept as it was
    assert result.not_sent == planned - sent > 0
    # Aborted requests keep what streamed before the abort.
    assert any(rec.column("ev_len")[i] > 0 for i in aborted)
    s = run_summary(result)
    assert s["halted"] == STOP and s["not_sent"] == planned - sent
    assert s["requests"] == sent and s["failures"] + s["aborted"] == len(rec.errors) and s["aborted"] == len(aborted)
    assert s["errors"][f"aborted: {STOP}"] == len(aborted)
    assert s["flags"]["concurrency_shortfall"] is False


# ------------------------------------------------------------------------------------ sweeps

AGENT_TICK_S = 0.2  # the node agent's monitor period in these tests


@pytest.fixture
def single_deployment(settings, tmp_path: Path, operator):
    """A ready sim single-server deployment launched by the node side's own code, watched by the
    agent's monitor pass in a thread; torn down (and its engine tree killed) afterwards."""
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    settings.VAR_DIR = tmp_path
    recipe = sim_single_recipe(node=cpu_node_create(name="partial-box"), user=operator, name="sim-single-partial")
    with agent_watched_deployment(recipe=recipe, user=operator, tmp_path=tmp_path, tick_s=AGENT_TICK_S,
                                  what="the sim deployment") as deployment:
        yield deployment


def _run_in_thread(sweep_id: int) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(status=sweep_execute(sweep_id=sweep_id)), daemon=True)
    thread.start()
    return thread, result


def _wait_for_done_requests(sweep: BenchmarkSweep, at_least: int) -> None:
    wait_for(lambda: ((BenchmarkRun.objects.filter(sweep=sweep).values_list("progress", flat=True).first() or {})
                      .get("done") or 0) >= at_least, timeout_s=30, what=f"{at_least} finished requests")


@pytest.mark.django_db(transaction=True)
def test_it_keeps_the_records_of_an_open_loop_point_whose_engine_was_killed(single_deployment, operator,
                                                                           viewer_api, viewer) -> None:
    engine = ServerProcess.objects.get(deployment=single_deployment, role="single")
    # 5 req/s: the load generator's own stop needs 32 refusals in a row (6.4 s), so the agent's
    # mark reaches the sweep's watch first, the order a real run hit.
    sweep = sweep_create(deployment=single_deployment, user=operator,
                         grid={"request_rates": [5], "lengths": "64:32", "requests": 300})
    thread, result = _run_in_thread(sweep.pk)
    _wait_for_done_requests(sweep, 3)
    killed_at = time.monotonic()
    os.kill(engine.pid, signal.SIGKILL)
    thread.join(60)
    assert time.monotonic() - killed_at < 10
    assert result["status"] == SweepStatus.FAILED

    sweep.refresh_from_db()
    [run] = sweep.runs.all()
    s = run.summary
    assert run.status == RunStatus.FAILED and s["ended_by"] == "deployment_down"
    assert s["halted"] == "single #0 killed by signal 9 (SIGKILL); restart policy is 'never'"
    assert s["successes"] >= 3
    assert s["not_sent"] == 300 - s["requests"] > 250
    # What was in flight or arrived after the kill failed (refused, cut off, or aborted by the stop).
    failed = f"none of {s['requests']:,} requests sent failed"
    if s["failures"] + s["aborted"]:
        commonest, count = max(s["errors"].items(), key=lambda kv: kv[1])
        failed = (f"{s['failures'] + s['aborted']:,} of {s['requests']:,} requests sent failed "
                  f"(commonest: {count} x {commonest})")
    assert sweep.reason == (
        f"single #0 killed by signal 9 (SIGKILL); restart policy is 'never' during point 5 req/s 64/32: {failed}, "
        f"{s['not_sent']:,} not sent; deployment #{single_deployment.pk} was marked failed at that moment; its "
        "numbers are not kept as a measurement")
    assert run.reason in sweep.reason
    # The run's planned count stays; what was sent and what was not is in the summary, and the
    # failed sweep counts what it sent. Done are the requests that finished: those the stop
    # aborted in flight are not among them.
    assert run.num_requests == 300 and sweep.requests_total == s["requests"]
    assert sweep.requests_done == s["requests"] - s["aborted"]

    records = viewer_api.get(f"/api/runs/{run.pk}/records/")
    assert records.status_code == 200 and records.json()["count"] == s["requests"]
    page = _client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert "stopped before the reasons were stored" not in page
    assert f"{s['requests']:,} sent of 300 planned" in page
    assert escape(f"the sweep stopped the point: {s['halted']}") in page
    # A failed point: never ranked, never analysed.
    assert run_not_measured(run=run).startswith("it failed (single #0 killed by signal 9")


@pytest.mark.django_db(transaction=True)
def test_it_keeps_the_planned_count_of_a_closed_loop_point_whose_engine_died(tmp_path: Path, settings, operator,
                                                                            viewer_api, viewer,
                                                                            monkeypatch) -> None:
    from benchmarks.services import sweeps as sweep_services

    settings.VAR_DIR = tmp_path
    monkeypatch.setattr(sweep_services, "ENTRY_HEALTH_GAP_S", 0.2)  # the three health checks, sooner
    base, proc = sim_start(tmp_path / "sim.log")
    try:
        deployment = sim_deployment_create(base_url=base)
        sweep = sweep_create(deployment=deployment, user=operator,
                             grid={"concurrency": [2], "lengths": "16:64", "requests": 400})
        assert sweep.requests_total == 400
        thread, result = _run_in_thread(sweep.pk)
        _wait_for_done_requests(sweep, 2)
        proc.kill()  # no agent here: the load generator notices the target gone
        proc.wait(timeout=10)
        thread.join(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert result["status"] == SweepStatus.FAILED
    sweep.refresh_from_db()
    [run] = sweep.runs.all()
    s = run.summary
    assert s["ended_by"] == "target_unreachable" and s["requests"] + s["not_sent"] == 400
    sent = s["requests"]
    finished = sent - s["aborted"]
    # The run keeps its planned count; the failed sweep counts what its point sent.
    assert (sweep.requests_total, sweep.requests_done, run.num_requests) == (sent, finished, 400)
    api = viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert (api["requests_total"], api["requests_done"]) == (sent, finished)
    assert viewer_api.get(f"/api/runs/{run.pk}/").json()["num_requests"] == 400

    html = _client(viewer).get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    progress = html.split('class="requests-done"')[1].split("</dd>")[0]
    assert (f"{finished} finished of {sent} sent" if finished < sent else f"{finished} / {sent} requests") in progress
    row = html.split(f'id="run-{run.pk}"')[1].split("</tr>")[0]
    assert f"{sent:,} sent of 400 planned" in row
    cell = row.split('class="small failure-reasons"')[1]
    lines = [part.split("</div>")[0].split(">", 1)[1] for part in cell.split("<div title=")[1:]]
    assert lines and len(lines) == len(set(lines)), lines


# ------------------------------------------------------------------------------------ wording


@pytest.mark.django_db(transaction=True)
def test_it_says_what_the_deployment_was_marked_when_the_reason_was_written() -> None:
    from benchmarks.services.sweeps import REASON_STATUS_WAIT_S, _went_down_reason
    from deployments.choices import DeploymentStatus

    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    summary = {"requests": 3, "failures": 3, "errors": {"server closed the connection": 3}}
    down = "single #0 killed by signal 9 (SIGKILL); restart policy is 'never'"

    # The agent marks the deployment a moment after the process: the reason waits for that.
    def mark_failed() -> None:
        time.sleep(0.3)
        Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.FAILED)

    marker = threading.Thread(target=mark_failed)
    marker.start()
    text = _went_down_reason(summary, "c=2 16/8", deployment, down=down, healthy=None, health="")
    marker.join()
    assert text == (f"{down} during point c=2 16/8: 3 of 3 requests failed (commonest: 3 x server closed the "
                    f"connection); deployment #{deployment.pk} was marked failed at that moment")

    # Still marked ready after the wait: the text says so, in words that stay true once stored.
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.READY)
    started = time.monotonic()
    text = _went_down_reason(summary, "c=2 16/8", deployment, down=down, healthy=None, health="")
    assert time.monotonic() - started <= REASON_STATUS_WAIT_S + 0.5
    assert text.endswith(f"; deployment #{deployment.pk} was still marked ready at that moment")
    assert " is ready" not in text


# ------------------------------------------------------------------------------------ token check


def test_it_raises_no_token_flag_for_a_run_without_one_success(sim_url: str) -> None:
    # Every stream is cut off by the client's timeout: the server counted the tokens it made for
    # them, the client none as output.
    specs = random_dataset(num=4, input_len=16, output_len=512, seed=2, token_ids=True)
    cfg = LoadConfig(base_url=sim_url, api=Api.GENERATE, model="sim-model", concurrency=4, ignore_eos=True,
                     timeout_s=0.3, metrics_urls=[f"{sim_url}/metrics"])
    s = run_summary(loadgen_run(config=cfg, specs=specs))
    assert s["successes"] == 0 and s["server_generation_tokens_delta"] > 0
    assert s["flags"]["server_token_mismatch"] is False
    assert s["server_token_note"] == (f"not compared: no request succeeded, and the server's count "
                                      f"({s['server_generation_tokens_delta']:g} tokens) includes streams cut off "
                                      "before the client counted them")


def _outcome(start_ms: int, tokens: int, *, ok: bool, requested: int = 16, error: str | None = None,
             ) -> RequestOutcome:
    events = array("q", [(start_ms + 10 + k) * MS for k in range(tokens)])
    return RequestOutcome(scheduled=start_ms * MS, start=start_ms * MS, end=(start_ms + 40) * MS, events=events,
                          event_tokens=array("H", [1] * tokens), output_tokens=tokens, requested_output=requested,
                          http_status=200, ok=ok, error=error, finish_reason="length" if ok else None)


def _result(outcomes: list[RequestOutcome], before: float, after: float) -> RunResult:
    store = RecordStore()
    for o in outcomes:
        store.add(o)
    cfg = LoadConfig(base_url="http://x", api=Api.GENERATE, model="m", concurrency=2)
    return RunResult(records=store, config=cfg, t0=0, workers=[WorkerStats(0, MS, 100 * MS, 10, len(outcomes))],
                     server_tokens_before=before, server_tokens_after=after)


def test_it_compares_the_server_count_with_what_failed_requests_could_have_made() -> None:
    # Two successes of 16 tokens and one failure that streamed 3 of its 16: the server made
    # between 35 and 48 tokens for them.
    outcomes = [_outcome(0, 16, ok=True), _outcome(5, 16, ok=True),
                _outcome(10, 3, ok=False, error="server closed the connection inside the response body after "
                                                "96 body bytes")]
    s = run_summary(_result(outcomes, 100.0, 100.0 + 40))
    assert s["flags"]["server_token_mismatch"] is False
    assert s["server_token_note"] == ("1 failed request: the server's count may include up to 13 tokens the client "
                                      "did not receive; compared with that range")
    assert run_summary(_result(outcomes, 100.0, 100.0 + 60))["flags"]["server_token_mismatch"] is True
    assert run_summary(_result(outcomes, 100.0, 100.0 + 30))["flags"]["server_token_mismatch"] is True


# ------------------------------------------------------------------------------------ failures cell


@pytest.mark.django_db
def test_it_never_lists_the_same_failure_text_twice(settings, tmp_path: Path, viewer) -> None:
    settings.VAR_DIR = tmp_path
    body = "server closed the connection inside the response body after {} body bytes"
    http = "HTTP 500: {{\"error\": \"the engine could not schedule this request because {}\"}}"
    outcomes = [_outcome(0, 16, ok=True),
                _outcome(1, 2, ok=False, error=body.format(4312)), _outcome(2, 1, ok=False, error=body.format(87)),
                _outcome(3, 0, ok=False, error=http.format("its KV cache is full")),
                _outcome(4, 0, ok=False, error=http.format("the queue is full"))]
    s = run_summary(_result(outcomes, 0.0, 0.0))
    # One kind of failure is one entry, whatever its byte count, said with the range of its
    # counts; the records keep each message.
    assert s["errors"] == {body.format("87–4,312"): 2, http.format("its KV cache is full"): 1,
                           http.format("the queue is full"): 1}

    from benchmarks.services.runs import _store_summary

    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE, points_total=1,
                                          points_done=1, grid={"concurrency": [2], "lengths": [[16, 16]]})
    run = BenchmarkRun(sweep=sweep, ordinal=0, status=RunStatus.DONE, concurrency=2, input_len=16, output_len=16,
                       num_requests=5)
    _store_summary(run, s)
    run.save()
    html = _client(viewer).get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    cell = html.split(f'id="run-{run.pk}"')[1].split("</tr>")[0].split('class="small failure-reasons"')[1]
    lines = [part.split("</div>")[0].split(">", 1)[1] for part in cell.split("<div title=")[1:]]
    # The two HTTP 500 bodies read the same once cut to the cell's width: one line, counted twice.
    assert lines == ["2 × HTTP 500: {&quot;error&quot;: &quot;the engine could not schedule this req…",
                     "2 × server closed the connection inside the response body after…"], lines


def test_a_fresh_engines_declared_token_counter_reads_zero_not_unknown(tmp_path: Path) -> None:
    # Before its first generation the sim (like SGLang) declares the labelled counter with no
    # series: that is 0 tokens, so the first run against a fresh engine still gets its check.
    from benchmarks.loadgen.driver import server_generation_tokens

    base, proc = sim_start(tmp_path / "fresh-sim.log")
    try:
        assert server_generation_tokens([f"{base}/metrics"]) == (0.0, [])
        specs = random_dataset(num=2, input_len=16, output_len=8, seed=4, token_ids=True)
        cfg = LoadConfig(base_url=base, api=Api.GENERATE, model="sim-model", concurrency=2, ignore_eos=True,
                         metrics_urls=[f"{base}/metrics"])
        s = run_summary(loadgen_run(config=cfg, specs=specs))
        assert s["server_generation_tokens_delta"] == 16 and s["flags"]["server_token_mismatch"] is False
    finally:
        proc.terminate()
        proc.wait(timeout=10)
