"""Reproduce the seed table with the ``sim`` engine behind the real ``sglang-router``.

Starts a simulated prefill server, decode server and ``sglang_router.launch_router
--pd-disaggregation`` on loopback with profile ``seed-sm120-fallback`` (and a single server for the
TP4 row), runs closed-loop streaming requests of 256 input / 256 output tokens (``ignore_eos``) at
concurrency 1, 8 and 16 through the router, and prints measured tok/s, TPOT and TTFT beside the
seed's numbers with the relative difference.

Protocol per concurrency ``c``: ``c`` client slots start together; each sends ``--rounds`` requests
back to back. Metrics follow ``/work/shared/design/metrics.md``: TTFT to the first event carrying
text, TPOT = (E2E - TTFT) / (output_tokens - 1) averaged over requests, output tokens from the
server's ``usage.completion_tokens``, tok/s = output tokens / (first start to last end).

The servers run with ``--time-scale F`` (default 0.25, four times faster than the profile), and every
measured time is divided by ``F`` (tok/s multiplied) before it is compared, so the table is in the
modelled system's units. Usage::

    .venv/bin/python benchmarks/scripts/sim_seed_reproduction.py [--time-scale 0.25] [--rounds 2]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
INPUT_TOKENS = 256
OUTPUT_TOKENS = 256
# The seed table (DeepSeek-V4-Flash, 8 sm_120 GPUs, SGLang): tok/s, TPOT (s), TTFT (s).
SEED = {
    "single c=1": (10.2, 0.094, 0.696),
    "PD c=1": (9.95, 0.094, 0.893),
    "PD c=8": (24.5, 0.282, 2.0),
    "PD c=16": (25.0, 0.510, 8.8),
}
WORDS = ("abc", "de", "fgh", "ij", "klmn", "op", "qrs", "tu", "vwx", "yz")


@dataclass
class Result:
    """One request as the client saw it (wall seconds)."""

    start: float
    ttft: float
    e2e: float
    output_tokens: int


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prompt(index: int) -> str:
    """Exactly ``INPUT_TOKENS`` tokens under the simulator's tokenizer (words of <= 4 characters)."""
    return " ".join(WORDS[(index + i) % len(WORDS)] for i in range(INPUT_TOKENS))


class Processes:
    """Child processes in their own process groups, stopped on exit."""

    def __init__(self, log_dir: Path) -> None:
        self.children: list[subprocess.Popen[bytes]] = []
        self.log_dir = log_dir

    def start(self, name: str, argv: list[str]) -> None:
        """Start ``argv`` with stdout/stderr to ``<log_dir>/<name>.log``."""
        with open(self.log_dir / f"{name}.log", "wb") as out:
            self.children.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                                  start_new_session=True))

    def stop(self) -> None:
        """SIGTERM every child's group, then SIGKILL what is left after 5 s."""
        for child in self.children:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for child in self.children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def sim_argv(role: str, port: int, profile: str, scale: float, bootstrap: int | None = None) -> list[str]:
    """The simulator's command line for one role."""
    argv = [PYTHON, "-m", "deployments.engines.sim_server", "--role", role, "--host", "127.0.0.1",
            "--port", str(port), "--model-name", "deepseek-v4-flash-sim", "--profile", profile,
            "--startup-delay-s", "0", "--time-scale", str(scale)]
    if bootstrap is not None:
        argv += ["--bootstrap-port", str(bootstrap)]
    return argv


async def wait_ready(session: aiohttp.ClientSession, base: str, timeout_s: float = 60.0) -> None:
    """Poll until a one-token completion through ``base`` succeeds."""
    deadline = time.monotonic() + timeout_s
    body = {"model": "deepseek-v4-flash-sim", "prompt": "warm up", "max_tokens": 1}
    while time.monotonic() < deadline:
        try:
            async with session.post(f"{base}/v1/completions", json=body) as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{base} did not become ready within {timeout_s} s")


async def one_request(session: aiohttp.ClientSession, base: str, index: int) -> Result:
    """One streamed 256/256 completion; raises on any failure or a length mismatch."""
    body = {
        "model": "deepseek-v4-flash-sim", "prompt": prompt(index), "max_tokens": OUTPUT_TOKENS,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first = last = None
    usage: dict[str, int] | None = None
    buf = b""
    async with session.post(f"{base}/v1/completions", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {await resp.text()}")
        async for raw in resp.content.iter_any():
            buf += raw
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        continue
                    msg = json.loads(data)
                    if "error" in msg:
                        raise RuntimeError(f"stream error: {msg['error']}")
                    if msg.get("usage"):
                        usage = msg["usage"]
                    if any(c.get("text") for c in msg.get("choices", [])):
                        now = time.perf_counter()
                        first = first or now
                        last = now
    if first is None or last is None or usage is None:
        raise RuntimeError("stream ended without output or usage")
    if usage["completion_tokens"] != OUTPUT_TOKENS or usage["prompt_tokens"] != INPUT_TOKENS:
        raise RuntimeError(f"length mismatch: {usage}")
    return Result(start=start, ttft=first - start, e2e=last - start, output_tokens=usage["completion_tokens"])


async def closed_loop(base: str, concurrency: int, rounds: int, via_router: bool) -> list[Result]:
    """``concurrency`` slots, each sending ``rounds`` requests back to back."""
    # One connection per request: on a reused keep-alive connection the router's first SSE event
    # was seen arriving ~40 ms after its headers on every other request (the Nagle/delayed-ACK
    # signature); a fresh connection starts in quick-ACK mode. Under --time-scale that wall-clock
    # artifact would be multiplied by 1/F, so it is kept out of the comparison.
    conn = aiohttp.TCPConnector(limit=concurrency + 4, force_close=via_router)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        await wait_ready(session, base)

        async def slot(s: int) -> list[Result]:
            return [await one_request(session, base, s * rounds + r) for r in range(rounds)]

        per_slot = await asyncio.gather(*(slot(s) for s in range(concurrency)))
    return [r for results in per_slot for r in results]


def summarise(results: list[Result], scale: float) -> tuple[float, float, float]:
    """(tok/s, mean TPOT s, mean TTFT s) in modelled units (wall times divided by ``scale``)."""
    begin = min(r.start for r in results)
    end = max(r.start + r.e2e for r in results)
    tokens = sum(r.output_tokens for r in results)
    tok_s = tokens / (end - begin) * scale
    tpot = statistics.mean((r.e2e - r.ttft) / (r.output_tokens - 1) for r in results) / scale
    ttft = statistics.mean(r.ttft for r in results) / scale
    return tok_s, tpot, ttft


async def run(args: argparse.Namespace) -> dict[str, tuple[float, float, float]]:
    """Start the processes, run every configuration, stop the processes; returns measurements."""
    measured: dict[str, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sim-seed-") as tmp:
        log_dir = Path(args.log_dir) if args.log_dir else Path(tmp)
        log_dir.mkdir(parents=True, exist_ok=True)
        procs = Processes(log_dir)
        try:
            p_port, b_port, d_port, r_port, s_port, m_port = (free_port() for _ in range(6))
            procs.start("prefill", sim_argv("prefill", p_port, args.profile, args.time_scale, b_port))
            procs.start("decode", sim_argv("decode", d_port, args.profile, args.time_scale))
            if not args.skip_single:
                procs.start("single", sim_argv("single", s_port, args.single_profile, args.time_scale))
            procs.start("router", [
                PYTHON, "-m", "sglang_router.launch_router", "--pd-disaggregation",
                "--prefill", f"http://127.0.0.1:{p_port}", str(b_port), "--decode", f"http://127.0.0.1:{d_port}",
                "--host", "127.0.0.1", "--port", str(r_port), "--log-level", "warn",
                "--request-timeout-secs", "3600", "--prometheus-host", "127.0.0.1", "--prometheus-port", str(m_port),
            ])
            if not args.skip_single:
                res = await closed_loop(f"http://127.0.0.1:{s_port}", 1, args.rounds + 1, via_router=False)
                measured["single c=1"] = summarise(res, args.time_scale)
                print(f"single c=1 done: {measured['single c=1']}", flush=True)
            for c in args.concurrency:
                res = await closed_loop(f"http://127.0.0.1:{r_port}", c, args.rounds + (1 if c == 1 else 0),
                                        via_router=True)
                measured[f"PD c={c}"] = summarise(res, args.time_scale)
                if args.verbose:
                    for r in sorted(res, key=lambda x: x.start):
                        print(f"  start {r.start:.3f} ttft {r.ttft / args.time_scale:.3f} e2e {r.e2e / args.time_scale:.2f}")
                print(f"PD c={c} done: {measured[f'PD c={c}']}", flush=True)
        finally:
            procs.stop()
    return measured


def table(measured: dict[str, tuple[float, float, float]]) -> str:
    """Markdown table: measured vs seed with % difference for tok/s, TPOT, TTFT."""
    lines = ["| Config | tok/s sim | tok/s seed | diff | TPOT sim | TPOT seed | diff | TTFT sim | TTFT seed | diff |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, (tok, tpot, ttft) in measured.items():
        s_tok, s_tpot, s_ttft = SEED[name]

        def d(a: float, b: float) -> str:
            return f"{(a - b) / b * 100:+.1f}%"

        lines.append(
            f"| {name} | {tok:.2f} | {s_tok} | {d(tok, s_tok)} | {tpot * 1000:.0f} ms | {s_tpot * 1000:.0f} ms | "
            f"{d(tpot, s_tpot)} | {ttft:.3f} s | {s_ttft} s | {d(ttft, s_ttft)} |"
        )
    return "\n".join(lines)


def main() -> int:
    """Run the reproduction and print the table; exit 1 when any number is off by more than 10%."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="seed-sm120-fallback")
    ap.add_argument("--single-profile", default="seed-sm120-fallback-tp4")
    ap.add_argument("--time-scale", type=float, default=0.25)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16])
    ap.add_argument("--skip-single", action="store_true")
    ap.add_argument("--log-dir", default=None, help="keep the servers' and router's logs here")
    ap.add_argument("--verbose", action="store_true", help="print every request's TTFT and E2E")
    args = ap.parse_args()
    measured = asyncio.run(run(args))
    print(table(measured))
    worst = max(abs(m - s) / s for name, vals in measured.items() for m, s in zip(vals, SEED[name], strict=True))
    print(f"worst difference: {worst * 100:.1f}% (time scale {args.time_scale}, {args.rounds} rounds)")
    return 0 if worst <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
