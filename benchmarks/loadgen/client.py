"""The streaming HTTP client: sends one request, times every streamed event, returns the outcome.

aiohttp with a raw-bytes SSE parser (:mod:`.sse`): the body is read with ``readany()`` (whatever
bytes arrived, no line-length limit) and the timestamp of a read is taken right after it returns,
before any parsing. The connection pool is uncapped by default (``limit=0``): aiohttp's default
cap of 100 connections silently queues the 101st request of a concurrency-128 run (case C9). Any
wait for a pooled connection is measured through aiohttp's trace hooks and kept as the request's
``pool_wait``, so a capped client is visible in the records instead of inflating TTFT unseen.
aiohttp sets ``TCP_NODELAY`` on every connection it opens (``aiohttp.base_protocol``), which keeps
Nagle's algorithm from holding back small request writes on reused connections.

Request outcomes follow ``/work/shared/design/metrics.md``: success needs HTTP 2xx, no error object
anywhere in the stream, at least one output event and a clean end (``finish_reason`` or
``[DONE]``); a failure keeps its reason.
"""
from __future__ import annotations

import asyncio
import time
from array import array
from types import SimpleNamespace
from typing import Any

import aiohttp

from .datasets import RequestSpec
from .protocol import Api, event_inspect, request_body, request_path
from .records import RequestOutcome
from .sse import SseParser

__all__ = ["StreamingClient"]

_MAX_EVENT_TOKENS = 65535  # ev_tokens is uint16
_ERROR_BODY_BYTES = 2000


async def _on_queued_end(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    # The instant a request that queued for a pooled connection got one.
    if ctx.trace_request_ctx is not None:
        ctx.trace_request_ctx[0] = time.perf_counter_ns()


class StreamingClient:
    """One aiohttp session speaking ``api`` to ``base_url``; use as ``async with``.

    ``headers`` (e.g. ``Authorization``) are sent with every request and never recorded or logged.
    ``connection_limit`` 0 means no pool cap (the default; a cap exists only to reproduce capped
    clients). ``timeout_s`` bounds a whole request. ``keep_text`` keeps each request's output text
    in the outcome (tests and spot checks; off for large runs). ``events_seen`` counts every SSE
    event parsed (output or not), the denominator of the client CPU per event.
    """

    def __init__(
        self, *, base_url: str, api: Api, model: str, headers: dict[str, str] | None = None,
        connection_limit: int = 0, force_close: bool = False, timeout_s: float = 600.0,
        keep_text: bool = False, extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + request_path(api)
        self.api = api
        self.model = model
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **(headers or {})}
        self.connection_limit = connection_limit
        self.force_close = force_close
        self.timeout_s = timeout_s
        self.keep_text = keep_text
        self.extra_body = extra_body
        self.events_seen = 0
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> StreamingClient:
        trace = aiohttp.TraceConfig()
        trace.on_connection_queued_end.append(_on_queued_end)
        connector = aiohttp.TCPConnector(
            limit=self.connection_limit, limit_per_host=0, force_close=self.force_close, ttl_dns_cache=None,
        )
        self._session = aiohttp.ClientSession(
            connector=connector, trace_configs=[trace], auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, spec: RequestSpec, *, scheduled: int, ignore_eos: bool = False, index: int = -1) -> RequestOutcome:
        """Send ``spec`` now; ``scheduled`` is when it was due (ns). Never raises for request faults.

        ``index`` is the request's position in the dataset (kept in the record). ``start`` is taken just before the request is handed to aiohttp; connection-pool waits go
        to ``pool_wait``. Transport errors and timeouts become failed outcomes with the reason.
        """
        assert self._session is not None, "use StreamingClient as an async context manager"
        body = request_body(api=self.api, model=self.model, prompt=spec.prompt, messages=spec.messages,
                            max_tokens=spec.output_len, ignore_eos=ignore_eos, extra=self.extra_body)
        events = array("q")
        ev_tokens = array("H")
        out = RequestOutcome(scheduled=scheduled, start=0, end=0, index=index, events=events, event_tokens=ev_tokens,
                             requested_input=spec.input_len, requested_output=spec.output_len)
        pool = [0]
        api, keep_text = self.api, self.keep_text
        texts: list[str] = []
        completion, prompt_tokens, clean, error = -1, -1, False, None
        parser = SseParser()
        perf = time.perf_counter_ns
        out.start = perf()
        try:
            async with self._session.post(self.url, data=body, headers=self.headers, trace_request_ctx=pool) as resp:
                out.http_status = resp.status
                if not 200 <= resp.status < 300:
                    raw = await resp.content.read(_ERROR_BODY_BYTES)
                    error = f"HTTP {resp.status}: {raw.decode('utf-8', 'replace').strip()}"
                    out.end = perf()
                else:
                    content = resp.content
                    eof = [0]
                    content.on_eof(lambda: eof.__setitem__(0, perf()))
                    seen, t = 0, 0
                    while error is None:
                        chunk = await content.readany()
                        if not chunk:
                            break
                        t = perf()
                        for data in parser.feed(chunk):
                            seen += 1
                            info = event_inspect(api, data, completion, keep_text)
                            if info.error is not None:
                                error = info.error
                                break
                            if info.output:
                                events.append(t)
                                ev_tokens.append(min(info.tokens, _MAX_EVENT_TOKENS))
                                if info.text is not None:
                                    if api is Api.GENERATE:
                                        texts[:] = [info.text]
                                    else:
                                        texts.append(info.text)
                            if info.completion_tokens >= 0:
                                completion = info.completion_tokens
                            if info.prompt_tokens >= 0:
                                prompt_tokens = info.prompt_tokens
                            if info.finished:
                                clean = True
                                if info.finish_reason is not None:
                                    out.finish_reason = info.finish_reason
                    # The end is when the body's terminator was parsed (the on_eof callback runs
                    # inside the read, right after aiohttp returns the connection to the pool):
                    # when many responses finish at once this loop can see them milliseconds
                    # later, and a request waiting in a capped pool must not appear to overlap.
                    out.end = eof[0] or perf()
                    self.events_seen += seen
                    if error is None and parser.pending and parser.pending > 0 and not clean:
                        error = f"stream ended inside an event ({parser.pending} bytes unterminated)"
        except asyncio.TimeoutError:
            error = f"timed out after {self.timeout_s:g} s"
        except aiohttp.ClientError as exc:
            error = f"{type(exc).__name__}: {exc}"
        if out.end == 0:
            out.end = perf()
        # From start (not from the queue entry, which can be much later when many requests start
        # at once) to the connection grant, so start + pool_wait is when the request really left.
        out.pool_wait = max(pool[0] - out.start, 0) if pool[0] else 0
        if keep_text:
            out.text = "".join(texts)
        out.input_tokens = prompt_tokens
        if error is None and not events:
            error = "no output"
        if error is None and not clean:
            error = "stream ended without finish_reason or [DONE]"
        if error is not None:
            out.error = error
            out.ok = False
            out.output_tokens = completion if completion >= 0 else len(events)
            return out
        out.ok = True
        if completion >= 0:
            out.output_tokens = completion
        else:
            out.output_tokens = len(events)
            out.tokens_estimated = True
        return out
