"""The streaming client's own HTTP/1.1 transport against a real local TCP server that sends raw bytes.

The server (:class:`RawServer`, started in each test on a free loopback port) reads real HTTP
requests and answers each with a scripted list of byte writes, pauses, a close or a reset, so
every framing the transport must handle (chunked split anywhere, ``Content-Length``,
close-delimited, interim 1xx) and every failure (non-2xx, a close or reset mid-body, a stall, a
malformed chunk) is produced by a real socket.
"""
from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, Union

import pytest

from benchmarks.loadgen import Api, RequestSpec, StreamingClient
from benchmarks.loadgen.records import RequestOutcome

pytestmark = pytest.mark.timeout(60)

Step = Union[bytes, float, str]  # bytes: write them; float: sleep that long; "close" / "reset"


def sse(obj: Any) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def tok(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


BODY = (sse(tok(" Hello")) + sse(tok(" world", "length")) + sse({"choices": [], "usage": {"prompt_tokens": 3,
        "completion_tokens": 2}}) + sse("[DONE]"))


def chunked(*pieces: bytes, ext: bool = False, trailer: bool = False) -> bytes:
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(p), b";x=1" if ext else b"", p) for p in pieces)
    return out + (b"0\r\nX-Trailer: 1\r\n\r\n" if trailer else b"0\r\n\r\n")


def head(status: int = 200, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status} X", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


CHUNKED_HEAD = head(200, "Content-Type: text/event-stream", "Transfer-Encoding: chunked")


class RawServer:
    """A real TCP server: each request gets the next script of raw writes, pauses, close or reset."""

    def __init__(self, scripts: list[list[Step]]) -> None:
        self.scripts = scripts
        self.cursor = 0
        self.requests: list[bytes] = []
        self.connections = 0
        self.open = 0
        self.max_open = 0
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections += 1
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            writer.transport.abort()  # the test is over; a stalled script has nothing left to say
        finally:
            self.open -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                request = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = next((int(line.split(b":")[1]) for line in request.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            request += await reader.readexactly(length)
            self.requests.append(request)
            script = self.scripts[min(self.cursor, len(self.scripts) - 1)]
            self.cursor += 1
            for step in script:
                if isinstance(step, float):
                    await asyncio.sleep(step)
                elif step == "close":
                    writer.close()
                    return
                elif step == "reset":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                else:
                    writer.write(step)
                    await writer.drain()


def spec() -> RequestSpec:
    return RequestSpec(prompt="hi", input_len=-1, output_len=2)


async def send(client: StreamingClient) -> RequestOutcome:
    return await client.send(spec(), scheduled=time.perf_counter_ns())


def run(scripts: list[list[Step]], body: Callable[[RawServer, StreamingClient], Awaitable[Any]],
        **client_kw: Any) -> tuple[RawServer, Any]:
    async def main() -> tuple[RawServer, Any]:
        async with RawServer(scripts) as server:
            async with StreamingClient(base_url=server.url, api=Api.COMPLETIONS, model="m", keep_text=True,
                                       **client_kw) as client:
                assert client.transport == "http1"
                return server, await body(server, client)

    return asyncio.run(main())


def assert_ok(out: RequestOutcome) -> None:
    assert out.error is None and out.ok, out.error
    assert out.text == " Hello world"
    assert len(out.events) == 2
    assert (out.output_tokens, out.input_tokens, out.finish_reason) == (2, 3, "length")


# ---------------------------------------------------------------------- framing
RESPONSE = CHUNKED_HEAD + chunked(BODY[:17], BODY[17:60], BODY[60:], ext=True, trailer=True)


def test_it_decodes_a_chunked_response_split_at_every_byte_boundary() -> None:
    scripts = [[RESPONSE[:cut], 0.001, RESPONSE[cut:]] for cut in range(1, len(RESPONSE))]

    async def body(server: RawServer, client: StreamingClient) -> list[RequestOutcome]:
        return [await send(client) for _ in scripts]

    server, outs = run(scripts, body)
    for out in outs:
        assert_ok(out)
    assert server.connections == 1  # every response fully read, the connection kept alive throughout


def test_it_decodes_a_chunked_response_arriving_one_byte_per_read() -> None:
    script: list[Step] = []
    for i in range(len(RESPONSE)):
        script += [RESPONSE[i:i + 1], 0.0005]
    server, out = run([script], lambda s, c: send(c))
    assert_ok(out)


def test_it_times_each_event_at_its_own_read() -> None:
    script: list[Step] = [CHUNKED_HEAD, chunked(sse(tok(" Hello")))[:-5], 0.1,
                          chunked(sse(tok(" world", "length")))[:-5], 0.1, chunked(BODY[-110:])]
    _, out = run([script], lambda s, c: send(c))
    gap = (out.events[1] - out.events[0]) / 1e9
    assert gap == pytest.approx(0.1, abs=0.02)
    assert out.end - out.events[1] == pytest.approx(0.1e9, abs=0.02e9)


def test_it_reads_a_content_length_body() -> None:
    script: list[Step] = [head(200, "Content-Type: text/event-stream", f"Content-Length: {len(BODY)}"),
                          BODY[:30], 0.005, BODY[30:]]

    async def body(server: RawServer, client: StreamingClient) -> list[RequestOutcome]:
        return [await send(client), await send(client)]

    server, outs = run([script], body)
    for out in outs:
        assert_ok(out)
    assert server.connections == 1


def test_it_reads_a_body_delimited_by_the_connection_close() -> None:
    script: list[Step] = [head(200, "Content-Type: text/event-stream", "Connection: close"), BODY, 0.01, "close"]

    async def body(server: RawServer, client: StreamingClient) -> list[RequestOutcome]:
        return [await send(client), await send(client)]

    server, outs = run([script], body)
    for out in outs:
        assert_ok(out)
    assert server.connections == 2


def test_it_skips_an_interim_100_continue_response() -> None:
    script: list[Step] = [b"HTTP/1.1 100 Continue\r\n\r\n", 0.005, RESPONSE]
    _, out = run([script], lambda s, c: send(c))
    assert_ok(out)


# ---------------------------------------------------------------------- failures with reasons
def test_it_fails_a_non_2xx_response_with_its_status_and_body() -> None:
    text = b'{"error": {"message": "server overloaded"}}'
    script: list[Step] = [head(503, "Content-Type: application/json", f"Content-Length: {len(text)}"), text]

    async def body(server: RawServer, client: StreamingClient) -> list[RequestOutcome]:
        return [await send(client), await send(client)]

    server, outs = run([script], body)
    for out in outs:
        assert not out.ok and out.http_status == 503
        assert out.error == 'HTTP 503: {"error": {"message": "server overloaded"}}'
        assert out.output_tokens == 0 and len(out.events) == 0
    assert server.connections == 1  # an error body read to its end keeps the connection usable


def test_it_does_not_follow_a_redirect() -> None:
    script: list[Step] = [head(307, "Location: http://127.0.0.1:9/v1/completions", "Content-Length: 0")]
    server, out = run([script], lambda s, c: send(c))
    assert out.http_status == 307 and not out.ok
    assert out.error.startswith("HTTP 307 (redirect to http://127.0.0.1:9/v1/completions, not followed)")
    assert len(server.requests) == 1


def test_it_fails_a_stream_the_server_closes_inside_an_event() -> None:
    partial = BODY[:len(sse(tok(" Hello"))) + 10]
    script: list[Step] = [CHUNKED_HEAD, chunked(partial)[:-5], 0.01, "close"]
    _, out = run([script], lambda s, c: send(c))
    assert not out.ok and len(out.events) == 1
    assert out.error == (f"server closed the connection inside the response body after {len(partial)} body bytes "
                         "(inside an event: 10 bytes unterminated)")


def test_it_fails_a_stream_the_server_closes_between_events() -> None:
    script: list[Step] = [CHUNKED_HEAD, chunked(sse(tok(" Hello")))[:-5], 0.01, "close"]
    _, out = run([script], lambda s, c: send(c))
    assert not out.ok and len(out.events) == 1 and out.output_tokens == 1
    assert out.error == f"server closed the connection inside the response body after {len(sse(tok(' Hello')))} body bytes"


def test_it_fails_a_request_the_server_closes_before_answering() -> None:
    _, out = run([["close"]], lambda s, c: send(c))
    assert not out.ok and out.http_status == 0
    assert out.error == "server closed the connection before the response headers were complete"


def test_it_reports_a_connection_reset() -> None:
    script: list[Step] = [CHUNKED_HEAD, chunked(sse(tok(" Hello")))[:-5], 0.01, "reset"]
    _, out = run([script], lambda s, c: send(c))
    assert not out.ok and len(out.events) == 1
    assert out.error.startswith("connection lost (ConnectionResetError: ")
    assert "inside the response body" in out.error


def test_it_times_out_a_stalled_stream_and_recovers_on_a_new_connection() -> None:
    stalled: list[Step] = [CHUNKED_HEAD, chunked(sse(tok(" Hello")))[:-5], 5.0]

    async def body(server: RawServer, client: StreamingClient) -> list[RequestOutcome]:
        return [await send(client), await send(client)]

    server, (slow, fine) = run([stalled, [RESPONSE]], body, timeout_s=0.3)
    assert not slow.ok and slow.error == "timed out after 0.3 s"
    assert (slow.end - slow.start) / 1e9 == pytest.approx(0.3, abs=0.1)
    assert len(slow.events) == 1
    assert_ok(fine)
    assert server.connections == 2  # the stalled connection was dropped, not reused


def test_it_refuses_a_malformed_chunk_size_with_the_reason() -> None:
    script: list[Step] = [CHUNKED_HEAD, b"zz\r\nhello\r\n"]
    _, out = run([script], lambda s, c: send(c))
    assert not out.ok
    assert out.error == "malformed HTTP response: bad chunk size b'zz'"


def test_it_refuses_a_compressed_body_it_did_not_ask_for() -> None:
    script: list[Step] = [head(200, "Content-Encoding: gzip", "Content-Length: 4"), b"\x1f\x8b\x08\x00"]
    server, out = run([script], lambda s, c: send(c))
    assert not out.ok and out.http_status == 200
    assert out.error.startswith("unsupported HTTP response: Content-Encoding 'gzip' was not asked for")
    assert b"accept-encoding" not in server.requests[0].lower()


def test_it_names_the_address_it_could_not_connect_to() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> RequestOutcome:
        async with StreamingClient(base_url=f"http://127.0.0.1:{port}", api=Api.COMPLETIONS, model="m") as client:
            return await send(client)

    out = asyncio.run(main())
    assert not out.ok
    assert out.error.startswith(f"cannot connect to 127.0.0.1:{port}: ConnectionRefusedError")


# ---------------------------------------------------------------------- connections
def test_it_reuses_one_keep_alive_connection_and_sends_headers_without_recording_them() -> None:
    async def body(server: RawServer, client: StreamingClient) -> list[RequestOutcome]:
        outs = [await send(client) for _ in range(5)]
        assert client.connections_opened == 1
        return outs

    server, outs = run([[RESPONSE]], body, headers={"Authorization": "Bearer s3cret"})
    assert server.connections == 1 and len(server.requests) == 5
    for out in outs:
        assert_ok(out)
        assert "s3cret" not in repr(out)
    request = server.requests[0]
    assert b"Authorization: Bearer s3cret\r\n" in request
    assert b"Connection: keep-alive\r\n" in request
    assert request.startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    payload = json.loads(request.split(b"\r\n\r\n", 1)[1])
    assert payload["stream"] is True and payload["max_tokens"] == 2


def test_it_opens_a_connection_per_request_when_forced_to_close() -> None:
    async def body(server: RawServer, client: StreamingClient) -> list[RequestOutcome]:
        return [await send(client) for _ in range(3)]

    server, outs = run([[RESPONSE]], body, force_close=True)
    for out in outs:
        assert_ok(out)
    assert server.connections == 3
    assert all(b"Connection: close\r\n" in r for r in server.requests)


def test_it_does_not_reuse_a_connection_the_server_said_to_close() -> None:
    script: list[Step] = [head(200, "Content-Type: text/event-stream", f"Content-Length: {len(BODY)}",
                               "Connection: close"), BODY]

    async def body(server: RawServer, client: StreamingClient) -> list[RequestOutcome]:
        return [await send(client) for _ in range(2)]

    server, outs = run([script], body)
    for out in outs:
        assert_ok(out)
    assert server.connections == 2


def test_it_queues_for_a_capped_pool_and_records_the_wait() -> None:
    script: list[Step] = [CHUNKED_HEAD, 0.2, chunked(BODY)]

    async def body(server: RawServer, client: StreamingClient) -> list[RequestOutcome]:
        return list(await asyncio.gather(*(send(client) for _ in range(4))))

    server, outs = run([script], body, connection_limit=2)
    for out in outs:
        assert_ok(out)
    assert server.max_open == 2 and server.connections == 2
    waits = sorted(out.pool_wait / 1e9 for out in outs)
    assert waits[:2] == [0, 0]
    assert waits[2] == pytest.approx(0.2, abs=0.08) and waits[3] == pytest.approx(0.2, abs=0.08)


def test_it_picks_aiohttp_for_https_and_refuses_bad_settings() -> None:
    client = StreamingClient(base_url="https://example.invalid", api=Api.CHAT, model="m")
    assert client.transport == "aiohttp"
    assert StreamingClient(base_url="http://127.0.0.1:1", api=Api.CHAT, model="m").transport == "http1"
    with pytest.raises(ValueError, match="plain http:// only"):
        StreamingClient(base_url="https://example.invalid", api=Api.CHAT, model="m", transport="http1")
    with pytest.raises(ValueError, match="transport must be one of"):
        StreamingClient(base_url="http://127.0.0.1:1", api=Api.CHAT, model="m", transport="h2")
    with pytest.raises(ValueError, match="invalid HTTP header"):
        StreamingClient(base_url="http://127.0.0.1:1", api=Api.CHAT, model="m", headers={"X-A": "1\r\nX-B: 2"})


@pytest.mark.parametrize("transport", ["http1", "aiohttp"])
def test_it_gives_the_same_outcome_through_either_transport(transport: str) -> None:
    first = len(sse(tok(" Hello")))
    script: list[Step] = [CHUNKED_HEAD, chunked(BODY[:first])[:-5], 0.02, chunked(BODY[first:])]

    async def main() -> RequestOutcome:
        async with RawServer([script]) as server:
            async with StreamingClient(base_url=server.url, api=Api.COMPLETIONS, model="m", keep_text=True,
                                       transport=transport) as client:
                assert client.transport == transport
                return await send(client)

    out = asyncio.run(main())
    assert_ok(out)
    assert (out.events[1] - out.events[0]) / 1e9 == pytest.approx(0.02, abs=0.015)
