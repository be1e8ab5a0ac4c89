"""The SSE parser and event classification, fed byte strings directly (no network)."""
from __future__ import annotations

import json

import pytest

from benchmarks.loadgen import Api, SseParser, event_inspect, request_body

STREAM = (b': hello\n\ndata: {"choices":[{"text":" a b"}]}\n\ndata:{"choices":[{"text":"c"}]}\r\n\r\n'
          b'event: x\nid: 3\ndata: {"x":\ndata: 1}\n\n: ping\n\ndata: [DONE]\n\n')
EXPECTED = [b'{"choices":[{"text":" a b"}]}', b'{"choices":[{"text":"c"}]}', b'{"x":\n1}', b"[DONE]"]


def feed_all(parser: SseParser, parts: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for part in parts:
        out.extend(parser.feed(part))
    return out


def test_it_parses_the_stream_in_one_read() -> None:
    assert feed_all(SseParser(), [STREAM]) == EXPECTED


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_it_gives_the_same_events_for_a_split_at_any_byte(cut: int) -> None:
    assert feed_all(SseParser(), [STREAM[:cut], STREAM[cut:]]) == EXPECTED


def test_it_survives_one_byte_reads() -> None:
    parser = SseParser()
    assert feed_all(parser, [STREAM[i:i + 1] for i in range(len(STREAM))]) == EXPECTED
    assert parser.pending == 0


def test_it_keeps_an_event_larger_than_128_kib_whole() -> None:
    payload = json.dumps({"choices": [{"text": "y" * 300_000}]}).encode()
    event = b"data: " + payload + b"\n\n"
    parts = [event[i:i + 65536] for i in range(0, len(event), 65536)]
    assert feed_all(SseParser(), parts) == [payload]


def test_it_keeps_only_one_leading_space_of_data() -> None:
    assert SseParser().feed(b"data:  two\n\n") == [b" two"]


def test_it_reports_an_unterminated_event_as_pending() -> None:
    parser = SseParser()
    assert parser.feed(b'data: {"a"') == []
    assert parser.pending == 10


@pytest.mark.parametrize(("api", "payload", "output", "finished"), [
    (Api.CHAT, {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}, False, False),
    (Api.CHAT, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, False, False),
    (Api.CHAT, {"choices": [{"index": 0, "delta": {"content": "x"}}]}, True, False),
    (Api.CHAT, {"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]}, True, False),
    (Api.CHAT, {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]}, True, False),
    (Api.CHAT, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, False, True),
    (Api.CHAT, {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5}}, False, False),
    (Api.COMPLETIONS, {"choices": [{"text": ""}]}, False, False),
    (Api.COMPLETIONS, {"choices": [{"text": " hi", "finish_reason": "length"}]}, True, True),
    (Api.GENERATE, {"text": "a b", "output_ids": [5], "meta_info": {"completion_tokens": 2, "finish_reason": None}},
     True, False),
    (Api.GENERATE, {"text": "a b", "output_ids": [], "meta_info": {"completion_tokens": 1,
                                                                   "finish_reason": {"type": "stop"}}}, False, True),
])
def test_it_classifies_output_carrying_events(api: Api, payload: dict, output: bool, finished: bool) -> None:
    info = event_inspect(api, json.dumps(payload).encode(), 1)
    assert (info.output, info.finished, info.error) == (output, finished, None)


def test_it_reads_usage_and_per_chunk_tokens_from_cumulative_usage() -> None:
    data = json.dumps({"choices": [{"delta": {"content": "abc"}}], "usage": {"prompt_tokens": 9, "completion_tokens": 7}})
    info = event_inspect(Api.CHAT, data.encode(), 4)
    assert (info.prompt_tokens, info.completion_tokens, info.tokens) == (9, 7, 3)


def test_it_reports_error_objects_and_non_json() -> None:
    assert event_inspect(Api.CHAT, b'{"error": {"message": "out of memory"}}', -1).error == "out of memory"
    assert "not JSON" in (event_inspect(Api.CHAT, b"{oops", -1).error or "")


def test_it_always_asks_for_usage_and_sends_ignore_eos() -> None:
    body = json.loads(request_body(api=Api.CHAT, model="m", prompt="hi", messages=None, max_tokens=8, ignore_eos=True))
    assert body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["max_tokens"] == 8
    gen = json.loads(request_body(api=Api.GENERATE, model="m", prompt=[1, 2], messages=None, max_tokens=4, ignore_eos=True))
    assert gen == {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}, "stream": True}
