"""Client benchmark: Ceiling's streaming client against widely used peers, on one fast local server.

The server (``--serve``, started here in its own process) answers ``POST /v1/completions`` with a
stream of ``--tokens`` completion chunks, one every ``--gap-ms`` on a shared tick, then a
``finish_reason`` chunk, a usage chunk and ``[DONE]`` (chunked HTTP/1.1, keep-alive,
``TCP_NODELAY``). Every token's text is the server's own ``perf_counter_ns()`` at the moment it was
written, so the true gap between two events is known exactly even when the server runs late;
``perf_counter`` is CLOCK_MONOTONIC, one clock for all processes of the host.

Clients, each in its own process, closed loop at each concurrency (``--streams``, default 16, 64,
256), ``--rounds`` requests per stream:

- ``ceiling``: :func:`benchmarks.loadgen.loadgen_run` (one worker process, ``keep_text`` on to read
  the send times back) with its own HTTP/1.1 transport (receive time taken in ``data_received``);
- ``ceiling-aiohttp``: the same with ``transport="aiohttp"``, the previous transport (receive time
  taken after ``readany()`` returns), so before and after are measured side by side in one run;
- ``sglang-bench_serving``: SGLang's ``bench_serving.async_request_openai_completions`` (the request
  function its CLI uses), from the side environment ``--peer-python`` (default
  ``var/peers2/bin/python``; install with ``python -m venv var/peers2 && var/peers2/bin/pip install
  --no-deps sglang==0.4.6.post5 && var/peers2/bin/pip install aiohttp numpy requests tqdm
  transformers ipython pillow``);
- ``aiperf``: AIPerf's ``AioHttpClient.post_request`` (the request path of its HTTP transport:
  aiohttp ``iter_any()``, a timestamp per chunk, its SSE reader), from ``--aiperf-python`` (default
  ``var/peers3/bin/python``; install with ``python -m venv var/peers3 && var/peers3/bin/pip install
  aiperf==0.13.0``). AIPerf itself decodes the payload JSON later, in separate record-processor
  processes, so its CPU figure here leaves that work out (Ceiling's and bench_serving's include it).
  Its full CLI needs a tokenizer from the Hugging Face hub, which this host cannot reach.

Per client and concurrency: delivered output events/s (events / wall time of the load phase), client
CPU µs per output event (``time.process_time`` of the client process over the load phase, imports
excluded), ITL error = measured gap − true gap (from the server's send times) at p50 and p99 and
the p99 of its absolute value; for clients that keep absolute receive times, the delivery delay
(receive time − the server's send time; one clock) at p50/p99; the server's own tick lateness at
p99 (how late its timer woke: a direct reading of how busy the host's CPUs are); the 1-minute load
average after each client, and the load averages before and after the whole run. A peer whose
environment is missing is left out of the table.

Usage::

    .venv/bin/python benchmarks/scripts/client_bench.py [--streams 16 64 256] [--tokens 256] [--gap-ms 5]
        [--server-cpus 2 --client-cpus 4] [--json rows.json]
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
import urllib.request
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
            if self.buf.startswith(b"GET /_ticks"):
                # The ticker's own timing since the previous call (and reset), for the report.
                self.buf = self.buf[head_end + 4:]
                body = json.dumps(self.server.tick_stats()).encode()
                assert self.transport is not None
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                continue
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
    """Writes one token to every active stream each ``gap`` seconds (absolute deadlines).

    Keeps, per tick with active streams, how late it woke (ns after its deadline) and how long its
    write loop took (ns), so the report can tell server-side lateness from client-side delay.
    """

    def __init__(self, tokens: int, gap: float) -> None:
        self.tokens = tokens
        self.gap = gap
        self.active: list[list[Any]] = []
        self.late: list[int] = []
        self.loop_ns: list[int] = []

    def tick_stats(self) -> dict[str, Any]:
        """Percentiles (ms) of tick lateness and write-loop time since the last call; resets them."""
        late, loop_ns = sorted(self.late), sorted(self.loop_ns)
        self.late, self.loop_ns = [], []

        def pct(v: list[int], p: float) -> float | None:
            return v[min(len(v) - 1, int(p / 100 * len(v)))] / 1e6 if v else None

        return {"ticks": len(late), "late_p50_ms": pct(late, 50), "late_p99_ms": pct(late, 99),
                "write_loop_p50_ms": pct(loop_ns, 50), "write_loop_p99_ms": pct(loop_ns, 99)}

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
            woke = perf()
            if self.active:
                self.late.append(int((loop.time() - nxt) * 1e9))
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
            if self.active:
                self.loop_ns.append(perf() - woke)
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

AIPERF_DRIVER = r'''
import asyncio, json, sys, time
from aiperf.transports.aiohttp_client import AioHttpClient
url, streams, rounds, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
body = json.dumps({"model": "m", "prompt": "hello", "max_tokens": tokens, "stream": True,
                   "stream_options": {"include_usage": True}}).encode()
headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
async def main():
    client = AioHttpClient(timeout=600)
    outs = []
    async def slot():
        for _ in range(rounds):
            outs.append(await client.post_request(url + "/v1/completions", body, headers))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(slot() for _ in range(streams)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    await client.close()
    reqs = []
    for rec in outs:  # AIPerf parses payloads later, in its record processors: not in the timed part
        times, texts = [], []
        for msg in rec.responses:
            for f in msg.packets:
                if f.name == "data" and f.value and f.value != "[DONE]":
                    ch = json.loads(f.value).get("choices") or []
                    if ch and ch[0].get("text"):
                        times.append(msg.perf_ns)
                        texts.append(ch[0]["text"])
        reqs.append({"ok": rec.error is None, "itl": [(b - a) / 1e9 for a, b in zip(times, times[1:])],
                     "text": "".join(texts), "times_ns": times})
    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "requests": reqs}))
asyncio.run(main())
'''

CEILING_DRIVER = r'''
import json, sys, time
import numpy as np
from benchmarks.loadgen import Api, LoadConfig, RequestSpec, loadgen_run, run_summary
url, streams, rounds, tokens, transport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
specs = [RequestSpec(prompt="hello", input_len=-1, output_len=tokens) for _ in range(streams * rounds)]
cfg = LoadConfig(base_url=url, api=Api.COMPLETIONS, model="m", concurrency=streams, keep_text=True, workers=1,
                 transport=transport)
res = loadgen_run(config=cfg, specs=specs)
s = run_summary(res)
rec = res.records
reqs = []
for i in range(len(rec)):
    ev = rec.events_of(i)
    reqs.append({"ok": bool(rec.ok[i]), "itl": (np.diff(ev) / 1e9).tolist(), "text": rec.texts.get(i, ""),
                 "times_ns": ev.tolist()})
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
    events, errors, lat, failed = 0, [], [], 0
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
        if "times_ns" in r:  # receive stamp minus the server's send stamp: one clock, one host
            lat.extend((t - s) / 1e9 for t, s in zip(r["times_ns"], sends))
    return {"client": name, "streams": streams, "events_per_s": events / data["wall_s"],
            "cpu_us_per_event": data["cpu_s"] / events * 1e6 if events else float("nan"),
            "cpu_fraction": data["cpu_s"] / data["wall_s"],
            "itl_err_p50_ms": _pct(errors, 50) * 1e3, "itl_err_p99_ms": _pct(errors, 99) * 1e3,
            "itl_abs_err_p99_ms": _pct([abs(e) for e in errors], 99) * 1e3,
            "delivery_p50_ms": _pct(lat, 50) * 1e3 if lat else None,
            "delivery_p99_ms": _pct(lat, 99) * 1e3 if lat else None,
            "failed": failed, "flags": data.get("flags")}


def _ticks(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/_ticks", timeout=10) as resp:
        return json.loads(resp.read())


def _run_client(argv: list[str], env: dict[str, str] | None = None, cpus: set[int] | None = None) -> dict[str, Any]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    if cpus:
        os.sched_setaffinity(proc.pid, cpus)
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def _cpus(text: str | None) -> set[int] | None:
    return {int(c) for c in text.split(",")} if text else None


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
    p.add_argument("--aiperf-python", default=str(REPO / "var" / "peers3" / "bin" / "python"))
    p.add_argument("--server-cpus", help="pin the server to these CPUs (comma list), e.g. on an idle many-core host")
    p.add_argument("--client-cpus", help="pin every client process to these CPUs (comma list)")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args.port, args.tokens, args.gap_ms / 1e3))
        return 0
    port = _free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", "--port", str(port), "--tokens", str(args.tokens),
                               "--gap-ms", str(args.gap_ms)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    if args.server_cpus:
        os.sched_setaffinity(server.pid, _cpus(args.server_cpus))
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    url = f"http://127.0.0.1:{port}"
    client_cpus = _cpus(args.client_cpus)
    rows = []
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            peer = Path(tmp) / "peer_driver.py"
            peer.write_text(PEER_DRIVER)
            ceiling = Path(tmp) / "ceiling_driver.py"
            ceiling.write_text(CEILING_DRIVER)
            aiperf = Path(tmp) / "aiperf_driver.py"
            aiperf.write_text(AIPERF_DRIVER)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
            for streams in args.streams:
                common = [url, str(streams), str(args.rounds), str(args.tokens)]
                runs: list[tuple[str, list[str], dict[str, str] | None]] = [
                    ("ceiling", [sys.executable, str(ceiling), *common, "http1"], env),
                    ("ceiling-aiohttp", [sys.executable, str(ceiling), *common, "aiohttp"], env),
                ]
                if Path(args.peer_python).exists():
                    runs.append(("sglang-bench_serving", [args.peer_python, str(peer), *common], {**os.environ}))
                if Path(args.aiperf_python).exists():
                    runs.append(("aiperf", [args.aiperf_python, str(aiperf), *common], {**os.environ}))
                for name, argv_, env_ in runs:
                    _ticks(url)
                    row = _analyse(name, streams, _run_client(argv_, env_, client_cpus))
                    row["server"] = _ticks(url)
                    row["load_1m_after"] = os.getloadavg()[0]
                    rows.append(row)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    load_after = os.getloadavg()
    print(f"{args.tokens} tokens per request, {args.gap_ms} ms apart, {args.rounds} requests per stream; "
          f"{os.cpu_count()} CPUs; load average (1/5/15 min) before {_load(load_before)}, after {_load(load_after)}")
    print(f"{'client':<22}{'streams':>8}{'events/s':>10}{'CPU us/ev':>10}{'CPU share':>10}"
          f"{'ITL err p50 ms':>15}{'p99 ms':>8}{'|p99| ms':>9}{'deliv p50/p99 ms':>18}"
          f"{'srv late p99 ms':>16}{'load 1m':>8}{'failed':>7}")
    for r in rows:
        deliv = (f"{r['delivery_p50_ms']:.3f}/{r['delivery_p99_ms']:.3f}" if r["delivery_p50_ms"] is not None else "-")
        late = r["server"].get("late_p99_ms")
        print(f"{r['client']:<22}{r['streams']:>8}{r['events_per_s']:>10.0f}{r['cpu_us_per_event']:>10.1f}"
              f"{r['cpu_fraction']:>10.2f}{r['itl_err_p50_ms']:>15.3f}{r['itl_err_p99_ms']:>8.3f}"
              f"{r['itl_abs_err_p99_ms']:>9.3f}{deliv:>18}{(f'{late:.3f}' if late is not None else '-'):>16}"
              f"{r['load_1m_after']:>8.2f}{r['failed']:>7}")
    if args.json:
        Path(args.json).write_text(json.dumps({"load_before": load_before, "load_after": load_after, "rows": rows},
                                              indent=2))
    return 0


def _load(values: tuple[float, float, float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
