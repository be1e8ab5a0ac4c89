"""The run driver's progress callback and duration-limited points, against the replay server."""
from __future__ import annotations

import asyncio
import gc
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.loadgen import (
    Api, LoadConfig, LoadgenStopped, RequestSpec, loadgen_run, loadgen_run_async, run_summary,
)
from benchmarks.loadgen.driver import MEASURED_GC_GEN0, WARMUP_PHASE
from benchmarks.tests.replay_server import ReplayProcess, sse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

KEYS = {"done", "total", "failed", "aborted", "sent", "output_tokens", "elapsed_s", "tok_s", "tok_s_mean"}
GAP = 0.05
TOKENS = 4


def stream(gap: float = GAP, tokens: int = TOKENS) -> dict[str, Any]:
    writes = [[gap * (i + 1), sse({"choices": [{"text": " t", "finish_reason": "length" if i == tokens - 1 else None}]})]
              for i in range(tokens)]
    end = gap * tokens
    writes += [[end + 0.001, sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": tokens}})],
               [end + 0.002, sse("[DONE]")]]
    return {"writes": writes, "tokens": tokens}


ERROR = {"status": 500, "content_type": "application/json", "writes": [[0.01, '{"error": "boom"}']]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ReplayProcess]:
    with ReplayProcess({"routes": {"/v1/completions": [stream()]}}, tmp_path) as proc:
        yield proc


@pytest.fixture
def flaky(tmp_path: Path) -> Iterator[ReplayProcess]:
    with ReplayProcess({"routes": {"/v1/completions": [stream(), stream(), ERROR]}}, tmp_path) as proc:
        yield proc


def specs(n: int) -> list[RequestSpec]:
    return [RequestSpec(prompt=f"p{i}", input_len=-1, output_len=TOKENS) for i in range(n)]


class Calls:
    """A progress callback that keeps every call with the calling thread and the time."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.threads: set[int] = set()
        self.times: list[float] = []

    def __call__(self, info: dict[str, Any]) -> None:
        self.calls.append(dict(info))
        self.threads.add(threading.get_ident())
        self.times.append(time.monotonic())


def assert_well_formed(seen: Calls, *, total: int, failed: int, tokens: int) -> None:
    assert seen.calls, "progress was never called"
    for info in seen.calls:
        assert set(info) == KEYS
        assert isinstance(info["done"], int) and isinstance(info["total"], int)
        assert 0 <= info["failed"] <= info["done"] <= info["total"]
        # sent so far: those that came back and those in flight, never more than planned
        assert info["done"] + info["aborted"] <= info["sent"] <= info["total"]
    sent = [info["sent"] for info in seen.calls]
    assert sent == sorted(sent)
    last = seen.calls[-1]
    assert (last["done"], last["total"], last["failed"], last["output_tokens"]) == (total, total, failed, tokens)
    assert last["sent"] == total   # every planned request went out
    assert last["aborted"] == 0  # no stop: nothing was aborted in flight
    # The mean since the first request: the tokens so far over the seconds since then, null before any token;
    # the window's tok_s is another figure (the last ~0.5 s only).
    for info in seen.calls:
        if info["output_tokens"]:
            assert info["tok_s_mean"] == pytest.approx(info["output_tokens"] / info["elapsed_s"])
        else:
            assert info["tok_s_mean"] is None
    assert last["tok_s_mean"] == pytest.approx(tokens / last["elapsed_s"])
    elapsed = [c["elapsed_s"] for c in seen.calls]
    assert elapsed == sorted(elapsed)
    # At most ~2 calls per second: every gap but the final call's is at least ~0.5 s.
    gaps = [b - a for a, b in zip(seen.times[:-1], seen.times[1:-1])]
    assert all(g >= 0.45 for g in gaps), gaps
    dones = [c["done"] for c in seen.calls]
    assert dones == sorted(dones)


def test_it_reports_progress_from_the_calling_thread_about_twice_a_second(flaky: ReplayProcess) -> None:
    # 12 requests of ~0.2 s at concurrency 2: ~1.2 s of traffic, every third one fails (HTTP 500).
    seen = Calls()
    cfg = LoadConfig(base_url=flaky.url, api=Api.COMPLETIONS, model="m", concurrency=2)
    result = loadgen_run(config=cfg, specs=specs(12), progress=seen)
    s = run_summary(result)
    assert s["successes"] == 8
    assert_well_formed(seen, total=12, failed=4, tokens=8 * TOKENS)
    assert seen.threads == {threading.get_ident()}
    assert len(seen.calls) >= 2
    mid = seen.calls[0]
    assert 0 < mid["done"] < 12 and mid["elapsed_s"] >= 0.45
    # Two streams of one token per 50 ms while both are streaming: at most ~40 tok/s.
    assert 5 < mid["tok_s"] < 45
    assert mid["tok_s_mean"] == pytest.approx(mid["output_tokens"] / mid["elapsed_s"]) and 0 < mid["tok_s_mean"] < 45


def test_it_reports_progress_from_worker_processes_through_their_pipes(server: ReplayProcess) -> None:
    seen = Calls()
    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=4, workers=2, warmup=2)
    result = loadgen_run(config=cfg, specs=specs(24), progress=seen)
    assert run_summary(result)["successes"] == 24
    # The warm-up's reports come first, each with its phase, and end with both warm-up requests ended.
    warm = [i for i, c in enumerate(seen.calls) if c.get("phase") == WARMUP_PHASE]
    assert warm == list(range(len(warm))) and warm, seen.calls
    assert seen.calls[warm[-1]]["warmup_done"] == seen.calls[warm[-1]]["warmup_total"] == 2
    seen.calls, seen.times = seen.calls[len(warm):], seen.times[len(warm):]
    assert_well_formed(seen, total=24, failed=0, tokens=24 * TOKENS)
    assert seen.threads == {threading.get_ident()}
    assert any(0 < c["done"] < 24 for c in seen.calls[:-1])
    assert any(c["tok_s"] > 20 for c in seen.calls[:-1])  # 4 streams at 20 tok/s each


def test_it_reports_progress_from_the_event_loop_of_the_async_entry_point(server: ReplayProcess) -> None:
    seen = Calls()
    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=2)

    async def main() -> Any:
        return threading.get_ident(), await loadgen_run_async(config=cfg, specs=specs(10), progress=seen)

    ident, result = asyncio.run(main())
    assert len(result.records) == 10
    assert_well_formed(seen, total=10, failed=0, tokens=10 * TOKENS)
    assert seen.threads == {ident}


def test_it_keeps_measuring_when_the_progress_callback_raises(server: ReplayProcess,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def broken(info: dict[str, Any]) -> None:
        calls.append(info)
        raise KeyError("display gone")

    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=1)
    result = loadgen_run(config=cfg, specs=specs(5), progress=broken)
    assert run_summary(result)["successes"] == 5
    assert len(calls) == 1
    assert "progress callback failed" in caplog.text


@pytest.mark.parametrize("workers", [1, 2])
def test_the_mean_since_start_counts_what_the_stop_aborted_as_the_summary_does(tmp_path: Path,
                                                                                workers: int) -> None:
    # Requests of 20 tokens, one per 50 ms (~1 s each), two at a time; the stop comes ~0.5 s after
    # the first two finished, with the next two halfway through their streams: their tokens were
    # streamed, and aborted.
    routes = {"/v1/completions": [stream(gap=0.05, tokens=20)]}
    seen = Calls()

    def should_stop() -> str | None:
        done_at = [at for info, at in zip(seen.calls, seen.times) if info.get("done", 0) >= 2]
        return "the sweep was cancelled" if done_at and time.monotonic() - done_at[0] > 0.4 else None

    with ReplayProcess({"routes": routes}, tmp_path) as proc:
        cfg = LoadConfig(base_url=proc.url, api=Api.COMPLETIONS, model="m", concurrency=2, workers=workers)
        with pytest.raises(LoadgenStopped) as stopped:
            loadgen_run(config=cfg, specs=[RequestSpec(prompt=f"p{i}", input_len=-1, output_len=20) for i in range(8)],
                        progress=seen, should_stop=should_stop)
    s = run_summary(stopped.value.result)
    assert s["successes"] >= 2 and s["aborted"] >= 1 and s["failures"] == 0
    streamed_by_aborted = sum(len(stopped.value.result.records.events_of(i))
                              for i, error in stopped.value.result.records.errors.items() if error.startswith("aborted"))
    assert streamed_by_aborted > 0   # the aborted requests had streamed tokens
    last = seen.calls[-1]
    # The live counts end where the stored ones are: the successes' 20 tokens each and what the
    # aborted requests had streamed (the output throughput counts both); the mean since start is
    # over those tokens.
    assert last["aborted"] == s["aborted"] and last["done"] == s["successes"]
    assert s["output_tokens"] == 20 * s["successes"] and s["output_tokens_aborted"] == streamed_by_aborted
    assert last["output_tokens"] == s["output_tokens"] + s["output_tokens_aborted"]
    assert last["tok_s_mean"] == pytest.approx(last["output_tokens"] / last["elapsed_s"])
    assert last["tok_s_mean"] == pytest.approx(s["output_throughput_tok_s"], rel=0.15)
    # Every report's mean counts tokens of successes, requests in flight and aborted ones only:
    # never above what the successes and the two slots could have streamed by then.
    for info in seen.calls:
        assert info["output_tokens"] <= 20 * (info["done"] + 2)


# ---------------------------------------------------------------------- duration-limited points
@pytest.mark.parametrize("workers", [1, 2])
def test_it_cycles_the_dataset_until_the_duration_has_passed_in_a_closed_loop(server: ReplayProcess,
                                                                               workers: int) -> None:
    seen = Calls()
    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=4, workers=workers,
                     duration_s=1.0)
    result = loadgen_run(config=cfg, specs=specs(3), progress=seen)
    rec = result.records
    s = run_summary(result)
    assert result.duration_limited is True and s["duration_limited"] is True
    start, end = rec.column("start"), rec.column("end")
    # Every request started before t0 + 1 s, and the in-flight ones were allowed to finish.
    assert start.max() < result.t0 + 1e9
    assert end.max() > result.t0 + 1e9
    assert s["successes"] == len(rec) == s["requests"]
    # 4 slots x ~0.2 s per request over 1 s: about 20 requests (5 rounds), the dataset used ~7 times.
    assert 12 <= len(rec) <= 24
    assert set(rec.column("index").tolist()) <= {0, 1, 2}
    assert s["achieved_concurrency_max"] == 4
    last = seen.calls[-1]
    assert last["done"] == last["total"] == len(rec)


def test_it_stops_an_open_loop_schedule_at_the_duration(server: ReplayProcess) -> None:
    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", rate=30.0, seed=4, duration_s=1.0)
    result = loadgen_run(config=cfg, specs=specs(5))
    rec = result.records
    s = run_summary(result)
    assert result.duration_limited is True
    sched = rec.column("scheduled")
    assert sched.max() < result.t0 + 1e9 and rec.column("start").max() < result.t0 + 1.02e9
    assert 15 <= len(rec) <= 50  # Poisson at 30/s over 1 s
    assert s["successes"] == len(rec)
    assert s["achieved_rate_req_s"] == pytest.approx(s["scheduled_rate_req_s"], rel=0.1)


@pytest.mark.parametrize("rate", [None, 30.0])
def test_it_runs_a_one_spec_dataset_for_a_duration_over_two_workers(server: ReplayProcess, rate: float | None) -> None:
    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=None if rate else 2, rate=rate,
                     workers=2, duration_s=0.8, seed=1)
    result = loadgen_run(config=cfg, specs=specs(1))
    rec = result.records
    assert sorted(set(rec.column("worker").tolist())) == [0, 1]  # both workers sent, with one spec between them
    assert set(rec.column("index").tolist()) == {0}
    assert rec.column("start").max() < result.t0 + 0.8e9 + 0.02e9
    assert run_summary(result)["successes"] == len(rec) >= 6


def test_it_says_a_dataset_run_is_not_duration_limited(server: ReplayProcess) -> None:
    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=2)
    result = loadgen_run(config=cfg, specs=specs(2))
    assert result.duration_limited is False and run_summary(result)["duration_limited"] is False


@pytest.mark.parametrize("duration", [0.0, -1.0, math.nan, math.inf])
def test_it_refuses_a_duration_that_is_not_a_positive_number_of_seconds(duration: float) -> None:
    cfg = LoadConfig(base_url="http://127.0.0.1:9", api=Api.COMPLETIONS, model="m", concurrency=1,
                     duration_s=duration)
    with pytest.raises(ValueError, match="duration_s must be a finite number of seconds > 0"):
        cfg.validate()


def test_it_refuses_a_duration_with_an_infinite_rate() -> None:
    cfg = LoadConfig(base_url="http://127.0.0.1:9", api=Api.COMPLETIONS, model="m", rate=math.inf, duration_s=5)
    with pytest.raises(ValueError, match="infinite rate"):
        cfg.validate()


# ---------------------------------------------------------------------- garbage collector
def test_it_quiets_the_garbage_collector_while_measuring_and_restores_it(server: ReplayProcess) -> None:
    before = gc.get_threshold()
    during: list[tuple[int, int]] = []

    def look(info: dict[str, Any]) -> None:
        during.append((gc.get_threshold()[0], gc.get_freeze_count()))

    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=1)
    loadgen_run(config=cfg, specs=specs(4), progress=look)
    # The progress calls before the final one happen while the measured phase runs.
    assert during[0][0] == max(before[0], MEASURED_GC_GEN0) and during[0][1] > 1000
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


# ---------------------------------------------------------------------- request cap
@pytest.mark.parametrize("workers", [1, 2])
def test_it_stops_a_duration_run_at_its_request_cap_when_that_comes_first(server: ReplayProcess, workers: int) -> None:
    seen = Calls()
    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=4, workers=workers,
                     duration_s=30.0, max_requests=10)
    started = time.monotonic()
    result = loadgen_run(config=cfg, specs=specs(3), progress=seen)
    assert len(result.records) == 10 and run_summary(result)["successes"] == 10
    assert time.monotonic() - started < 10  # ended by the cap (~0.6 s of traffic), not by the 30 s
    assert seen.calls[-1]["done"] == seen.calls[-1]["total"] == 10


def test_it_sends_only_the_first_max_requests_of_a_dataset(server: ReplayProcess) -> None:
    cfg = LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", rate=50.0, max_requests=5)
    result = loadgen_run(config=cfg, specs=specs(40))
    assert sorted(result.records.column("index").tolist()) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="max_requests must be >= 1"):
        LoadConfig(base_url=server.url, api=Api.COMPLETIONS, model="m", concurrency=1, max_requests=0).validate()
