"""Calibration of text prompts against the server's own token counts (``usage.prompt_tokens``).

Used for the ``random`` dataset when the API takes text only (chat, and completions on an engine
that is not sent token ids, e.g. llama.cpp): probe prompts of two word counts are sent, the
server's ``prompt_tokens`` fitted to a line (chat-template overhead + tokens per word), and prompts
are then built to hit the requested length. The run still records requested vs actual input tokens
per request (metrics.md).

Each probe is first sent as the run sends its requests (streaming, ``stream_options.include_usage``
asked for). A server that streams no usage (``llama_cpp.server`` ignores ``stream_options``, for
completions and chat alike) is asked again with a plain non-streaming request, whose JSON answer
carries ``usage.prompt_tokens``: the same prompt, the same endpoint, so the same count.
"""
from __future__ import annotations

import random
import time
from typing import Any

import aiohttp
import orjson

from .client import StreamingClient
from .datasets import RequestSpec, TextCalibration, random_words, text_calibration_fit
from .protocol import Api, request_body, request_path

__all__ = ["dataset_calibrate_text", "dataset_calibrate_text_at", "probe_word_counts"]

#: Seconds one non-streaming probe may take (a one-token request: its prompt's prefill only).
PLAIN_PROBE_TIMEOUT_S = 120.0


async def dataset_calibrate_text(
    *, base_url: str, api: Api, model: str, headers: dict[str, str] | None = None,
    word_counts: tuple[int, ...] = (64, 512), seed: int = 0,
) -> TextCalibration:
    """Fit :class:`TextCalibration` from one-token probe requests of ``word_counts`` words each.

    Raises ``RuntimeError`` when a probe fails or the server reports no ``prompt_tokens``.
    """
    rng = random.Random(seed)
    probes: list[tuple[int, int]] = []
    async with StreamingClient(base_url=base_url, api=api, model=model, headers=headers) as client:
        for words in word_counts:
            probes.append((words, await _probe(client, api, rng, words)))
    return text_calibration_fit(probes)


def probe_word_counts(input_len: int) -> tuple[int, int]:
    """Word counts of the two fitting probes for prompts of ``input_len`` tokens: at most half of
    ``input_len`` words for the longer one (and at most 64 and 512 words), so a probe is no longer
    than the run's own prompts for up to two tokens per word: a probe of 512 words is about 1,200
    tokens on llama.cpp's tokenizer and would not fit a 512-token context that the run's prompts
    of 64 tokens fit. ``(8, 16)`` at the least."""
    small = max(8, min(64, input_len // 8))
    return small, max(2 * small, min(512, input_len // 2))


async def dataset_calibrate_text_at(
    *, base_url: str, api: Api, model: str, input_len: int, headers: dict[str, str] | None = None,
    word_counts: tuple[int, ...] | None = None, seed: int = 0,
) -> tuple[TextCalibration, dict[str, object]]:
    """:func:`dataset_calibrate_text`, then one more probe of the words it gives for ``input_len``
    tokens: when the server counts that prompt differently (a template or tokenizer that is not
    exactly linear in words), the line is moved through that probe, so prompts of that length come
    out at ``input_len`` tokens on average. Returns the calibration and its evidence
    ``{"overhead_tokens", "tokens_per_word", "probes": [[words, prompt_tokens], ...],
    "check": {"words", "prompt_tokens", "requested"}, "adjusted_tokens"}`` (``adjusted_tokens``:
    how far the check probe moved the line, 0 when it hit ``input_len``). ``word_counts`` defaults to
    :func:`probe_word_counts` of ``input_len``. One-token probes (two for the fit, one check): three
    requests' prefill on the server before the run. Raises ``RuntimeError`` as
    :func:`dataset_calibrate_text` does."""
    if word_counts is None:
        word_counts = probe_word_counts(input_len)
    rng = random.Random(seed)
    probes: list[tuple[int, int]] = []
    async with StreamingClient(base_url=base_url, api=api, model=model, headers=headers) as client:
        for words in word_counts:
            probes.append((words, await _probe(client, api, rng, words)))
        cal = text_calibration_fit(probes)
        words = cal.words_for(input_len)
        got = await _probe(client, api, rng, words)
    adjusted = 0.0
    if got != input_len:
        # Through the check probe, same slope: words_for(input_len) now lands on input_len.
        moved = TextCalibration(overhead=got - cal.per_word * words, per_word=cal.per_word)
        adjusted = moved.overhead - cal.overhead
        cal = moved
    return cal, {"overhead_tokens": cal.overhead, "tokens_per_word": cal.per_word,
                 "probes": [list(p) for p in probes],
                 "check": {"words": words, "prompt_tokens": got, "requested": input_len},
                 "adjusted_tokens": adjusted}


async def _probe(client: StreamingClient, api: Api, rng: random.Random, words: int) -> int:
    """The server's ``prompt_tokens`` for a one-token request of ``words`` random words (as one user
    message for chat): from the streamed usage, else (a server that streams none) from the usage of
    the same request sent without streaming (:func:`_plain_prompt_tokens`). Raises ``RuntimeError``
    when it fails or reports no prompt tokens either way."""
    text = random_words(rng, words)
    spec = RequestSpec(prompt=text, input_len=-1, output_len=1,
                       messages=[{"role": "user", "content": text}] if api is Api.CHAT else None)
    out = await client.send(spec, scheduled=time.perf_counter_ns())
    if not out.ok:
        raise RuntimeError(f"calibration probe of {words} words gave no prompt_tokens: {out.error}")
    if out.input_tokens >= 0:
        return out.input_tokens
    got, why = await _plain_prompt_tokens(client, spec)
    if got is None:
        raise RuntimeError(f"calibration probe of {words} words gave no prompt_tokens: the stream had no usage "
                           f"and {why}")
    return got


async def _plain_prompt_tokens(client: StreamingClient, spec: RequestSpec) -> tuple[int | None, str]:
    """``usage.prompt_tokens`` of ``spec`` sent once without streaming (``"stream": false``, no
    ``stream_options``) to the client's endpoint with its headers: ``(tokens, "")``, or ``(None,
    why)`` in plain words (HTTP status and body excerpt, a connection error, an answer without
    usage). Never raises for request faults."""
    body: dict[str, Any] = orjson.loads(request_body(api=client.api, model=client.model, prompt=spec.prompt,
                                                     messages=spec.messages, max_tokens=spec.output_len,
                                                     ignore_eos=False, extra=client.extra_body))
    body["stream"] = False
    body.pop("stream_options", None)
    headers = {k: v for k, v in client.headers.items() if k.lower() != "accept"}
    url = client.url
    what = f"the same request without streaming (POST {request_path(client.api)})"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PLAIN_PROBE_TIMEOUT_S)) as session:
            async with session.post(url, data=orjson.dumps(body), headers=headers, allow_redirects=False) as resp:
                raw = await resp.read()
                status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, f"{what} failed: {type(exc).__name__}: {exc}"
    excerpt = raw[:300].decode("utf-8", "replace").strip()
    if not 200 <= status < 300:
        return None, f"{what} answered HTTP {status}: {excerpt}"
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, f"{what} answered something that is not JSON: {excerpt}"
    # /generate keeps its counts in meta_info, the OpenAI APIs in usage.
    usage = obj.get("meta_info" if client.api is Api.GENERATE else "usage") if isinstance(obj, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        return None, f"{what} gave no usage.prompt_tokens either"
    return tokens, ""

