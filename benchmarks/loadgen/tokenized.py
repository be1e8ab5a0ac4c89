"""Text prompts of exactly the requested length, sized with the server's own tokenizer.

Where the server offers a tokenize endpoint, random-word prompts need no word→token line
(:mod:`benchmarks.loadgen.calibrate`): each prompt is tokenized, cut at a token boundary and
detokenized, then tokenized again to confirm, as benchmark clients that hold the model's
tokenizer size theirs (vLLM's ``benchmark_serving.py`` and SGLang's ``bench_serving`` build random
prompts from token ids decoded with it). The only figure the tokenizer cannot give is what the request adds around the text (a
chat template's role markers, a BOS token the endpoint does not count): it is measured once per
point as one one-token probe's ``usage.prompt_tokens`` less the tokenize count of its text.

Endpoints (:data:`TOKENIZE_ENDPOINTS`): llama-cpp-python's server, ``POST /extras/tokenize``
``{"input", "model"}`` → ``{"tokens"}`` and ``POST /extras/detokenize`` ``{"tokens", "model"}`` →
``{"text"}`` (``llama_cpp/server/app.py``; it tokenizes with ``special=True`` and adds BOS, as its
completions endpoint does: a completion of ``"the"`` reported 3 prompt tokens, the tokenize count of
``"the"``, on the tiny test model). Others (vLLM's ``/tokenize``, SGLang's) are not asked: on those
engines the completions API is sent token ids and chat prompts keep the calibration.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from .calibrate import PLAIN_PROBE_TIMEOUT_S, _probe_text
from .client import StreamingClient
from .datasets import RequestSpec, length_draws, random_words
from .protocol import Api

__all__ = ["TOKENIZE_ENDPOINTS", "ServerTokenizer", "server_tokenizer", "tokenized_text_dataset"]

#: ``(tokenize path, detokenize path)`` pairs tried in order by :func:`server_tokenizer`.
TOKENIZE_ENDPOINTS: tuple[tuple[str, str], ...] = (("/extras/tokenize", "/extras/detokenize"),)
#: Seconds one tokenize or detokenize call may take (a local CPU pass over one prompt's text).
TOKENIZE_TIMEOUT_S = 30.0
#: Most cuts tried per prompt after the first (each a detokenize and a tokenize call): a cut inside
#: a word can tokenize differently once detokenized; the next cut moves by the difference.
CUT_RETRIES = 4
#: Words in the overhead probe's text (one-token request).
OVERHEAD_PROBE_WORDS = 8


class TokenizeError(RuntimeError):
    """A tokenize or detokenize call failed or answered something unexpected (plain words)."""


@dataclass(slots=True)
class ServerTokenizer:
    """The server's tokenize and detokenize endpoints over one ``aiohttp`` session (the caller's).

    ``calls`` counts the HTTP calls made, for the evidence."""

    session: aiohttp.ClientSession
    base_url: str
    model: str
    tokenize_path: str
    detokenize_path: str
    headers: dict[str, str]
    calls: int = 0

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        try:
            async with self.session.post(self.base_url + path, data=orjson.dumps(body), headers=self.headers,
                                         allow_redirects=False) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TokenizeError(f"POST {path} failed: {type(exc).__name__}: {exc}") from exc
        excerpt = raw[:200].decode("utf-8", "replace").strip()
        if not 200 <= status < 300:
            raise TokenizeError(f"POST {path} answered HTTP {status}: {excerpt}")
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise TokenizeError(f"POST {path} answered something that is not JSON: {excerpt}") from exc
        if not isinstance(obj, dict):
            raise TokenizeError(f"POST {path} answered {excerpt}")
        return obj

    async def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` as the endpoint counts them (BOS included where it adds one).
        Raises :class:`TokenizeError`."""
        obj = await self._post(self.tokenize_path, {"input": text, "model": self.model})
        tokens = obj.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise TokenizeError(f"POST {self.tokenize_path} gave no token list")
        return tokens

    async def detokenize(self, tokens: list[int]) -> str:
        """Text of ``tokens``. Raises :class:`TokenizeError`."""
        obj = await self._post(self.detokenize_path, {"tokens": tokens, "model": self.model})
        text = obj.get("text")
        if not isinstance(text, str):
            raise TokenizeError(f"POST {self.detokenize_path} gave no text")
        return text


async def server_tokenizer(session: aiohttp.ClientSession, *, base_url: str, model: str,
                           headers: dict[str, str] | None = None) -> tuple[ServerTokenizer | None, list[str]]:
    """The first of :data:`TOKENIZE_ENDPOINTS` whose tokenize and detokenize both answer a short
    text (and give it back), or None; with why each was passed over, in plain words (a server
    without the endpoint answers 404). Never raises for request faults."""
    why: list[str] = []
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    for tok_path, detok_path in TOKENIZE_ENDPOINTS:
        tok = ServerTokenizer(session=session, base_url=base_url.rstrip("/"), model=model, tokenize_path=tok_path,
                              detokenize_path=detok_path, headers=hdrs)
        try:
            ids = await tok.tokenize("the day")
            back = await tok.detokenize(ids)
        except TokenizeError as exc:
            why.append(str(exc))
            continue
        if not ids or back.strip() != "the day":
            why.append(f"POST {detok_path} did not give back the text tokenized: {back[:80]!r}")
            continue
        return tok, why
    return None, why


async def _overhead(client: StreamingClient, tok: ServerTokenizer, api: Api, rng: random.Random) -> dict[str, int]:
    """``{"prompt_tokens", "content_tokens", "overhead_tokens"}`` of one one-token probe of
    :data:`OVERHEAD_PROBE_WORDS` random words: the server's count less the tokenize count.
    Raises ``RuntimeError`` as :func:`benchmarks.loadgen.calibrate._probe_text` does, or
    :class:`TokenizeError`."""
    text = random_words(rng, OVERHEAD_PROBE_WORDS)
    got = await _probe_text(client, api, text)
    content = len(await tok.tokenize(text))
    return {"prompt_tokens": got, "content_tokens": content, "overhead_tokens": got - content}


async def _sized(tok: ServerTokenizer, rng: random.Random, target: int, prefix: int) -> tuple[str, int]:
    """Random words cut to ``target`` tokens as the endpoint counts them (``prefix``: the tokens it
    gives for an empty text, BOS). Returns the text and its confirmed count (``target`` unless no
    cut landed: then the closest tried). Raises :class:`TokenizeError`."""
    words = random_words(rng, max(1, target))
    ids = await tok.tokenize(words)
    for _ in range(8):  # words shorter than a token each (a tokenizer that merges words): add more
        if len(ids) >= target:
            break
        words += " " + random_words(rng, max(1, target - len(ids)))
        ids = await tok.tokenize(words)
    if len(ids) == target:
        return words, target
    if target <= prefix:  # no room for text: the shortest the endpoint counts
        text = random_words(rng, 1)
        return text, len(await tok.tokenize(text))
    best: tuple[str, int] = (words, len(ids))
    cut = target
    for _ in range(1 + CUT_RETRIES):
        cut = max(prefix + 1, min(cut, len(ids)))
        text = await tok.detokenize(ids[prefix:cut])
        got = len(await tok.tokenize(text))
        if got == target:
            return text, got
        if abs(got - target) < abs(best[1] - target):
            best = (text, got)
        cut += target - got
    return best


async def tokenized_text_dataset(
    *, base_url: str, api: Api, model: str, num: int, input_len: int, output_len: int, range_ratio: float = 0.0,
    output_range_ratio: float = 0.0, seed: int = 0, headers: dict[str, str] | None = None,
    should_stop: Callable[[], bool] | None = None, overhead: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[RequestSpec] | None, dict[str, Any]]:
    """``num`` seeded random text requests (as one user message for chat) whose prompts the server
    counts at exactly their requested length, where it offers a tokenize endpoint
    (:func:`server_tokenizer`); ``(None, {"tokenize_unavailable": [why, ...]})`` where it does not,
    for the caller to keep the calibration (:func:`benchmarks.loadgen.dataset_calibrate_text_at`).

    Lengths are drawn as :func:`benchmarks.loadgen.random_dataset` draws them (same seed, same
    lengths); each prompt's words come from the same generator. The request's own tokens
    (``overhead``; measured here with one one-token probe when None, see the module docstring) are
    taken off each requested length, and the words cut to the rest at a token boundary, confirmed
    by tokenizing the cut text again. Returns the requests and the evidence for the summary's
    ``input_calibration``: ``{"method": "tokenize", "endpoint", "overhead_tokens", "overhead_probe"
    (None when ``overhead`` was given), "prompts", "exact" (prompts whose confirmed count is the
    target), "max_miss_tokens", "tokenize_calls", "seconds"}``. ``should_stop`` is asked before
    each prompt; when it returns true :class:`benchmarks.loadgen.LoadgenStopped` is raised.
    ``progress`` (optional) is called with the number of prompts built so far after each one
    (keep it quick: it runs between the tokenize calls). Raises
    ``RuntimeError`` when the overhead probe fails or a tokenize call fails after the endpoint
    answered the first."""
    started = time.monotonic()
    rng = random.Random(seed)
    ins = length_draws(n=num, length=input_len, range_ratio=range_ratio, rng=rng)
    outs = length_draws(n=num, length=output_len, range_ratio=output_range_ratio, rng=rng)
    timeout = aiohttp.ClientTimeout(total=max(TOKENIZE_TIMEOUT_S, PLAIN_PROBE_TIMEOUT_S))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        tok, why = await server_tokenizer(session, base_url=base_url, model=model, headers=headers)
        if tok is None:
            return None, {"tokenize_unavailable": why}
        probe: dict[str, int] | None = None
        if overhead is None:
            async with StreamingClient(base_url=base_url, api=api, model=model, headers=headers) as client:
                probe = await _overhead(client, tok, api, random.Random(seed ^ 0x5EED))
            overhead = probe["overhead_tokens"]
        prefix = len(await tok.tokenize(""))
        specs: list[RequestSpec] = []
        misses: list[int] = []
        for n_in, n_out in zip(ins, outs):
            if should_stop is not None and should_stop():
                from .driver import LoadgenStopped

                raise LoadgenStopped(f"stopped while building prompts ({len(specs)} of {num} built)")
            text, got = await _sized(tok, rng, n_in - overhead, prefix)
            misses.append(got + overhead - n_in)
            specs.append(RequestSpec(prompt=text, input_len=n_in, output_len=n_out,
                                     messages=[{"role": "user", "content": text}] if api is Api.CHAT else None))
            if progress is not None:
                progress(len(specs))
    return specs, {"method": "tokenize", "endpoint": tok.tokenize_path, "overhead_tokens": overhead,
                   "overhead_probe": probe, "prompts": len(specs), "exact": sum(1 for m in misses if m == 0),
                   "max_miss_tokens": max((abs(m) for m in misses), default=0), "tokenize_calls": tok.calls,
                   "seconds": round(time.monotonic() - started, 3)}
