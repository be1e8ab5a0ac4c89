"""Engine ``/metrics``: scrape, parse with ``prometheus_client``'s text parser, normalise across
SGLang, vLLM and ``sim``, and turn token counters into live tok/s.

Plain Python (no Django at import time).

**Names** (the first present wins, per row):

=================  ===============================  =========================================
quantity           SGLang (and ``sim``)             vLLM
=================  ===============================  =========================================
running requests   ``sglang:num_running_reqs``      ``vllm:num_requests_running``
queued requests    ``sglang:num_queue_reqs``        ``vllm:num_requests_waiting``
KV-cache usage     ``sglang:token_usage``           ``vllm:kv_cache_usage_perc`` (current),
                                                    ``vllm:gpu_cache_usage_perc`` (older)
prompt tokens      ``sglang:prompt_tokens_total``   ``vllm:prompt_tokens_total``
generated tokens   ``sglang:generation_tokens_total`` ``vllm:generation_tokens_total``
=================  ===============================  =========================================

**The router** (``sglang-router``, whose exposition is served on its ``--prometheus-port``) has no
token counters (it forwards its workers' tokens) and no live count of the requests it holds
(``smg_worker_requests_active`` counts a PD request once on its prefill and once on its decode
worker, and ``smg_http_inflight_request_age_count`` is refreshed only every ~20 s), so its
``running``, ``queued`` and KV usage stay None. Its reading has the counters
``smg_router_requests_total`` (requests routed, summed over route labels) and the 5xx
part of ``smg_http_responses_total`` (by its ``status_code`` label) turned into ``req_s`` and
``error_5xx_s``, and ``workers_healthy`` / ``workers_total`` from ``smg_worker_health`` (1 =
healthy, one series per worker URL). Requests end in whole units seconds apart, so their rates are
taken over the last :data:`REQUEST_RATE_WINDOW_S` seconds of scrapes rather than between two
scrapes half a second apart (which would read 0 or 2 req/s at a steady 0.7). Names as sglang-router 0.3.2 exports them (read off a real
router in front of ``sim`` workers); engines export none of them, so one normaliser serves all.

Sources: SGLang ``docs/references/production_metrics.md`` and vLLM ``docs/design/metrics.md``
(excerpts in ``/work/shared/fixtures/engine-metrics/``); the ``sim`` engine exports SGLang's names
(:mod:`deployments.engines.simcore.metrics`). KV usage is a fraction 0..1 in both engines (vLLM's
``_perc`` name notwithstanding: "1 means 100 percent usage"). llama-cpp-python's server has no
``/metrics`` at all, so its values are None with that reason.

**Labels.** One logical series may appear once per label set. Labels that name a *replica*
(``model_name``, vLLM's ``engine`` index, SGLang's ``dp_rank`` and ``engine_type``) are summed
over: two data-parallel engines run twice the requests. Labels that name a *shard of one
replica* (SGLang's ``tp_rank``, ``pp_rank``, ``moe_ep_rank``) repeat the same replica-level value,
so the largest of them stands for the replica instead of being added up. KV usage is averaged
over replicas (each has its own pool), the other quantities are summed.

**tok/s** is the delta of ``generation_tokens_total`` (and ``prompt_tokens_total``) between two
scrapes of the same process divided by the seconds between them; never SGLang's
``gen_throughput`` gauge, which keeps its last value when traffic stops. A token counter that
is declared (``# TYPE``) with no series yet reads 0, and one absent from the previous scrape of
the same process counts from 0 (a labelled series appears with the first token, so the tokens
of a fresh engine's first burst are not lost); a counter that went down (engine restarted, same
port) gives None for that interval, never a negative rate; a new process identity (pid, start
time) starts over.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import math
import re
import threading
import time
from collections.abc import Hashable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from deployments.telemetry.loop import LoopThread

#: Seconds one scrape may take before it counts as failed; short so a hung engine cannot stall
#: a 10 Hz sampler.
SCRAPE_TIMEOUT_S = 0.5
#: A process is scraped at most this often (seconds), whatever the sampler's rate.
SCRAPE_MIN_PERIOD_S = 0.5
#: Share of the scrape period a scrape may come early: a sampler at 2 Hz asks every 0.5 s give or
#: take a few milliseconds of scheduling, and with an exact test every such early ask skipped
#: its scrape (about half the samples of a 2 Hz sampler reused the previous reading).
SCRAPE_PERIOD_SLACK = 0.1
#: Seconds of past scrapes a router's request and 5xx rates are averaged over.
REQUEST_RATE_WINDOW_S = 5.0

RUNNING = ("sglang:num_running_reqs", "vllm:num_requests_running")
QUEUED = ("sglang:num_queue_reqs", "vllm:num_requests_waiting")
KV_USAGE = ("sglang:token_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PROMPT_TOKENS = ("sglang:prompt_tokens_total", "vllm:prompt_tokens_total")
GENERATION_TOKENS = ("sglang:generation_tokens_total", "vllm:generation_tokens_total")
ROUTER_REQUESTS = ("smg_router_requests_total",)
ROUTER_RESPONSES = "smg_http_responses_total"
ROUTER_WORKER_HEALTH = "smg_worker_health"
SHARD_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"})
_WANTED = frozenset((*RUNNING, *QUEUED, *KV_USAGE, *PROMPT_TOKENS, *GENERATION_TOKENS, *ROUTER_REQUESTS,
                     ROUTER_RESPONSES, ROUTER_WORKER_HEALTH))

_FAMILIES = sorted({n[: -len("_total")] if n.endswith("_total") else n for n in _WANTED}, key=len, reverse=True)
_PREFIXES = (*_FAMILIES, *(f"# TYPE {n}" for n in _FAMILIES))
# A sample line of a wanted series ("name{labels} value" or "name value"), or its TYPE line.
_RELEVANT = re.compile(r"^(?:# TYPE )?(?:" + "|".join(re.escape(n) for n in _FAMILIES) + r")(?:_total)?[ {]")

#: Why an engine has no scrape, by engine name (as in ``deployments.choices.Engine``).
NO_METRICS = {
    "llamacpp": "llama-cpp-python's server exposes no /metrics",
}


@dataclass
class EngineReading:
    """One process's engine figures: ``deployment.sample``'s ``engine`` object plus when it was
    scraped (``scraped_at``, ``time.monotonic()``; None when never scraped)."""

    running: float | None = None
    queued: float | None = None
    kv_usage: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    gen_tok_s: float | None = None
    prompt_tok_s: float | None = None
    requests_total: float | None = None
    req_s: float | None = None
    errors_5xx_total: float | None = None
    error_5xx_s: float | None = None
    workers_healthy: int | None = None
    workers_total: int | None = None
    metrics_error: str | None = None
    scraped_at: float | None = field(default=None, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """The wire form (no ``scraped_at``)."""
        out = asdict(self)
        out.pop("scraped_at")
        return out

    @classmethod
    def unavailable(cls, reason: str) -> "EngineReading":
        """A reading with every value None and ``metrics_error`` = ``reason``."""
        return cls(metrics_error=reason)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def relevant_lines(text: str) -> str:
    """Only the lines of ``text`` about the series this module reads: their samples and
    ``# TYPE`` lines (``# HELP`` text is not needed). An engine's exposition is mostly histogram
    buckets; handing the parser only the few wanted lines cuts the cost of a scrape's parse by
    an order of magnitude (about 1.8 ms → 0.12 ms for the ``sim``'s 165 lines on the 2-core
    development host). A cheap prefix test runs first, the exact name check only on its hits."""
    return "\n".join(
        line for line in text.splitlines() if line.startswith(_PREFIXES) and _RELEVANT.match(line)
    ) + "\n"


def normalise_metrics(text: str) -> dict[str, float | None]:
    """The normalised quantities of a Prometheus text exposition (see the module doc):
    ``{"running", "queued", "kv_usage", "prompt_tokens_total", "generation_tokens_total",
    "requests_total", "errors_5xx_total", "workers_healthy", "workers_total"}`` (the last four
    from a router's series), None for each quantity the text does not carry.

    Raises:
        ValueError: the text is not Prometheus exposition format (the parser's message).
    """
    # name → replica key → largest value over shards of that replica
    by_name: dict[str, dict[tuple, float]] = {}
    errors_5xx: float | None = None
    health: dict[str, float] = {}
    declared: set[str] = set()  # counters with a TYPE line (read as 0 while they have no series)
    for family in text_string_to_metric_families(relevant_lines(text)):
        if family.type == "counter":
            declared.add(f"{family.name}_total")
        for sample in family.samples:
            if sample.name not in _WANTED:
                continue
            value = _finite(float(sample.value))
            if value is None:
                continue
            if sample.name == ROUTER_RESPONSES:
                # Present from the router's first response on: 0 until a 5xx was answered.
                errors_5xx = (errors_5xx or 0.0) + (value if str(sample.labels.get("status_code", "")).startswith("5")
                                                    else 0.0)
                continue
            if sample.name == ROUTER_WORKER_HEALTH:
                health[sample.labels.get("worker", "")] = value
                continue
            replica = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in SHARD_LABELS))
            per = by_name.setdefault(sample.name, {})
            per[replica] = max(per.get(replica, value), value)

    def pick(names: tuple[str, ...], *, mean: bool = False) -> float | None:
        for name in names:
            values = list(by_name.get(name, {}).values())
            if values:
                return sum(values) / len(values) if mean else sum(values)
        return None

    def tokens(names: tuple[str, ...]) -> float | None:
        # A labelled counter has no series before its first increment (``sim`` and SGLang
        # declare the token counters at start and create the series with the first token):
        # declared without a series, it is 0, so the rate of the first burst is known.
        value = pick(names)
        return 0.0 if value is None and any(n in declared for n in names) else value

    return {
        "running": pick(RUNNING),
        "queued": pick(QUEUED),
        "kv_usage": pick(KV_USAGE, mean=True),
        "prompt_tokens_total": tokens(PROMPT_TOKENS),
        "generation_tokens_total": tokens(GENERATION_TOKENS),
        "requests_total": pick(ROUTER_REQUESTS),
        "errors_5xx_total": errors_5xx,
        "workers_healthy": sum(1 for v in health.values() if v >= 1) if health else None,
        "workers_total": len(health) if health else None,
    }


def counter_rate(previous: float | None, current: float | None, seconds: float) -> float | None:
    """(current − previous) / seconds, or None when either value is unknown, ``seconds`` ≤ 0,
    or the counter went down (a reset: the engine restarted)."""
    if previous is None or current is None or seconds <= 0 or current < previous:
        return None
    return round((current - previous) / seconds, 3)


@dataclass(frozen=True)
class ScrapeTarget:
    """One process to scrape: ``key`` (the ServerProcess id), the ``/metrics`` URL, the engine
    name (``sglang``, ``vllm``, ``sim``; only for the error hint) and the process ``identity``
    (pid, start ticks): counters of a different identity never make a rate."""

    key: Hashable
    url: str
    engine: str
    identity: tuple


class _CounterState:
    __slots__ = ("identity", "t", "prompt", "gen", "window")

    def __init__(self, identity: tuple, t: float, values: dict[str, float | None],
                 window: list[tuple[float, float | None, float | None]] | None = None) -> None:
        self.identity, self.t = identity, t
        self.prompt, self.gen = values.get("prompt_tokens_total"), values.get("generation_tokens_total")
        # (t, requests_total, errors_5xx_total) of the scrapes of the last REQUEST_RATE_WINDOW_S
        # seconds, oldest first, this one last.
        self.window = [*(window or []), (t, values.get("requests_total"), values.get("errors_5xx_total"))]
        while len(self.window) > 2 and t - self.window[1][0] >= REQUEST_RATE_WINDOW_S:
            self.window.pop(0)


def reading_from_text(text: str, *, t: float, identity: tuple, state: dict[Hashable, _CounterState],
                      key: Hashable) -> EngineReading:
    """Parse ``text`` and compute rates against ``state[key]`` (the previous scrape of the same
    process), then remember this scrape in ``state``. A parse failure gives a reading with
    ``metrics_error`` and leaves ``state`` alone."""
    try:
        values = normalise_metrics(text)
    except ValueError as exc:
        return EngineReading(metrics_error=f"unparseable /metrics: {exc}", scraped_at=t)
    return reading_from_values(values, t=t, identity=identity, state=state, key=key)


def reading_from_values(values: dict[str, float | None], *, t: float, identity: tuple,
                        state: dict[Hashable, _CounterState], key: Hashable) -> EngineReading:
    """:func:`reading_from_text` after parsing: rates of ``values`` (from
    :func:`normalise_metrics`) against ``state[key]``, which is then replaced by this scrape."""
    prev = state.get(key)
    rates: dict[str, float | None] = {"gen_tok_s": None, "prompt_tok_s": None, "req_s": None, "error_5xx_s": None}
    same = prev is not None and prev.identity == identity
    if same:
        dt = t - prev.t
        # A token counter appears with the engine's first token (``sim`` and SGLang create the
        # labelled series lazily): absent in the previous scrape of this process, it was 0 then.
        gen, prompt = values.get("generation_tokens_total"), values.get("prompt_tokens_total")
        rates["gen_tok_s"] = counter_rate(prev.gen if prev.gen is not None or gen is None else 0.0, gen, dt)
        rates["prompt_tok_s"] = counter_rate(prev.prompt if prev.prompt is not None or prompt is None else 0.0,
                                             prompt, dt)
        # Over the window: from the oldest scrape kept (the newest one at least
        # REQUEST_RATE_WINDOW_S old, or the previous scrape while the window fills up).
        t0, req0, err0 = prev.window[0]
        # Both series appear with the router's first request / response: before, the count was 0.
        req0 = req0 if req0 is not None or values.get("requests_total") is None else 0.0
        rates["req_s"] = counter_rate(req0, values.get("requests_total"), t - t0)
        err0 = err0 if err0 is not None or values.get("errors_5xx_total") is None else 0.0
        rates["error_5xx_s"] = counter_rate(err0, values.get("errors_5xx_total"), t - t0)
    state[key] = _CounterState(identity, t, values, prev.window if same else None)
    return EngineReading(**values, **rates, scraped_at=t)


def _error_text(target: ScrapeTarget, exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return f"GET {target.url} timed out after {timeout_s:g} s"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"GET {target.url}: cannot connect ({exc.os_error.strerror or exc})"
    return f"GET {target.url}: {type(exc).__name__}: {exc}"


class MetricsScraper:
    """Scrapes many engines concurrently without blocking the sampler.

    Scrapes run on a long-lived asyncio loop (``loop``, a :class:`~.loop.LoopThread`; its own
    when not given) with one shared ``aiohttp.ClientSession`` (keep-alive, ``timeout_s`` per
    request). aiohttp rather than httpx because of its cost: one
    GET of the ``sim``'s ``/metrics`` over a kept-alive connection took 167 µs of client CPU with
    aiohttp 3.12 and 1073 µs with httpx 0.28's ``AsyncClient`` on the 2-core development host,
    and a 10 Hz sampler pays that per process. :meth:`request` starts a scrape of each target whose last scrape
    began at least ``min_period_s`` ago (less :data:`SCRAPE_PERIOD_SLACK` of it) and none is in
    flight, waits at most ``wait_s`` for them, and returns; results land in :meth:`latest` whenever they arrive, so one slow engine
    delays nobody. Thread-safe; :meth:`close` stops the loop.
    """

    def __init__(self, *, timeout_s: float = SCRAPE_TIMEOUT_S, min_period_s: float = SCRAPE_MIN_PERIOD_S,
                 loop: LoopThread | None = None, clock=time.monotonic) -> None:
        self.timeout_s = timeout_s
        self.min_period_s = min_period_s
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: dict[Hashable, EngineReading] = {}
        self._state: dict[Hashable, _CounterState] = {}
        self._started: dict[Hashable, float] = {}
        self._inflight: dict[Hashable, concurrent.futures.Future] = {}
        self._own_loop = loop is None
        self._loop = loop or LoopThread(name="metrics-scraper")
        self._client: aiohttp.ClientSession | None = None

    async def _session(self) -> aiohttp.ClientSession:
        if self._client is None:
            self._client = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=256, limit_per_host=4),
            )
        return self._client

    async def _scrape(self, target: ScrapeTarget) -> None:
        try:
            client = await self._session()
            async with client.get(target.url) as resp:
                body = await resp.text()
                status = resp.status
            t = self._clock()
            if status != 200:
                hint = " (SGLang serves /metrics only with --enable-metrics)" if target.engine == "sglang" else ""
                reading = EngineReading(metrics_error=f"GET {target.url}: HTTP {status}{hint}", scraped_at=t)
            else:
                try:
                    values = normalise_metrics(body)
                except ValueError as exc:
                    reading = EngineReading(metrics_error=f"unparseable /metrics: {exc}", scraped_at=t)
                else:
                    with self._lock:
                        reading = reading_from_values(values, t=t, identity=target.identity, state=self._state,
                                                      key=target.key)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, UnicodeDecodeError) as exc:
            reading = EngineReading(metrics_error=_error_text(target, exc, self.timeout_s), scraped_at=self._clock())
        with self._lock:
            self._latest[target.key] = reading
            self._inflight.pop(target.key, None)

    async def _scrape_many(self, targets: list[ScrapeTarget]) -> None:
        await asyncio.gather(*(self._scrape(t) for t in targets))

    def request(self, targets: Iterable[ScrapeTarget], *, wait_s: float = 0.0) -> int:
        """Start the due scrapes among ``targets`` (one hand-over to the loop thread for all of
        them); wait up to ``wait_s`` seconds for them. Returns how many were started."""
        now = self._clock()
        period = self.min_period_s * (1.0 - SCRAPE_PERIOD_SLACK)
        due = []
        with self._lock:
            for target in targets:
                if target.key in self._inflight:
                    continue
                if now - self._started.get(target.key, float("-inf")) < period:
                    continue
                self._started[target.key] = now
                due.append(target)
            if not due:
                return 0
            fut = self._loop.submit(self._scrape_many(due))
            for target in due:
                self._inflight[target.key] = fut
        if wait_s > 0:
            concurrent.futures.wait([fut], timeout=wait_s)
        return len(due)

    def wait_inflight(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` seconds for the scrapes in flight to finish."""
        with self._lock:
            futures = set(self._inflight.values())
        if futures and timeout_s > 0:
            concurrent.futures.wait(futures, timeout=timeout_s)

    def scrape_now(self, targets: Iterable[ScrapeTarget]) -> None:
        """Scrape every target now (ignoring ``min_period_s``) and wait for all of them; for
        tests and the benchmark."""
        targets = list(targets)
        with self._lock:
            for target in targets:
                self._started.pop(target.key, None)
        period, self.min_period_s = self.min_period_s, 0.0
        try:
            self.request(targets, wait_s=self.timeout_s + 5.0)
        finally:
            self.min_period_s = period

    def latest(self, key: Hashable) -> EngineReading | None:
        """The most recent reading of ``key`` (None before its first scrape finished)."""
        with self._lock:
            return self._latest.get(key)

    def forget(self, keep: Iterable[Hashable]) -> None:
        """Drop state of every key not in ``keep`` (processes that ended)."""
        keep = set(keep)
        with self._lock:
            for store in (self._latest, self._state, self._started):
                for key in [k for k in store if k not in keep]:
                    del store[key]

    def close(self) -> None:
        """Close the HTTP client and, when the scraper started its own loop, stop it; safe to
        call twice."""
        client, self._client = self._client, None
        if client is not None:
            try:
                self._loop.run(client.close(), timeout_s=5)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        if self._own_loop:
            self._loop.close()
