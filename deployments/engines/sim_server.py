"""The ``sim`` engine: a real HTTP server that behaves like an SGLang server, driven by a profile.

Run::

    python -m deployments.engines.sim_server --role single|prefill|decode --host 127.0.0.1 --port P
        [--bootstrap-port B]  (prefill only: the KV bootstrap listener the router points decode at)
        --model-name NAME --profile NAME_OR_PATH
        [--startup-delay-s X] (wall seconds; overrides the profile's startup_delay_s)
        [--time-scale F]      (multiplies every modelled duration; 0.1 runs ten times faster)
        [--seed S]            (seeds the pseudo-EOS positions and the profile's service-time jitter)
        [--stream-coalesce N] (the stream events of N output tokens go out in one network write, as
                              a buffering proxy in front of an engine delivers them; default 1:
                              each event is written as it is made. A client then reads N events at
                              once, which Ceiling's load generator reports as ``itl_coalesced``)
        [--context-length-unset] (``/get_server_info`` reports ``context_length`` null, as SGLang
                              does when ``--context-length`` was not on its command line; the
                              profile's context is still ``/v1/models``' ``max_model_len``)
        [--health-busy-s X]   (wall seconds ``/health`` computes on the serving loop before it
                              answers while a generation is in flight, blocking every other
                              request meanwhile, as a server that serves one request at a time
                              (llama-cpp-python's) answers its health check only between
                              requests; default 0: ``/health`` answers at once)

Environment: ``CEILING_SIM_FAIL_GENERATE=1`` keeps ``/health`` and ``/v1/models`` answering but
fails every generation with 500; ``CEILING_SIM_IGNORE_SIGTERM=1`` ignores SIGTERM (stop tests need
an engine that only SIGKILL ends). Otherwise SIGTERM and SIGINT stop the server cleanly, after
which the process ends by that same signal (as uvicorn does since 0.29, and as the GNU C library
manual's "Termination in Handler" asks), so whoever waits for it reads "killed by signal 15
(SIGTERM)" rather than an exit code 0 that hides that someone stopped it.

What the real ``sglang-router`` 0.3.2 does with these servers (observed by running
``python -m sglang_router.launch_router --pd-disaggregation --prefill http://H:P1 B1 --decode
http://H:P2`` against logging servers):

- Start-up, per worker: ``GET /health`` until 200 (it waits up to ``--worker-startup-timeout-secs``,
  so a worker still in its startup delay is simply waited for), then ``GET /server_info`` and
  ``GET /model_info`` (JSON; the router reads what it recognises and tolerates the rest). It also
  opens a couple of HTTP/2 prior-knowledge connections (a ``PRI *`` preface) to probe for gRPC
  workers; an HTTP/1.1 server rejects them and the router falls back to HTTP, so the simulator
  silences aiohttp's log lines for that probe. Afterwards ``GET /health`` periodically.
- Per request (``/generate``, ``/v1/completions``, ``/v1/chat/completions``): the router sends the
  same JSON body to the prefill and to the decode worker at the same time, adding
  ``bootstrap_host`` (the prefill URL's host), ``bootstrap_port`` (the port given after the prefill
  URL) and a random 64-bit ``bootstrap_room``; it fills in defaults (e.g. chat's ``max_tokens``
  arrives as ``max_completion_tokens``) and forwards ``Authorization``. It waits for both
  responses' headers, then relays the decode response (status, body or SSE stream) to the client;
  the prefill body is read and dropped. A non-2xx prefill answer fails the request with the
  router's own 500 ``prefill_internal_error`` whatever decode does.
- So here: prefill answers after its modelled prefill batch (one token, like SGLang's prefill
  forward) and publishes the room on its bootstrap listener; decode long-polls
  ``http://bootstrap_host:bootstrap_port/kv/<room>``, sleeps the modelled transfer, joins the decode
  batch and streams every token to the router. Decode logs ``kv fetched room=...`` and counts
  ``sim:kv_fetch_total``.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from deployments.engines.simcore.app import ServerState, http_app
from deployments.engines.simcore.engine import ROLES, SimEngine
from deployments.engines.simcore.kv import KvClient, KvStore, bootstrap_app
from deployments.engines.simcore.metrics import SimMetrics
from deployments.engines.simcore.profile import ProfileError, SimProfile, profile_load

log = logging.getLogger("ceiling.sim")

KV_FETCH_WAIT_S = 300.0
FALLBACK_VERSION = "0.1.0"


def sim_version() -> str:
    """``sim-<Ceiling version>``; the version comes from ``controlplane.settings.CEILING_VERSION``."""
    try:
        from controlplane.settings import CEILING_VERSION  # noqa: PLC0415 - optional, heavy import
    except Exception:  # noqa: BLE001 - the simulator must run without a configured control plane
        return f"sim-{FALLBACK_VERSION}"
    return f"sim-{CEILING_VERSION}"


def env_flag(name: str) -> bool:
    """True when environment variable ``name`` is ``1``/``true``/``yes``/``on``; raises on junk."""
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    # The value is not echoed: whatever was put in the variable (a secret, by mistake or not)
    # would reach the log and the process's failure reason.
    raise SystemExit(f"{name} must be 0 or 1 (or true/false, yes/no, on/off); its value is none of these")


class _GrpcProbeFilter(logging.Filter):
    """Drops aiohttp's traceback for the router's HTTP/2 prior-knowledge probe (see module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, BadHttpMessage) and "PRI" in str(exc))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line documented in the module docstring."""
    p = argparse.ArgumentParser(prog="python -m deployments.engines.sim_server", description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=ROLES, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bootstrap-port", type=int, default=None)
    p.add_argument("--model-name", required=True)
    p.add_argument("--profile", required=True)
    p.add_argument("--startup-delay-s", type=float, default=None)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stream-coalesce", type=int, default=1, metavar="N")
    p.add_argument("--context-length-unset", action="store_true")
    p.add_argument("--health-busy-s", type=float, default=0.0, metavar="SECONDS")
    args = p.parse_args(argv)
    if not 1 <= args.stream_coalesce <= 1_000_000:
        p.error("--stream-coalesce must be a whole number of tokens from 1 to 1000000")
    if args.role == "prefill" and args.bootstrap_port is None:
        p.error("--bootstrap-port is required for --role prefill")
    if args.role != "prefill" and args.bootstrap_port is not None:
        p.error("--bootstrap-port is only for --role prefill")
    if args.time_scale <= 0:
        p.error("--time-scale must be > 0")
    if args.startup_delay_s is not None and args.startup_delay_s < 0:
        p.error("--startup-delay-s must be >= 0")
    if not 0 <= args.health_busy_s <= 3600:
        p.error("--health-busy-s must be a number of seconds from 0 to 3600")
    return args


def server_args(args: argparse.Namespace, profile: SimProfile) -> dict[str, Any]:
    """The SGLang-style argument dict reported by ``/get_server_info``."""
    d = profile.decode
    return {
        "served_model_name": args.model_name,
        "host": args.host,
        "port": args.port,
        "tp_size": 1,
        "dp_size": 1,
        "disaggregation_mode": args.role if args.role != "single" else "null",
        "disaggregation_bootstrap_port": args.bootstrap_port,
        "disaggregation_transfer_backend": "sim",
        "max_running_requests": d.max_running_requests,
        "max_total_num_tokens": d.kv_capacity_tokens,
        "chunked_prefill_size": profile.prefill.max_batch_tokens,
        # SGLang reports the argument as given: null unless --context-length was on its command line.
        "context_length": None if getattr(args, "context_length_unset", False) else profile.context_length,
        "random_seed": args.seed,
        "profile": profile.name,
    }


async def serve(args: argparse.Namespace, profile: SimProfile) -> int | None:
    """Run the server until SIGTERM/SIGINT (unless ignored) stops it; returns that signal's
    number once the server has shut down cleanly."""
    fail_generate = env_flag("CEILING_SIM_FAIL_GENERATE")
    metrics = SimMetrics(args.model_name)
    store = KvStore(metrics) if args.role == "prefill" else None
    client = KvClient(KV_FETCH_WAIT_S) if args.role == "decode" else None
    engine = SimEngine(
        profile=profile, role=args.role, time_scale=args.time_scale, metrics=metrics, seed=args.seed,
        kv_fetch=client.fetch if client else None, kv_publish=store.publish if store else None,
    )
    delay = args.startup_delay_s if args.startup_delay_s is not None else profile.startup_delay_s * args.time_scale
    started = time.monotonic()
    state = ServerState(
        engine=engine, model_name=args.model_name, role=args.role, version=sim_version(), started_at=started,
        ready_at=started + delay, fail_generate=fail_generate, server_args=server_args(args, profile),
        seed=args.seed, started_at_wall=time.time(), stream_coalesce=args.stream_coalesce,
        health_busy_s=args.health_busy_s,
    )
    engine.start()
    # handler_cancellation: a client (or the router) that hangs up aborts its request, as in SGLang.
    runners = [web.AppRunner(http_app(state), access_log=None, handler_cancellation=True)]
    if store is not None:
        runners.append(web.AppRunner(bootstrap_app(store), access_log=None))
    ports = [args.port] + ([args.bootstrap_port] if store is not None else [])
    for runner, port in zip(runners, ports, strict=True):
        await runner.setup()
        await web.TCPSite(runner, args.host, port, reuse_address=True).start()
    log.info(
        "sim server role=%s listening on %s:%s%s profile=%s time_scale=%s startup_delay_s=%.3f fail_generate=%s",
        args.role, args.host, args.port, f" bootstrap={args.bootstrap_port}" if store else "", profile.name,
        args.time_scale, delay, fail_generate,
    )
    stop = asyncio.Event()
    caught: list[int] = []

    def on_signal(sig: int) -> None:
        caught.append(sig)
        stop.set()

    loop = asyncio.get_running_loop()
    if not env_flag("CEILING_SIM_IGNORE_SIGTERM"):
        loop.add_signal_handler(signal.SIGTERM, on_signal, signal.SIGTERM)
    loop.add_signal_handler(signal.SIGINT, on_signal, signal.SIGINT)
    if delay > 0:
        loop.call_later(delay, lambda: log.info("startup delay over; /health answers 200"))
    await stop.wait()
    log.info("stopping")
    await engine.stop()
    for runner in reversed(runners):
        await runner.cleanup()
    if client:
        await client.close()
    return caught[0] if caught else None


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status (2 for a bad command line or profile, 1
    when a port cannot be bound). A server stopped by SIGTERM or SIGINT does not return: it
    ends by that signal once shut down (see the module docstring)."""
    args = parse_args(argv)
    if env_flag("CEILING_SIM_IGNORE_SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.server").addFilter(_GrpcProbeFilter())
    try:
        profile = profile_load(args.profile)
    except ProfileError as exc:
        print(f"sim_server: {exc}", file=sys.stderr)
        return 2
    try:
        stopped_by = asyncio.run(serve(args, profile))
    except OSError as exc:
        print(f"sim_server: cannot listen: {exc}", file=sys.stderr)
        return 1
    if stopped_by is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(stopped_by, signal.SIG_DFL)
        signal.raise_signal(stopped_by)
    return 0


if __name__ == "__main__":
    sys.exit(main())
