"""Readiness probes against real servers: the ``sim`` engine (startup delay, failing
generation) and the real sglang-router in front of sim prefill and decode workers."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from deployments.examples import local_node_facts_example
from deployments.launch import launch_plan_render
from deployments.readiness import process_liveness, process_readiness, router_worker_counts
from deployments.tests.test_agent_support import free_ports, wait_for

SIM = [sys.executable, "-m", "deployments.engines.sim_server", "--model-name", "tiny", "--profile", "demo-fast"]


@pytest.fixture
def spawn():
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], env: dict | None = None) -> subprocess.Popen:
        import os

        proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def _single_checks(port: int) -> list[dict]:
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": port}},
        "sim": {"profile": "demo-fast"},
    }
    plan = launch_plan_render(engine="sim", topology="single", spec=spec, node=local_node_facts_example())
    return plan.process("single").readiness


def test_it_never_uses_the_model_list_as_readiness():
    checks = _single_checks(31000)

    assert [c["kind"] for c in checks] == ["process_alive", "http", "generate"]
    assert not any("/v1/models" in c.get("url", "") for c in checks)


def test_it_is_not_ready_during_the_startup_delay_and_ready_after(spawn):
    (port,) = free_ports(1)
    spawn([*SIM, "--role", "single", "--port", str(port), "--startup-delay-s", "1.5"])
    checks = _single_checks(port)
    first = wait_for(lambda: (r := process_readiness(checks=checks, alive=True, role="single")).kind != "http"
                     or "503" in r.detail and r, timeout_s=10, what="/health to answer")

    assert first.ok is False and first.detail == f"http://127.0.0.1:{port}/health answered 503, expected 200"
    ready = wait_for(lambda: (r := process_readiness(checks=checks, alive=True, role="single")).ok and r,
                     timeout_s=10, what="readiness")
    assert ready.kind == "generate"
    assert ready.detail == f"one-token generation at http://127.0.0.1:{port}/generate succeeded"
    assert process_liveness(checks=checks, alive=True).ok
    assert process_readiness(checks=checks, alive=False, role="single").detail == "process is not running"


def test_it_reports_a_failing_generation_with_its_status_and_body(spawn):
    (port,) = free_ports(1)
    spawn([*SIM, "--role", "single", "--port", str(port), "--startup-delay-s", "0"],
          env={"CEILING_SIM_FAIL_GENERATE": "1"})
    checks = _single_checks(port)
    wait_for(lambda: process_liveness(checks=checks, alive=True).ok, timeout_s=10, what="/health")

    result = process_readiness(checks=checks, alive=True, role="single")

    assert result.ok is False and result.kind == "generate"
    assert result.detail.startswith(f"one-token generation at http://127.0.0.1:{port}/generate failed: HTTP 500")
    assert "simulated generation failure" in result.detail
    assert process_liveness(checks=checks, alive=True).ok  # alive, yet never ready


def test_it_checks_the_real_router_worker_list_and_streams_through_it(spawn):
    p_http, boot, d_http, r_http, prom = free_ports(5)
    spawn([*SIM, "--role", "prefill", "--port", str(p_http), "--bootstrap-port", str(boot), "--startup-delay-s", "0"])
    spawn([*SIM, "--role", "decode", "--port", str(d_http), "--startup-delay-s", "0"])
    spawn([sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
           "--prefill", f"http://127.0.0.1:{p_http}", str(boot), "--decode", f"http://127.0.0.1:{d_http}",
           "--host", "127.0.0.1", "--port", str(r_http), "--prometheus-port", str(prom)])
    base = f"http://127.0.0.1:{r_http}"
    checks = [
        {"kind": "process_alive"},
        {"kind": "http", "method": "GET", "url": f"{base}/health", "expect": {"status": 200}},
        {"kind": "router_workers", "method": "GET", "url": f"{base}/workers", "expect": {"prefill": 1, "decode": 1}},
        {"kind": "generate", "method": "POST", "url": f"{base}/generate", "expect": {"status": 200},
         "json": {"text": "Hello", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}},
    ]

    result = wait_for(lambda: (r := process_readiness(checks=checks, alive=True, role="router")).ok and r,
                      timeout_s=30, what="the router to be ready", every_s=0.25)

    assert result.detail == f"streamed request through {base}/generate yielded a token"
    too_many = [*checks[:2], {**checks[2], "expect": {"prefill": 2, "decode": 1}}]
    short = process_readiness(checks=too_many, alive=True, role="router")
    assert (short.ok, short.kind) == (False, "router_workers")
    assert short.detail == "router lists healthy workers prefill 1, decode 1; expected prefill 2, decode 1"


def test_it_counts_only_healthy_router_workers():
    # The shape sglang-router 0.3.2 returns from GET /workers (trimmed).
    payload = {
        "workers": [
            {"url": "http://127.0.0.1:31001", "worker_type": "decode", "is_healthy": True},
            {"url": "http://127.0.0.1:31000", "worker_type": "prefill", "is_healthy": False, "bootstrap_port": 31998},
        ],
        "total": 2,
        "stats": {"prefill_count": 1, "decode_count": 1, "regular_count": 0},
    }

    assert router_worker_counts(payload) == {"prefill": 0, "decode": 1, "regular": 0}
    assert router_worker_counts({"unexpected": True}) == {"prefill": 0, "decode": 0, "regular": 0}


def test_it_tells_a_timeout_from_a_refused_connection(spawn):
    (port,) = free_ports(1)
    proc = spawn([*SIM, "--role", "single", "--port", str(port), "--startup-delay-s", "0"])
    checks = _single_checks(port)
    wait_for(lambda: process_liveness(checks=checks, alive=True).ok, timeout_s=10, what="/health")
    os.kill(proc.pid, signal.SIGSTOP)  # the kernel still accepts connections; nobody answers
    try:
        stopped = process_liveness(checks=checks, alive=True)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    proc.kill()
    proc.wait(timeout=10)
    refused = process_liveness(checks=checks, alive=True)

    assert (stopped.ok, stopped.kind, stopped.timed_out) == (False, "http", True)
    assert stopped.detail == f"http://127.0.0.1:{port}/health did not answer within 2.0 s (ReadTimeout)"
    assert (refused.ok, refused.kind, refused.timed_out) == (False, "http", False)
    assert refused.detail == f"http://127.0.0.1:{port}/health: nothing listens on 127.0.0.1:{port} yet (Connection refused)"
