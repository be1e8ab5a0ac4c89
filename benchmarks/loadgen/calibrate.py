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

__all__ = ["dataset_calibrate_text"]


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
            text = random_words(rng, words)
            spec = RequestSpec(prompt=text, input_len=-1, output_len=1,
                               messages=[{"role": "user", "content": text}] if api is Api.CHAT else None)
            out = await client.send(spec, scheduled=time.perf_counter_ns())
            if not out.ok or out.input_tokens < 0:
                raise RuntimeError(f"calibration probe of {words} words gave no prompt_tokens: {out.error or 'no usage'}")
            probes.append((words, out.input_tokens))
    return text_calibration_fit(probes)
