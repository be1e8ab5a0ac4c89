"""Datasets: what each request sends (prompt and requested lengths).

Three sources (``/work/shared/design/metrics.md``, "Dataset random"):

- ``random``: seeded and reproducible. Input lengths are uniform integers in
  [L·(1−r), L·(1+r)] for range ratio r (r = 0 means exactly L; this is *not* SGLang's
  ``--random-range-ratio``, which draws from [L·r, L]). Prompts are token ids when the API takes
  ids (``/generate`` ``input_ids``, completions ``prompt``), which is exact in the server's own
  tokens; otherwise text built from short common words, cut to the exact length with the server's
  tokenizer where it offers one (:func:`benchmarks.loadgen.tokenized_text_dataset`), else
  calibrated against the server's ``usage.prompt_tokens`` by :func:`text_calibration_fit` (the
  run records requested vs actual either way).
- a prompts file: one prompt per line, or JSONL with ``{"prompt": ...}`` or ``{"messages": [...]}``.
- ShareGPT-format JSON: a list of ``{"conversations": [{"from": "human"|"gpt", "value": ...}]}``;
  the first human turn is the prompt, the following gpt turn's length (in words, as a proxy when no
  tokenizer is given) the requested output unless a fixed output length is given.
"""
from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "RequestSpec", "random_dataset", "prompts_file_dataset", "sharegpt_dataset", "length_draws",
    "text_calibration_fit", "TextCalibration",
]

# Short, frequent English words: one token each in common BPE vocabularies (GPT-2/Llama/Qwen
# families) and in the sim tokenizer (<= 4 characters per word).
WORDS: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "at", "by", "it", "from",
    "that", "this", "be", "are", "was", "or", "an", "not", "but", "all", "can", "has", "have",
    "one", "two", "new", "more", "time", "use", "data", "work", "part", "set", "way", "day", "home",
    "city", "game", "line", "food", "road", "tree", "book", "room", "hand", "name", "team", "song",
)
# Token ids for random prompts are drawn from this range: above the special tokens of common
# vocabularies and below the smallest common vocabulary size (32000, Llama-2 / Mistral).
DEFAULT_TOKEN_ID_RANGE = (1000, 30000)


@dataclass(slots=True)
class RequestSpec:
    """One request to send: ``prompt`` (text or token ids) or chat ``messages``, requested lengths.

    ``input_len`` is the requested input length in server tokens (-1 when unknown, e.g. a prompts
    file without a tokenizer); ``output_len`` is ``max_tokens``.
    """

    prompt: str | list[int] | None
    input_len: int
    output_len: int
    messages: list[dict[str, Any]] | None = None


def length_draws(*, n: int, length: int, range_ratio: float, rng: random.Random) -> list[int]:
    """``n`` integers uniform in [L·(1−r), L·(1+r)] (at least 1); r = 0 gives exactly L.

    Raises ``ValueError`` for r outside [0, 1] or L < 1.
    """
    if not 0.0 <= range_ratio <= 1.0:
        raise ValueError(f"range ratio must be in [0, 1], got {range_ratio}")
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    lo = max(1, math.ceil(length * (1 - range_ratio)))
    hi = max(lo, math.floor(length * (1 + range_ratio)))
    return [length] * n if lo == hi == length else [rng.randint(lo, hi) for _ in range(n)]


@dataclass(frozen=True, slots=True)
class TextCalibration:
    """Server tokens for a text of ``w`` words: ``overhead + per_word * w`` (from two probes)."""

    overhead: float
    per_word: float

    def words_for(self, tokens: int) -> int:
        """Words to send for ``tokens`` server tokens (at least 1)."""
        return max(1, round((tokens - self.overhead) / self.per_word))


def text_calibration_fit(probes: list[tuple[int, int]]) -> TextCalibration:
    """Fit :class:`TextCalibration` to ``(words sent, usage.prompt_tokens)`` pairs (>= 2, distinct).

    A least-squares line; raises ``ValueError`` with fewer than two distinct word counts.
    """
    xs = [float(w) for w, _ in probes]
    ys = [float(t) for _, t in probes]
    if len(set(xs)) < 2:
        raise ValueError("calibration needs prompts of at least two different lengths")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    if slope <= 0:
        raise ValueError(f"server token counts do not grow with prompt length: {probes}")
    return TextCalibration(overhead=my - slope * mx, per_word=slope)


def random_words(rng: random.Random, n: int) -> str:
    """``n`` words from :data:`WORDS`, space-separated, drawn with ``rng``."""
    return " ".join(rng.choice(WORDS) for _ in range(n))


def random_dataset(
    *, num: int, input_len: int, output_len: int, range_ratio: float = 0.0, output_range_ratio: float = 0.0,
    seed: int = 0, token_ids: bool = True, token_id_range: tuple[int, int] = DEFAULT_TOKEN_ID_RANGE,
    calibration: TextCalibration | None = None, chat: bool = False,
    should_stop: Callable[[], bool] | None = None, progress: Callable[[int], None] | None = None,
) -> list[RequestSpec]:
    """``num`` seeded random requests.

    ``token_ids=True``: prompts are lists of ids uniform in ``token_id_range`` of exactly the drawn
    length (the server counts them as given). Otherwise text from :data:`WORDS`, with the word count
    from ``calibration`` (one word per token without one); ``chat=True`` wraps the text as one user
    message, whose chat template adds tokens of its own (role markers, the assistant turn: 6 on the
    sim and on llama.cpp's default template), so a chat prompt has the requested length only with a
    ``calibration`` fitted on chat requests to the same server
    (:func:`benchmarks.loadgen.dataset_calibrate_text_at`, which counts the template in its
    overhead); without one it is longer by the template's tokens, which the run's
    ``input_length_mismatch`` check reports. Same arguments, same requests. ``should_stop`` (optional) is asked before each
    prompt; when it returns true :class:`benchmarks.loadgen.LoadgenStopped` is raised (a large
    prompt set takes seconds to build and must not outlive a cancel). ``progress`` (optional) is
    called with the number of requests built so far after each one (keep it quick).
    """
    rng = random.Random(seed)
    ins = length_draws(n=num, length=input_len, range_ratio=range_ratio, rng=rng)
    outs = length_draws(n=num, length=output_len, range_ratio=output_range_ratio, rng=rng)
    specs: list[RequestSpec] = []
    lo, hi = token_id_range
    for n_in, n_out in zip(ins, outs):
        if should_stop is not None and should_stop():
            from .driver import LoadgenStopped

            raise LoadgenStopped(f"stopped while building prompts ({len(specs)} of {num} built)")
        if token_ids and not chat:
            specs.append(RequestSpec(prompt=[rng.randrange(lo, hi) for _ in range(n_in)], input_len=n_in,
                                     output_len=n_out))
        else:
            words = calibration.words_for(n_in) if calibration else n_in
            text = random_words(rng, words)
            specs.append(RequestSpec(
                prompt=text, input_len=n_in, output_len=n_out,
                messages=[{"role": "user", "content": text}] if chat else None,
            ))
        if progress is not None:
            progress(len(specs))
    return specs


def prompts_file_dataset(
    *, path: str | Path, output_len: int, num: int | None = None, count_tokens: Callable[[str], int] | None = None,
) -> list[RequestSpec]:
    """Requests from a prompts file: one prompt per line, or JSONL (``prompt`` or ``messages``).

    Blank lines are skipped; ``num`` cycles through the prompts (or truncates). ``count_tokens``
    gives the requested input length when a tokenizer is known (else -1). Raises ``ValueError``
    naming the line for JSONL lines without ``prompt``/``messages``.
    """
    specs: list[RequestSpec] = []
    for lineno, raw in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), start=1):   # "\n" only: JSON allows U+2028 etc. in strings
        line = raw.strip()
        if not line:
            continue
        messages = None
        if line.startswith("{"):
            obj = json.loads(line)
            if isinstance(obj.get("messages"), list):
                messages = obj["messages"]
                prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            elif isinstance(obj.get("prompt"), str):
                prompt = obj["prompt"]
            else:
                raise ValueError(f"{path}:{lineno}: a JSON line needs 'prompt' (string) or 'messages' (list)")
        else:
            prompt = raw
        specs.append(RequestSpec(prompt=prompt, input_len=count_tokens(prompt) if count_tokens else -1,
                                 output_len=output_len, messages=messages))
    return _take(specs, num)


def sharegpt_dataset(
    *, path: str | Path, num: int | None = None, output_len: int | None = None, seed: int = 0,
    count_tokens: Callable[[str], int] | None = None, min_output: int = 4,
) -> list[RequestSpec]:
    """Requests from ShareGPT-format JSON (see the module docstring), shuffled with ``seed``.

    Conversations with fewer than two turns are skipped. Output length: ``output_len`` if given,
    else the reply's length by ``count_tokens`` (or its word count), at least ``min_output``.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    count = count_tokens or (lambda s: len(s.split()))
    specs: list[RequestSpec] = []
    for conv in data:
        turns = conv.get("conversations") or conv.get("conversation") or []
        if len(turns) < 2:
            continue
        prompt, reply = str(turns[0].get("value", "")), str(turns[1].get("value", ""))
        out = output_len if output_len is not None else max(min_output, count(reply))
        specs.append(RequestSpec(prompt=prompt, input_len=count_tokens(prompt) if count_tokens else -1, output_len=out))
    random.Random(seed).shuffle(specs)
    return _take(specs, num)


def _take(specs: list[RequestSpec], num: int | None) -> list[RequestSpec]:
    if num is None or not specs:
        return specs
    return [specs[i % len(specs)] for i in range(num)]
