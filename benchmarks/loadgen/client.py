"""The streaming HTTP client: sends one request, times every streamed event, returns the outcome.

Two transports behind one interface (:class:`StreamingClient`), chosen from the URL:

- ``http://`` (every local and in-cluster engine): Ceiling's own HTTP/1.1 client on
  ``asyncio.Protocol`` (:mod:`.http1`). The receive time of every network read is
  ``time.perf_counter_ns()`` taken first thing in ``data_received``, before any parsing and before
  any other connection's bytes of the same loop wake-up are parsed; the HTTP framing (chunked,
  ``Content-Length`` or close-delimited), the SSE parser (:mod:`.sse`) and the event
  classification run right after, in one deferred callback per loop iteration, and the request's
  coroutine wakes once, when the response is complete. A read's timestamp is therefore the time
  the loop saw the bytes, not the time a task got round to them (with aiohttp's ``readany()``
  that difference reached 11 ms at p99 with 64 streams: ``benchmarks/scripts/client_bench.py``).
  Keep-alive connections are reused, ``TCP_NODELAY`` is set on every socket, redirects are not
  followed (a 3xx is a failed request that names the target), and no compression is asked for.
- anything else (``https://``): aiohttp with the same SSE parser and event handling; a read's
  timestamp is taken right after ``readany()`` returns. aiohttp sets ``TCP_NODELAY`` on its
  connections (``aiohttp.base_protocol``).

Both: the connection pool is uncapped by default (``connection_limit`` 0): a cap such as aiohttp's
default of 100 connections silently queues the 101st request of a concurrency-128 run (case C9).
Any wait for a pooled connection is kept as the request's ``pool_wait``, so a capped client is
visible in the records instead of inflating TTFT unseen. ``timeout_s`` bounds a whole request
(pool wait, connect, response).

Request outcomes follow ``/work/shared/design/metrics.md``: success needs HTTP 2xx, no error object
anywhere in the stream, at least one output event and a clean end (``finish_reason`` or
``[DONE]``); a failure keeps its reason (HTTP status and body excerpt, connection refused or reset,
server closed the connection mid-body, timeout, stream ended inside an event, :data:`NO_OUTPUT`,
...). A failure in which the server sent not one byte of a response (connection refused, reset or closed before any
response byte; not a timeout, not an HTTP error status) also says so in
``RequestOutcome.connect_error``, which the run driver counts to notice a target that is gone.
"""
from __future__ import annotations

import asyncio
import time
from array import array
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from .datasets import RequestSpec
from .http1 import Http1Connection, Http1Pool, http_request_head
from .protocol import Api, event_inspect, request_body, request_path
from .records import RequestOutcome
from .sse import SseParser

__all__ = ["TRANSPORTS", "StreamingClient"]

TRANSPORTS = ("auto", "http1", "aiohttp")

_MAX_EVENT_TOKENS = 65535  # ev_tokens is uint16
_ERROR_BODY_BYTES = 2000
# A 2xx answer whose stream ended without one output event and without an error in the server's
# words (an SSE error field or event, or an error body, which are kept instead).
NO_OUTPUT = "the stream ended with no output tokens"
_perf = time.perf_counter_ns


async def _on_queued_end(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    # The instant a request that queued for a pooled aiohttp connection got one.
    if ctx.trace_request_ctx is not None:
        ctx.trace_request_ctx[0] = time.perf_counter_ns()


def _no_connection(exc: OSError, where: str) -> str:
    """A short description of a connect that failed, for ``RequestOutcome.connect_error``:
    ``connection refused to 127.0.0.1:30000`` (nothing listens there), ``connection reset by ...``,
    else the error's type and text."""
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused to {where}"
    if isinstance(exc, ConnectionResetError):
        return f"connection reset by {where}"
    return f"cannot connect to {where}: {type(exc).__name__}: {exc}"


def _body_error(body: bytes) -> str | None:
    """The error a 2xx response body without any SSE ``data`` event carries, in the server's words:
    an SSE ``error:`` field (llama.cpp's server streams its errors so), or a JSON object with an
    ``error`` (or ``"object": "error"``, vLLM's); None when the body says no error."""
    text = body.strip()
    if not text:
        return None
    candidates = [line[len(b"error:"):].strip() for line in text.splitlines() if line.startswith(b"error:")]
    candidates.append(text)
    for raw in candidates:
        info = event_inspect(Api.COMPLETIONS, raw, -1)
        if info.error is not None and not info.error.startswith("event is not"):
            return f"server error: {info.error}"[:_ERROR_BODY_BYTES]
        if raw is not text:
            return f"server error: {raw.decode('utf-8', 'replace')}"[:_ERROR_BODY_BYTES]
    return None


class _Exchange:
    """One request's response as it streams in: the sink both transports feed raw body bytes to.

    Output-event times go straight into ``events`` (int64 ns) with their token counts; nothing is
    awaited per event. ``future`` (protocol transport only) completes when the response ends or
    fails. ``error`` is an in-stream error or an HTTP status error; ``failure`` a transport fault.
    """

    __slots__ = ("client", "api", "keep_text", "parser", "events", "ev_tokens", "texts", "completion",
                 "prompt_tokens", "clean", "error", "failure", "seen", "finish_reason", "status", "content_type",
                 "location", "excerpt", "end_t", "future", "unanswered")

    def __init__(self, client: StreamingClient, future: asyncio.Future[None] | None) -> None:
        self.client = client
        self.api = client.api
        self.keep_text = client.keep_text
        self.parser = SseParser()
        self.events = array("q")
        self.ev_tokens = array("H")
        self.texts: list[str] = []
        self.completion = -1
        self.prompt_tokens = -1
        self.clean = False
        self.error: str | None = None
        self.failure: str | None = None
        self.seen = 0
        self.finish_reason: str | None = None
        self.status = 0
        self.content_type = ""
        self.location = ""
        self.excerpt = b""
        self.end_t = 0
        self.future = future
        self.unanswered: str | None = None  # why the server never answered (see fail), else None

    # -------------------------------------------------------------- ResponseSink
    def head(self, status: int, headers: dict[str, str], t: int) -> None:
        """The final status and headers arrived."""
        self.status = status
        self.content_type = headers.get("content-type", "")
        self.location = headers.get("location", "")

    def body(self, data: bytes, t: int) -> bool:
        """Body bytes of one network read received at ``t`` (ns); False once the stream failed."""
        if not 200 <= self.status < 300:
            room = _ERROR_BODY_BYTES - len(self.excerpt)
            if room > 0:
                self.excerpt += data[:room]
            return True
        if not self.seen and len(self.excerpt) < _ERROR_BODY_BYTES:
            # The start of a 2xx body kept until its first event: a server that answers 200 with an
            # error (a JSON body, or an SSE ``error:`` field) has its words kept (see outcome).
            self.excerpt += data[:_ERROR_BODY_BYTES - len(self.excerpt)]
        payloads = self.parser.feed(data)
        if not payloads:
            return True
        api, keep_text, events, ev_tokens = self.api, self.keep_text, self.events, self.ev_tokens
        completion = self.completion
        tokens = 0
        for payload in payloads:
            self.seen += 1
            info = event_inspect(api, payload, completion, keep_text)
            if info.error is not None:
                self.error = info.error
                self.completion = completion
                self.client.tokens_seen += tokens
                self._done(t)
                return False
            if info.output:
                events.append(t)
                k = info.tokens
                ev_tokens.append(k if k <= _MAX_EVENT_TOKENS else _MAX_EVENT_TOKENS)
                tokens += k or 1
                if info.text is not None:
                    if api is Api.GENERATE:
                        self.texts[:] = [info.text]
                    else:
                        self.texts.append(info.text)
            if info.completion_tokens >= 0:
                completion = info.completion_tokens
            if info.prompt_tokens >= 0:
                self.prompt_tokens = info.prompt_tokens
            if info.finished:
                self.clean = True
                if info.finish_reason is not None:
                    self.finish_reason = info.finish_reason
        self.completion = completion
        self.client.tokens_seen += tokens
        return True

    def end(self, t: int) -> None:
        """The body is complete (its terminator was read at ``t``)."""
        self._done(t)

    def reusable(self) -> bool:
        """Whether the connection may carry another request: not after a 2xx answer that streamed
        no event at all. llama.cpp's server answers a prompt longer than its context so (HTTP 200,
        an empty stream) and then closes the connection: the next request sent on it would fail
        as never answered, for a reason that was this one's."""
        return self.seen > 0 or not 200 <= self.status < 300

    def fail(self, reason: str, t: int, *, unanswered: bool | str = False) -> None:
        """The transport failed at ``t`` with ``reason``. ``unanswered``: the server sent no byte of
        a response (True, or a short description of why, e.g. ``connection refused to host:port``)."""
        if self.failure is None:
            self.failure = reason
            if unanswered and not self.status:
                where = f"{self.client.host}:{self.client.port}"
                self.unanswered = unanswered if isinstance(unanswered, str) else f"{reason} ({where})"
        self._done(t)

    def _done(self, t: int) -> None:
        if not self.end_t:
            self.end_t = t
        fut = self.future
        if fut is not None and not fut.done():
            fut.set_result(None)

    # -------------------------------------------------------------- outcome
    def outcome(self, out: RequestOutcome) -> RequestOutcome:
        """Fill ``out`` (start, scheduled, pool_wait already set) with what the response said."""
        out.http_status = self.status
        out.end = self.end_t or _perf()
        out.events = self.events
        out.event_tokens = self.ev_tokens
        out.finish_reason = self.finish_reason
        out.input_tokens = self.prompt_tokens
        self.client.events_seen += self.seen
        if self.keep_text:
            out.text = "".join(self.texts)
        pending = self.parser.pending
        error = None
        if self.status and not 200 <= self.status < 300:
            error = f"HTTP {self.status}"
            if 300 <= self.status < 400 and self.location:
                error += f" (redirect to {self.location}, not followed)"
            error += f": {self.excerpt.decode('utf-8', 'replace').strip()}"
        elif self.error is not None:
            error = self.error
        elif self.failure is not None:
            error = self.failure
            if pending and not self.clean:
                error += f" (inside an event: {pending} bytes unterminated)"
        elif pending and not self.clean:
            error = f"stream ended inside an event ({pending} bytes unterminated)"
        if not self.events and not self.seen and 200 <= self.status < 300:
            said = _body_error(self.excerpt)
            if said is not None:
                error = said  # the server's own words beat NO_OUTPUT or "stream ended inside an event"
        if error is None and not self.events:
            error = NO_OUTPUT
            if self.content_type and "text/event-stream" not in self.content_type:
                error += f" (response Content-Type {self.content_type!r}, not text/event-stream)"
            if self.status and not self.seen:
                error += (f": HTTP {self.status} with an empty body" if not self.excerpt.strip()
                          else f": HTTP {self.status}, no event in the body")
        if error is None and not self.clean:
            error = "stream ended without finish_reason or [DONE]"
        completion = self.completion
        if error is not None:
            out.error = error
            out.ok = False
            if self.unanswered is not None and error == self.failure:
                out.connect_error = self.unanswered
            out.output_tokens = completion if completion >= 0 else len(self.events)
            return out
        out.ok = True
        if completion >= 0:
            out.output_tokens = completion
        else:
            out.output_tokens = len(self.events)
            out.tokens_estimated = True
        return out


class StreamingClient:
    """One connection pool speaking ``api`` to ``base_url``; use as ``async with``.

    ``headers`` (e.g. ``Authorization``) are sent with every request and never recorded or logged.
    ``connection_limit`` 0 means no pool cap (the default; a cap exists only to reproduce capped
    clients). ``force_close`` opens a new connection per request. ``timeout_s`` bounds a whole
    request. ``keep_text`` keeps each request's output text in the outcome (tests and spot checks;
    off for large runs). ``events_seen`` counts every SSE event parsed (output or not) of finished
    requests, the denominator of the client CPU per event; ``tokens_seen`` counts output tokens as
    they stream (the server's per-event count when it gives one, else one per output event), for
    live progress. ``transport``: ``"auto"`` (the default) picks ``"http1"`` (Ceiling's own) for
    ``http://`` and ``"aiohttp"`` for anything else; naming one forces it (the client benchmark
    compares both); afterwards the attribute holds the transport in use. Raises ``ValueError``
    for an unknown transport, ``http1`` with a URL it cannot speak, or a header that would break
    the request framing (CR, LF or NUL). :meth:`abort_inflight` ends the requests in flight at
    once, each returned as a failed outcome with the given reason.
    """

    def __init__(
        self, *, base_url: str, api: Api, model: str, headers: dict[str, str] | None = None,
        connection_limit: int = 0, force_close: bool = False, timeout_s: float = 600.0,
        keep_text: bool = False, extra_body: dict[str, Any] | None = None, transport: str = "auto",
    ) -> None:
        self.url = base_url.rstrip("/") + request_path(api)
        self.api = api
        self.model = model
        merged = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        for name, value in (headers or {}).items():
            for known in [k for k in merged if k.lower() == name.lower()]:
                del merged[known]
            merged[name] = value
        self.headers = merged
        self.connection_limit = connection_limit
        self.force_close = force_close
        self.timeout_s = timeout_s
        self.keep_text = keep_text
        self.extra_body = extra_body
        self.events_seen = 0
        self.tokens_seen = 0
        parts = urlsplit(self.url)
        self.host, self.port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
        # Credentials in the URL (user:pass@host) become Basic auth in aiohttp; the own transport
        # does not do that, so such a URL goes to aiohttp.
        plain = parts.scheme == "http" and bool(parts.hostname) and parts.username is None
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        if transport == "http1" and not plain:
            raise ValueError(f"the http1 transport speaks plain http:// only, not {base_url!r}")
        self.transport = "http1" if transport == "http1" or (transport == "auto" and plain) else "aiohttp"
        self._session: aiohttp.ClientSession | None = None
        self._pool: Http1Pool | None = None
        # Tasks suspended inside send(), and the abort reason of those abort_inflight() cancelled.
        self._inflight: set[asyncio.Task[Any]] = set()
        self._aborted: dict[asyncio.Task[Any], str] = {}
        self._head = b""
        if self.transport == "http1":
            self._host, self._port = parts.hostname or "", parts.port or 80
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            self._head = http_request_head(method="POST", host=parts.netloc, path=path,
                                           headers={**self.headers, "User-Agent": "ceiling-loadgen"},
                                           close=force_close)

    async def __aenter__(self) -> StreamingClient:
        if self.transport == "http1":
            self._pool = Http1Pool(host=self._host, port=self._port, limit=self.connection_limit,
                                   force_close=self.force_close)
            return self
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
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def connections_opened(self) -> int:
        """Connections opened so far by the ``http1`` transport (keep-alive reuse keeps it low); -1 for aiohttp."""
        return self._pool.opened if self._pool is not None else -1

    async def send(self, spec: RequestSpec, *, scheduled: int, ignore_eos: bool = False, index: int = -1) -> RequestOutcome:
        """Send ``spec`` now; ``scheduled`` is when it was due (ns). Never raises for request faults.

        ``index`` is the request's position in the dataset (kept in the record). ``start`` is taken
        just before the connection is requested; a wait for a capped pool goes to ``pool_wait``.
        Transport errors and timeouts become failed outcomes with the reason.
        """
        body = request_body(api=self.api, model=self.model, prompt=spec.prompt, messages=spec.messages,
                            max_tokens=spec.output_len, ignore_eos=ignore_eos, extra=self.extra_body)
        out = RequestOutcome(scheduled=scheduled, start=0, end=0, index=index,
                             requested_input=spec.input_len, requested_output=spec.output_len)
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        try:
            if self._pool is not None:
                return await self._send_http1(body, out)
            assert self._session is not None, "use StreamingClient as an async context manager"
            return await self._send_aiohttp(body, out)
        finally:
            self._inflight.discard(task)
            self._aborted.pop(task, None)

    def abort_inflight(self, reason: str) -> int:
        """End every request in flight now (call it from the client's event loop): each one's
        connection is dropped and its :meth:`send` returns a failed outcome whose ``error`` is
        ``reason``, keeping the output events received until then (a response that was already
        complete stays as it was). Requests sent later are not affected. Returns how many were
        aborted."""
        n = 0
        for task in list(self._inflight):
            if task not in self._aborted and not task.done():
                self._aborted[task] = reason
                task.cancel()
                n += 1
        return n

    def _abort_reason(self) -> str | None:
        """In a ``CancelledError`` handler of :meth:`send`: the reason when :meth:`abort_inflight`
        (and nothing else) cancelled this task, which then carries on; None when the cancellation
        must propagate."""
        task = asyncio.current_task()
        why = self._aborted.get(task) if task is not None else None
        if why is None or task is None or task.uncancel() > 0:
            return None
        return why

    async def _send_http1(self, body: bytes, out: RequestOutcome) -> RequestOutcome:
        pool = self._pool
        assert pool is not None
        request = self._head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        ex = _Exchange(self, pool.loop.create_future())
        conn: Http1Connection | None = None
        out.start = _perf()
        try:
            async with asyncio.timeout(self.timeout_s):
                conn, granted = await pool.acquire()
                if granted:
                    out.pool_wait = max(granted - out.start, 0)
                conn.begin(ex, request)
                await ex.future
        except TimeoutError:
            fut = ex.future  # the timeout cancels it while it is awaited: cancelled means incomplete
            if fut.cancelled() or not fut.done():  # a response complete right at the deadline stays so
                if conn is not None and conn.sink is ex:
                    conn.abort()
                ex.fail(f"timed out after {self.timeout_s:g} s", _perf())
        except OSError as exc:
            ex.fail(f"cannot connect to {self._host}:{self._port}: {type(exc).__name__}: {exc}", _perf(),
                    unanswered=_no_connection(exc, f"{self._host}:{self._port}"))
        except asyncio.CancelledError:
            aborting = asyncio.current_task() in self._aborted
            if aborting and conn is not None and conn.sink is ex:
                conn.process()  # reads that arrived before the abort belong to the response
            if conn is not None and conn.sink is ex:
                conn.abort()
            why = self._abort_reason()
            if why is None:
                raise
            if not ex.end_t:
                ex.fail(why, _perf())
        return ex.outcome(out)

    async def _send_aiohttp(self, body: bytes, out: RequestOutcome) -> RequestOutcome:
        assert self._session is not None
        ex = _Exchange(self, None)
        pool = [0]
        out.start = _perf()
        try:
            async with self._session.post(self.url, data=body, headers=self.headers, trace_request_ctx=pool,
                                          allow_redirects=False) as resp:
                ex.head(resp.status, {k.lower(): v for k, v in resp.headers.items()}, _perf())
                content = resp.content
                if not 200 <= resp.status < 300:
                    ex.body(await content.read(_ERROR_BODY_BYTES), _perf())
                    ex.end(_perf())
                else:
                    eof = [0]
                    content.on_eof(lambda: eof.__setitem__(0, _perf()))
                    while True:
                        chunk = await content.readany()
                        if not chunk:
                            break
                        if not ex.body(chunk, _perf()):
                            break
                    # The end is when the body's terminator was parsed (the on_eof callback runs
                    # inside the read): when many responses finish at once this loop can see them
                    # milliseconds later, and a request waiting in a capped pool must not appear to
                    # overlap.
                    ex.end(eof[0] or _perf())
        except asyncio.TimeoutError:
            ex.fail(f"timed out after {self.timeout_s:g} s", _perf())
        except aiohttp.ClientError as exc:
            # Raised before the response head arrived (status still 0): the server never answered.
            unanswered: bool | str = isinstance(exc, (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError))
            if isinstance(exc, aiohttp.ClientConnectorError):
                unanswered = _no_connection(exc.os_error, f"{exc.host}:{exc.port}")
            ex.fail(f"{type(exc).__name__}: {exc}", _perf(), unanswered=unanswered)
        except asyncio.CancelledError:
            why = self._abort_reason()  # the response was released by the context manager
            if why is None:
                raise
            if not ex.end_t:
                ex.fail(why, _perf())
        # From start (not from the queue entry, which can be much later when many requests start
        # at once) to the connection grant, so start + pool_wait is when the request really left.
        out.pool_wait = max(pool[0] - out.start, 0) if pool[0] else 0
        return ex.outcome(out)
