"""The sim engine as real processes on loopback: single server, PD through the real router, faults.

Every process runs in its own session and is killed at teardown; ports come from the kernel.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from deployments.supervisor.procfs import CLK_TCK, proc_stat

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "deployments" / "data" / "sim_profiles"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """A child process with its log file."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.popen = subprocess.Popen(
                argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **(env or {})},
            )

    def text(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.kill()


def start_sim(procs: list[Proc], tmp_path: Path, role: str, *, profile: str = "demo-fast", delay: float = 0.0,
              scale: float = 1.0, env: dict[str, str] | None = None, bootstrap: int | None = None,
              extra: tuple[str, ...] = ()) -> tuple[str, Proc]:
    port = free_port()
    argv = [sys.executable, "-m", "deployments.engines.sim_server", "--role", role, "--host", "127.0.0.1",
            "--port", str(port), "--model-name", "sim-model", "--profile", profile,
            "--startup-delay-s", str(delay), "--time-scale", str(scale), *extra]
    if bootstrap is not None:
        argv += ["--bootstrap-port", str(bootstrap)]
    proc = Proc(argv, tmp_path / f"{role}-{port}.log", env)
    procs.append(proc)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(f"{base}/v1/models", timeout=1).status_code == 200, proc)
    return base, proc


@dataclass
class PD:
    """A PD pair of ``sim`` workers behind the real ``sglang-router`` (:func:`start_pd`)."""

    prefill_url: str
    prefill: Proc
    decode_url: str
    decode: Proc
    router_url: str
    router: Proc
    router_port: int
    prometheus_port: int
    bootstrap_port: int


def start_pd(procs: list[Proc], tmp_path: Path) -> PD:
    """Start a prefill and a decode ``sim`` worker (demo-fast) and the real router in PD mode in
    front of them (``--prometheus-port`` set); return once the router reports both healthy."""
    bootstrap = free_port()
    prefill, prefill_proc = start_sim(procs, tmp_path, "prefill", bootstrap=bootstrap)
    decode, decode_proc = start_sim(procs, tmp_path, "decode")
    router_port, prom_port = free_port(), free_port()
    router = Proc([
        sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
        "--prefill", prefill, str(bootstrap), "--decode", decode, "--host", "127.0.0.1",
        "--port", str(router_port), "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom_port),
        "--log-level", "warn",
    ], tmp_path / "router.log")
    procs.append(router)
    base = f"http://127.0.0.1:{router_port}"

    def workers_ready() -> bool:
        workers = httpx.get(f"{base}/workers", timeout=2, trust_env=False).json()["workers"]
        return sorted(w["worker_type"] for w in workers if w["is_healthy"]) == ["decode", "prefill"]

    wait_for(workers_ready, router)
    return PD(prefill, prefill_proc, decode, decode_proc, base, router, router_port, prom_port, bootstrap)


def wait_for(check, proc: Proc | None = None, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise AssertionError(f"process exited early:\n{proc.text()}")
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def sse_events(resp: httpx.Response) -> list[dict | str]:
    out: list[dict | str] = []
    for line in resp.iter_lines():
        if line.startswith("data:"):
            data = line[5:].strip()
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def metric(base: str, name: str) -> float:
    for line in httpx.get(f"{base}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_it_streams_completions_chat_and_generate_with_exact_usage(procs: list[Proc], tmp_path: Path) -> None:
    base, _ = start_sim(procs, tmp_path, "single")
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{base}/v1/completions", json={
            "model": "sim-model", "prompt": "abcd efgh ij", "max_tokens": 7, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True},
        }) as resp:
            assert resp.status_code == 200
            events = sse_events(resp)
        assert events[-1] == "[DONE]"
        usage_chunk = events[-2]
        assert usage_chunk["choices"] == [] and usage_chunk["usage"] == {
            "prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}
        texts = [e["choices"][0]["text"] for e in events[:-2] if e["choices"][0]["text"]]
        assert len(texts) == 7
        assert events[-3]["choices"][0]["finish_reason"] == "length"

        with client.stream("POST", f"{base}/v1/chat/completions", json={
            "model": "sim-model", "messages": [{"role": "user", "content": "hello there"}],
            "max_completion_tokens": 5, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
        }) as resp:
            events = sse_events(resp)
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        contents = [e["choices"][0]["delta"]["content"] for e in events[1:-2] if e["choices"][0]["delta"].get("content")]
        assert len(contents) == 5 and all(c.startswith(" ") for c in contents)
        # "hello there" is 2 + 2 tokens (5-letter words are two 4-character chunks) plus the template.
        assert events[-2]["usage"] == {"prompt_tokens": 3 + 3 + 4, "completion_tokens": 5, "total_tokens": 15}

        body = client.post(f"{base}/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4, "ignore_eos": True}).json()
        assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 4
        assert len(body["choices"][0]["message"]["content"].split()) == 4

        native = client.post(f"{base}/generate", json={
            "input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}}).json()
        assert native["meta_info"]["prompt_tokens"] == 4
        assert native["meta_info"]["completion_tokens"] == 6 == len(native["output_ids"])
        assert native["meta_info"]["finish_reason"] == {"type": "length", "length": 6}

        with client.stream("POST", f"{base}/generate", json={
                "text": "one two", "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}, "stream": True}) as resp:
            events = sse_events(resp)
        assert events[-1] == "[DONE]"
        assert [e["meta_info"]["completion_tokens"] for e in events[:-1]] == [1, 2, 3, 3]
        assert events[-2]["text"] == events[-3]["text"] and len(events[-2]["text"].split()) == 3

        # Without ignore_eos the pseudo-EOS ends the same prompt at the same place every time.
        runs = [client.post(f"{base}/v1/completions", json={"prompt": "stop early", "max_tokens": 1000}).json()
                for _ in range(2)]
        assert runs[0]["choices"][0]["finish_reason"] == "stop"
        assert runs[0]["usage"]["completion_tokens"] == runs[1]["usage"]["completion_tokens"] <= 64

        assert client.post(f"{base}/v1/completions", json={"prompt": "x", "n": 2}).status_code == 400
        assert client.post(f"{base}/generate", json={"sampling_params": {}}).status_code == 400
        assert client.get(f"{base}/health_generate").status_code == 200
        info = client.get(f"{base}/get_server_info").json()
        assert info["version"].startswith("sim-") and info["sim"]["role"] == "single"
        assert info["sim"]["profile"]["name"] == "demo-fast" and info["disaggregation_mode"] == "null"
    assert metric(base, "sglang:generation_tokens_total") >= 7 + 5 + 4 + 6 + 3
    assert metric(base, "sglang:time_to_first_token_seconds_count") >= 6


def test_stream_coalesce_writes_the_events_of_n_tokens_at_once(procs: list[Proc], tmp_path: Path) -> None:
    # demo-fast at 5x: a decode step of one request is (4 + 1) ms x 5 = 25 ms, so four tokens'
    # events are written 100 ms apart and each network read holds whole groups of four.
    base, _ = start_sim(procs, tmp_path, "single", scale=5.0, extra=("--stream-coalesce", "4"))
    reads: list[list[str]] = []
    with httpx.Client(timeout=30) as client, client.stream("POST", f"{base}/v1/completions", json={
            "model": "sim-model", "prompt": "abcd", "max_tokens": 8, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}) as resp:
        assert resp.status_code == 200
        for raw in resp.iter_raw():
            reads.append([e for e in raw.decode().split("\n\n") if e])
    events = [e[len("data: "):] for r in reads for e in r]
    assert events[-1] == "[DONE]" and len(events) == 8 + 2 + 1      # 8 tokens, finish, usage, [DONE]
    per_read = [sum('"text":" ' in e for e in r) for r in reads]    # token events (their text starts " ")
    assert sum(per_read) == 8 and all(n % 4 == 0 for n in per_read), reads
    assert json.loads(events[-2])["usage"]["completion_tokens"] == 8


def test_a_stream_coalesce_below_one_token_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deployments.engines.sim_server", "--role", "single", "--port", "1",
         "--model-name", "m", "--profile", "demo-fast", "--stream-coalesce", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--stream-coalesce must be a whole number of tokens from 1 to 1000000" in proc.stderr


def test_health_busy_s_makes_health_compute_only_while_a_generation_is_in_flight(procs: list[Proc],
                                                                                 tmp_path: Path) -> None:
    # demo-fast at 10x: 50 ms per output token, so 200 tokens keep a request in flight for 10 s.
    base, proc = start_sim(procs, tmp_path, "single", scale=10.0, extra=("--health-busy-s", "2"))

    def cpu_s() -> float:
        return proc_stat(proc.popen.pid).cpu_ticks / CLK_TCK  # the sim's user + system seconds

    with httpx.Client(timeout=30) as client:
        began = time.monotonic()
        assert client.get(f"{base}/health").status_code == 200
        assert time.monotonic() - began < 1.0  # idle: at once
        body = {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
        with client.stream("POST", f"{base}/generate", json=body) as resp:
            lines = resp.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))
            cpu_before, began = cpu_s(), time.monotonic()
            with httpx.Client(timeout=30) as other:
                assert other.get(f"{base}/health").status_code == 200
            took, used = time.monotonic() - began, cpu_s() - cpu_before
    assert took >= 2.0, took
    # It computed all along (on a loaded host it shares the core, so only part of the 2 s is its own).
    assert 0.1 < used <= took + 0.1, (used, took)


def test_a_negative_health_busy_s_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deployments.engines.sim_server", "--role", "single", "--port", "1",
         "--model-name", "m", "--profile", "demo-fast", "--health-busy-s", "-1"],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--health-busy-s must be a number of seconds from 0 to 3600" in proc.stderr


def test_it_answers_503_on_health_while_starting_but_lists_models(procs: list[Proc], tmp_path: Path) -> None:
    base, _ = start_sim(procs, tmp_path, "single", delay=3.0)
    assert httpx.get(f"{base}/health").status_code == 503
    assert httpx.get(f"{base}/health_generate").status_code == 503
    models = httpx.get(f"{base}/v1/models").json()
    assert models["data"][0]["id"] == "sim-model"
    assert httpx.post(f"{base}/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 503
    wait_for(lambda: httpx.get(f"{base}/health").status_code == 200, timeout=10)
    assert httpx.post(f"{base}/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 200


def test_it_fails_every_generation_with_fail_generate(procs: list[Proc], tmp_path: Path) -> None:
    base, _ = start_sim(procs, tmp_path, "single", env={"CEILING_SIM_FAIL_GENERATE": "1"})
    assert httpx.get(f"{base}/health").status_code == 200
    assert httpx.get(f"{base}/v1/models").status_code == 200
    assert httpx.get(f"{base}/health_generate").status_code == 503
    for path, body in (("/generate", {"text": "hi"}), ("/v1/completions", {"prompt": "hi"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        resp = httpx.post(f"{base}{path}", json=body)
        assert resp.status_code == 500
        assert "CEILING_SIM_FAIL_GENERATE" in resp.json()["message"]


def test_it_ignores_sigterm_only_when_told(procs: list[Proc], tmp_path: Path) -> None:
    _, stubborn = start_sim(procs, tmp_path, "single", env={"CEILING_SIM_IGNORE_SIGTERM": "1"})
    _, polite = start_sim(procs, tmp_path, "single")
    stubborn.popen.send_signal(signal.SIGTERM)
    polite.popen.send_signal(signal.SIGTERM)
    # Shut down cleanly, then ended by the signal itself, so its parent sees who stopped it.
    assert polite.popen.wait(timeout=10) == -signal.SIGTERM
    assert "stopping" in polite.log.read_text()
    time.sleep(0.5)
    assert stubborn.popen.poll() is None


def test_it_serves_pd_through_the_real_router(procs: list[Proc], tmp_path: Path) -> None:
    pd = start_pd(procs, tmp_path)
    base = pd.router_url
    with httpx.stream("POST", f"{base}/v1/chat/completions", timeout=30, json={
        "model": "sim-model", "messages": [{"role": "user", "content": "tell me about prefill"}],
        "max_tokens": 12, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    }) as resp:
        assert resp.status_code == 200
        events = sse_events(resp)
    contents = [e["choices"][0]["delta"].get("content") for e in events if isinstance(e, dict) and e["choices"]]
    assert len([c for c in contents if c]) == 12
    assert events[-2]["usage"]["completion_tokens"] == 12 and events[-1] == "[DONE]"

    native = httpx.post(f"{base}/generate", timeout=30, json={
        "text": "one two three", "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}).json()
    assert native["meta_info"]["completion_tokens"] == 4

    assert metric(pd.decode_url, "sim:kv_fetch_total") == 2
    assert metric(pd.prefill_url, "sim:kv_served_total") == 2
    assert metric(pd.prefill_url, "sglang:prompt_tokens_total") == (3 + 3 + 6) + 4  # chat template + "one two three"
    assert metric(pd.decode_url, "sglang:generation_tokens_total") == 16
    fetched = [line for line in pd.decode.text().splitlines() if "kv fetched room=" in line]
    assert len(fetched) == 2 and f"from=127.0.0.1:{pd.bootstrap_port}" in fetched[0]
    room = fetched[0].split("room=")[1].split()[0]
    assert f"kv served room={room}" in pd.prefill.text()
    assert httpx.get(f"{pd.decode_url}/get_server_info").json()["disaggregation_mode"] == "decode"


def test_it_queues_when_the_kv_cache_is_full(procs: list[Proc], tmp_path: Path) -> None:
    raw = json.loads((PROFILES / "demo-fast.json").read_text())
    raw["name"] = "tiny-kv"
    # Room for two 256-token prompts (plus their 16-token reserve and growth), not three.
    raw["decode"].update(kv_capacity_tokens=600, admission_reserve_tokens=16, fixed_s=0.04, per_seq_s=0.0)
    raw["startup_delay_s"] = 0
    profile = tmp_path / "tiny-kv.json"
    profile.write_text(json.dumps(raw))
    base, _ = start_sim(procs, tmp_path, "single", profile=str(profile))
    prompt = " ".join(["word"] * 256)
    results: dict[int, dict] = {}

    def send(i: int) -> None:
        t0 = time.monotonic()
        body = httpx.post(f"{base}/v1/completions", timeout=30, json={
            "prompt": prompt, "max_tokens": 30, "ignore_eos": True}).json()
        results[i] = {"elapsed": time.monotonic() - t0, "tokens": body["usage"]["completion_tokens"]}

    threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    # All three in the server (a loaded machine may take a while to send the third), read at once.
    deadline = time.monotonic() + 5
    while True:
        running, queued = metric(base, "sglang:num_running_reqs"), metric(base, "sglang:num_queue_reqs")
        usage = metric(base, "sglang:token_usage")
        if running + queued >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    for t in threads:
        t.join(timeout=30)
    assert (running, queued) == (2.0, 1.0)
    assert usage > 0.85
    assert all(r["tokens"] == 30 for r in results.values())
    # 30 tokens at >= 40 ms a step is >= 1.2 s: whichever request arrived last waited for one of
    # the other two to finish, so it took at least that much longer than the second slowest.
    elapsed = sorted(r["elapsed"] for r in results.values())
    assert elapsed[2] > elapsed[1] + 0.8


def test_a_bad_switch_value_is_refused_without_echoing_it(tmp_path):
    # A value put in an engine switch (a secret, by mistake or not) must not reach the log.
    value = "mangoVeil8823Crest"
    env = {**os.environ, "CEILING_SIM_FAIL_GENERATE": value}
    proc = subprocess.run(
        [sys.executable, "-m", "deployments.engines.sim_server", "--role", "single", "--host", "127.0.0.1",
         "--port", "1", "--startup-delay-s", "0", "--model-name", "m", "--profile", "demo-fast"],
        cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True, timeout=60,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "CEILING_SIM_FAIL_GENERATE must be 0 or 1" in out
    assert value.lower() not in out.lower()
