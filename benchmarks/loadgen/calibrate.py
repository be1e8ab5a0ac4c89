"""Calibration of text prompts against the server's own token counts (``usage.prompt_tokens``).

Used for the ``random`` dataset when the API takes text only (chat): probe prompts of two word
counts are sent, the server's ``prompt_tokens`` fitted to a line (chat-template overhead + tokens
per word), and prompts are then built to hit the requested length. The run still records requested
vs actual input tokens per request (metrics.md).
"""
from __future__ import annotations

import random
import time

from .client import StreamingClient
from .datasets import RequestSpec, TextCalibration, random_words, text_calibration_fit
from .protocol import Api

__all__ = ["dataset_calibrate_text", "dataset_calibrate_text_at"]


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


async def dataset_calibrate_text_at(
    *, base_url: str, api: Api, model: str, input_len: int, headers: dict[str, str] | None = None,
    word_counts: tuple[int, ...] = (64, 512), seed: int = 0,
) -> tuple[TextCalibration, dict[str, object]]:
    """:func:`dataset_calibrate_text`, then one more probe of the words it gives for ``input_len``
    tokens: when the server counts that prompt differently (a template or tokenizer that is not
    exactly linear in words), the line is moved through that probe, so prompts of that length come
    out at ``input_len`` tokens on average. Returns the calibration and its evidence
    ``{"overhead_tokens", "tokens_per_word", "probes": [[words, prompt_tokens], ...],
    "check": {"words", "prompt_tokens", "requested"}, "adjusted_tokens"}`` (``adjusted_tokens``:
    how far the check probe moved the line, 0 when it hit ``input_len``). One-token probes (two for the
    fit with the default ``word_counts``, one check): three requests' prefill on the server before
    the run. Raises ``RuntimeError`` as
    :func:`dataset_calibrate_text` does."""
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
    message for chat). Raises ``RuntimeError`` when it fails or reports no prompt tokens."""
    text = random_words(rng, words)
    spec = RequestSpec(prompt=text, input_len=-1, output_len=1,
                       messages=[{"role": "user", "content": text}] if api is Api.CHAT else None)
    out = await client.send(spec, scheduled=time.perf_counter_ns())
    if not out.ok or out.input_tokens < 0:
        raise RuntimeError(f"calibration probe of {words} words gave no prompt_tokens: {out.error or 'no usage'}")
    return out.input_tokens
