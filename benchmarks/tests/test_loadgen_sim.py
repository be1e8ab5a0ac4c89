"""The load generator against the built-in ``sim`` engine (a real server process)."""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.loadgen import Api, LoadConfig, dataset_calibrate_text, loadgen_run, random_dataset, run_summary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
REPO = Path(__file__).resolve().parents[2]


# The clean-run test runs its sim at this multiple of demo-fast's durations: a decode step of one
# sequence (5 ms) becomes 60 ms, longer than the sim's catch-up window (_MAX_CATCH_UP_S, 50 ms), so
# a step the sim starts late is never written back to back with the next, and a client late by a
# few tens of ms on a busy two-core host still reads each write alone. At demo-fast's own 5-8 ms
# such a host makes pairs of writes arrive in one read and the run is (rightly) itl_coalesced.
SEPARATE_EVENTS_TIME_SCALE = 12.0


def _sim_start(log: Path, time_scale: float = 1.0) -> tuple[str, subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deployments.engines.sim_server", "--role", "single", "--port", str(port),
             "--profile", "demo-fast", "--model-name", "m", "--startup-delay-s", "0",
             "--time-scale", str(time_scale)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return base, proc


def _sim_stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base, proc = _sim_start(tmp_path_factory.mktemp("sim") / "sim.log")
    yield base
    _sim_stop(proc)


@pytest.fixture(scope="module")
def sim_separate_events(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from deployments.engines.simcore.engine import _MAX_CATCH_UP_S
    from deployments.engines.simcore.profile import profile_load

    assert profile_load("demo-fast").decode.step_time_s(1, 0) * SEPARATE_EVENTS_TIME_SCALE > _MAX_CATCH_UP_S
    base, proc = _sim_start(tmp_path_factory.mktemp("sim") / "sim.log", time_scale=SEPARATE_EVENTS_TIME_SCALE)
    yield base
    _sim_stop(proc)


@pytest.mark.parametrize("api", [Api.GENERATE, Api.COMPLETIONS])
def test_it_runs_exact_lengths_against_sim_and_agrees_with_its_metrics(sim_separate_events: str, api: Api) -> None:
    sim = sim_separate_events
    specs = random_dataset(num=16, input_len=64, output_len=32, seed=5)
    cfg = LoadConfig(base_url=sim, api=api, model="m", concurrency=4, warmup=4, ignore_eos=True, fixed_output=True,
                     metrics_urls=[f"{sim}/metrics"])
    result = loadgen_run(config=cfg, specs=specs)
    s = run_summary(result)
    assert s["successes"] == 16
    assert set(result.records.column("input_tokens").tolist()) == {64}
    assert set(result.records.column("output_tokens").tolist()) == {32}
    assert s["server_generation_tokens_delta"] == 16 * 32
    assert s["itl_zero_gap_fraction"] < 0.10, s["itl_zero_gap_fraction"]
    assert s["flags"] == {"concurrency_shortfall": False, "rate_shortfall": False, "output_length_mismatch": False,
                          "tokens_estimated": False, "server_token_mismatch": False, "client_cpu_bound": False,
                          "rate_off_target": False, "input_length_mismatch": False, "itl_coalesced": False,
                          "tpot_slo_not_applicable": False, "tpot_slo_unmeasured": False,
                          "no_successful_requests": False, "all_requests_aborted": False}
    if api is Api.GENERATE:  # /generate reports cumulative completion_tokens: per-token ITL is known
        assert s["itl_per_token_s"] is not None and s["itl_per_token_s"]["count"] == 16 * 31


def test_it_calibrates_chat_prompts_to_the_servers_token_count(sim: str) -> None:
    cal = asyncio.run(dataset_calibrate_text(base_url=sim, api=Api.CHAT, model="m"))
    specs = random_dataset(num=6, input_len=200, output_len=8, range_ratio=0.1, token_ids=False, calibration=cal,
                           chat=True, seed=2)
    cfg = LoadConfig(base_url=sim, api=Api.CHAT, model="m", concurrency=3)
    result = loadgen_run(config=cfg, specs=specs)
    order = result.records.column("index").tolist()
    assert sorted(order) == list(range(6))
    assert result.records.column("input_tokens").tolist() == [specs[i].input_len for i in order]
    assert run_summary(result)["input_tokens_requested_mean"] == run_summary(result)["input_tokens_actual_mean"]


def test_it_flags_a_fixed_length_run_without_ignore_eos_on_sim(sim: str) -> None:
    specs = random_dataset(num=8, input_len=16, output_len=200, seed=1)
    cfg = LoadConfig(base_url=sim, api=Api.GENERATE, model="m", concurrency=4, ignore_eos=False, fixed_output=True)
    s = run_summary(loadgen_run(config=cfg, specs=specs))
    assert s["flags"]["output_length_mismatch"] is True
    assert s["output_tokens_mean"] < 65  # demo-fast stops between 8 and 64 tokens
