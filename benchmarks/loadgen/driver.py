"""The run driver: sends a dataset at a closed-loop concurrency or an open-loop arrival rate.

Protocol of one run (one grid point):

1. Warmup: ``warmup`` requests at the run's concurrency; their outcomes are dropped.
2. The server's ``generation_tokens_total`` is scraped from ``metrics_urls`` (if given).
3. The measured phase starts at one shared instant ``t0``. Closed loop: ``concurrency`` slots each
   send their next request as soon as the previous one ends. Open loop: request i is due at
   ``t0 + offset_i`` (:func:`.arrivals.arrival_offsets`); with ``concurrency`` set as well it is a
   cap, and the wait for a free slot is the request's client queue time (``start - scheduled``).
4. ``generation_tokens_total`` is scraped again; the delta is compared with the client's tokens.

Dataset generation happens before :func:`loadgen_run` is called and never inside the measured
window (case C11). Workers: one process is usually enough (about 30-40 µs of CPU per streamed
event); when the warmup shows the client's core more than :data:`CPU_BUSY_FRACTION` busy, or when
``workers`` says so, the load is split over N processes (``multiprocessing`` spawn, each with its own
event loop and connection pool): slots are divided, open-loop arrivals dealt round-robin from one
global schedule, and every process starts at the same ``t0`` (perf_counter is CLOCK_MONOTONIC,
shared by all processes of the host). Their records are merged.
"""
from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .arrivals import arrival_offsets, scheduled_rate
from .client import StreamingClient
from .datasets import RequestSpec
from .protocol import Api
from .records import RecordStore

__all__ = ["LoadConfig", "RunResult", "WorkerStats", "loadgen_run", "loadgen_run_async", "server_generation_tokens"]

# Above this share of one core during warmup, the event loop starts delaying reads (timestamps
# get late); half a core leaves room for bursts. Chosen from the client benchmark
# (benchmarks/scripts/client_bench.py): ITL error grows once a process passes ~60% CPU.
CPU_BUSY_FRACTION = 0.5
# A worker whose measured-phase CPU use exceeds this share of a core is flagged client_cpu_bound.
CPU_BOUND_FRACTION = 0.9
START_DELAY_S = 0.05  # lead time for every worker to see t0 before it passes


@dataclass
class LoadConfig:
    """How to drive one run. ``headers`` may hold secrets: they are sent, never stored or shown.

    Exactly one of closed loop (``rate`` None, ``concurrency`` >= 1) or open loop (``rate`` > 0,
    ``concurrency`` optional cap). ``fixed_output``: every request must produce exactly its
    requested ``output_len`` (sent with ``ignore_eos``; checked by the summary). ``workers``: a
    process count, or None to decide from the warmup's CPU use. ``metrics_urls``: the servers'
    Prometheus endpoints to cross-check token counts (decode servers for PD, not the router).
    """

    base_url: str
    api: Api
    model: str
    concurrency: int | None = None
    rate: float | None = None
    burstiness: float = 1.0
    seed: int = 0
    warmup: int = 0
    ignore_eos: bool = False
    fixed_output: bool = False
    connection_limit: int = 0
    force_close: bool = False
    timeout_s: float = 600.0
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    keep_text: bool = False
    workers: int | None = 1
    metrics_urls: list[str] = field(default_factory=list)
    extra_body: dict[str, Any] | None = None

    def validate(self) -> None:
        """Raise ``ValueError`` for an inconsistent config."""
        if self.rate is None and (self.concurrency is None or self.concurrency < 1):
            raise ValueError("a closed-loop run needs concurrency >= 1")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("rate must be > 0")
        if self.workers is not None and self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.connection_limit < 0:
            raise ValueError("connection_limit must be >= 0 (0 = no cap)")


@dataclass
class WorkerStats:
    """One worker process's measured phase: CPU and wall ns, SSE events parsed, requests sent."""

    worker: int
    cpu_ns: int
    wall_ns: int
    events: int
    requests: int

    @property
    def cpu_fraction(self) -> float:
        """Share of one core used during the measured phase."""
        return self.cpu_ns / self.wall_ns if self.wall_ns > 0 else 0.0


@dataclass
class RunResult:
    """What :func:`loadgen_run` measured; :func:`.metrics.run_summary` turns it into numbers.

    ``t0`` (perf_counter ns) is the measured phase's start; ``scheduled_rate`` the rate the open-loop
    schedule itself realises (None for closed loop); ``server_tokens_before``/``after`` the summed
    ``generation_tokens_total`` (None when not scraped or not exposed).
    """

    records: RecordStore
    config: LoadConfig
    t0: int
    workers: list[WorkerStats]
    scheduled_rate: float | None = None
    warmup_cpu_fraction: float | None = None
    server_tokens_before: float | None = None
    server_tokens_after: float | None = None
    server_scrape_errors: list[str] = field(default_factory=list)


def server_generation_tokens(urls: list[str], timeout_s: float = 10.0) -> tuple[float | None, list[str]]:
    """Sum of every ``*generation_tokens_total`` sample at ``urls`` (SGLang, vLLM names), and errors.

    Parsed with ``prometheus_client.parser``; sums over label sets (one per rank in newer SGLang
    releases). None when no URL exposed such a counter.
    """
    total, found, errors = 0.0, False, []
    for url in urls:
        try:
            text = httpx.get(url, timeout=timeout_s).raise_for_status().text
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name.endswith("generation_tokens_total"):
                        total += sample.value
                        found = True
        except (httpx.HTTPError, ValueError) as exc:
            errors.append(f"{url}: {type(exc).__name__}: {exc}")
    return (total if found else None), errors


# ---------------------------------------------------------------------- one event loop
async def _warmup(client: StreamingClient, cfg: LoadConfig, specs: list[RequestSpec], conc: int) -> None:
    queue = list(reversed(specs))

    async def slot() -> None:
        while queue:
            spec = queue.pop()
            await client.send(spec, scheduled=time.perf_counter_ns(), ignore_eos=cfg.ignore_eos)

    await asyncio.gather(*(slot() for _ in range(max(1, min(conc, len(specs))))))


async def _measured(
    client: StreamingClient, cfg: LoadConfig, specs: list[RequestSpec], due: list[int] | None,
    slots: int | None, t0: int, worker: int, indices: list[int] | None = None,
) -> tuple[RecordStore, WorkerStats]:
    store = RecordStore()
    perf = time.perf_counter_ns
    delay = (t0 - perf()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)
    events0, cpu0, wall0 = client.events_seen, time.process_time_ns(), perf()
    idx = indices if indices is not None else list(range(len(specs)))
    if due is None:
        queue = list(reversed(list(zip(idx, specs))))

        async def slot() -> None:
            while queue:
                i, spec = queue.pop()
                now = perf()
                store.add(await client.send(spec, scheduled=now, ignore_eos=cfg.ignore_eos, index=i), worker)

        await asyncio.gather(*(slot() for _ in range(max(1, min(slots or 1, len(specs))))))
    else:
        sem = asyncio.Semaphore(slots) if slots else None

        async def one(i: int, spec: RequestSpec, when: int) -> None:
            if sem is None:
                store.add(await client.send(spec, scheduled=when, ignore_eos=cfg.ignore_eos, index=i), worker)
                return
            async with sem:
                store.add(await client.send(spec, scheduled=when, ignore_eos=cfg.ignore_eos, index=i), worker)

        tasks = []
        for i, spec, when in zip(idx, specs, due):
            wait = (when - perf()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.ensure_future(one(i, spec, when)))
        await asyncio.gather(*tasks)
    stats = WorkerStats(worker=worker, cpu_ns=time.process_time_ns() - cpu0, wall_ns=perf() - wall0,
                        events=client.events_seen - events0, requests=len(store))
    return store, stats


def _client(cfg: LoadConfig) -> StreamingClient:
    return StreamingClient(
        base_url=cfg.base_url, api=cfg.api, model=cfg.model, headers=cfg.headers,
        connection_limit=cfg.connection_limit, force_close=cfg.force_close, timeout_s=cfg.timeout_s,
        keep_text=cfg.keep_text, extra_body=cfg.extra_body,
    )


def _split(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def _schedule(cfg: LoadConfig, n: int) -> list[float] | None:
    if cfg.rate is None:
        return None
    return arrival_offsets(n=n, rate=cfg.rate, burstiness=cfg.burstiness, seed=cfg.seed)


# ---------------------------------------------------------------------- worker processes
def _worker_main(conn: Any, cfg: LoadConfig, specs: list[RequestSpec], due_offsets: list[float] | None,
                 slots: int | None, warmup_specs: list[RequestSpec], worker: int, indices: list[int]) -> None:
    """Body of one worker process: warm up, report ready, wait for t0, run, send records back."""

    async def main() -> None:
        async with _client(cfg) as client:
            if warmup_specs:
                await _warmup(client, cfg, warmup_specs, slots or cfg.concurrency or 1)
            conn.send(("ready", None))
            t0 = conn.recv()
            due = None if due_offsets is None else [t0 + int(o * 1e9) for o in due_offsets]
            store, stats = await _measured(client, cfg, specs, due, slots, t0, worker, indices)
        conn.send(("done", (store, stats)))

    try:
        asyncio.run(main())
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _run_processes(cfg: LoadConfig, specs: list[RequestSpec], warmup: list[RequestSpec], n: int,
                   offsets: list[float] | None) -> tuple[RecordStore, list[WorkerStats], int, tuple[float | None, list[str]]]:
    ctx = multiprocessing.get_context("spawn")
    conc_parts = _split(cfg.concurrency, n) if cfg.concurrency else [None] * n
    warm_parts = _split(len(warmup), n)
    procs, conns, w0 = [], [], 0
    for i in range(n):
        mine = specs[i::n]
        due = offsets[i::n] if offsets is not None else None
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker_main, args=(child, cfg, mine, due, conc_parts[i],
                                                   warmup[w0:w0 + warm_parts[i]], i,
                                                   list(range(len(specs)))[i::n]), daemon=True)
        w0 += warm_parts[i]
        p.start()
        child.close()
        procs.append(p)
        conns.append(parent)
    try:
        for c in conns:
            kind, payload = c.recv()
            if kind == "error":
                raise RuntimeError(f"load worker failed during warmup: {payload}")
        before = server_generation_tokens(cfg.metrics_urls) if cfg.metrics_urls else (None, [])
        t0 = time.perf_counter_ns() + int(START_DELAY_S * 1e9)
        for c in conns:
            c.send(t0)
        stores, stats = [], []
        for c in conns:
            kind, payload = c.recv()
            if kind == "error":
                raise RuntimeError(f"load worker failed: {payload}")
            stores.append(payload[0])
            stats.append(payload[1])
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return RecordStore.merge(stores), stats, t0, before


# ---------------------------------------------------------------------- entry points
async def loadgen_run_async(*, config: LoadConfig, specs: list[RequestSpec],
                            warmup_specs: list[RequestSpec] | None = None) -> RunResult:
    """Run ``specs`` in this process's event loop (one worker; ``config.workers`` is ignored).

    ``warmup_specs`` default to the first ``config.warmup`` specs (reused, not consumed). Scrapes
    ``metrics_urls`` from a thread so the loop keeps running.
    """
    config.validate()
    warmup = warmup_specs if warmup_specs is not None else specs[:config.warmup]
    offsets = _schedule(config, len(specs))
    async with _client(config) as client:
        if warmup:
            await _warmup(client, config, warmup, config.concurrency or 1)
        before = (await asyncio.to_thread(server_generation_tokens, config.metrics_urls)
                  if config.metrics_urls else (None, []))
        t0 = time.perf_counter_ns() + int(START_DELAY_S * 1e9)
        due = None if offsets is None else [t0 + int(o * 1e9) for o in offsets]
        store, stats = await _measured(client, config, specs, due, config.concurrency, t0, 0)
    after = (await asyncio.to_thread(server_generation_tokens, config.metrics_urls)
             if config.metrics_urls else (None, []))
    return RunResult(records=store, config=config, t0=t0, workers=[stats],
                     scheduled_rate=scheduled_rate(offsets) if offsets else None,
                     server_tokens_before=before[0], server_tokens_after=after[0],
                     server_scrape_errors=before[1] + after[1])


def loadgen_run(*, config: LoadConfig, specs: list[RequestSpec], warmup_specs: list[RequestSpec] | None = None) -> RunResult:
    """Run ``specs`` with ``config`` (blocking; call it outside a running event loop).

    ``workers`` = 1: one event loop here. ``workers`` = N: N spawned processes. ``workers`` None:
    the warmup runs here first and its CPU use decides N (at most the CPU count); with no warmup,
    one process. Raises ``ValueError`` for a bad config and ``RuntimeError`` when a worker fails.
    """
    config.validate()
    warmup = warmup_specs if warmup_specs is not None else specs[:config.warmup]
    n = config.workers
    warm_fraction = None
    if n is None:
        n = 1
        if warmup:
            warm_fraction = asyncio.run(_measure_warmup(config, warmup))
            n = max(1, min(os.cpu_count() or 1, math.ceil(warm_fraction / CPU_BUSY_FRACTION)))
    if n == 1:
        result = asyncio.run(loadgen_run_async(config=config, specs=specs, warmup_specs=warmup))
        result.warmup_cpu_fraction = warm_fraction
        return result
    offsets = _schedule(config, len(specs))
    store, stats, t0, before = _run_processes(config, specs, warmup, n, offsets)
    after = server_generation_tokens(config.metrics_urls) if config.metrics_urls else (None, [])
    return RunResult(records=store, config=replace(config), t0=t0, workers=stats,
                     scheduled_rate=scheduled_rate(offsets) if offsets else None, warmup_cpu_fraction=warm_fraction,
                     server_tokens_before=before[0], server_tokens_after=after[0],
                     server_scrape_errors=before[1] + after[1])


async def _measure_warmup(cfg: LoadConfig, warmup: list[RequestSpec]) -> float:
    async with _client(cfg) as client:
        cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
        await _warmup(client, cfg, warmup, cfg.concurrency or 1)
        wall = time.perf_counter_ns() - wall0
        return (time.process_time_ns() - cpu0) / wall if wall > 0 else 0.0
