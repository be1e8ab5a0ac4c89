"""A real HTTP/1.1 server process that replays scripted byte streams with scripted timing.

Run::

    python benchmarks/tests/replay_server.py --port P --script script.json [--backlog 1024]

The script (JSON) maps request paths to responses; each POST to a path takes the next response of
its list in turn (round-robin), so one script can mix stream shapes::

    {"routes": {"/v1/chat/completions": [
        {"status": 200, "content_type": "text/event-stream",
         "writes": [[0.005, "data: {...}\\n\\n"], [0.214, "data: ..."], ...],   # [seconds, text]
         "writes_b64": [[0.1, "<base64>"]],            # optional, merged with writes by time
         "tokens": 10,                                  # added to the generation counter
         "hold_s": 0.0}                                 # extra time before the end of the body
    ]}, "metrics_token_factor": 1.0}

Each write's time is seconds after the request was received, measured on the monotonic clock and
slept to as an absolute deadline (so lateness does not accumulate); each write is one chunk of a
``Transfer-Encoding: chunked`` body sent with ``TCP_NODELAY``, so a scripted split arrives at the
client as separate network reads when the writes are a few milliseconds apart. Connections are
kept alive.

Other routes: ``GET /_stats`` → ``{"requests", "in_flight", "max_in_flight", "connections",
"max_connections"}`` (counted since start or the last ``POST /_reset``); ``GET /_log`` → one entry
per scripted request in arrival order, ``{"path", "received_ns", "writes_ns", "end_ns"}``: the
``time.perf_counter_ns()`` instants (CLOCK_MONOTONIC, the load generator's clock on the same host)
when the request was read and when each scripted write (in time order) was handed to the socket,
so a test can assert what the client should have measured even when a loaded host makes the server
late (the last 10,000 requests are kept); ``GET /metrics`` →
Prometheus text with ``replay:generation_tokens_total`` (the scripted ``tokens`` of every response
fully sent, times ``metrics_token_factor``, to fake a disagreeing server). Exits on SIGTERM.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any


class Replay:
    """Server state: the script, the per-path cursor and the counters of ``/_stats``."""

    def __init__(self, script: dict[str, Any]) -> None:
        self.routes: dict[str, list[dict[str, Any]]] = {}
        for path, responses in script.get("routes", {}).items():
            self.routes[path] = [self._compile(r) for r in (responses if isinstance(responses, list) else [responses])]
        self.cursor: dict[str, int] = {}
        self.factor = float(script.get("metrics_token_factor", 1.0))
        self.tokens = 0.0
        self.log: deque[dict[str, Any]] = deque(maxlen=10_000)
        self.reset()

    def reset(self) -> None:
        """Zero the ``/_stats`` counters (the token counter is monotonic, like a server's)."""
        self.requests = self.in_flight = self.max_in_flight = 0
        self.connections = getattr(self, "connections", 0)
        self.max_connections = self.connections

    @staticmethod
    def _compile(resp: dict[str, Any]) -> dict[str, Any]:
        writes = [(float(t), s.encode()) for t, s in resp.get("writes", [])]
        writes += [(float(t), base64.b64decode(b)) for t, b in resp.get("writes_b64", [])]
        writes.sort(key=lambda w: w[0])
        return {"status": int(resp.get("status", 200)), "content_type": resp.get("content_type", "text/event-stream"),
                "writes": writes, "tokens": int(resp.get("tokens", 0)), "hold_s": float(resp.get("hold_s", 0.0))}

    def next_response(self, path: str) -> dict[str, Any] | None:
        """The next scripted response for ``path`` (round-robin), or None when none is scripted."""
        options = self.routes.get(path)
        if not options:
            return None
        i = self.cursor.get(path, 0)
        self.cursor[path] = i + 1
        return options[i % len(options)]

    def stats(self) -> dict[str, int]:
        return {"requests": self.requests, "in_flight": self.in_flight, "max_in_flight": self.max_in_flight,
                "connections": self.connections, "max_connections": self.max_connections}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return method, path, body


def _simple(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json") -> None:
    writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)


async def _replay(writer: asyncio.StreamWriter, resp: dict[str, Any], received: float, entry: dict[str, Any]) -> None:
    writer.write(f"HTTP/1.1 {resp['status']} X\r\nContent-Type: {resp['content_type']}\r\n"
                 "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    await writer.drain()
    loop = asyncio.get_running_loop()
    for at, data in resp["writes"]:
        delay = received + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if data:
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
        entry["writes_ns"].append(time.perf_counter_ns())
    last = resp["writes"][-1][0] if resp["writes"] else 0.0
    delay = received + last + resp["hold_s"] - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    entry["end_ns"] = time.perf_counter_ns()


async def serve(port: int, script: dict[str, Any], backlog: int) -> None:
    """Serve ``script`` on 127.0.0.1:``port`` until SIGTERM/SIGINT."""
    state = Replay(script)
    loop = asyncio.get_running_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state.connections += 1
        state.max_connections = max(state.max_connections, state.connections)
        try:
            while True:
                req = await _read_request(reader)
                if req is None:
                    return
                received = loop.time()
                received_ns = time.perf_counter_ns()
                method, path, _ = req
                if method == "GET" and path == "/_stats":
                    _simple(writer, 200, json.dumps(state.stats()).encode())
                elif method == "GET" and path == "/_log":
                    _simple(writer, 200, json.dumps(list(state.log)).encode())
                elif method == "POST" and path == "/_reset":
                    state.reset()
                    _simple(writer, 200, b"{}")
                elif method == "GET" and path == "/metrics":
                    text = ("# HELP replay:generation_tokens_total Generated tokens.\n"
                            "# TYPE replay:generation_tokens_total counter\n"
                            f"replay:generation_tokens_total {state.tokens}\n")
                    _simple(writer, 200, text.encode(), "text/plain; version=0.0.4")
                else:
                    resp = state.next_response(path) if method == "POST" else None
                    if resp is None:
                        _simple(writer, 404, b'{"error": {"message": "no scripted response"}}')
                    else:
                        state.requests += 1
                        entry: dict[str, Any] = {"path": path, "received_ns": received_ns, "writes_ns": [],
                                                 "end_ns": None}
                        state.log.append(entry)
                        state.in_flight += 1
                        state.max_in_flight = max(state.max_in_flight, state.in_flight)
                        try:
                            await _replay(writer, resp, received, entry)
                            state.tokens += resp["tokens"] * state.factor
                        finally:
                            state.in_flight -= 1
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            state.connections -= 1
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=backlog, reuse_address=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(f"replay server listening on 127.0.0.1:{port}", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description="Replay scripted HTTP byte streams with scripted timing.")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--script", required=True)
    p.add_argument("--backlog", type=int, default=1024)
    args = p.parse_args(argv)
    with open(args.script, encoding="utf-8") as fh:
        script = json.load(fh)
    asyncio.run(serve(args.port, script, args.backlog))
    return 0


class ReplayProcess:
    """Test helper: runs this file as a subprocess on a free loopback port with ``script``.

    ``url`` is the base URL; :meth:`stats` reads ``/_stats``; :meth:`stop` terminates it (also on
    ``with`` exit). Raises ``RuntimeError`` when the server does not answer within 10 s.
    """

    def __init__(self, script: dict[str, Any], workdir: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        path = workdir / f"replay-{self.port}.json"
        path.write_text(json.dumps(script))
        self.log = workdir / f"replay-{self.port}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--port", str(self.port), "--script", str(path)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                self.stats()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"replay server did not start: {self.log.read_text()}") from None
                time.sleep(0.05)

    def stats(self) -> dict[str, int]:
        """The server's ``/_stats`` counters."""
        with urllib.request.urlopen(f"{self.url}/_stats", timeout=5) as resp:
            return json.loads(resp.read())

    def request_log(self) -> list[dict[str, Any]]:
        """The server's ``/_log``: per scripted request, when it was read and each write was sent (ns)."""
        with urllib.request.urlopen(f"{self.url}/_log", timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def __enter__(self) -> ReplayProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sse(payload: dict[str, Any] | str) -> str:
    """One SSE event ``data: <json>`` + blank line (``payload`` as JSON unless already a string)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


if __name__ == "__main__":
    sys.exit(main())
