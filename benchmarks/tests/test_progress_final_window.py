"""The final progress report's ``tok_s`` covers a window of at least the report period, against the sim engine."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.loadgen import Api, LoadConfig, loadgen_run, random_dataset
from benchmarks.loadgen.driver import PROGRESS_PERIOD_S, _Reporter
from benchmarks.tests.sweep_support import sim_start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def slow_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A sim engine slowed down so that a short run spans several progress reports."""
    base, proc = sim_start(tmp_path_factory.mktemp("sim") / "sim.log", time_scale=20.0)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def expected_tok_s(calls: list[dict[str, Any]], i: int) -> float:
    """Output tok/s of call ``i`` over the window back to the latest earlier call at least a period back (or t0)."""
    now = calls[i]
    start_s, start_tokens = 0.0, 0
    for earlier in calls[:i]:
        if now["elapsed_s"] - earlier["elapsed_s"] >= PROGRESS_PERIOD_S:
            start_s, start_tokens = earlier["elapsed_s"], earlier["output_tokens"]
    return (now["output_tokens"] - start_tokens) / (now["elapsed_s"] - start_s)


def test_the_final_report_of_a_sim_run_measures_a_window_of_at_least_the_period(slow_sim: str) -> None:
    calls: list[dict[str, Any]] = []
    specs = random_dataset(num=2, input_len=64, output_len=24, seed=3)
    cfg = LoadConfig(base_url=slow_sim, api=Api.COMPLETIONS, model="sim-model", concurrency=2, warmup=0,
                     ignore_eos=True, fixed_output=True)
    loadgen_run(config=cfg, specs=specs, progress=lambda info: calls.append(dict(info)))
    assert len(calls) >= 2, calls
    final = calls[-1]
    assert final["output_tokens"] == 48
    assert final["tok_s"] > 0
    for i in range(len(calls)):
        assert calls[i]["tok_s"] == pytest.approx(expected_tok_s(calls, i), rel=1e-6)


def test_a_final_report_just_after_a_periodic_one_reaches_back_past_it(slow_sim: str) -> None:
    """The user's case, made certain: tokens arrive, a periodic report counts them all, the final
    report follows a few milliseconds later. Its rate is over the window back to the report a
    period earlier, not 0.0 over the last milliseconds. The counts come from a real sim run."""
    calls: list[dict[str, Any]] = []
    specs = random_dataset(num=2, input_len=64, output_len=24, seed=3)
    cfg = LoadConfig(base_url=slow_sim, api=Api.COMPLETIONS, model="sim-model", concurrency=2, warmup=0,
                     ignore_eos=True, fixed_output=True)
    loadgen_run(config=cfg, specs=specs, progress=lambda info: calls.append(dict(info)))
    tokens = calls[-1]["output_tokens"]
    reported: list[dict[str, Any]] = []
    reporter = _Reporter(reported.append)
    t0 = time.perf_counter_ns()
    time.sleep(PROGRESS_PERIOD_S + 0.05)
    reporter.report(t0=t0, done=0, total=2, failed=0, tokens=tokens // 2)
    time.sleep(PROGRESS_PERIOD_S + 0.05)
    reporter.report(t0=t0, done=2, total=2, failed=0, tokens=tokens)
    reporter.report(t0=t0, done=2, total=2, failed=0, tokens=tokens, final=True)
    assert len(reported) == 3
    final = reported[-1]
    assert final["tok_s"] > 0
    assert final["tok_s"] == pytest.approx((tokens - tokens // 2) / (final["elapsed_s"] - reported[0]["elapsed_s"]))
    assert final["tok_s"] == pytest.approx(expected_tok_s(reported, 2))
