"""Sweeps against real ``sim`` servers, seen live: the load generator's own progress on the run row
and in the sweep's realtime group (the real Redis channel layer), points limited by time, the
whichever-ends-first rule, and the engine version of a PD deployment read from its workers behind
the real sglang-router."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import (
    point_limits, server_info_fetch, snapshot_versions, sweep_create, sweep_execute, sweep_snapshot,
)
from benchmarks.tests.sweep_support import REPO, sim_deployment_create
from controlplane.realtime import sweep_group
from deployments.choices import ProcessStatus, Role
from deployments.engines.sim_server import sim_version
from deployments.models import Deployment, ServerProcess
from deployments.tests.test_agent_support import free_ports, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0


class GroupListener:
    """A real channel-layer channel added to a sweep's group; :meth:`drain` returns every wire
    message received so far."""

    def __init__(self, sweep_id: int) -> None:
        self.layer = get_channel_layer()
        self.group = sweep_group(sweep_id)
        self.channel = async_to_sync(self.layer.new_channel)()
        async_to_sync(self.layer.group_add)(self.group, self.channel)

    def drain(self, *, until_type: str, timeout_s: float = 10.0) -> list[dict]:
        import asyncio

        async def collect() -> list[dict]:
            got: list[dict] = []
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                try:
                    event = await asyncio.wait_for(self.layer.receive(self.channel), 1.0)
                except asyncio.TimeoutError:
                    continue
                got.append(event["message"])
                if event["message"]["type"] == until_type:
                    return got
            return got

        try:
            return async_to_sync(collect)()
        finally:
            async_to_sync(self.layer.group_discard)(self.group, self.channel)


def _run_in_thread(sweep_id: int) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep_id)))
    thread.start()
    return thread, result


def test_it_stores_and_broadcasts_the_load_generators_progress_while_a_point_runs(sim_url: str, operator) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": ["16:64"], "duration_s": 3.0})
    listener = GroupListener(sweep.pk)
    thread, result = _run_in_thread(sweep.pk)
    seen: list[dict] = []
    while thread.is_alive():
        run = BenchmarkRun.objects.filter(sweep=sweep).first()
        # the load generator's reports (before them the row says it is preparing prompts)
        if run is not None and run.status == RunStatus.RUNNING and run.progress and "phase" not in run.progress:
            seen.append(dict(run.progress))
        time.sleep(0.1)
    thread.join()
    assert result["status"] == SweepStatus.DONE
    messages = listener.drain(until_type="sweep.status")
    run = BenchmarkRun.objects.get(sweep=sweep)
    sweep.refresh_from_db()

    # the row was written while the point ran, at most once a second, with the client's counts
    writes = {p["updated_at"] for p in seen}
    assert 2 <= len(writes) <= 3 + 1, writes
    assert any(p["done"] > 0 and p["tok_s"] > 0 for p in seen)
    assert all(p["duration_s"] == 3.0 and p["failed"] == 0 for p in seen)
    # every report was broadcast in the shape the live pages read
    progress = [m["data"] for m in messages if m["type"] == "sweep.progress" and "phase" not in m["data"]]
    assert len(progress) >= len(writes)
    assert {(p["sweep_id"], p["run_id"], p["point_index"], p["points_total"]) for p in progress} == {
        (sweep.pk, run.pk, 0, 1)}
    assert [p["done"] for p in progress] == sorted(p["done"] for p in progress)
    assert set(progress[0]) >= {"done", "total", "failed", "output_tokens", "elapsed_s", "tok_s"}
    assert max(p["elapsed_s"] for p in progress) >= 2.5
    [point] = [m["data"] for m in messages if m["type"] == "sweep.point"]
    assert (point["run_id"], point["point_index"], point["points_done"], point["points_total"]) == (run.pk, 0, 1, 1)
    assert point["summary"]["ended_by"] == "duration" and point["summary"]["requests"] == run.num_requests
    assert point["summary"]["output_tok_s"] == pytest.approx(run.output_tok_s)
    assert messages[-1]["type"] == "sweep.status" and messages[-1]["data"]["status"] == "done"
    seqs = [m["seq"] for m in messages]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    # a time-limited point: it ran for its duration and the totals follow what it sent
    s = run.summary
    assert run.duration_s == 3.0 and s["ended_by"] == "duration" and s["prompts_reused"] is False
    assert 3.0 <= s["duration_s"] < 5.0
    assert run.num_requests == s["requests"] == s["successes"] >= 6
    assert s["output_tokens"] == 64 * s["requests"]  # fixed length, every request complete
    assert (sweep.requests_done, sweep.requests_total) == (run.num_requests, run.num_requests)
    assert run.progress["done"] == run.num_requests  # the last report is stored too


def test_it_ends_an_open_loop_point_at_its_request_count_or_its_duration_whichever_comes_first(
        sim_url: str, operator) -> None:
    # 4 req/s: 3 requests arrive within 3 s (ends by count); 40 requests do not fit in 1.5 s (ends by time)
    by_count = point_limits(point={"concurrency": None, "request_rate": 4.0, "max_requests": 3, "duration_s": 3.0,
                                   "num_requests": 3}, seed=0)
    by_time = point_limits(point={"concurrency": None, "request_rate": 4.0, "max_requests": 40, "duration_s": 1.5,
                                  "num_requests": 40}, seed=0)
    assert (by_count["duration_s"], by_count["ends_by"]) == (None, "requests")
    assert (by_time["duration_s"], by_time["ends_by"]) == (1.5, "duration")
    # a closed loop cannot know which comes first: both limits go to the load generator
    closed = point_limits(point={"concurrency": 2, "request_rate": None, "max_requests": 8, "duration_s": 60.0,
                                 "num_requests": 8}, seed=0)
    assert closed == {"duration_s": 60.0, "max_requests": 8, "specs": 8, "ends_by": "first"}
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [], "request_rates": [4.0], "lengths": ["16:8"], "requests": 40,
                               "duration_s": 1.5})
    assert sweep.requests_total == 40
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    run = BenchmarkRun.objects.get(sweep=sweep)
    sweep.refresh_from_db()
    assert run.summary["ended_by"] == "duration" and 1 <= run.num_requests < 40
    assert run.summary["request_cap_applied"] is True
    assert sweep.requests_total == sweep.requests_done == run.num_requests  # the unsent 40 - n left the total


def test_it_ends_a_closed_loop_point_by_time_when_its_requests_outlast_it(sim_url: str, operator, viewer) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1], "lengths": ["16:64"], "requests": 500, "duration_s": 1.5})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    run = BenchmarkRun.objects.get(sweep=sweep)
    assert run.summary["ended_by"] == "duration"
    assert 1 <= run.num_requests < 500 and run.summary["duration_s"] < 4.0
    # the pool its time can use: 1 slot x 1.5 s at 1 ms + 64 x 0.1 ms a request (7.4 ms), 203 < 500
    assert run.summary["prompt_pool"] == 203 and run.summary["prompts_reused"] is False
    client = Client()
    client.force_login(viewer)
    page = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert "1.5 s per point" in page and "(the point ended by its duration)" in page
    assert "Distinct prompts of the time-limited point (prompts)" in page and "none was sent twice" in page


def test_it_reads_the_pd_engine_version_from_the_workers_behind_the_real_router(tmp_path: Path) -> None:
    p_http, boot, d_http, r_http, prom = free_ports(5)
    sim = [sys.executable, "-m", "deployments.engines.sim_server", "--model-name", "tiny", "--profile", "demo-fast",
           "--startup-delay-s", "0"]
    procs = [subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for argv in (
        [*sim, "--role", "prefill", "--port", str(p_http), "--bootstrap-port", str(boot)],
        [*sim, "--role", "decode", "--port", str(d_http)],
        [sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation", "--prefill",
         f"http://127.0.0.1:{p_http}", str(boot), "--decode", f"http://127.0.0.1:{d_http}", "--host", "127.0.0.1",
         "--port", str(r_http), "--prometheus-port", str(prom)],
    )]
    try:
        router = f"http://127.0.0.1:{r_http}"
        wait_for(lambda: _answers(f"{router}/get_server_info") and _answers(f"http://127.0.0.1:{d_http}/health"),
                 timeout_s=30, what="the router and the decode worker")
        deployment = sim_deployment_create(base_url=router, recipe_name="sim-pd", topology="pd")
        deployment.processes.all().delete()
        for role, port in ((Role.PREFILL, p_http), (Role.DECODE, d_http), (Role.ROUTER, r_http)):
            ServerProcess.objects.create(deployment=deployment, role=role, status=ProcessStatus.READY,
                                         argv=["python"], health_url=f"http://127.0.0.1:{port}/health")
        sweep = BenchmarkSweep.objects.create(deployment=deployment, grid={}, topology="pd", engine="sim")
        snap = sweep_snapshot(sweep=sweep, deployment=Deployment.objects.get(pk=deployment.pk))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
    # sglang-router 0.3.2 answers /get_server_info with its own counts and no version
    entry = snap["server_info"]["entry"]
    assert entry["version"] is None and entry["route"] == "/get_server_info"
    assert snap["router_version"] is None and snap["router_version_source"] is None
    assert snap["engine_version"] == sim_version() and snap["engine_version_source"] == "decode0"
    assert snap["server_info"]["prefill0"]["disaggregation_mode"] == "prefill"


class _VersionOnly(BaseHTTPRequestHandler):
    """A server that, like vLLM, answers only ``GET /version``."""

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        body = json.dumps({"version": "0.9.2"}).encode() if self.path == "/version" else b"not found"
        self.send_response(200 if self.path == "/version" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_it_falls_back_to_the_version_route_and_says_what_each_route_answered() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VersionOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        info = server_info_fetch(base_url=base)
    finally:
        server.shutdown()
        server.server_close()
    assert (info["version"], info["route"]) == ("0.9.2", "/version")
    (closed,) = free_ports(1)
    down = server_info_fetch(base_url=f"http://127.0.0.1:{closed}")
    assert down["version"] is None and down["error"].startswith("ConnectError")


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_it_names_each_workers_version_when_they_differ_and_keeps_the_router_apart() -> None:
    info = {"entry": {"version": None}, "prefill0": {"version": "0.4.9"}, "decode0": {"version": "0.4.9"},
            "decode1": {"version": "0.5.0"}}
    v = snapshot_versions(server_info=info, topology="pd")
    assert v["engine_version"] == "decode0=0.4.9, decode1=0.5.0" and v["engine_version_source"] == "decode0, decode1"
    single = snapshot_versions(server_info={"entry": {"version": "b4500"}}, topology="single")
    assert (single["engine_version"], single["engine_version_source"]) == ("b4500", "entry")
    routed = snapshot_versions(server_info={"entry": {"version": "0.3.2"}, "prefill0": {"version": "0.4.9"}},
                               topology="pd")
    assert (routed["router_version"], routed["engine_version"], routed["engine_version_source"]) == (
        "0.3.2", "0.4.9", "prefill0")


def test_it_shows_live_progress_for_llamacpp_which_exposes_no_counters(tmp_path: Path, operator) -> None:
    from deployments.engines.tiny_gguf import tiny_gguf_write
    from deployments.models import Node, Recipe
    from deployments.tests.test_llamacpp_engine import Server, server_argv

    (port,) = free_ports(1)
    srv = Server(server_argv(tiny_gguf_write(tmp_path / "tiny.gguf"), port), tmp_path / "server.log",
                 f"http://127.0.0.1:{port}")
    try:
        srv.wait_ready()
        node, _ = Node.objects.get_or_create(name="local", defaults={"hostname": "localhost", "cpu_count": 2,
                                                                     "agent_heartbeat_at": timezone.now()})
        spec = {"served_model_name": "tiny", "roles": {"single": {"cpus": "0-1", "port": port}}}
        recipe = Recipe.objects.create(name="llama", engine="llamacpp", topology="single", node=node, spec=spec)
        deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, spec_snapshot=spec, node=node,
                                               status="ready", entry_url=srv.base_url)
        ServerProcess.objects.create(deployment=deployment, role=Role.SINGLE, status=ProcessStatus.READY,
                                     argv=["python"], health_url=f"{srv.base_url}/v1/models")
        sweep = sweep_create(deployment=deployment, user=operator,
                             grid={"concurrency": [1], "lengths": ["16:8"], "duration_s": 2.0})
        listener = GroupListener(sweep.pk)
        assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
        messages = listener.drain(until_type="sweep.status")
    finally:
        srv.stop()
    run = BenchmarkRun.objects.get(sweep=sweep)
    assert run.api == "openai-completions" and run.num_requests >= 1
    progress = [m["data"] for m in messages if m["type"] == "sweep.progress" and "phase" not in m["data"]]
    assert progress and progress[-1]["done"] == run.num_requests and progress[-1]["output_tokens"] > 0
    assert any(p["tok_s"] > 0 for p in progress)
    assert run.progress["done"] == run.num_requests
    # llama_cpp.server answers none of the version routes: the snapshot says so instead of guessing
    assert run.snapshot["engine_version"] is None
    for key in ("entry", "single0"):  # the worker asked at its origin, not under /v1 (its health route)
        assert run.snapshot["server_info"][key]["error"] == (
            "HTTP 404 from /get_server_info; HTTP 404 from /server_info; HTTP 404 from /version")


def test_it_sweeps_for_a_duration_from_the_command_line(sim_url: str) -> None:
    import io

    from django.core.management import call_command

    deployment = sim_deployment_create(base_url=sim_url, recipe_name="cli-timed")
    out = io.StringIO()
    call_command("sweep", "cli-timed", "--concurrency", "2", "--lengths", "16:8", "--duration", "1", "--here",
                 stdout=out)
    text = out.getvalue()
    sweep = BenchmarkSweep.objects.get(deployment=deployment)
    run = sweep.runs.get()
    assert f"sweep #{sweep.pk} created: 1 point, as many requests as fit in 1 s per point" in text
    assert sweep.status == SweepStatus.DONE and sweep.grid["duration_s"] == 1.0
    assert run.summary["ended_by"] == "duration" and run.num_requests >= 2
    assert sweep.name.endswith("1 s/point")
