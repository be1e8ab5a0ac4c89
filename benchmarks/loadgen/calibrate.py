"""Calibration of text prompts against the server's own token counts (``usage.prompt_tokens``).

Used for the ``random`` dataset when the API takes text only (chat, and completions on an engine
that is not sent token ids) and the server offers no tokenize endpoint (one that does, as
llama.cpp's, has its prompts sized exactly by :mod:`benchmarks.loadgen.tokenized`): probe prompts of two word counts are sent, the
server's ``prompt_tokens`` fitted to a line (chat-template overhead + tokens per word), and prompts
are then built to hit the requested length. The run still records requested vs actual input tokens
per request (metrics.md).

Each probe is first sent as the run sends its requests (streaming, ``stream_options.include_usage``
asked for). A server that streams no usage (``llama_cpp.server`` ignores ``stream_options``, for
completions and chat alike) is asked again with a plain non-streaming request, whose JSON answer
carries ``usage.prompt_tokens``: the same prompt, the same endpoint, so the same count.

The line is checked at the requested length with probes of the words it gives, moved after each
miss through the mean of the checks so far (each probe's own random words land a few tokens off the
line; their mean less so), until one lands within the run's own tolerance
(:data:`benchmarks.loadgen.metrics.INPUT_LENGTH_TOLERANCE` or
:data:`~benchmarks.loadgen.metrics.INPUT_LENGTH_TOLERANCE_TOKENS`, whichever is larger) or
:data:`CALIBRATION_CHECKS` have been sent. Calibration sets the prompts' mean only: each prompt's
own words still vary, so a run whose stream carries no usage has its sent prompts counted after it
(:func:`prompts_token_counts`), as the run's ``input_length_check``.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from .client import StreamingClient
from .datasets import RequestSpec, TextCalibration, random_words, text_calibration_fit
from .metrics import INPUT_LENGTH_TOLERANCE, INPUT_LENGTH_TOLERANCE_TOKENS
from .protocol import Api, request_body, request_path

__all__ = ["dataset_calibrate_text", "dataset_calibrate_text_at", "probe_word_counts", "prompts_token_counts"]

#: Seconds one non-streaming probe may take (a one-token request: its prompt's prefill only).
PLAIN_PROBE_TIMEOUT_S = 120.0
#: Most check probes at the requested length (one-token requests). On llama.cpp's tokenizer one
#: probe of random words missed 16 tokens by 4 and 256 by 19; the second or third lands within 2 %.
CALIBRATION_CHECKS = 4


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
    """:func:`dataset_calibrate_text`, then check probes of the words it gives for ``input_len``
    tokens: when the server counts such a prompt differently (a template or tokenizer that is not
    exactly linear in words, or random words that tokenize longer than the fit's), the line is
    moved through the mean of the checks so far (same slope) and checked again, until a check
    lands within ``tolerance_tokens`` of ``input_len`` (the run's ``input_length_mismatch``
    tolerance: 2 % or 1 token, whichever is larger) or :data:`CALIBRATION_CHECKS` checks were sent.
    Returns the calibration and its evidence ``{"overhead_tokens", "tokens_per_word", "probes":
    [[words, prompt_tokens], ...], "checks": [[words, prompt_tokens], ...], "check": {"words",
    "prompt_tokens", "requested"}`` (the last check)``, "hit", "tolerance_tokens",
    "adjusted_tokens"}`` (``hit``: the last check landed within the tolerance; False means the line
    was moved after it and not checked again; ``adjusted_tokens``: how far the checks moved the line
    from the fit, 0 when the first hit). ``word_counts`` defaults to :func:`probe_word_counts` of
    ``input_len``. One-token probes (two for the fit, one to :data:`CALIBRATION_CHECKS` checks):
    three to six requests' prefill on the server before the run. Raises ``RuntimeError`` as
    :func:`dataset_calibrate_text` does."""
    if word_counts is None:
        word_counts = probe_word_counts(input_len)
    rng = random.Random(seed)
    probes: list[tuple[int, int]] = []
    checks: list[tuple[int, int]] = []
    tolerance = max(INPUT_LENGTH_TOLERANCE * input_len, INPUT_LENGTH_TOLERANCE_TOKENS)
    hit = False
    async with StreamingClient(base_url=base_url, api=api, model=model, headers=headers) as client:
        for words in word_counts:
            probes.append((words, await _probe(client, api, rng, words)))
        fitted = cal = text_calibration_fit(probes)
        for _ in range(CALIBRATION_CHECKS):
            words = cal.words_for(input_len)
            got = await _probe(client, api, rng, words)
            checks.append((words, got))
            if abs(got - input_len) <= tolerance:
                hit = True
                break
            # Same slope, through the mean of the checks so far: words_for(input_len) lands on
            # input_len for their mean prompt.
            cal = TextCalibration(overhead=sum(t - fitted.per_word * w for w, t in checks) / len(checks),
                                  per_word=fitted.per_word)
    words, got = checks[-1]
    return cal, {"overhead_tokens": cal.overhead, "tokens_per_word": cal.per_word,
                 "probes": [list(p) for p in probes], "checks": [list(c) for c in checks],
                 "check": {"words": words, "prompt_tokens": got, "requested": input_len},
                 "hit": hit, "tolerance_tokens": tolerance, "adjusted_tokens": cal.overhead - fitted.overhead}


async def prompts_token_counts(
    *, base_url: str, api: Api, model: str, specs: list[RequestSpec], headers: dict[str, str] | None = None,
    budget_s: float = PLAIN_PROBE_TIMEOUT_S, should_stop: Callable[[], bool] | None = None,
) -> tuple[list[int], str | None]:
    """The server's ``usage.prompt_tokens`` of each of ``specs``, in order: each sent once more
    without streaming and with one output token (the same prompt, the same endpoint, so the same
    count as when the run sent it), for a run whose stream carried no usage. Stops at the first
    request that gives no count, once ``budget_s`` seconds have passed, or when ``should_stop()``
    (asked before each) returns true: returns the counts so far
    and why it stopped in plain words (None when every spec was counted). Never raises for request
    faults."""
    counts: list[int] = []
    deadline = time.monotonic() + budget_s
    async with StreamingClient(base_url=base_url, api=api, model=model, headers=headers) as client:
        for i, spec in enumerate(specs):
            if time.monotonic() > deadline:
                return counts, f"stopped after {budget_s:g} s with {i} of {len(specs)} prompts counted"
            if should_stop is not None and should_stop():
                return counts, f"stopped with {i} of {len(specs)} prompts counted"
            one = RequestSpec(prompt=spec.prompt, input_len=spec.input_len, output_len=1, messages=spec.messages)
            got, why = await _plain_prompt_tokens(client, one)
            if got is None:
                return counts, f"prompt {i + 1} of {len(specs)}: {why}"
            counts.append(got)
    return counts, None


async def _probe(client: StreamingClient, api: Api, rng: random.Random, words: int) -> int:
    """The server's ``prompt_tokens`` for a one-token request of ``words`` random words (as one user
    message for chat): from the streamed usage, else (a server that streams none) from the usage of
    the same request sent without streaming (:func:`_plain_prompt_tokens`). Raises ``RuntimeError``
    when it fails or reports no prompt tokens either way."""
    return await _probe_text(client, api, random_words(rng, words), what=f"calibration probe of {words} words")


async def _probe_text(client: StreamingClient, api: Api, text: str, *, what: str = "probe") -> int:
    """The server's ``prompt_tokens`` for a one-token request of ``text`` (as one user message for
    chat), as :func:`_probe` counts it. Raises ``RuntimeError`` naming ``what``."""
    spec = RequestSpec(prompt=text, input_len=-1, output_len=1,
                       messages=[{"role": "user", "content": text}] if api is Api.CHAT else None)
    out = await client.send(spec, scheduled=time.perf_counter_ns())
    if not out.ok:
        raise RuntimeError(f"{what} gave no prompt_tokens: {out.error}")
    if out.input_tokens >= 0:
        return out.input_tokens
    got, why = await _plain_prompt_tokens(client, spec)
    if got is None:
        raise RuntimeError(f"{what} gave no prompt_tokens: the stream had no usage and {why}")
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

