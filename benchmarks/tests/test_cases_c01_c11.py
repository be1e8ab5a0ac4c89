"""Measurement cases C1-C11 (``/work/shared/cases/measurement-cases.md``) through the real client.

Every case runs :func:`benchmarks.loadgen.loadgen_run` against ``replay_server.py`` in its own
process, replaying the case's byte stream with the case's timing, and asserts the right value.
Each case is parametrised over other inputs of the same kind (other APIs, other channels, other
split points) so the fix covers the kind of fault. Timing tolerance: ±15 ms (2-core host with
other tests running); counts are exact.

Times measured from a request's start (TTFT, E2E) are asserted against the instant the server
really sent the write (its ``/_log``, same CLOCK_MONOTONIC as the client) minus the client's
``start``: that is the value a correct client reports. The time the request took to reach the
server and any lateness of the server's own timer on a busy host are part of it, and the scripted
offsets are only checked to be a lower bound of it.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.loadgen import Api, LoadConfig, RequestSpec, loadgen_run, run_summary
from benchmarks.tests.replay_server import ReplayProcess, sse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOL = 0.015
PATHS = {Api.CHAT: "/v1/chat/completions", Api.COMPLETIONS: "/v1/completions", Api.GENERATE: "/generate"}

Replay = Callable[..., ReplayProcess]


@pytest.fixture
def replay(tmp_path: Path) -> Iterator[Replay]:
    started: list[ReplayProcess] = []

    def start(api: Api, responses: list[dict[str, Any]], **script: Any) -> ReplayProcess:
        proc = ReplayProcess({"routes": {PATHS[api]: responses}, **script}, tmp_path)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def run(proc: ReplayProcess, api: Api, n: int = 1, *, concurrency: int = 1, output_len: int = 16, **cfg: Any):
    config = LoadConfig(base_url=proc.url, api=api, model="m", concurrency=concurrency, keep_text=True, **cfg)
    specs = [RequestSpec(prompt="hello there", input_len=-1, output_len=output_len) for _ in range(n)]
    result = loadgen_run(config=config, specs=specs)
    return result, run_summary(result)


def sent_s(proc: ReplayProcess, result: Any, write: int, request: int = 0, record: int | None = None) -> float:
    """Seconds from the client's ``start`` of ``record`` to the server's send of ``write``.

    ``request`` is the request's position in the server's arrival order, ``record`` the client's
    record (default: the same position, which holds for one request or concurrency 1). ``write``
    indexes the response's scripted writes in time order; ``-1`` is the end of the body.
    """
    entry = proc.request_log()[request]
    at = entry["end_ns"] if write == -1 else entry["writes_ns"][write]
    start = result.records.start[request if record is None else record]
    return (at - start) / 1e9


def chat(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta if delta is not None else {}, "finish_reason": finish}
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice]}


def completion(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def usage(prompt: int, out: int) -> dict[str, Any]:
    return {"id": "c", "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": out,
                                                "total_tokens": prompt + out}}


def token(api: Api, i: int, text: str = " tok", finish: str | None = None, usage_so_far: int | None = None) -> dict[str, Any]:
    """The i-th (0-based) token chunk of ``api``; ``/generate`` carries cumulative counts."""
    if api is Api.CHAT:
        return chat({"content": text}, finish)
    if api is Api.COMPLETIONS:
        return completion(text, finish)
    meta: dict[str, Any] = {"id": "r", "finish_reason": {"type": finish} if finish else None, "prompt_tokens": 7}
    if usage_so_far is not None:
        meta["completion_tokens"] = usage_so_far
    return {"text": text * (i + 1), "output_ids": [100 + i], "meta_info": meta}


# ---------------------------------------------------------------------- C1
OPENINGS = {
    "role only": ({"role": "assistant"}, "content", "Hi"),
    "role with empty content": ({"role": "assistant", "content": ""}, "content", "Hi"),
    "reasoning first": ({"role": "assistant"}, "reasoning_content", "Let"),
    "tool call first": ({"role": "assistant"}, "tool_calls", [{"index": 0, "function": {"name": "f", "arguments": ""}}]),
}


@pytest.mark.parametrize("opening", list(OPENINGS))
def test_it_times_ttft_from_the_first_output_not_the_role_chunk_c1(replay: Replay, opening: str) -> None:
    role_delta, channel, first = OPENINGS[opening]
    writes = [[0.005, sse(chat(role_delta))], [0.214, sse(chat({channel: first}))]]
    writes += [[0.214 + 0.020 * i, sse(chat({"content": f" w{i}"}))] for i in range(1, 10)]
    writes += [[0.396, sse(chat({}, "stop"))], [0.397, sse(usage(9, 10))], [0.398, sse("[DONE]")]]
    proc = replay(Api.CHAT, [{"writes": writes}])

    result, s = run(proc, Api.CHAT)

    assert s["successes"] == 1
    assert s["output_tokens"] == 10
    first_output = sent_s(proc, result, 1)  # write 0 is the role chunk at 5 ms
    assert first_output >= 0.214
    assert s["ttft_s"]["mean"] == pytest.approx(first_output, abs=TOL)
    # TPOT ((E2E - TTFT) / 9) against the server's own times of the first output and the body's end:
    # on a busy host a write may leave late, which moves the scripted 20 ms gaps
    sent_tpot = (sent_s(proc, result, -1) - first_output) / 9
    assert sent_tpot == pytest.approx(0.020, abs=0.010)
    assert s["tpot_s"]["mean"] == pytest.approx(sent_tpot, abs=2 * TOL / 9)
    assert s["itl_s"]["count"] == 9  # ten output events, nine gaps; the role chunk is not one of them
    assert s["itl_s"]["p50"] == pytest.approx(0.020, abs=TOL)
    assert result.records.ev_len[0] == 10
    assert s["flags"]["tokens_estimated"] is False


# ---------------------------------------------------------------------- C2
@pytest.mark.parametrize("api", [Api.COMPLETIONS, Api.CHAT, Api.GENERATE])
def test_it_counts_tokens_from_events_when_usage_is_absent_c2(replay: Replay, api: Api) -> None:
    times = [0.2 + i * 0.8 / 31 for i in range(32)]
    writes = [[t, sse(token(api, i))] for i, t in enumerate(times)]
    final = token(api, 31, "", "stop") if api is not Api.GENERATE else {"text": "", "output_ids": [],
                                                                          "meta_info": {"finish_reason": {"type": "stop"}}}
    if api is Api.CHAT:
        final = chat({}, "stop")
    writes += [[1.001, sse(final)], [1.002, sse("[DONE]")]]
    proc = replay(api, [{"writes": writes}])

    result, s = run(proc, api, output_len=256)

    assert s["output_tokens"] == 32  # not the requested 256
    assert s["flags"]["tokens_estimated"] is True
    assert s["tokens_estimated_count"] == 1
    assert sent_s(proc, result, 0) >= 0.2 and sent_s(proc, result, 31) >= 1.0
    assert s["ttft_s"]["mean"] == pytest.approx(sent_s(proc, result, 0), abs=TOL)
    assert s["e2e_s"]["mean"] == pytest.approx(sent_s(proc, result, 31), abs=TOL)
    assert s["tpot_s"]["mean"] == pytest.approx(0.8 / 31, abs=2 * TOL / 31)


# ---------------------------------------------------------------------- C3
ERRORS = {
    "error object then DONE": ([[0.05, sse({"error": {"message": "out of memory", "code": 500}})],
                                [0.06, sse("[DONE]")]], 200, "out of memory"),
    "error after some tokens": ([[0.05, sse(completion(" a"))], [0.07, sse(completion(" b"))],
                                 [0.09, sse({"error": {"message": "out of memory", "code": 500}})],
                                 [0.10, sse("[DONE]")]], 200, "out of memory"),
    "openai error object": ([[0.05, sse({"object": "error", "message": "context too long", "code": 400})],
                             [0.06, sse("[DONE]")]], 200, "context too long"),
    "http 500 json": ([[0.05, '{"error": {"message": "boom"}}']], 500, "HTTP 500"),
}


@pytest.mark.parametrize("kind", list(ERRORS))
def test_it_fails_a_request_whose_stream_carries_an_error_c3(replay: Replay, kind: str) -> None:
    writes, status, message = ERRORS[kind]
    good = [[0.1, sse(completion(" ok"))], [0.15, sse(completion(" go", "stop"))], [0.16, sse(usage(3, 2))],
            [0.17, sse("[DONE]")]]
    ctype = "text/event-stream" if status == 200 else "application/json"
    proc = replay(Api.COMPLETIONS, [{"writes": writes, "status": status, "content_type": ctype}, {"writes": good}])

    result, s = run(proc, Api.COMPLETIONS, n=2)

    assert (s["successes"], s["failures"]) == (1, 1)
    bad = next(i for i in range(2) if not result.records.ok[i])
    assert message in result.records.errors[bad]
    assert s["output_tokens"] == 2  # the failure adds no tokens
    assert s["ttft_s"]["count"] == 1 and s["e2e_s"]["count"] == 1  # and no latency
    good_ttft = sent_s(proc, result, 0, request=1, record=1 - bad)  # the good response is the second sent
    assert good_ttft >= 0.1
    assert s["ttft_s"]["mean"] == pytest.approx(good_ttft, abs=TOL)
    assert s["error_adjusted"]["ttft_s"]["p99"] == float("inf")


# ---------------------------------------------------------------------- C4
SPLITS = {
    "after data colon": (["data:", ' {"choices":[{"text":" hi"}]}\n\n'], " hi"),
    "inside the JSON string before a space": (['data: {"choices":[{"text":"hello', ' world"}]}\n\n'], "hello world"),
    "between CR and LF": (['data: {"choices":[{"text":" hi"}]}\r', '\n\r\n'], " hi"),
    "between the two newlines": (['data: {"choices":[{"text":"  two"}]}\n', '\n'], "  two"),
    "one byte at a time": (list('data: {"choices":[{"text":" x y"}]}\n\n'), " x y"),
}


@pytest.mark.parametrize("split", list(SPLITS))
def test_it_reassembles_an_event_split_across_reads_c4(replay: Replay, split: str) -> None:
    parts, text = SPLITS[split]
    # 4 ms apart with TCP_NODELAY on both ends: each part is its own network read.
    writes = [[0.02 + 0.004 * i, p] for i, p in enumerate(parts)]
    writes.append([writes[-1][0] + 0.01, sse("[DONE]")])
    proc = replay(Api.COMPLETIONS, [{"writes": writes}])

    result, s = run(proc, Api.COMPLETIONS)

    assert s["successes"] == 1
    assert result.records.ev_len[0] == 1
    assert result.records.texts[0] == text


# ---------------------------------------------------------------------- C5
def test_it_accepts_data_without_a_space_and_ignores_comments_c5(replay: Replay) -> None:
    writes = [[0.01, ": keep-alive\n\n"], [0.02, 'data:{"choices":[{"text":"a"}]}\n\n'],
              [0.03, ":ping\ndata:{\"choices\":[{\"text\":\"b\"}]}\n\n"], [0.04, "data:[DONE]\n\n"]]
    proc = replay(Api.COMPLETIONS, [{"writes": writes}])

    result, s = run(proc, Api.COMPLETIONS)

    assert s["successes"] == 1
    assert result.records.ev_len[0] == 2
    assert result.records.texts[0] == "ab"
    assert sent_s(proc, result, 1) >= 0.02  # write 0 is the keep-alive comment
    assert s["ttft_s"]["mean"] == pytest.approx(sent_s(proc, result, 1), abs=TOL)


# ---------------------------------------------------------------------- C6
@pytest.mark.parametrize("api", [Api.CHAT, Api.COMPLETIONS])
def test_it_reads_tokens_from_a_usage_only_chunk_c6(replay: Replay, api: Api) -> None:
    writes = [[0.05 + 0.01 * i, sse(token(api, i))] for i in range(5)]
    writes.append([0.10, sse(token(api, 5, "", "stop")) if api is Api.COMPLETIONS else sse(chat({}, "stop"))])
    writes += [[0.11, sse({"id": "x", "object": "chat.completion.chunk", "choices": [],
                           "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}})],
               [0.12, sse("[DONE]")]]
    proc = replay(api, [{"writes": writes}])

    result, s = run(proc, api)

    assert s["successes"] == 1
    assert result.records.ev_len[0] == 5  # the usage chunk is not an output event
    assert result.records.output_tokens[0] == 5
    assert result.records.input_tokens[0] == 12
    assert s["flags"]["tokens_estimated"] is False


# ---------------------------------------------------------------------- C7
def test_it_ends_e2e_at_the_last_output_not_at_usage_or_done_c7(replay: Replay) -> None:
    writes = [[0.1 * (i + 1), sse(chat({"content": " t"}, "stop" if i == 9 else None))] for i in range(10)]
    writes += [[1.05, sse(usage(4, 10))], [1.06, sse("[DONE]")]]
    proc = replay(Api.CHAT, [{"writes": writes}])

    result, s = run(proc, Api.CHAT)

    last_output, done = sent_s(proc, result, 9), sent_s(proc, result, -1)
    assert last_output >= 1.00 and done >= 1.06
    assert s["e2e_s"]["mean"] == pytest.approx(last_output, abs=TOL)  # not the usage chunk 50 ms later
    assert s["tpot_s"]["mean"] == pytest.approx(0.1, abs=2 * TOL / 9)
    assert (result.records.end[0] - result.records.start[0]) / 1e9 == pytest.approx(done, abs=TOL)
    assert s["duration_s"] == pytest.approx(done, abs=TOL)  # the run's end is the response's end


@pytest.mark.parametrize("shape", ["role and usage", "empty content and usage", "only DONE"])
def test_it_fails_a_stream_without_output_c7(replay: Replay, shape: str) -> None:
    writes = {
        "role and usage": [[0.01, sse(chat({"role": "assistant"}))], [0.02, sse(usage(4, 0))], [0.03, sse("[DONE]")]],
        "empty content and usage": [[0.01, sse(chat({"content": ""}, "stop"))], [0.02, sse(usage(4, 0))],
                                    [0.03, sse("[DONE]")]],
        "only DONE": [[0.01, sse("[DONE]")]],
    }[shape]
    proc = replay(Api.CHAT, [{"writes": writes}])

    result, s = run(proc, Api.CHAT)

    assert s["failures"] == 1
    assert result.records.errors[0] == "the stream ended with no output tokens"
    assert s["output_tokens"] == 0


def test_it_fails_a_stream_cut_before_a_clean_end_c7(replay: Replay) -> None:
    proc = replay(Api.CHAT, [{"writes": [[0.01, sse(chat({"content": " a"}))], [0.02, sse(chat({"content": " b"}))]]}])

    result, s = run(proc, Api.CHAT)

    assert s["failures"] == 1
    assert "without finish_reason or [DONE]" in result.records.errors[0]


# ---------------------------------------------------------------------- C8
@pytest.mark.parametrize("pieces", [1, 7, 64])
def test_it_parses_one_event_of_200_kib_c8(replay: Replay, pieces: int) -> None:
    text = "x" * (200 * 1024 - 40)
    event = sse(completion(text, "length"))
    assert len(event) > 200 * 1024
    step = len(event) // pieces + 1
    writes = [[0.01 + 0.002 * i, event[i * step:(i + 1) * step]] for i in range(pieces)]
    writes.append([writes[-1][0] + 0.01, sse("[DONE]")])
    proc = replay(Api.COMPLETIONS, [{"writes": writes}])

    result, s = run(proc, Api.COMPLETIONS)

    assert s["successes"] == 1
    assert result.records.ev_len[0] == 1
    assert result.records.texts[0] == text


# ---------------------------------------------------------------------- C9
HOLD = [{"writes": [[0.01, sse(completion(" a"))], [2.0, sse(completion(" b", "stop"))], [2.001, sse(usage(3, 2))],
                    [2.002, sse("[DONE]")]], "tokens": 2}]


@pytest.mark.parametrize("workers", [1, 2])
def test_it_reaches_128_requests_in_flight_c9(replay: Replay, workers: int) -> None:
    proc = replay(Api.COMPLETIONS, HOLD)

    _, s = run(proc, Api.COMPLETIONS, n=128, concurrency=128, workers=workers)

    assert proc.stats()["max_in_flight"] == 128
    assert s["successes"] == 128
    assert s["achieved_concurrency_max"] == 128
    assert s["client_workers"] == workers
    assert s["flags"]["concurrency_shortfall"] is False
    # The server holds each request 2 s; opening 128 connections at once on a loaded 2-core
    # machine adds a few hundred ms on top, never less than the hold.
    assert 1.99 <= s["e2e_s"]["p50"] < 3.0


def test_it_flags_a_client_capped_below_the_target_c9(replay: Replay) -> None:
    proc = replay(Api.COMPLETIONS, HOLD)

    _, s = run(proc, Api.COMPLETIONS, n=128, concurrency=128, connection_limit=100)

    assert proc.stats()["max_in_flight"] == 100
    assert s["achieved_concurrency_max"] == 100
    assert s["flags"]["concurrency_shortfall"] is True
    # The 28 that waited are visible: they got a connection once the first 100 (held 2 s) ended,
    # so never before 2 s; a loaded machine only makes them later.
    assert 1.95 <= s["pool_wait_s"]["p99"] <= 2.6


# ---------------------------------------------------------------------- C10
def fixed_stream(n_tokens: int, finish: str, gap: float = 0.001) -> dict[str, Any]:
    writes = [[0.01 + gap * i, sse(completion(" t"))] for i in range(n_tokens - 1)]
    end = 0.01 + gap * n_tokens
    writes += [[end, sse(completion(" t", finish))], [end + 0.001, sse(usage(8, n_tokens))], [end + 0.002, sse("[DONE]")]]
    return {"writes": writes, "tokens": n_tokens}


@pytest.mark.parametrize("short", [130, 97])
def test_it_marks_a_fixed_length_run_whose_server_stopped_early_c10(replay: Replay, short: int) -> None:
    proc = replay(Api.COMPLETIONS, [fixed_stream(256, "length"), fixed_stream(short, "stop")])

    _, s = run(proc, Api.COMPLETIONS, n=8, concurrency=4, output_len=256, ignore_eos=True, fixed_output=True)

    assert s["flags"]["output_length_mismatch"] is True
    assert s["output_length_mismatch_count"] == 4
    assert s["output_tokens_mean"] == pytest.approx((256 + short) / 2)
    assert s["output_length_requested"] == 256


def test_it_leaves_an_exact_fixed_length_run_unflagged_c10(replay: Replay) -> None:
    proc = replay(Api.COMPLETIONS, [fixed_stream(256, "length")])

    _, s = run(proc, Api.COMPLETIONS, n=4, concurrency=2, output_len=256, ignore_eos=True, fixed_output=True)

    assert s["flags"]["output_length_mismatch"] is False
    assert s["output_tokens_mean"] == 256


# ---------------------------------------------------------------------- C11
def test_it_measures_throughput_over_the_traffic_only_c11(replay: Replay) -> None:
    proc = replay(Api.COMPLETIONS, [{"writes": [[0.01, sse(completion(" a"))], [0.02, sse(completion(" b", "stop"))],
                                                [0.021, sse(usage(3, 2))], [0.022, sse("[DONE]")]]}])
    began = time.monotonic()
    time.sleep(3.0)  # dataset generation (30 s in the case; scaled down): before the run, outside it
    specs = [RequestSpec(prompt=f"p{i}", input_len=-1, output_len=2) for i in range(100)]
    # Nearly constant gaps (gamma shape 1e6) at 10 requests/s: 100 requests over about 10 s.
    config = LoadConfig(base_url=proc.url, api=Api.COMPLETIONS, model="m", rate=10.0, burstiness=1e6, warmup=5)
    result = loadgen_run(config=config, specs=specs)
    s = run_summary(result)

    assert time.monotonic() - began > 12.5
    assert s["successes"] == 100
    assert s["duration_s"] == pytest.approx(9.9 + 0.022, abs=0.1)
    assert s["request_throughput_req_s"] == pytest.approx(10.0, rel=0.02)
    assert s["flags"]["rate_shortfall"] is False
