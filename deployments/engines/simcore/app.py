"""The ``sim`` engine's HTTP API: the part of SGLang's that the control plane and the router use.

Routes: ``/health``, ``/health_generate``, ``/get_server_info`` and ``/server_info``,
``/get_model_info`` and ``/model_info``, ``/v1/models``, ``/generate``, ``/v1/completions``,
``/v1/chat/completions`` (streaming with SSE, ``stream_options.include_usage``, ``ignore_eos``),
``/metrics`` (Prometheus text, ``sglang:`` names).

While the startup delay runs, ``/health`` and ``/health_generate`` answer 503 and generation
routes 503, but ``/v1/models``, the info routes and ``/metrics`` already answer 200, as SGLang's
HTTP server does while the model loads. With ``fail_generate`` every generation answers 500 while
``/health`` stays 200 (and ``/health_generate`` 503): an engine that lists its model yet cannot
generate.

What each API returns is documented on its handler; errors are OpenAI-shaped
``{"object": "error", "message", "type", "code"}`` with the HTTP status in ``code``.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .engine import RequestRejected, SimEngine, SimRequest
from .text import EOS_TOKEN_ID, chat_prompt, natural_length, output_token, prompt_digest, text_token_count

log = logging.getLogger("ceiling.sim.http")

DEFAULT_MAX_NEW_TOKENS_GENERATE = 128  # SGLang's SamplingParams default
DEFAULT_MAX_TOKENS_COMPLETIONS = 16  # the OpenAI completions default


@dataclass
class ServerState:
    """Everything the handlers need: the engine, identity, readiness and fault switches."""

    engine: SimEngine
    model_name: str
    role: str
    version: str
    started_at: float
    ready_at: float
    fail_generate: bool
    server_args: dict[str, Any]
    seed: int = 0
    started_at_wall: float = 0.0
    # Output tokens whose stream events go out in one network write (``--stream-coalesce``); 1
    # writes each event as it is made.
    stream_coalesce: int = 1
    # Wall seconds /health computes on the serving loop before answering while a generation is
    # in flight (``--health-busy-s``); 0 answers at once.
    health_busy_s: float = 0.0

    def ready(self) -> bool:
        """True once the startup delay has passed."""
        return time.monotonic() >= self.ready_at


STATE_KEY = web.AppKey("sim_state", ServerState)


class BadRequest(Exception):
    """A request body the API rejects with 400."""


def _error(message: str, status: int) -> web.Response:
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "InternalServerError")
    return web.json_response({"object": "error", "message": message, "type": kind, "code": status}, status=status)


def _int_field(body: dict[str, Any], key: str, default: int | None, minimum: int = 0) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest(f"{key} must be an integer >= {minimum}")
    return value


def _bool_field(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be a boolean")
    return value


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def _make_request(
    state: ServerState, body: dict[str, Any], *, prompt: str | list[int], prompt_tokens: int,
    max_new: int, ignore_eos: bool, seed: int | None,
) -> SimRequest:
    prof = state.engine.profile
    digest = prompt_digest(prompt, state.seed if seed is None else seed)
    target, finish = max_new, "length"
    if not ignore_eos:
        natural = natural_length(digest, prof.eos.min_tokens, prof.eos.max_tokens)
        if natural < max_new:
            target, finish = natural, "stop"
    req = SimRequest(
        rid=str(body.get("rid") or uuid.uuid4().hex), prompt_tokens=prompt_tokens, target_tokens=target,
        finish_type=finish, digest=digest, arrived=time.monotonic(),
    )
    if state.role in ("prefill", "decode"):
        room = body.get("bootstrap_room")
        if isinstance(room, bool) or not isinstance(room, int):
            raise BadRequest(f"a {state.role} server needs an integer bootstrap_room (sent by the PD router)")
        req.bootstrap_room = room
        if state.role == "decode":
            host, port = body.get("bootstrap_host"), body.get("bootstrap_port")
            if not isinstance(host, str) or isinstance(port, bool) or not isinstance(port, int):
                raise BadRequest("a decode server needs bootstrap_host and an integer bootstrap_port")
            req.bootstrap_host, req.bootstrap_port = host, port
    if max_new == 0:
        raise BadRequest("max new tokens must be >= 1")
    return req


async def _events(state: ServerState, req: SimRequest) -> AsyncIterator[tuple[Any, ...]]:
    """The engine's events for ``req``; cancels the request if the consumer goes away."""
    done = False
    try:
        while True:
            event = await req.events.get()
            if event[0] in ("done", "error"):
                done = True
            yield event
            if done:
                return
    finally:
        if not done:
            state.engine.cancel(req)


def _gate(state: ServerState) -> web.Response | None:
    if state.fail_generate:
        return _error("simulated generation failure (CEILING_SIM_FAIL_GENERATE=1)", 500)
    if not state.ready():
        return _error("the server is still starting (model loading)", 503)
    return None


def _submit(state: ServerState, req: SimRequest) -> web.Response | None:
    try:
        state.engine.submit(req)
    except RequestRejected as exc:
        return _error(str(exc), exc.status)
    return None


def _tokens_text(req: SimRequest, start: int, stop: int) -> str:
    return "".join(output_token(req.digest, i)[1] for i in range(start, stop))


def _finish_reason_native(req: SimRequest, finish: str) -> dict[str, Any]:
    if finish == "stop":
        return {"type": "stop", "matched": EOS_TOKEN_ID}
    return {"type": "length", "length": req.generated}


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class _StreamWriter:
    """An SSE response whose events are written ``every`` output tokens at a time: the events of
    ``every`` token events (and whatever came between them) go out in one ``write``, as a buffering
    proxy in front of an engine delivers them; ``every`` 1 writes each event at once. ``close``
    writes what is held, then ``[DONE]`` and the end of the body."""

    def __init__(self, resp: web.StreamResponse, every: int) -> None:
        self.resp, self.every, self.held, self.tokens = resp, max(1, every), bytearray(), 0

    async def event(self, payload: dict[str, Any] | str, *, token: bool = False) -> None:
        self.held += _sse(payload)
        self.tokens += token
        if self.every == 1 or self.tokens >= self.every:
            await self._flush()

    async def _flush(self) -> None:
        if self.held:
            await self.resp.write(bytes(self.held))
        self.held.clear()
        self.tokens = 0

    async def close(self) -> web.StreamResponse:
        self.held += _sse("[DONE]")
        await self._flush()
        await self.resp.write_eof()
        return self.resp


async def _open_stream(request: web.Request) -> _StreamWriter:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    return _StreamWriter(resp, request.app[STATE_KEY].stream_coalesce)


# ---------------------------------------------------------------------- info routes
async def health(request: web.Request) -> web.Response:
    """200 (empty body) once started, 503 during the startup delay.

    With ``health_busy_s`` > 0 and a generation in flight, the handler first computes for that
    many wall seconds without yielding the event loop (no other request is served meanwhile,
    and the process uses CPU all along), then answers: a server busy serving requests one at a
    time, whose health check waits for its turn."""
    state = request.app[STATE_KEY]
    if state.health_busy_s > 0 and state.engine.in_flight() > 0:
        end = time.monotonic() + state.health_busy_s
        while time.monotonic() < end:
            pass
    return web.Response(status=200 if state.ready() else 503)


async def health_generate(request: web.Request) -> web.Response:
    """200 when a one-token generation succeeds; 503 while starting or when generation fails.

    On ``single`` a real one-token request runs through the scheduler (queueing behind load, as in
    SGLang); prefill and decode servers cannot generate alone, so they answer from their state.
    """
    state = request.app[STATE_KEY]
    if state.fail_generate or not state.ready():
        return web.Response(status=503)
    if state.role != "single":
        return web.Response(status=200)
    req = _make_request(state, {}, prompt="health", prompt_tokens=2, max_new=1, ignore_eos=True, seed=0)
    if _submit(state, req) is not None:
        return web.Response(status=503)
    async for event in _events(state, req):
        if event[0] == "error":
            return web.Response(status=503)
    return web.Response(status=200)


async def server_info(request: web.Request) -> web.Response:
    """SGLang-style server arguments plus ``version``, role, profile and live ``internal_states``."""
    state = request.app[STATE_KEY]
    eng = state.engine
    info = dict(state.server_args)
    info.update(
        version=state.version,
        internal_states=[{
            "num_running_reqs": len(eng.running),
            "num_queue_reqs": len(eng.waiting) + len(eng.resume),
            "num_used_tokens": eng.kv_used,
            "kv_fetches": eng.kv_fetch_count,
            "last_gen_throughput": 0.0,
        }],
        sim={
            "role": state.role,
            "time_scale": eng.time_scale,
            "ready": state.ready(),
            "uptime_s": round(time.monotonic() - state.started_at, 3),
            "profile": eng.profile.as_dict(),
        },
    )
    return web.json_response(info)


async def model_info(request: web.Request) -> web.Response:
    """SGLang's ``/get_model_info`` shape."""
    state = request.app[STATE_KEY]
    return web.json_response({
        # No model_path / tokenizer_path: sglang-router would try to fetch a tokenizer for them
        # from the Hugging Face hub; the served name is what it routes by.
        "served_model_name": state.model_name,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "sim",
        "architectures": ["SimForCausalLM"],
    })


async def models(request: web.Request) -> web.Response:
    """OpenAI model list with the one served model (answers during the startup delay too)."""
    state = request.app[STATE_KEY]
    return web.json_response({
        "object": "list",
        "data": [{
            "id": state.model_name, "object": "model", "created": int(state.started_at_wall),
            "owned_by": "sglang", "root": state.model_name, "max_model_len": state.engine.profile.context_length,
        }],
    })


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition (``sglang:`` names; see :mod:`.metrics`)."""
    state = request.app[STATE_KEY]
    return web.Response(body=state.engine.metrics.render(), content_type="text/plain", charset="utf-8")


# ---------------------------------------------------------------------- generation routes
async def generate(request: web.Request) -> web.StreamResponse:
    """SGLang native ``/generate``.

    Body: ``{"text": str | [str] | "input_ids": [int] | [[int]], "sampling_params":
    {"max_new_tokens", "ignore_eos", "seed"}, "stream": bool, "rid"}`` (one prompt per request).
    Answer: ``{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
    "completion_tokens", "cached_tokens", "e2e_latency"}}``; streamed as SSE events carrying the
    cumulative ``text`` and this event's ``output_ids``, then ``data: [DONE]``.
    """
    state = request.app[STATE_KEY]
    try:
        body = await _json_body(request)
        text, ids = body.get("text"), body.get("input_ids")
        if isinstance(text, list) and len(text) == 1:
            text = text[0]
        if isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], list):
            ids = ids[0]
        if isinstance(text, str):
            prompt: str | list[int] = text
            ptoks = text_token_count(text)
        elif isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            prompt, ptoks = ids, len(ids)
        else:
            raise BadRequest("give one prompt as text (a string) or input_ids (a list of integers)")
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be an object")
        max_new = _int_field(sp, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS_GENERATE) or 0
        req = _make_request(state, body, prompt=prompt, prompt_tokens=ptoks, max_new=max_new,
                            ignore_eos=_bool_field(sp, "ignore_eos"), seed=_int_field(sp, "seed", None))
        stream = _bool_field(body, "stream")
    except BadRequest as exc:
        return _error(str(exc), 400)
    if (gate := _gate(state)) or (gate := _submit(state, req)):
        return gate

    def payload(start: int, upto: int, finish: str | None) -> dict[str, Any]:
        return {
            "text": _tokens_text(req, 0, upto),
            "output_ids": [output_token(req.digest, i)[0] for i in range(start, upto)],
            "meta_info": {
                "id": req.rid,
                "finish_reason": _finish_reason_native(req, finish) if finish else None,
                "prompt_tokens": req.prompt_tokens,
                "completion_tokens": upto,
                "cached_tokens": 0,
                "e2e_latency": round(time.monotonic() - req.arrived, 6),
            },
        }

    resp: _StreamWriter | None = None
    sent = 0
    async for event in _events(state, req):
        if event[0] == "error":
            if resp is None:
                return _error(event[1], event[2])
            await resp.event({"error": {"message": event[1], "code": event[2]}})
            break
        if not stream:
            if event[0] == "done":
                return web.json_response(payload(0, req.generated, event[1]))
            continue
        if resp is None:
            resp = await _open_stream(request)
        if event[0] == "token":
            await resp.event(payload(sent, event[1], None), token=True)
            sent = event[1]
        else:
            await resp.event(payload(sent, req.generated, event[1]))
    assert resp is not None
    return await resp.close()


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    try:
        body = await _json_body(request)
        if _int_field(body, "n", 1, 1) != 1:
            raise BadRequest("only n = 1 is supported")
        if chat:
            try:
                prompt_text, ptoks = chat_prompt(body.get("messages"))  # type: ignore[arg-type]
            except ValueError as exc:
                raise BadRequest(str(exc)) from exc
            prompt: str | list[int] = prompt_text
            max_new = _int_field(body, "max_completion_tokens", None)
            if max_new is None:
                max_new = _int_field(body, "max_tokens", None)
            if max_new is None:
                max_new = state.engine.profile.context_length - ptoks
        else:
            raw = body.get("prompt")
            if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], (str, list)):
                raw = raw[0]
            if isinstance(raw, str):
                prompt, ptoks = raw, text_token_count(raw)
            elif isinstance(raw, list) and raw and all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
                prompt, ptoks = raw, len(raw)
            else:
                raise BadRequest("prompt must be one string or one list of token ids")
            max_new = _int_field(body, "max_tokens", DEFAULT_MAX_TOKENS_COMPLETIONS)
        req = _make_request(state, body, prompt=prompt, prompt_tokens=ptoks, max_new=max_new or 0,
                            ignore_eos=_bool_field(body, "ignore_eos"), seed=_int_field(body, "seed", None))
        stream = _bool_field(body, "stream")
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage")) if isinstance(opts, dict) else False
    except BadRequest as exc:
        return _error(str(exc), 400)
    if (gate := _gate(state)) or (gate := _submit(state, req)):
        return gate

    created = int(time.time())
    cid = ("chatcmpl-" if chat else "cmpl-") + req.rid
    obj = "chat.completion.chunk" if chat else "text_completion"

    def usage() -> dict[str, int]:
        return {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.generated,
                "total_tokens": req.prompt_tokens + req.generated}

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": cid, "object": obj, "created": created, "model": state.model_name, "choices": choices, **extra}

    def choice(text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else ({"content": text} if text else {})
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

    resp: _StreamWriter | None = None
    sent = 0
    async for event in _events(state, req):
        if event[0] == "error":
            if resp is None:
                return _error(event[1], event[2])
            await resp.event({"error": {"message": event[1], "type": "InternalServerError", "code": event[2]}})
            break
        if not stream:
            if event[0] != "done":
                continue
            text = _tokens_text(req, 0, req.generated)
            if chat:
                ch = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": event[1]}
            else:
                ch = {"index": 0, "text": text, "logprobs": None, "finish_reason": event[1]}
            return web.json_response({
                "id": cid, "object": "chat.completion" if chat else "text_completion", "created": created,
                "model": state.model_name, "choices": [ch], "usage": usage(),
            })
        if resp is None:
            resp = await _open_stream(request)
            if chat:
                await resp.event(chunk([choice(None, None, role=True)]))
        if event[0] == "token":
            await resp.event(chunk([choice(_tokens_text(req, sent, event[1]), None)]), token=True)
            sent = event[1]
        else:
            await resp.event(chunk([choice(None, event[1])]))
            if include_usage:
                await resp.event(chunk([], usage=usage()))
    assert resp is not None
    return await resp.close()


async def completions(request: web.Request) -> web.StreamResponse:
    """OpenAI ``/v1/completions`` (``prompt`` string or token ids; ``max_tokens`` default 16)."""
    return await _openai(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """OpenAI ``/v1/chat/completions`` (``max_completion_tokens`` or ``max_tokens``)."""
    return await _openai(request, chat=True)


def http_app(state: ServerState) -> web.Application:
    """The aiohttp application serving every route in the module docstring."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STATE_KEY] = state
    r = app.router
    r.add_get("/health", health)
    r.add_get("/health_generate", health_generate)
    for path in ("/get_server_info", "/server_info"):
        r.add_get(path, server_info)
    for path in ("/get_model_info", "/model_info"):
        r.add_get(path, model_info)
    r.add_get("/v1/models", models)
    r.add_get("/metrics", metrics)
    r.add_post("/generate", generate)
    r.add_post("/v1/completions", completions)
    r.add_post("/v1/chat/completions", chat_completions)
    return app
