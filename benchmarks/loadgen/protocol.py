"""Request bodies and streamed-event classification for the APIs the load generator speaks.

APIs (``Api``): OpenAI ``/v1/completions`` and ``/v1/chat/completions`` (as served by SGLang, vLLM
and the ``sim`` engine) and SGLang's native ``/generate``. For each streamed SSE data payload,
:func:`event_inspect` answers only what the metrics need (``/work/shared/design/metrics.md``):

- does the event carry generated output of any channel (text, ``delta.content``, reasoning
  content, tool calls)? A role-only opening chunk, a usage-only chunk (``"choices": []``) and
  ``[DONE]`` do not;
- the usage it reports (``prompt_tokens``, ``completion_tokens``; cumulative when the server
  sends usage on every chunk, which gives per-chunk token counts);
- whether it ends the stream cleanly (``finish_reason`` or ``[DONE]``), and any error object.

Payloads are parsed with orjson (about a microsecond for a token chunk); the output text is only
decoded when the caller asks to keep it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["Api", "EventInfo", "event_inspect", "request_body", "request_path", "DONE"]

DONE = b"[DONE]"


class Api(str, enum.Enum):
    """Which HTTP API a run speaks; the value is the name used in configs and records."""

    COMPLETIONS = "openai-completions"
    CHAT = "openai-chat"
    GENERATE = "sglang-generate"


def request_path(api: Api) -> str:
    """URL path of ``api`` (appended to the server's base URL)."""
    return {Api.COMPLETIONS: "/v1/completions", Api.CHAT: "/v1/chat/completions", Api.GENERATE: "/generate"}[api]


def request_body(
    *, api: Api, model: str, prompt: str | list[int] | None, messages: list[dict[str, Any]] | None,
    max_tokens: int, ignore_eos: bool, extra: dict[str, Any] | None = None,
) -> bytes:
    """JSON body (bytes) of one streaming request.

    ``prompt`` is text or token ids (ids go to ``input_ids`` for ``/generate`` and to ``prompt``
    for completions, which SGLang and vLLM accept); chat needs ``messages`` (or wraps ``prompt`` as
    one user message). OpenAI bodies always ask for ``stream_options.include_usage`` (metrics.md:
    output tokens come from the server's usage). ``ignore_eos`` is SGLang's and vLLM's extension
    for fixed-length runs. ``extra`` is merged last (top level for OpenAI, into
    ``sampling_params`` for ``/generate``). Raises ``ValueError`` for a prompt the API cannot take.
    """
    if api is Api.GENERATE:
        sp: dict[str, Any] = {"max_new_tokens": max_tokens, "ignore_eos": ignore_eos}
        if extra:
            sp.update(extra)
        body: dict[str, Any] = {"sampling_params": sp, "stream": True}
        if isinstance(prompt, list):
            body["input_ids"] = prompt
        elif isinstance(prompt, str):
            body["text"] = prompt
        else:
            raise ValueError("/generate needs a prompt (text or token ids)")
        return orjson.dumps(body)
    body = {"model": model, "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True
    if api is Api.CHAT:
        if messages is None:
            if not isinstance(prompt, str):
                raise ValueError("chat needs messages or a text prompt")
            messages = [{"role": "user", "content": prompt}]
        body["messages"] = messages
    else:
        if prompt is None:
            raise ValueError("completions need a prompt (text or token ids)")
        body["prompt"] = prompt
    if extra:
        body.update(extra)
    return orjson.dumps(body)


@dataclass(slots=True)
class EventInfo:
    """What one data payload says.

    ``output``: it carries generated output. ``tokens``: output tokens in this event when the
    server tells (cumulative usage or ``/generate``'s ``completion_tokens`` delta), else 0.
    ``completion_tokens`` / ``prompt_tokens``: usage if present (else -1). ``finished``: a
    ``finish_reason`` or ``[DONE]`` was seen (``finish_reason`` holds the reason text, ``[DONE]``
    leaves it None). ``error``: the error message when the payload is or contains an error object,
    or is not JSON. ``text``: the output text, only when asked for.
    """

    output: bool = False
    tokens: int = 0
    completion_tokens: int = -1
    prompt_tokens: int = -1
    finished: bool = False
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None
    text: str | None = None


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or err
        return str(msg)
    return str(err)


def event_inspect(api: Api, data: bytes, prev_completion_tokens: int, keep_text: bool = False) -> EventInfo:
    """Classify one SSE data payload of ``api`` (see the module docstring).

    ``prev_completion_tokens`` is the cumulative completion count seen so far in this stream (or
    -1), used to turn cumulative counts into this event's token count. Never raises.
    """
    info = EventInfo()
    if data == DONE or data.strip() == DONE:
        info.done = info.finished = True
        return info
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        info.error = f"event is not JSON: {data[:200]!r}"
        return info
    if not isinstance(obj, dict):
        info.error = f"event is not a JSON object: {data[:200]!r}"
        return info
    if obj.get("error") is not None:
        info.error = _error_text(obj["error"])
        return info
    if obj.get("object") == "error":
        info.error = _error_text(obj.get("message", obj))
        return info
    if api is Api.GENERATE:
        _inspect_generate(obj, info, prev_completion_tokens, keep_text)
    else:
        _inspect_openai(obj, info, prev_completion_tokens, keep_text)
    return info


def _usage(usage: Any, info: EventInfo) -> None:
    if isinstance(usage, dict):
        ct, pt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        if isinstance(ct, int):
            info.completion_tokens = ct
        if isinstance(pt, int):
            info.prompt_tokens = pt


def _inspect_openai(obj: dict[str, Any], info: EventInfo, prev: int, keep_text: bool) -> None:
    _usage(obj.get("usage"), info)
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return
    pieces: list[str] = []
    for ch in choices:
        if not isinstance(ch, dict):
            continue
        delta = ch.get("delta")
        if isinstance(delta, dict):
            for key in ("content", "reasoning_content", "reasoning"):
                val = delta.get(key)
                if val:
                    info.output = True
                    if keep_text and isinstance(val, str) and key == "content":
                        pieces.append(val)
            if delta.get("tool_calls") or delta.get("function_call"):
                info.output = True
        else:
            text = ch.get("text")
            if text:
                info.output = True
                if keep_text and isinstance(text, str):
                    pieces.append(text)
        reason = ch.get("finish_reason")
        if reason is not None:
            info.finished = True
            info.finish_reason = str(reason)
    if keep_text and pieces:
        info.text = "".join(pieces)
    if info.output and info.completion_tokens >= 0 and prev >= 0:
        info.tokens = max(info.completion_tokens - prev, 0)
    elif info.output and info.completion_tokens > 0 and prev < 0:
        info.tokens = info.completion_tokens


def _inspect_generate(obj: dict[str, Any], info: EventInfo, prev: int, keep_text: bool) -> None:
    meta = obj.get("meta_info")
    if isinstance(meta, dict):
        ct, pt = meta.get("completion_tokens"), meta.get("prompt_tokens")
        if isinstance(ct, int):
            info.completion_tokens = ct
        if isinstance(pt, int):
            info.prompt_tokens = pt
        reason = meta.get("finish_reason")
        if reason is not None:
            info.finished = True
            info.finish_reason = str(reason.get("type", reason)) if isinstance(reason, dict) else str(reason)
    ids = obj.get("output_ids")
    if info.completion_tokens >= 0:
        info.tokens = max(info.completion_tokens - max(prev, 0), 0)
        info.output = info.tokens > 0
    elif isinstance(ids, list):
        info.output = bool(ids)
        info.tokens = len(ids)
    if keep_text and info.output and isinstance(obj.get("text"), str):
        # /generate streams the cumulative text; the caller keeps the last one.
        info.text = obj["text"]
