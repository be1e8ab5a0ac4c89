"""Engine ``/metrics``: normalising SGLang and vLLM (old and new names and labels), token rates
from counter deltas (a reset gives null, never a negative rate), and scraping a real ``sim``
engine process plus real local servers that are slow or wrong."""
from __future__ import annotations

import http.server
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from deployments.telemetry.engine import (
    EngineReading,
    MetricsScraper,
    ScrapeTarget,
    counter_rate,
    REQUEST_RATE_WINDOW_S,
    normalise_metrics,
    reading_from_text,
)
from deployments.tests.test_sim_server import procs, start_sim  # noqa: F401 - fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "engine-metrics"
#: What an engine's exposition says of the router-only quantities: nothing.
NO_ROUTER = {"requests_total": None, "errors_5xx_total": None, "workers_healthy": None, "workers_total": None}


def test_it_normalises_sglangs_documented_metrics():
    values = normalise_metrics((FIXTURES / "sglang-docs-sample.prom").read_text())
    assert values == {"running": 162.0, "queued": 2826.0, "kv_usage": 0.28,
                      "prompt_tokens_total": 8.128902e06, "generation_tokens_total": 7.557572e06, **NO_ROUTER}


def test_it_normalises_vllms_older_names():
    text = (FIXTURES / "vllm-docs-sample.prom").read_text() + (
        '# TYPE vllm:num_requests_waiting gauge\n'
        'vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0\n'
        '# TYPE vllm:gpu_cache_usage_perc gauge\n'
        'vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4\n'
        '# TYPE vllm:prompt_tokens_total counter\n'
        'vllm:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 140000.0\n'
    )
    values = normalise_metrics(text)
    assert values == {"running": 8.0, "queued": 3.0, "kv_usage": 0.4,
                      "prompt_tokens_total": 140000.0, "generation_tokens_total": 27453.0, **NO_ROUTER}


VLLM_V1 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1000.0
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e9
vllm:prompt_tokens_total{engine="1",model_name="m"} 500.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 400.0
vllm:generation_tokens_total{engine="1",model_name="m"} 600.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 3.0
"""


def test_it_sums_vllms_engines_and_averages_their_kv_usage():
    assert normalise_metrics(VLLM_V1) == {"running": 8.0, "queued": 1.0, "kv_usage": 0.5,
                                          "prompt_tokens_total": 1500.0, "generation_tokens_total": 1000.0,
                                          **NO_ROUTER}


def test_it_reads_the_routers_requests_workers_and_active_requests():
    values = normalise_metrics((FIXTURES / "sglang-router-0.3.2-pd.prom").read_text())
    assert values == {"running": None, "queued": None, "kv_usage": None, "prompt_tokens_total": None,
                      "generation_tokens_total": None, "requests_total": 4.0, "errors_5xx_total": 0.0,
                      "workers_healthy": 2, "workers_total": 2}


ROUTER_FAILING = """\
# TYPE smg_http_responses_total counter
smg_http_responses_total{status_code="200",error_code=""} 4
smg_http_responses_total{status_code="503",error_code="server_selection_failed"} 4
smg_http_responses_total{status_code="500",error_code="decode_internal_error"} 1
# TYPE smg_router_requests_total counter
smg_router_requests_total{router_type="http",backend_type="pd",connection_mode="http",model="m",endpoint="generate",streaming="false"} 9
# TYPE smg_worker_requests_active gauge
smg_worker_requests_active{worker="http://127.0.0.1:31100"} 3
smg_worker_requests_active{worker="http://127.0.0.1:31101"} 3
# TYPE smg_http_inflight_request_age_count gauge
smg_http_inflight_request_age_count{gt="0",le="30"} 2
smg_http_inflight_request_age_count{gt="30",le="60"} 1
smg_http_inflight_request_age_count{gt="60",le="180"} 0
# TYPE smg_worker_health gauge
smg_worker_health{worker="http://127.0.0.1:31101"} 0
smg_worker_health{worker="http://127.0.0.1:31100"} 1
"""


def test_it_counts_a_routers_5xx_answers_and_unhealthy_workers_and_rates_them():
    values = normalise_metrics(ROUTER_FAILING)
    # No live in-flight count: the per-worker counts hold a PD request twice (3 + 3 for 3 requests).
    assert (values["errors_5xx_total"], values["requests_total"], values["running"]) == (5.0, 9.0, None)
    assert (values["workers_healthy"], values["workers_total"]) == (1, 2)
    state: dict = {}
    reading_from_text((FIXTURES / "sglang-router-0.3.2-pd.prom").read_text(), t=1.0, identity=(7, 1),
                      state=state, key="r")
    later = reading_from_text(ROUTER_FAILING, t=3.0, identity=(7, 1), state=state, key="r")
    assert later.req_s == 2.5 and later.error_5xx_s == 2.5  # (9 - 4) / 2 s and (5 - 0) / 2 s
    assert later.gen_tok_s is None  # a router has no token counters


def test_it_rates_router_requests_over_a_window_not_between_two_scrapes():
    # One request ends every 1.5 s; scrapes every 0.5 s would read 0 or 2 req/s between two.
    state: dict = {}
    readings = []
    for i in range(40):
        t = 0.5 * i
        text = f"smg_router_requests_total{{endpoint=\"generate\"}} {int(t / 1.5)}\n"
        readings.append(reading_from_text(text, t=t, identity=(7, 1), state=state, key="r"))
    steady = [r.req_s for r in readings[12:]]  # once the window holds REQUEST_RATE_WINDOW_S of scrapes
    assert all(0.5 <= v <= 0.85 for v in steady), steady
    assert len(state["r"].window) <= int(REQUEST_RATE_WINDOW_S / 0.5) + 2  # the window stays bounded


def test_it_rates_the_routers_first_requests_from_zero():
    # smg_router_requests_total appears only with the first request: before it the count was 0.
    state: dict = {}
    idle = "smg_worker_health{worker=\"http://w\"} 1\n"
    reading_from_text(idle, t=0.0, identity=(7, 1), state=state, key="r")
    later = reading_from_text(idle + 'smg_router_requests_total{endpoint="generate"} 2\n', t=1.0, identity=(7, 1),
                              state=state, key="r")
    assert later.req_s == 2.0


def test_it_counts_no_5xx_rate_before_a_routers_first_answer():
    state: dict = {}
    idle = "# TYPE smg_worker_health gauge\nsmg_worker_health{worker=\"http://w\"} 1\n"
    first = reading_from_text(idle, t=1.0, identity=(7, 1), state=state, key="r")
    assert first.errors_5xx_total is None and first.workers_healthy == 1
    answered = 'smg_http_responses_total{status_code="200",error_code=""} 3\n'
    after = reading_from_text(idle + answered, t=2.0, identity=(7, 1), state=state, key="r")
    assert after.errors_5xx_total == 0.0 and after.error_5xx_s == 0.0


def test_it_prefers_the_current_vllm_kv_name_when_both_are_exported():
    text = VLLM_V1 + '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9\n'
    assert normalise_metrics(text)["kv_usage"] == 0.5


def test_it_counts_a_value_repeated_per_tensor_parallel_rank_once():
    text = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 4.0
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="1"} 4.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 6.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.2
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="1"} 0.2
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.4
"""
    values = normalise_metrics(text)
    assert values["running"] == 10.0
    assert values["kv_usage"] == pytest.approx(0.3)
    assert values["queued"] is None and values["generation_tokens_total"] is None


def test_it_refuses_text_that_is_not_prometheus_exposition():
    with pytest.raises(ValueError):
        normalise_metrics('sglang:num_running_reqs{model_name="m" 1.0\n')
    reading = reading_from_text('sglang:num_running_reqs{model_name="m" 1.0\n', t=1.0, identity=(1, 1),
                                state={}, key=1)
    assert reading.metrics_error.startswith("unparseable /metrics") and reading.running is None


def gen(total: float) -> str:
    return f"# TYPE sglang:generation_tokens counter\nsglang:generation_tokens_total{{model_name=\"m\"}} {total}\n"


def test_it_computes_tok_s_from_counter_deltas_and_gives_null_on_a_reset():
    state: dict = {}
    first = reading_from_text(gen(100), t=10.0, identity=(42, 7), state=state, key="p")
    assert first.generation_tokens_total == 100.0 and first.gen_tok_s is None  # nothing to compare with
    second = reading_from_text(gen(150), t=10.5, identity=(42, 7), state=state, key="p")
    assert second.gen_tok_s == 100.0
    reset = reading_from_text(gen(30), t=11.0, identity=(42, 7), state=state, key="p")
    assert reset.gen_tok_s is None  # the engine restarted behind the same port: no negative rate
    after = reading_from_text(gen(80), t=11.5, identity=(42, 7), state=state, key="p")
    assert after.gen_tok_s == 100.0
    other = reading_from_text(gen(500), t=12.0, identity=(43, 9), state=state, key="p")
    assert other.gen_tok_s is None  # another process (pid, start time): counters do not compare
    stalled = reading_from_text(gen(500), t=13.0, identity=(43, 9), state=state, key="p")
    assert stalled.gen_tok_s == 0.0  # traffic stopped: the rate says so, unlike a stuck gauge


def test_it_computes_no_rate_from_unknown_values_or_no_time():
    assert counter_rate(None, 5.0, 1.0) is None
    assert counter_rate(5.0, None, 1.0) is None
    assert counter_rate(5.0, 6.0, 0.0) is None
    assert counter_rate(5.0, 4.0, 1.0) is None
    assert counter_rate(5.0, 8.0, 2.0) == 1.5


def test_it_reports_llamacpp_as_having_no_metrics_with_the_reason():
    reading = EngineReading.unavailable("llama-cpp-python's server exposes no /metrics")
    assert reading.as_dict() == {"running": None, "queued": None, "kv_usage": None, "prompt_tokens_total": None,
                                 "generation_tokens_total": None, "gen_tok_s": None, "prompt_tok_s": None,
                                 "requests_total": None, "req_s": None, "errors_5xx_total": None,
                                 "error_5xx_s": None, "workers_healthy": None, "workers_total": None,
                                 "metrics_error": "llama-cpp-python's server exposes no /metrics"}


# --- real processes ----------------------------------------------------------------------------


@pytest.fixture
def scraper():
    s = MetricsScraper(min_period_s=0.0)
    yield s
    s.close()


def _generate(base: str, tokens: int) -> None:
    resp = httpx.post(f"{base}/generate", json={"text": "hello world", "sampling_params": {
        "max_new_tokens": tokens, "ignore_eos": True}}, timeout=30, trust_env=False)
    assert resp.status_code == 200, resp.text


def _ready(base: str) -> None:
    deadline = time.monotonic() + 30
    while httpx.get(f"{base}/health", timeout=2, trust_env=False).status_code != 200:
        assert time.monotonic() < deadline, "sim never became healthy"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_it_scrapes_a_real_sim_engine_and_measures_its_tok_s(procs, tmp_path, scraper):  # noqa: F811
    base, proc = start_sim(procs, tmp_path, "single", delay=0.0)
    _ready(base)
    target = ScrapeTarget(key=1, url=f"{base}/metrics", engine="sim", identity=(proc.popen.pid, 0))
    _generate(base, 16)
    scraper.scrape_now([target])
    before = scraper.latest(1)
    assert before.metrics_error is None
    assert before.generation_tokens_total == 16.0 and before.running == 0.0 and before.queued == 0.0

    # A long request keeps one sequence running (about 200 tok/s at batch 1 in demo-fast).
    worker = threading.Thread(target=_generate, args=(base, 300))
    worker.start()
    time.sleep(0.4)
    scraper.scrape_now([target])
    during = scraper.latest(1)
    worker.join(timeout=30)
    assert during.running == 1.0
    assert 0.0 < during.kv_usage < 1.0
    tokens = during.generation_tokens_total - before.generation_tokens_total
    seconds = during.scraped_at - before.scraped_at
    assert tokens > 0 and during.gen_tok_s == pytest.approx(tokens / seconds, rel=1e-3)
    assert during.prompt_tok_s is not None

    scraper.scrape_now([target])
    after = scraper.latest(1)
    assert after.generation_tokens_total == 16.0 + 300.0 and after.running == 0.0


class _Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        time.sleep(2.0)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"sglang:num_running_reqs 1\n")

    def log_message(self, *args) -> None:
        pass


class _Fast(_Slow):
    def do_GET(self) -> None:  # noqa: N802
        body = b'# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="m"} 7\n'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(handler) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/metrics"


def test_it_never_lets_a_slow_engine_stall_the_others():
    slow_server, slow_url = _serve(_Slow)
    fast_server, fast_url = _serve(_Fast)
    scraper = MetricsScraper(timeout_s=0.5, min_period_s=0.5)
    try:
        targets = [ScrapeTarget(key="slow", url=slow_url, engine="sglang", identity=(1, 1)),
                   ScrapeTarget(key="fast", url=fast_url, engine="sglang", identity=(2, 2))]
        started = time.monotonic()
        assert scraper.request(targets) == 2
        # The sampler is not held by the scrapes: a request that waited for the slow one would
        # come back no sooner than its timeout, with its outcome already recorded.
        assert time.monotonic() - started < scraper.timeout_s and scraper.latest("slow") is None
        scraper.wait_inflight(0.3)
        assert scraper.latest("fast").queued == 7.0
        assert scraper.latest("slow") is None  # still in flight
        scraper.wait_inflight(2.0)
        assert scraper.latest("slow").metrics_error == f"GET {slow_url} timed out after 0.5 s"
        assert scraper.latest("slow").running is None
        # At most one scrape per process every min_period_s, whatever the sampler's rate.
        fast = targets[1:]
        assert scraper.request(fast, wait_s=0.3) == 1
        assert scraper.request(fast) == 0
        time.sleep(0.5)
        assert scraper.request(fast, wait_s=0.3) == 1
    finally:
        scraper.close()
        slow_server.shutdown()
        fast_server.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_it_says_why_a_scrape_failed(procs, tmp_path, scraper):  # noqa: F811
    base, proc = start_sim(procs, tmp_path, "single", delay=0.0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    missing = ScrapeTarget(key="404", url=f"{base}/not-metrics", engine="sglang", identity=(proc.popen.pid, 0))
    refused = ScrapeTarget(key="refused", url=f"http://127.0.0.1:{closed_port}/metrics", engine="vllm",
                           identity=(1, 1))
    scraper.scrape_now([missing, refused])
    assert scraper.latest("404").metrics_error == (
        f"GET {base}/not-metrics: HTTP 404 (SGLang serves /metrics only with --enable-metrics)")
    assert scraper.latest("refused").metrics_error.startswith(
        f"GET http://127.0.0.1:{closed_port}/metrics: cannot connect")
    scraper.forget(["404"])
    assert scraper.latest("refused") is None and scraper.latest("404") is not None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_it_scrapes_the_real_router_in_front_of_sim_workers(scraper):
    """The real sglang-router in PD mode (its own Prometheus port) in front of real sim prefill and
    decode workers: after requests through it, the scraper reads requests, their rate and the
    healthy workers."""
    import subprocess
    import sys

    from deployments.tests.test_agent_support import free_ports

    p_http, boot, d_http, r_http, prom = free_ports(5)
    sim = [sys.executable, "-m", "deployments.engines.sim_server", "--model-name", "tiny", "--profile", "demo-fast",
           "--startup-delay-s", "0"]
    argvs = [[*sim, "--role", "prefill", "--port", str(p_http), "--bootstrap-port", str(boot)],
             [*sim, "--role", "decode", "--port", str(d_http)],
             [sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
              "--prefill", f"http://127.0.0.1:{p_http}", str(boot), "--decode", f"http://127.0.0.1:{d_http}",
              "--host", "127.0.0.1", "--port", str(r_http), "--prometheus-port", str(prom),
              "--prometheus-host", "127.0.0.1"]]
    started = [subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for a in argvs]
    try:
        base = f"http://127.0.0.1:{r_http}"
        target = ScrapeTarget(key="router", url=f"http://127.0.0.1:{prom}/metrics", engine="sim",
                              identity=(started[2].pid, 0))
        deadline = time.monotonic() + 60
        while True:  # ready: the router answers a generation through both workers
            try:
                if httpx.post(f"{base}/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2}},
                              timeout=10, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the router never answered a generation"
            time.sleep(0.25)
        scraper.scrape_now([target])
        before = scraper.latest("router")
        assert before.metrics_error is None, before.metrics_error
        for _ in range(3):
            _generate(base, 4)
        scraper.scrape_now([target])
        after = scraper.latest("router")
    finally:
        for proc in started:
            proc.kill()
            proc.wait(timeout=10)
    assert (after.workers_healthy, after.workers_total) == (2, 2)
    assert after.requests_total - before.requests_total == 3.0
    seconds = after.scraped_at - before.scraped_at
    assert after.req_s == pytest.approx(3.0 / seconds, abs=2e-3)  # the rate is rounded to 3 decimals
    assert after.running is None and after.error_5xx_s == 0.0
