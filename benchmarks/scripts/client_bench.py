"""Client benchmark: Ceiling's streaming client against a widely used peer, on one fast local server.

The server (``--serve``, started here in its own process) answers ``POST /v1/completions`` with a
stream of ``--tokens`` completion chunks, one every ``--gap-ms`` on a shared tick, then a
``finish_reason`` chunk, a usage chunk and ``[DONE]`` (chunked HTTP/1.1, keep-alive,
``TCP_NODELAY``). Every token's text is the server's own ``perf_counter_ns()`` at the moment it was
written, so the true gap between two events is known exactly even when the server runs late;
``perf_counter`` is CLOCK_MONOTONIC, one clock for all processes of the host.

Clients, each in its own process, closed loop at each concurrency (``--streams``, default 16, 64,
256), ``--rounds`` requests per stream:

- ``ceiling``: :func:`benchmarks.loadgen.loadgen_run` (one worker process, ``keep_text`` on to read
  the send times back);
- ``sglang-bench_serving``: SGLang's ``bench_serving.async_request_openai_completions`` (the request
  function its CLI uses), from the side environment ``--peer-python`` (default
  ``var/peers2/bin/python``; install with ``python -m venv var/peers2 && var/peers2/bin/pip install
  --no-deps sglang==0.4.6.post5 && var/peers2/bin/pip install aiohttp numpy requests tqdm
  transformers ipython pillow``).

Per client and concurrency: delivered output events/s (events / wall time of the load phase), client
CPU µs per output event (``time.process_time`` of the client process over the load phase, imports
excluded), ITL error = measured gap − true gap (from the server's send times) at p50 and p99.
Usage::

    .venv/bin/python benchmarks/scripts/client_bench.py [--streams 16 64 256] [--tokens 256] [--gap-ms 5]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------- the fast server
class _Stream(asyncio.Protocol):
    """One connection: parses requests, registers them with the ticker, writes chunks."""

    def __init__(self, server: _Ticker) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            length = 0
            for line in self.buf[:head_end].split(b"\r\n")[1:]:
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if len(self.buf) < head_end + 4 + length:
                return
            # The usage chunk (choices: []) only for clients that ask for it, as OpenAI servers do:
            # SGLang 0.4's bench_serving indexes choices[0] of every chunk.
            usage = b"include_usage" in self.buf[head_end:head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length:]
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n")
            self.server.active.append([self.transport, self.server.tokens, usage])

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


class _Ticker:
    """Writes one token to every active stream each ``gap`` seconds (absolute deadlines)."""

    def __init__(self, tokens: int, gap: float) -> None:
        self.tokens = tokens
        self.gap = gap
        self.active: list[list[Any]] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        nxt = loop.time()
        perf = time.perf_counter_ns
        finish = b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}\n\n'
        usage = b'data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":%d}}\n\n' % self.tokens
        tails = {with_usage: b"%x\r\n%s\r\n0\r\n\r\n" % (len(t), t)
                 for with_usage, t in ((True, finish + usage + b"data: [DONE]\n\n"), (False, finish + b"data: [DONE]\n\n"))}
        while True:
            nxt += self.gap
            delay = nxt - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            keep = []
            for entry in self.active:
                tr = entry[0]
                if tr.is_closing():
                    continue
                body = b'data: {"choices":[{"index":0,"text":" %d","finish_reason":null}]}\n\n' % perf()
                tr.write(b"%x\r\n%s\r\n" % (len(body), body))
                entry[1] -= 1
                if entry[1] == 0:
                    tr.write(tails[entry[2]])
                else:
                    keep.append(entry)
            self.active = keep


async def _serve(port: int, tokens: int, gap: float) -> None:
    ticker = _Ticker(tokens, gap)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Stream(ticker), "127.0.0.1", port, backlog=4096, reuse_address=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    task = asyncio.ensure_future(ticker.run())
    print("ready", flush=True)
    async with server:
        await stop.wait()
    task.cancel()


# ---------------------------------------------------------------------- clients (subprocesses)
PEER_DRIVER = r'''
import asyncio, json, sys, time, types
import sglang.bench_serving as bs
bs.args = types.SimpleNamespace(disable_stream=False, disable_ignore_eos=False)
url, streams, rounds, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
async def main():
    outs = []
    async def slot():
        for _ in range(rounds):
            inp = bs.RequestFuncInput(prompt="hello", api_url=url + "/v1/completions", prompt_len=1,
                                      output_len=tokens, model="m", lora_name=None, image_data=None,
                                      extra_request_body={})
            outs.append(await bs.async_request_openai_completions(inp))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(slot() for _ in range(streams)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "requests": [
        {"ok": o.success, "itl": o.itl, "text": o.generated_text} for o in outs]}))
asyncio.run(main())
'''

CEILING_DRIVER = r'''
import json, sys, time
import numpy as np
from benchmarks.loadgen import Api, LoadConfig, RequestSpec, loadgen_run, run_summary
url, streams, rounds, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
specs = [RequestSpec(prompt="hello", input_len=-1, output_len=tokens) for _ in range(streams * rounds)]
cfg = LoadConfig(base_url=url, api=Api.COMPLETIONS, model="m", concurrency=streams, keep_text=True, workers=1)
res = loadgen_run(config=cfg, specs=specs)
s = run_summary(res)
rec = res.records
reqs = []
for i in range(len(rec)):
    ev = rec.events_of(i)
    reqs.append({"ok": bool(rec.ok[i]), "itl": (np.diff(ev) / 1e9).tolist(), "text": rec.texts.get(i, "")})
w = res.workers[0]
print(json.dumps({"cpu_s": w.cpu_ns / 1e9, "wall_s": w.wall_ns / 1e9, "requests": reqs,
                  "flags": s["flags"]}))
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], p: float) -> float:
    import numpy as np  # noqa: PLC0415 - only the parent needs it
    return float(np.percentile(np.asarray(values), p)) if values else float("nan")


def _analyse(name: str, streams: int, data: dict[str, Any]) -> dict[str, Any]:
    events, errors, failed = 0, [], 0
    for r in data["requests"]:
        if not r["ok"]:
            failed += 1
            continue
        sends = [int(x) for x in r["text"].split()]
        events += len(sends)
        true = [(b - a) / 1e9 for a, b in zip(sends, sends[1:])]
        itl = r["itl"]
        if len(itl) != len(true):  # an event the client never saw as separate: skip, counted as failure
            failed += 1
            continue
        errors.extend(m - t for m, t in zip(itl, true))
    return {"client": name, "streams": streams, "events_per_s": events / data["wall_s"],
            "cpu_us_per_event": data["cpu_s"] / events * 1e6 if events else float("nan"),
            "cpu_fraction": data["cpu_s"] / data["wall_s"],
            "itl_err_p50_ms": _pct(errors, 50) * 1e3, "itl_err_p99_ms": _pct(errors, 99) * 1e3,
            "failed": failed, "flags": data.get("flags")}


def _run_client(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one table; returns 0."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--streams", type=int, nargs="+", default=[16, 64, 256])
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--gap-ms", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--peer-python", default=str(REPO / "var" / "peers2" / "bin" / "python"))
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args.port, args.tokens, args.gap_ms / 1e3))
        return 0
    port = _free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", "--port", str(port), "--tokens", str(args.tokens),
                               "--gap-ms", str(args.gap_ms)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    url = f"http://127.0.0.1:{port}"
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            peer = Path(tmp) / "peer_driver.py"
            peer.write_text(PEER_DRIVER)
            ceiling = Path(tmp) / "ceiling_driver.py"
            ceiling.write_text(CEILING_DRIVER)
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            for streams in args.streams:
                common = [url, str(streams), str(args.rounds), str(args.tokens)]
                rows.append(_analyse("ceiling", streams, _run_client([sys.executable, str(ceiling), *common], env)))
                if Path(args.peer_python).exists():
                    rows.append(_analyse("sglang-bench_serving", streams,
                                         _run_client([args.peer_python, str(peer), *common], {**os.environ})))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    print(f"{args.tokens} tokens per request, {args.gap_ms} ms apart, {args.rounds} requests per stream; "
          f"{os.cpu_count()} CPUs")
    print(f"{'client':<22}{'streams':>8}{'events/s':>11}{'CPU us/event':>14}{'CPU share':>11}"
          f"{'ITL err p50 ms':>16}{'ITL err p99 ms':>16}{'failed':>8}")
    for r in rows:
        print(f"{r['client']:<22}{r['streams']:>8}{r['events_per_s']:>11.0f}{r['cpu_us_per_event']:>14.1f}"
              f"{r['cpu_fraction']:>11.2f}{r['itl_err_p50_ms']:>16.3f}{r['itl_err_p99_ms']:>16.3f}{r['failed']:>8}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
