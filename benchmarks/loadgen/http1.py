"""A small streaming HTTP/1.1 client on ``asyncio.Protocol``: receive times taken where bytes arrive.

Why it exists: a client that reads the body with ``await reader.read()`` stamps a chunk when its
task resumes, not when the bytes arrived. When many streams' bytes land in one event-loop wake-up,
every read callback runs first and the tasks resume afterwards, one by one, so the later ones are
stamped late by however long the others took (``benchmarks/scripts/client_bench.py`` measured
p99 inter-token errors of 11 ms at 64 streams that way). Here :meth:`Http1Connection.data_received`
takes ``time.perf_counter_ns()`` before anything else and only queues ``(time, bytes)``; decoding
the HTTP framing, parsing SSE and classifying events runs afterwards in one
:class:`Dispatcher` callback per loop iteration, after every read of that iteration has been
stamped, and yields after :data:`DISPATCH_BUDGET_NS` so a burst of parsing never holds back the
stamping of the next wake-up for long. Nothing wakes a coroutine per event: the request's
coroutine wakes once, when the response is complete.

Scope (what ``benchmarks.loadgen.client`` needs, nothing more): plain ``http://`` over TCP, one
request at a time per connection (no pipelining), ``POST`` with a ``Content-Length`` body;
responses framed by ``Transfer-Encoding: chunked``, ``Content-Length`` or connection close (RFC 9112
section 6.3), interim ``1xx`` responses skipped; keep-alive reuse of idle connections (LIFO),
``TCP_NODELAY`` on every socket, an optional cap on open connections with a FIFO wait, redirects
never followed. ``Content-Encoding`` other than identity is refused (the client never asks for
compression). Everything else (``https://``) goes through aiohttp in the caller.

Failures are reported to the response sink with their reason: connection refused or reset, the
server closing the connection before the headers or inside the body (with the byte count), a
malformed status line, header block or chunk size, chunk data longer than its declared size, or
an encoding it does not speak. Bytes arriving when no response is expected (or after a complete
one) mean the connection is out of step: it is dropped, never reused.
"""
from __future__ import annotations

import asyncio
import collections
import socket
import time
from typing import Protocol

__all__ = ["DISPATCH_BUDGET_NS", "Dispatcher", "Http1Connection", "Http1Pool", "ResponseSink", "http_request_head"]

# Longest stretch of deferred parsing before the loop gets to poll sockets again: 200 µs keeps the
# delay a new arrival can see well below the 1 ms ITL-error target, at the cost of an extra loop
# iteration (~10 µs) per 200 µs of parsing under heavy load.
DISPATCH_BUDGET_NS = 200_000
MAX_HEAD_BYTES = 64 * 1024  # status line + headers; far above any server's real header block
MAX_CHUNK_LINE = 4096  # a chunk-size line with extensions

_perf = time.perf_counter_ns

# Body framing states.
_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _LENGTH, _UNTIL_CLOSE, _IDLE = range(8)


class ResponseSink(Protocol):
    """What a connection reports one response to (``benchmarks.loadgen.client`` implements it).

    All times are ``perf_counter_ns`` values of the network read that carried the bytes.
    ``head`` is called once with the final (non-1xx) status and the headers (lower-case names);
    ``body`` with the decoded body bytes of each read and returns False to stop reading (the
    connection is then closed, not reused); exactly one of ``end`` (the body is complete) or
    ``fail`` (with the reason) ends the exchange. ``fail``'s ``unanswered`` is True when the
    server sent not one byte of a response before the connection ended (reset or closed before
    any response byte, or closed before the request could be written): the server never
    answered, as opposed to answering wrongly.
    """

    def head(self, status: int, headers: dict[str, str], t: int) -> None: ...

    def body(self, data: bytes, t: int) -> bool: ...

    def end(self, t: int) -> None: ...

    def fail(self, reason: str, t: int, *, unanswered: bool = False) -> None: ...

    def reusable(self) -> bool:
        """Asked once the body is complete, before ``end``: whether the connection may carry
        another request. False for an answer the server cut short its own way, after which it
        may close the connection under the next request."""
        ...


class Dispatcher:
    """Runs the deferred parsing of every connection of one client, once per loop iteration.

    Connections queue themselves with :meth:`wake` from ``data_received``; :meth:`_run` parses
    them in arrival order and, after :data:`DISPATCH_BUDGET_NS` of work, continues in the next
    loop iteration. It is scheduled as a zero-delay timer rather than with ``call_soon``: asyncio
    runs due timers after the I/O callbacks of the same iteration, so the reads that arrived in the
    meantime are stamped before parsing resumes (a ``call_soon`` callback would run first).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ready: collections.deque[Http1Connection] = collections.deque()
        self.scheduled = False

    def wake(self, conn: Http1Connection) -> None:
        """Queue ``conn`` for parsing (once, however many reads it gets before the next run)."""
        self.ready.append(conn)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_later(0, self._run)

    def _run(self) -> None:
        ready = self.ready
        deadline = _perf() + DISPATCH_BUDGET_NS
        while ready:
            ready.popleft().process()
            if ready and _perf() > deadline:
                self.loop.call_later(0, self._run)
                return
        self.scheduled = False


def http_request_head(*, method: str, host: str, path: str, headers: dict[str, str], close: bool) -> bytes:
    """The request head without its ``Content-Length`` line and final blank line (bytes, latin-1).

    Raises ``ValueError`` for a header name or value containing CR, LF or NUL (header injection).
    """
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if any(c in name + value for c in "\r\n\0") or not name or ":" in name:
            raise ValueError(f"invalid HTTP header {name!r}: names need no ':' and neither may contain CR, LF or NUL")
        lines.append(f"{name}: {value}")
    lines.append("Connection: close" if close else "Connection: keep-alive")
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


class Http1Connection(asyncio.Protocol):
    """One TCP connection: sends a request, decodes its response for the current sink.

    ``data_received`` only stamps and queues; :meth:`process` (run by the :class:`Dispatcher`)
    decodes. ``reusable`` is True between responses on a connection that may carry another
    request (keep-alive, fully read, nothing unexpected received).
    """

    def __init__(self, pool: Http1Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.sink: ResponseSink | None = None
        self.reusable = False
        self.requests = 0  # requests sent on this connection (1 = fresh)
        self._times: list[int] = []
        self._reads: list[bytes] = []
        self._queued = False
        self._reset()

    def _reset(self) -> None:
        self._received = 0  # bytes of the current response read so far, headers included
        self._state = _IDLE
        self._buf = b""
        self._remaining = 0
        self._status = 0
        self._keep_alive = True
        self._body_bytes = 0

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Small request writes on a reused connection must not wait for Nagle's algorithm.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        t = _perf()  # first: the receive time is what the measurement is about
        self._times.append(t)
        self._reads.append(data)
        if not self._queued:
            self._queued = True
            self.pool.dispatcher.wake(self)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost decides what the EOF means

    def connection_lost(self, exc: Exception | None) -> None:
        if self._reads:
            self.process()  # bytes that arrived before the close belong to the response
        t = _perf()
        self.closed = True
        self.reusable = False
        self.transport = None
        sink = self.sink
        if sink is None:
            self.pool.discard(self)
            return
        self.sink = None
        if self._state == _UNTIL_CLOSE and exc is None:
            sink.end(t)  # the body was delimited by the close (RFC 9112 section 6.3, rule 8)
        else:
            sink.fail(self._lost_reason(exc), t, unanswered=self._state == _HEAD and not self._received)
        self.pool.discard(self)

    def _lost_reason(self, exc: Exception | None) -> str:
        how = f"connection lost ({type(exc).__name__}: {exc})" if exc is not None else "server closed the connection"
        if self._state == _HEAD:
            if self.requests > 1 and not self._buf:
                return f"{how} before any response byte (reused keep-alive connection)"
            return f"{how} before the response headers were complete"
        return f"{how} inside the response body after {self._body_bytes} body bytes"

    # ------------------------------------------------------------------ requests
    def begin(self, sink: ResponseSink, request: bytes) -> None:
        """Send ``request`` (complete bytes) and report its response to ``sink``."""
        self.sink = sink
        self.reusable = False
        self.requests += 1
        self._reset()
        self._state = _HEAD
        if self.transport is None or self.closed:
            self.sink = None
            sink.fail("connection closed before the request was sent", _perf(), unanswered=True)
            return
        self.transport.write(request)

    def abort(self) -> None:
        """Drop the connection now (timeout, or the sink stopped reading); the sink gets no callback."""
        self.sink = None
        self.reusable = False
        self._reads.clear()
        self._times.clear()
        if self.transport is not None:
            self.transport.abort()
        self.closed = True
        self.pool.discard(self)

    # ------------------------------------------------------------------ decoding
    def process(self) -> None:
        """Decode every queued read, in order, with its own receive time."""
        self._queued = False
        reads, times = self._reads, self._times
        if not reads:
            return
        self._reads, self._times = [], []
        for data, t in zip(reads, times):
            if self.sink is None:
                if not self.closed:
                    # Bytes with no request outstanding: the stream is out of step; never reuse.
                    self.abort()
                return
            self._decode(data, t)

    def _decode(self, data: bytes, t: int) -> None:
        sink = self.sink
        assert sink is not None
        self._received += len(data)
        buf = self._buf + data if self._buf else data
        pos, n = 0, len(buf)
        pieces: list[bytes] = []
        state = self._state
        error = None
        done = False
        while pos < n:
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    if n - pos > MAX_HEAD_BYTES:
                        error = f"malformed HTTP response: headers longer than {MAX_HEAD_BYTES} bytes"
                    break
                state, error = self._head(buf[pos:end], t)
                pos = end + 4
                if error is not None or state == _IDLE:
                    done = error is None
                    break
            elif state == _SIZE:
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    if n - pos > MAX_CHUNK_LINE:
                        error = f"malformed HTTP response: chunk-size line longer than {MAX_CHUNK_LINE} bytes"
                    break
                line = buf[pos:nl].split(b";", 1)[0].strip()
                try:
                    size = int(line, 16)
                    if size < 0 or line.startswith((b"-", b"+", b"0x", b"0X")):
                        raise ValueError(line)
                except ValueError:
                    error = f"malformed HTTP response: bad chunk size {line[:40]!r}"
                    break
                pos = nl + 1
                if size == 0:
                    state = _TRAILER
                else:
                    self._remaining = size
                    state = _DATA
            elif state == _DATA:
                take = min(self._remaining, n - pos)
                pieces.append(buf[pos:pos + take])
                pos += take
                self._remaining -= take
                if self._remaining:
                    break
                state = _DATA_END
            elif state == _DATA_END:
                if buf[pos] == 10:  # a bare LF is tolerated, as most servers' parsers do
                    pos += 1
                elif buf[pos] == 13:
                    if n - pos < 2:
                        break
                    if buf[pos + 1] != 10:
                        error = "malformed HTTP response: chunk data not followed by CRLF"
                        break
                    pos += 2
                else:
                    error = "malformed HTTP response: chunk data longer than its chunk size"
                    break
                state = _SIZE
            elif state == _TRAILER:
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    if n - pos > MAX_HEAD_BYTES:
                        error = f"malformed HTTP response: trailer section longer than {MAX_HEAD_BYTES} bytes"
                    break
                line = buf[pos:nl]
                pos = nl + 1
                if line in (b"", b"\r"):
                    done = True
                    break
            elif state == _LENGTH:
                take = min(self._remaining, n - pos)
                pieces.append(buf[pos:pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    done = True
                break
            else:  # _UNTIL_CLOSE
                pieces.append(buf[pos:] if pos else buf)
                pos = n
        self._state = state
        self._buf = buf[pos:] if pos < n else b""
        if pieces:
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            self._body_bytes += len(body)
            if not sink.body(body, t):
                self.abort()
                return
        if error is not None:
            self.abort()
            sink.fail(error, t)
            return
        if done:
            self.sink = None
            self._state = _IDLE
            if self._buf:
                # More bytes after a complete response with none requested: out of step.
                self.abort()
            else:
                self.reusable = self._keep_alive and not self.pool.force_close and sink.reusable()
                self.pool.release(self)
            sink.end(t)

    def _head(self, block: bytes, t: int) -> tuple[int, str | None]:
        """Parse one header block; returns the next state (``_HEAD`` again after a 1xx) and an error."""
        lines = block.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            version, status = parts[0], int(parts[1])
        except (IndexError, ValueError):
            return _HEAD, f"malformed HTTP response: bad status line {lines[0][:80]!r}"
        if not version.startswith(b"HTTP/1.") or not 100 <= status <= 999:
            return _HEAD, f"malformed HTTP response: bad status line {lines[0][:80]!r}"
        if 100 <= status < 200:
            if status == 101:
                return _HEAD, "unsupported HTTP response: the server switched protocols (101)"
            return _HEAD, None  # interim response (100 Continue, 103 Early Hints): the real one follows
        headers: dict[str, str] = {}
        for raw in lines[1:]:
            name, sep, value = raw.partition(b":")
            if not sep:
                return _HEAD, f"malformed HTTP response: bad header line {raw[:80]!r}"
            key = name.strip().lower().decode("latin-1")
            val = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {val}" if key in headers else val
        self._status = status
        conn = headers.get("connection", "").lower()
        self._keep_alive = "close" not in conn and (version != b"HTTP/1.0" or "keep-alive" in conn)
        assert self.sink is not None
        self.sink.head(status, headers, t)
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding not in ("identity", ""):
            return _HEAD, (f"unsupported HTTP response: Content-Encoding {encoding!r} was not asked for "
                           "(the client accepts identity only)")
        te = headers.get("transfer-encoding", "").lower()
        if status in (204, 304):
            return _IDLE, None
        if te:
            if te.rsplit(",", 1)[-1].strip() != "chunked":
                return _HEAD, f"unsupported HTTP response: Transfer-Encoding {te!r} (only chunked is spoken)"
            return _SIZE, None
        if "content-length" in headers:
            try:
                length = int(headers["content-length"])
                if length < 0:
                    raise ValueError
            except ValueError:
                return _HEAD, f"malformed HTTP response: bad Content-Length {headers['content-length']!r}"
            self._remaining = length
            return (_LENGTH, None) if length else (_IDLE, None)
        self._keep_alive = False
        return _UNTIL_CLOSE, None


class Http1Pool:
    """Connections to one ``host:port`` with keep-alive reuse and an optional cap on open ones.

    ``limit`` 0 means no cap. :meth:`acquire` returns an idle connection (most recently used
    first), a new one, or, at the cap, waits in FIFO order for one to be released or closed and
    returns the grant time (``perf_counter_ns``; 0 when it did not wait). ``force_close`` opens a
    new connection for every request. Raises ``OSError`` (refused, unreachable, DNS) from
    :meth:`acquire`.
    """

    def __init__(self, *, host: str, port: int, limit: int = 0, force_close: bool = False) -> None:
        self.host = host
        self.port = port
        self.limit = limit
        self.force_close = force_close
        self.loop = asyncio.get_running_loop()
        self.dispatcher = Dispatcher(self.loop)
        self.idle: list[Http1Connection] = []
        self.open = 0
        self.opened = 0  # connections ever opened (tests check reuse with it)
        self.conns: set[Http1Connection] = set()
        self.waiters: collections.deque[asyncio.Future[Http1Connection | None]] = collections.deque()
        self._addrs: list[tuple] | None = None

    async def acquire(self) -> tuple[Http1Connection, int]:
        """A connection for one request and the instant the cap let it through (0: no wait)."""
        idle = self.idle
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.reusable and conn.transport is not None and not conn.transport.is_closing():
                conn.reusable = False
                return conn, 0
            self.discard(conn)
        granted = 0
        if self.limit and self.open >= self.limit:
            fut: asyncio.Future[Http1Connection | None] = self.loop.create_future()
            self.waiters.append(fut)
            try:
                conn_or_slot = await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._pass_on(fut.result())
                raise
            granted = _perf()
            if conn_or_slot is not None:
                return conn_or_slot, granted
        else:
            self.open += 1
        try:
            return await self._connect(), granted
        except BaseException:
            self._pass_on(None)
            raise

    def _pass_on(self, conn: Http1Connection | None) -> None:
        """Give a granted connection (or a slot, None) to the next waiter, or back to the pool."""
        if conn is not None:
            self.release(conn)
            return
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.open -= 1

    async def _connect(self) -> Http1Connection:
        if self._addrs is None:
            infos = await self.loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            if not infos:
                raise OSError(f"cannot resolve {self.host}")
            self._addrs = [(info[0], info[4]) for info in infos]
        last: OSError | None = None
        for family, addr in self._addrs:
            conn = Http1Connection(self)
            try:
                await self.loop.create_connection(lambda c=conn: c, family=family, host=addr[0], port=addr[1])
            except OSError as exc:
                last = exc
                continue
            self.opened += 1
            self.conns.add(conn)
            return conn
        assert last is not None
        raise last

    def release(self, conn: Http1Connection) -> None:
        """A response is complete: reuse ``conn`` (next waiter first) or close it."""
        if not conn.reusable or conn.closed:
            if not conn.closed and conn.transport is not None:
                conn.transport.close()
            self.discard(conn)
            return
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                conn.reusable = False
                fut.set_result(conn)
                return
        self.idle.append(conn)

    def discard(self, conn: Http1Connection) -> None:
        """``conn`` is closed or closing: free its slot (to the next waiter, if any). Idempotent."""
        if conn in self.conns:
            self.conns.discard(conn)
            if conn in self.idle:
                self.idle.remove(conn)
            self._pass_on(None)

    def close(self) -> None:
        """Close every connection (idle or not)."""
        for conn in list(self.conns):
            conn.sink = None
            if conn.transport is not None:
                conn.transport.close()
        self.idle.clear()
