"""The run driver: sends a dataset at a closed-loop concurrency or an open-loop arrival rate.

Protocol of one run (one grid point):

1. Warmup: ``warmup`` requests at the run's concurrency; their outcomes are dropped.
2. The server's ``generation_tokens_total`` is scraped from ``metrics_urls`` (if given).
3. The measured phase starts at one shared instant ``t0``. Closed loop: ``concurrency`` slots each
   send their next request as soon as the previous one ends. Open loop: request i is due at
   ``t0 + offset_i`` (:func:`.arrivals.arrival_offsets`); with ``concurrency`` set as well it is a
   cap, and the wait for a free slot is the request's client queue time (``start - scheduled``).
   A duration-limited run (``duration_s``) cycles through the dataset and sends nothing at or after
   ``t0 + duration_s``; requests already in flight then finish (each bounded by ``timeout_s``).
   A run whose target is gone ends early: after :data:`UNREACHABLE_FAILURES` requests in a row
   that the server never answered (connection refused, or reset/closed before any response byte,
   with no answered request in between) nothing new is sent, the requests in flight finish, and
   the result says why (``stopped_early``) and how many planned requests were never sent
   (``not_sent``; they are not failures).
4. ``generation_tokens_total`` is scraped again; the delta is compared with the client's tokens.

A run its caller stops (``should_stop``) during the measured phase ends the same way in every mode
(closed loop, open loop, time-limited, several worker processes): nothing new is sent, the
requests in flight are aborted (:meth:`.client.StreamingClient.abort_inflight`) and recorded as
failed with ``aborted: <the caller's reason>``, and :class:`LoadgenStopped` carries the partial
:class:`RunResult` (``halted`` set, ``not_sent`` the planned requests never sent). A stop before
the measured phase (prompts, warmup) has no result.

No record is lost to a part of the run that ignores the stop. Every event loop keeps a ledger
(:class:`_Ledger`) of the requests it sent and of those that came back; a worker process also
appends both to a spool file as they happen, which its parent reads whatever became of the
worker (the records travel that way, not through the pipe). An event loop or worker process that
has not handed back its outcome :data:`STOP_RESULTS_S` after the stop is left behind (a worker is
killed): its records up to then are kept, and its requests still in flight are recorded as failed
``aborted: <reason>`` ending at the stop, never as successes (``WorkerStats.unanswered``). So a
stop returns within about ``STOP_RESULTS_S`` + :data:`STOP_LOOP_GRACE_S` whatever the workers do.

Dataset generation happens before :func:`loadgen_run` is called and never inside the measured
window (case C11). During the measured phase the garbage collector is kept quiet
(:func:`_quiet_gc`): everything allocated before ``t0`` is frozen out of collections and the
young-generation threshold is raised, so a collection pass cannot stall the event loop between a
network read and its timestamp; the previous settings are restored afterwards.

Workers: one process is usually enough (about 10-25 µs of CPU per streamed event, see
``benchmarks/scripts/client_bench.py``: one core carries ~50 000 events/s); when the warmup shows the client's core more than
:data:`CPU_BUSY_FRACTION` busy, or when ``workers`` says so, the load is split over N processes
(``multiprocessing`` spawn, each with its own event loop and connection pool): slots are divided,
open-loop arrivals dealt round-robin from one global schedule, and every process starts at the same
``t0`` (perf_counter is CLOCK_MONOTONIC, shared by all processes of the host). Their records are
merged. Workers report their running counts to the parent through their pipe every
:data:`WORKER_REPORT_S`, which feeds the optional ``progress`` callback.

The ``progress`` callback hears of the warm-up too (``"phase": "warming up"``, :data:`WARMUP_PHASE`,
with the warm-up requests ended / to send and the seconds since it began), so a caller can show
that requests are going out before the measured phase's first report; the warm-up's requests are
never in the measured counts. The warm-up a run without a set worker count sends only to measure
the client's CPU use (``workers`` None) is not reported; the one that follows it is.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .arrivals import arrival_offsets, scheduled_rate
from .client import TRANSPORTS, StreamingClient
from .datasets import RequestSpec
from .protocol import Api
from .records import RecordStore, RequestOutcome

__all__ = ["WARMUP_PHASE", "LoadConfig", "Progress", "RunResult", "WorkerStats", "loadgen_run", "loadgen_run_async",
           "server_generation_tokens"]

logger = logging.getLogger("benchmarks.loadgen")

# Above this share of one core during warmup the load is split over more processes. With the
# receive time taken in data_received, one process at 0.76 of a core still measured p99 ITL error
# 0.6 ms (256 streams, benchmarks/scripts/client_bench.py on an idle 16-core host); past ~0.7 the
# loop has little slack for bursts, so that is where a second process starts.
CPU_BUSY_FRACTION = 0.7
# A worker whose measured-phase CPU use exceeds this share of a core is flagged client_cpu_bound.
CPU_BOUND_FRACTION = 0.9
START_DELAY_S = 0.05  # lead time for every worker to see t0 before it passes
# The progress callback runs at most this often (the brief of the sweep progress display: ~2/s).
PROGRESS_PERIOD_S = 0.5
# How often a worker process sends its counts to the parent (twice per progress period, so the
# parent's view is never more than ~0.25 s old).
WORKER_REPORT_S = 0.25
# Young-generation threshold during the measured phase (CPython's default is 700 net allocations
# of container objects). A gen-0 pass over 10 000 live young objects took 0.07 ms on the 2-core
# development host (0.03 ms at 700, 0.6 ms at 50 000): 14x fewer passes than the default while
# each stays far below the 1 ms ITL-error target. Full passes skip the frozen setup objects.
MEASURED_GC_GEN0 = 10_000

# A run stops sending once this many requests in a row failed without the server sending one
# byte of a response (RequestOutcome.connect_error: connection refused, or reset/closed before any
# response byte), with no answered request in between: its target is gone (the process died, the
# port is closed). Why 32: a refused connect fails in tens of microseconds, so a closed loop whose
# target died spins through thousands of them a second (3,500 in about 2 s in a run where the
# router was killed mid-point), every one a "failed request" of the point; 32 in a row is reached
# within milliseconds of the target going away, and it covers the in-flight requests a dying
# server resets at once for concurrencies up to 32. A transient blip (a reused keep-alive socket
# the server had just closed, a port briefly handed from one process to the next) is a few such
# failures among answered requests, and every answered request resets the count. Linux refuses a
# connect only when nothing listens on the port (a full accept queue drops the SYN and the client
# retries it), so refusals are not a sign of load. HTTP error answers (4xx, 5xx) never count: the
# server answered, and the point measures that answer.
UNREACHABLE_FAILURES = 32

Progress = Callable[[dict[str, Any]], None]
#: The ``phase`` of a progress report made while the warm-up requests run (before the measured
#: phase, whose reports have no ``phase``): ``{"phase": "warming up", "warmup_done",
#: "warmup_total", "warmup_elapsed_s"}``.
WARMUP_PHASE = "warming up"
# How often a run's ``should_stop`` callback is asked, and how often the measuring event loop
# looks at the stop flag it sets (seconds): a stop takes effect within about a quarter second,
# the same period as the progress polling it rides along with.
STOP_POLL_S = PROGRESS_PERIOD_S / 2
# Seconds a stopped run waits for its event loops (or worker processes) to hand back the records
# of what was sent. Aborting the requests in flight takes milliseconds; the wait is only long when
# a worker is stuck (a blocked event loop, a process stopped by SIGSTOP or starved of CPU). Its
# records are not lost then: they come from its ledger or spool file (see the module docstring).
STOP_RESULTS_S = 10.0
# Seconds the calling thread gives a single-process run's event loop beyond STOP_RESULTS_S: the
# loop itself enforces STOP_RESULTS_S, so only a loop that no longer runs at all (blocked in a
# call that never returns) is still busy after this, and it is left behind as a daemon thread.
STOP_LOOP_GRACE_S = 2.0
# The text before the caller's reason on every request a stop aborted in flight.
ABORTED_PREFIX = "aborted: "
# The start of ``stopped_early`` when the run stopped because its target refused it
# (:class:`_Reach`); the caller may know better who ended the target (a stop it asked for).
UNREACHABLE_PREFIX = "target unreachable: "


class LoadgenStopped(RuntimeError):
    """A run ended early because its ``should_stop`` callback said so: no new request was sent
    after that and in-flight requests were aborted (their connections closed). ``result``: the
    partial :class:`RunResult` when the stop came during the measured phase (the requests that
    finished, the aborted ones as failures ``aborted: <reason>``, ``halted`` and ``not_sent``);
    None when it came before (prompts, warmup) or a worker could not hand its records back."""

    def __init__(self, message: str, *, result: RunResult | None = None) -> None:
        super().__init__(message)
        self.result = result
        self.partial: tuple | None = None  # one event loop's raw outcome, made a result by loadgen_run


@dataclass
class LoadConfig:
    """How to drive one run. ``headers`` may hold secrets: they are sent, never stored or shown.

    Exactly one of closed loop (``rate`` None, ``concurrency`` >= 1) or open loop (``rate`` > 0,
    ``concurrency`` optional cap). ``fixed_output``: every request must produce exactly its
    requested ``output_len`` (sent with ``ignore_eos``; checked by the summary). ``workers``: a
    process count, or None to decide from the warmup's CPU use. ``metrics_urls``: the servers'
    Prometheus endpoints to cross-check token counts (decode servers for PD, not the router).
    ``duration_s`` (seconds, > 0): a duration-limited point instead of one pass over the dataset:
    requests cycle through the specs until ``duration_s`` has passed since the measured phase's
    first request, then sending stops and the requests in flight finish (bounded by
    ``timeout_s``). An open-loop duration run needs a finite ``rate``. ``max_requests`` (>= 1):
    at most that many measured requests are sent (the first ones of the dataset; with
    ``duration_s``, whichever limit comes first ends the run). ``transport``: the
    client's transport (:class:`.client.StreamingClient`; ``"auto"`` unless comparing them).
    ``unreachable_failures`` (>= 1, default :data:`UNREACHABLE_FAILURES`; None never stops): the
    run stops sending after that many consecutive requests the server never answered (per worker
    process).
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
    duration_s: float | None = None
    max_requests: int | None = None
    transport: str = "auto"
    unreachable_failures: int | None = UNREACHABLE_FAILURES

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
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"max_requests must be >= 1, got {self.max_requests}")
        if self.unreachable_failures is not None and self.unreachable_failures < 1:
            raise ValueError(f"unreachable_failures must be >= 1 (None: never stop), got {self.unreachable_failures}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if self.duration_s is not None:
            if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
                raise ValueError(f"duration_s must be a finite number of seconds > 0, got {self.duration_s!r}")
            if self.rate is not None and math.isinf(self.rate):
                raise ValueError("a duration-limited run cannot use an infinite rate (it would send without end); "
                                 "use a closed loop with concurrency instead")


@dataclass
class WorkerStats:
    """One worker process's measured phase: CPU and wall ns, SSE events parsed, requests sent;
    ``stopped_early`` why it stopped sending before its plan was done (its target unreachable, or
    the reason its caller stopped it with), else None; ``not_sent`` planned requests it never sent (0 when it was not stopped; None when
    its plan had no count, a duration-limited closed loop without a request cap). ``unanswered``:
    it did not hand back its outcome within :data:`STOP_RESULTS_S` of a stop, so its records are
    what its ledger or spool file held (its requests then in flight recorded as aborted at the
    stop) and ``cpu_ns``/``events`` are 0 (not measured)."""

    worker: int
    cpu_ns: int
    wall_ns: int
    events: int
    requests: int
    stopped_early: str | None = None
    not_sent: int | None = 0
    unanswered: bool = False

    @property
    def cpu_fraction(self) -> float:
        """Share of one core used during the measured phase."""
        return self.cpu_ns / self.wall_ns if self.wall_ns > 0 else 0.0


@dataclass
class RunResult:
    """What :func:`loadgen_run` measured; :func:`.metrics.run_summary` turns it into numbers.

    ``t0`` (perf_counter ns) is the measured phase's start; ``scheduled_rate`` the rate the open-loop
    schedule itself realises (None for closed loop); ``server_tokens_before``/``after`` the summed
    ``generation_tokens_total`` (None when not scraped or not exposed). ``duration_limited``: the
    run was bounded by ``config.duration_s`` rather than by the dataset's length.
    ``stopped_early``: why the run stopped sending before its plan was done (``"target
    unreachable: 32 consecutive connection failures (connection refused to 127.0.0.1:30000)"``),
    else None; ``not_sent``: planned requests never sent because of that (not failures; 0 when
    the run was not stopped, None when the plan had no count: a duration-limited closed loop).
    ``halted``: the reason the caller gave when it stopped the run during its measured phase
    (``should_stop``; the run is partial and ``stopped_early`` says the same unless the target had
    already gone), else None. ``unanswered_workers``: the workers (0 for a single event loop) that
    did not hand back their outcome within :data:`STOP_RESULTS_S` of such a stop; their records
    are what they had recorded by then, their requests in flight recorded as aborted.
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
    duration_limited: bool = False
    stopped_early: str | None = None
    not_sent: int | None = 0
    halted: str | None = None
    unanswered_workers: list[int] = field(default_factory=list)


def server_generation_tokens(urls: list[str], timeout_s: float = 10.0) -> tuple[float | None, list[str]]:
    """Sum of every ``*generation_tokens_total`` sample at ``urls`` (SGLang, vLLM names), and errors.

    Parsed with ``prometheus_client.parser``; sums over label sets (one per rank in newer SGLang
    releases). A counter family that is declared (``# TYPE ... counter``) with no sample yet counts
    0: a labelled counter has no series until its first increment, which is how SGLang and ``sim``
    export it before they generated anything. None when no URL declared such a counter.
    """
    total, found, errors = 0.0, False, []
    for url in urls:
        try:
            text = httpx.get(url, timeout=timeout_s).raise_for_status().text
            for family in text_string_to_metric_families(text):
                if family.type == "counter" and family.name.endswith("generation_tokens"):
                    found = True  # declared; its samples (if any) are added below
                for sample in family.samples:
                    if sample.name.endswith("generation_tokens_total"):
                        total += sample.value
                        found = True
        except (httpx.HTTPError, ValueError) as exc:
            errors.append(f"{url}: {type(exc).__name__}: {exc}")
    return (total if found else None), errors


# ---------------------------------------------------------------------- garbage collector
_gc_lock = threading.Lock()
_gc_depth = 0
_gc_saved: tuple[tuple[int, int, int], bool] | None = None


@contextmanager
def _quiet_gc() -> Iterator[None]:
    """Freeze the objects that exist now and raise the gen-0 threshold; restore both on exit.

    Process-wide (the collector is); nested or concurrent uses (two runs in threads of one
    process) share one saved state and the last one out restores it. Cycles made during the
    measured phase are still collected, only less often (:data:`MEASURED_GC_GEN0`).
    """
    global _gc_depth, _gc_saved  # noqa: PLW0603 - the collector's state is process-global too
    with _gc_lock:
        if _gc_depth == 0:
            _gc_saved = (gc.get_threshold(), gc.isenabled())
            gc.collect()
            gc.freeze()
            t = _gc_saved[0]
            gc.set_threshold(max(t[0], MEASURED_GC_GEN0), t[1], t[2])
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_saved is not None:
                gc.set_threshold(*_gc_saved[0])
                gc.unfreeze()
                _gc_saved = None


# ---------------------------------------------------------------------- progress
class _Tally:
    """Running counts of one event loop's measured phase, read by the progress reporter.

    Plain ints updated by the loop's thread only; another thread reading them sees a value that
    is at most one update old (the GIL makes each read atomic). ``t0`` is 0 until the measured
    phase has a start instant. :meth:`stop` (from the loop's thread) ends the measured phase early.
    """

    __slots__ = ("t0", "done", "failed", "aborted", "total", "client", "tokens0", "tokens_unsuccessful", "stop_reason",
                 "on_stop", "stop_ns", "ledger", "spool", "before", "warm_t0", "warm_done", "warm_total")

    def __init__(self, total: int) -> None:
        self.t0 = 0
        self.done = 0
        self.failed = 0
        self.aborted = 0
        self.total = total
        self.client: StreamingClient | None = None
        self.tokens0 = 0  # the client's counter at t0 (warmup tokens are not progress)
        # Output tokens streamed by measured requests that came back unsuccessful (failed, or
        # aborted by a stop): the run's output throughput never counts them, nor does ``tokens``.
        self.tokens_unsuccessful = 0
        self.stop_reason: str | None = None
        self.on_stop: Callable[[str], None] | None = None  # set by _measured while it runs
        self.stop_ns = 0  # perf_counter_ns of the first stop
        self.ledger: _Ledger | None = None  # set by _measured while it runs
        self.spool: int | None = None  # a worker process's spool file descriptor (see _Ledger)
        self.before: tuple[float | None, list[str]] = (None, [])  # the first scrape
        # The warm-up, apart from the counts above (it never counts toward them): its start
        # (perf_counter ns, 0 until it starts), the warm-up requests that ended and to send.
        self.warm_t0 = 0
        self.warm_done = 0
        self.warm_total = 0

    @property
    def measuring(self) -> bool:
        """The measured phase has begun (a stop now keeps what was sent)."""
        return self.on_stop is not None

    def stop(self, reason: str) -> None:
        """Stop the measured phase: nothing new is sent, the requests in flight are aborted as
        failures with ``reason``. Idempotent; a stop before the phase begins applies when it does."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stop_ns = time.perf_counter_ns()
        if self.on_stop is not None:
            self.on_stop(self.stop_reason)

    def partial(self, reason: str, at_ns: int = 0) -> tuple | None:
        """What this event loop recorded, for a run whose loop did not hand its outcome back after
        a stop (``reason``): ``(records, stats, t0, first scrape, (None, []))`` in the shape
        :func:`_one_loop` returns, the requests still in flight recorded as aborted at ``at_ns``
        (perf_counter ns; default the stop's own instant). None before the measured phase began.
        Callable from any thread."""
        ledger = self.ledger
        if ledger is None or not self.t0:
            return None
        at = at_ns or self.stop_ns or time.perf_counter_ns()
        store = ledger.snapshot(reason=reason, at_ns=at)
        stats = WorkerStats(worker=ledger.worker, cpu_ns=0, wall_ns=max(0, at - self.t0), events=0,
                            requests=len(store), stopped_early=reason, not_sent=None, unanswered=True)
        return store, stats, self.t0, self.before, (None, [])

    @property
    def tokens(self) -> int:
        """Output tokens streamed in the measured phase so far by the requests that succeeded, are
        still in flight or were aborted in flight by a stop: those of a request the server failed
        are taken out as it comes back, so once every request is back this is what the run's
        output throughput counts (:func:`benchmarks.loadgen.run_summary`: ``output_tokens`` of
        the successes plus ``output_tokens_aborted``)."""
        if self.client is None or not self.t0:
            return 0
        return self.client.tokens_seen - self.tokens0 - self.tokens_unsuccessful

    @property
    def sent(self) -> int:
        """Measured requests sent so far: those that came back (finished or aborted) and those still
        in flight (:class:`_Ledger` enters each as it is sent). A report carries it, so a point
        whose process is lost mid-run still says how many it had in flight."""
        return self.ledger.sent if self.ledger is not None else 0

    @property
    def streamed(self) -> int:
        """Output tokens streamed in the measured phase so far by every request, whatever it came
        back as: the window rate's count (what the servers produce now), never a measured total."""
        return self.client.tokens_seen - self.tokens0 if self.client is not None and self.t0 else 0

    def add(self, outcome: RequestOutcome) -> None:
        """Count one request that came back: ``done`` (and ``failed`` when it failed) if it
        finished, ``aborted`` alone if a stop ended it in flight (neither done nor failed, as the
        sweep's ``requests_done`` and the summary's failures of the server count it). The output
        tokens a failed one streamed leave :attr:`tokens`; an aborted one's stay, as the run's
        output throughput counts them."""
        aborted = not outcome.ok and outcome.error is not None and outcome.error.startswith(ABORTED_PREFIX)
        if not outcome.ok and not aborted:
            # As the client counted them as they streamed: each output event's tokens, 1 where unknown.
            self.tokens_unsuccessful += sum(k or 1 for k in outcome.event_tokens) \
                if len(outcome.event_tokens) == len(outcome.events) else len(outcome.events)
        if aborted:
            self.aborted += 1
            return
        self.done += 1
        if not outcome.ok:
            self.failed += 1


# Spool entries: a 4-byte little-endian length, then a pickle of ("B", token, (index, scheduled,
# start, requested_input, requested_output)) when a request is sent or ("E", token, outcome) when
# it came back.
_SPOOL_HEAD = struct.Struct("<I")


def _spool_append(fd: int, item: tuple) -> None:
    """Append one entry with ``os.write`` (no user-space buffer: once written it is in the page
    cache, readable by the parent even if this process is frozen or killed the next instant)."""
    data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_SPOOL_HEAD.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _cut_off(entry: tuple, reason: str, at_ns: int) -> RequestOutcome:
    """A request still in flight when its loop was given up on: failed ``aborted: <reason>``,
    ending at ``at_ns`` (the stop), no output. ``entry`` is a ledger entry (index, scheduled,
    start, requested_input, requested_output)."""
    index, scheduled, start, req_in, req_out = entry
    return RequestOutcome(scheduled=scheduled, start=start, end=max(start, at_ns), index=index,
                          requested_input=req_in, requested_output=req_out, error=ABORTED_PREFIX + reason)


def _spool_load(path: str, *, worker: int, reason: str | None = None, at_ns: int = 0) -> RecordStore:
    """The records a worker process appended to its spool ``path``, in the order they came back.
    With ``reason`` (a worker that did not answer a stop) the requests sent and not come back are
    added as :func:`_cut_off` at ``at_ns``; without it they are left out (a worker that answered
    has none). A torn last entry (the worker killed mid-write) is ignored; a missing file is an
    empty store."""
    store = RecordStore()
    begun: dict[int, tuple] = {}
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, the loop breaks out early
    except FileNotFoundError:
        return store
    with fh:
        while True:
            head = fh.read(_SPOOL_HEAD.size)
            if len(head) < _SPOOL_HEAD.size:
                break
            (size,) = _SPOOL_HEAD.unpack(head)
            data = fh.read(size)
            if len(data) < size:
                break
            kind, token, payload = pickle.loads(data)
            if kind == "B":
                begun[token] = payload
            else:
                begun.pop(token, None)
                store.add(payload, worker)
    if reason is not None:
        for entry in sorted(begun.values(), key=lambda e: e[2]):
            store.add(_cut_off(entry, reason, at_ns), worker)
    return store


class _Ledger:
    """One event loop's account of its measured requests: each is entered when it is sent
    (:meth:`begin`) and moved to the records when it comes back (:meth:`end`). With ``spool`` (a
    worker process's file descriptor) both are also appended to that file as they happen
    (:func:`_spool_append`: about 19 µs per request of 256 output events on the 2-core
    development host, both entries together, about the cost of parsing one or two streamed events).
    :meth:`snapshot` is what a run gets from a loop that ignored a stop."""

    __slots__ = ("store", "worker", "spool", "inflight", "kept", "lock", "_next")

    def __init__(self, store: RecordStore, worker: int, spool: int | None = None) -> None:
        self.store = store
        self.worker = worker
        self.spool = spool
        self.inflight: dict[int, tuple] = {}
        self.kept = 0
        self.lock = threading.Lock()  # against snapshot() from another thread; never contended otherwise
        self._next = 0

    @property
    def sent(self) -> int:
        """Requests entered so far (:meth:`begin`): every measured request this loop sent."""
        return self._next

    def begin(self, spec: RequestSpec, index: int, scheduled: int) -> int:
        """Enter a request about to be sent; returns its token for :meth:`end`."""
        token = self._next
        self._next += 1
        entry = (index, scheduled, time.perf_counter_ns(), spec.input_len, spec.output_len)
        with self.lock:
            self.inflight[token] = entry
        if self.spool is not None:
            _spool_append(self.spool, ("B", token, entry))
        return token

    def end(self, token: int, outcome: RequestOutcome) -> None:
        """Record the outcome of the request ``token``."""
        with self.lock:
            self.store.add(outcome, self.worker)
            self.kept += 1
            self.inflight.pop(token, None)
        if self.spool is not None:
            _spool_append(self.spool, ("E", token, outcome))

    def snapshot(self, *, reason: str, at_ns: int) -> RecordStore:
        """A copy of the records so far plus every request still in flight as :func:`_cut_off`
        (``reason``, ending at ``at_ns``); callable from another thread."""
        with self.lock:
            store = self.store.head(self.kept)
            pending = sorted(self.inflight.values(), key=lambda e: e[2])
        for entry in pending:
            store.add(_cut_off(entry, reason, at_ns), self.worker)
        return store


class _Reporter:
    """Turns running counts into ``progress`` calls at most every :data:`PROGRESS_PERIOD_S`.

    ``tok_s`` is the output tokens streamed during the window that ends now and starts at the
    latest earlier call at least :data:`PROGRESS_PERIOD_S` (0.5 s) back, or at ``t0`` when there
    is none, divided by that window's length in seconds: the rate of the last moment, not the
    run's output throughput. A periodic call comes at least 0.5 s after the previous one, so its
    window starts there (the counts are polled every half period, so usually no more than about
    0.75 s); the final call may come just after a periodic one, so its window reaches back past
    it (up to about 1.25 s) rather than measuring a few milliseconds, and is never 0.0 when tokens
    arrived in it.
    ``tok_s`` counts every token streamed, whatever its request came back as.
    ``tok_s_mean`` is the output tokens so far of the requests that succeeded or are still in
    flight (never those of a request that came back failed or aborted, which the run's output
    throughput does not count either) divided by the seconds since ``t0``, when the first request
    was sent (the mean rate since the start, which the run's output throughput approaches); None
    before any token. A callback that raises is logged once and not called
    again: the measurement goes on (a broken display must not cost the run).
    """

    def __init__(self, callback: Progress) -> None:
        self.callback: Progress | None = callback
        self.last_t = 0
        # (perf_counter ns, output tokens streamed) of the latest calls, oldest first: the windows' starts.
        self.marks: list[tuple[int, int]] = []
        self.calls = 0
        self.warm_last = 0  # perf_counter ns of the latest warm-up report (0: none yet)
        self.warm_ended = False  # the report of the warm-up's last request was made

    def warming(self, *, started: int, done: int, total: int) -> None:
        """Call the callback with ``{"phase": WARMUP_PHASE, "warmup_done", "warmup_total",
        "warmup_elapsed_s"}`` (warm-up requests that ended, to send, seconds since the warm-up
        began at ``started``, perf_counter ns): at once for the first, then at most every
        :data:`PROGRESS_PERIOD_S`, and at once when the last warm-up request has ended. Never once
        the measured phase has reported. Nothing before the warm-up starts (``started`` 0) or
        without warm-up requests."""
        if self.callback is None or started <= 0 or total <= 0 or self.calls or self.warm_ended:
            return
        now = time.perf_counter_ns()
        ended = done >= total
        if not ended and self.warm_last and now - self.warm_last < PROGRESS_PERIOD_S * 1e9:
            return
        self.warm_last, self.warm_ended = now, ended
        self._call({"phase": WARMUP_PHASE, "warmup_done": min(done, total), "warmup_total": total,
                    "warmup_elapsed_s": max(0.0, (now - started) / 1e9)})

    def warming_from(self, tally: _Tally) -> None:
        """:meth:`warming` with ``tally``'s warm-up counts while its measured phase has not begun."""
        if not tally.t0:
            self.warming(started=tally.warm_t0, done=tally.warm_done, total=tally.warm_total)

    def _call(self, info: dict[str, Any]) -> None:
        try:
            self.callback(info)  # type: ignore[misc]
        except Exception:  # noqa: BLE001 - see the class docstring
            logger.exception("load generator progress callback failed; no further progress calls for this run")
            self.callback = None

    def report(self, *, t0: int, done: int, total: int, failed: int, tokens: int, aborted: int = 0,
               streamed: int | None = None, sent: int | None = None, final: bool = False) -> None:
        """Call the callback if a period has passed since the last call (always when ``final``).
        ``tokens``: output tokens of the requests that succeeded, are in flight or were aborted in
        flight by a stop (``output_tokens`` and ``tok_s_mean``, :attr:`_Tally.tokens`); ``streamed``:
        those of every request, failed and aborted ones included
        (the window's ``tok_s``; ``tokens`` when not given); ``sent``: measured requests sent so far,
        in flight included (``sent``; None when not counted)."""
        streamed = tokens if streamed is None else streamed
        if self.callback is None or t0 <= 0:
            return
        now = time.perf_counter_ns()
        if now < t0:
            return
        start = self.last_t or t0
        if not final and self.calls and now - start < PROGRESS_PERIOD_S * 1e9:
            return
        if not final and not self.calls and now - t0 < PROGRESS_PERIOD_S * 1e9:
            return
        from_t, from_tokens = t0, 0
        for mark_t, mark_tokens in self.marks:
            if now - mark_t >= PROGRESS_PERIOD_S * 1e9:
                from_t, from_tokens = mark_t, mark_tokens
        window, elapsed = (now - from_t) / 1e9, (now - t0) / 1e9
        info = {"done": done, "total": max(total, done + aborted), "failed": failed, "aborted": aborted,
                "sent": sent, "output_tokens": tokens,
                "elapsed_s": elapsed, "tok_s": (streamed - from_tokens) / window if window > 0 else 0.0,
                "tok_s_mean": tokens / elapsed if tokens > 0 and elapsed > 0 else None}
        self.last_t = now
        # Calls are at least a period apart (all but the final one), so the two latest marks
        # always hold the latest one at least a period back (a third covers a repeated final call).
        self.marks = [*self.marks[-2:], (now, streamed)]
        self.calls += 1
        self._call(info)


# ---------------------------------------------------------------------- one event loop
async def _warmup(client: StreamingClient, cfg: LoadConfig, specs: list[RequestSpec], conc: int,
                  tally: _Tally | None = None) -> None:
    """Send the warm-up ``specs`` over ``conc`` slots; their outcomes are dropped. With ``tally``
    its ``warm_t0`` is set as the warm-up starts and ``warm_done`` counts each request that ended
    (succeeded or failed), for the progress reports; its measured counts are never touched."""
    queue = list(reversed(specs))
    if tally is not None:
        tally.warm_total, tally.warm_done, tally.warm_t0 = len(specs), 0, time.perf_counter_ns()

    async def slot() -> None:
        while queue:
            spec = queue.pop()
            await client.send(spec, scheduled=time.perf_counter_ns(), ignore_eos=cfg.ignore_eos)
            if tally is not None:
                tally.warm_done += 1

    await asyncio.gather(*(slot() for _ in range(max(1, min(conc, len(specs))))))


class _Reach:
    """Whether one event loop's target still answers: counts consecutive requests the server never
    answered (``RequestOutcome.connect_error``) and, at ``limit`` of them (None: never), records
    why in ``reason`` and sets ``gone``. Any request the server answered (success, HTTP error, a
    stream that broke after the head) resets the count. Created inside the running loop."""

    __slots__ = ("limit", "streak", "reason", "gone")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.streak = 0
        self.reason: str | None = None
        self.gone = asyncio.Event()

    def see(self, outcome: RequestOutcome) -> None:
        """Count one finished request."""
        if outcome.connect_error is None:
            self.streak = 0
            return
        self.streak += 1
        if self.reason is None and self.limit is not None and self.streak >= self.limit:
            self.reason = (f"{UNREACHABLE_PREFIX}{self.streak} consecutive connection failures "
                           f"({outcome.connect_error})")
            self.gone.set()

    def stop(self, reason: str) -> None:
        """Stop sending because the caller said so (``reason``), as if the target were gone; a
        reason already found (the target gone) stands."""
        if self.reason is None:
            self.reason = reason
        self.gone.set()

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when the target is found gone meanwhile. A wait of at most
        :data:`STOP_POLL_S` is a plain sleep, checked when it ends: an open loop waits this way
        before every arrival, and a plain sleep costs less than a timed wait on the event."""
        if self.reason is not None:
            return
        if seconds <= STOP_POLL_S:
            await asyncio.sleep(seconds)
            return
        try:
            await asyncio.wait_for(self.gone.wait(), timeout=seconds)
        except TimeoutError:
            pass


async def _measured(
    client: StreamingClient, cfg: LoadConfig, specs: list[RequestSpec], due: list[int] | None,
    slots: int | None, t0: int, worker: int, indices: list[int] | None = None, tally: _Tally | None = None,
    cap: int | None = None,
) -> tuple[RecordStore, WorkerStats]:
    """The measured phase of one event loop: closed loop (``due`` None) or open loop (``due`` ns).

    Open loop: ``specs[j]`` (dataset position ``indices[j]``) is due at ``due[j]``.

    Duration-limited (``cfg.duration_s``): closed-loop slots cycle through ``specs`` and stop
    starting requests at ``t0 + duration_s`` or after ``cap`` requests; open-loop ``due`` already
    ends before that instant, and a request still waiting for a capped slot then is not sent.

    Every mode stops starting requests once the target is gone (:class:`_Reach`,
    ``cfg.unreachable_failures``) or ``tally.stop`` is called (the requests in flight are then
    aborted: failed outcomes ``aborted: <reason>``); the stats say why and how many planned
    requests were not sent. Every request goes through the loop's :class:`_Ledger` (``tally.ledger``;
    spooled to ``tally.spool`` in a worker process).
    """
    store = RecordStore()
    tally = tally if tally is not None else _Tally(len(specs) if due is None else len(due))
    tally.client = client
    perf = time.perf_counter_ns
    deadline = t0 + int(cfg.duration_s * 1e9) if cfg.duration_s is not None else None
    idx = indices if indices is not None else list(range(len(specs)))
    ignore_eos = cfg.ignore_eos
    reach = _Reach(cfg.unreachable_failures)
    not_sent: int | None = 0
    ledger = _Ledger(store, worker, tally.spool)
    tally.ledger = ledger

    async def send(spec: RequestSpec, when: int, i: int) -> None:
        token = ledger.begin(spec, i, when)
        outcome = await client.send(spec, scheduled=when, ignore_eos=ignore_eos, index=i)
        ledger.end(token, outcome)
        tally.add(outcome)
        reach.see(outcome)

    def halt(reason: str) -> None:
        reach.stop(reason)
        client.abort_inflight(ABORTED_PREFIX + reason)

    tally.on_stop = halt
    if tally.stop_reason is not None:
        halt(tally.stop_reason)
    delay = (t0 - perf()) / 1e9
    if delay > 0:
        await reach.sleep(delay)
    tally.tokens0 = client.tokens_seen
    tally.t0 = t0
    events0, cpu0, wall0 = client.events_seen, time.process_time_ns(), perf()
    if due is None and deadline is None:
        queue = list(reversed(list(zip(idx, specs))))

        async def slot() -> None:
            while queue and reach.reason is None:
                i, spec = queue.pop()
                await send(spec, perf(), i)

        await asyncio.gather(*(slot() for _ in range(max(1, min(slots or 1, len(specs))))))
        not_sent = len(queue)
    elif due is None:
        n, sent = len(specs), [0]

        async def cycling_slot() -> None:
            while specs and reach.reason is None:
                now = perf()
                if now >= deadline or (cap is not None and sent[0] >= cap):
                    return
                j = sent[0] % n
                sent[0] += 1
                tally.total = sent[0]
                await send(specs[j], now, idx[j])

        await asyncio.gather(*(cycling_slot() for _ in range(max(1, slots or 1))))
        if reach.reason is not None:
            # Time was the plan; a request cap, when given, is the count that was not reached.
            not_sent = max(0, cap - sent[0]) if cap is not None else None
    else:
        sem = asyncio.Semaphore(slots) if slots else None
        skipped = [0]

        async def one(j: int, when: int) -> None:
            if sem is None:
                await send(specs[j], when, idx[j])
                return
            async with sem:
                if deadline is not None and perf() >= deadline:
                    tally.total -= 1  # due in time but no slot before the end: not sent
                    return
                if reach.reason is not None:
                    skipped[0] += 1
                    return
                await send(specs[j], when, idx[j])

        tasks = []
        for j, when in enumerate(due):
            wait = (when - perf()) / 1e9
            if wait > 0:
                await reach.sleep(wait)
            if reach.reason is not None:
                skipped[0] += len(due) - j
                break
            tasks.append(asyncio.ensure_future(one(j, when)))
        await asyncio.gather(*tasks)
        not_sent = skipped[0]
    stats = WorkerStats(worker=worker, cpu_ns=time.process_time_ns() - cpu0, wall_ns=perf() - wall0,
                        events=client.events_seen - events0, requests=len(store), stopped_early=reach.reason,
                        not_sent=not_sent if reach.reason is not None else 0)
    return store, stats


def _client(cfg: LoadConfig) -> StreamingClient:
    return StreamingClient(
        base_url=cfg.base_url, api=cfg.api, model=cfg.model, headers=cfg.headers,
        connection_limit=cfg.connection_limit, force_close=cfg.force_close, timeout_s=cfg.timeout_s,
        keep_text=cfg.keep_text, extra_body=cfg.extra_body, transport=cfg.transport,
    )


def _split(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def _schedule(cfg: LoadConfig, n: int) -> list[float] | None:
    """Open-loop offsets (s): one per spec, or for a duration run every arrival before ``duration_s``.

    A duration run's schedule is drawn with the same seed and cut at ``duration_s``; it is drawn
    longer and longer until it passes that instant (a seeded draw of n + k arrivals starts with the
    draw of n, so the cut does not depend on the first guess).
    """
    if cfg.rate is None:
        return None
    if cfg.duration_s is None:
        return arrival_offsets(n=n, rate=cfg.rate, burstiness=cfg.burstiness, seed=cfg.seed)
    count = max(16, int(cfg.rate * cfg.duration_s * 1.25) + 16)
    while True:
        offsets = arrival_offsets(n=count, rate=cfg.rate, burstiness=cfg.burstiness, seed=cfg.seed)
        if offsets[-1] >= cfg.duration_s:
            return [o for o in offsets if o < cfg.duration_s][:cfg.max_requests]
        count *= 2


def _due(t0: int, offsets: list[float] | None) -> list[int] | None:
    return None if offsets is None else [t0 + int(o * 1e9) for o in offsets]


def _capped(cfg: LoadConfig, specs: list[RequestSpec]) -> list[RequestSpec]:
    """A one-pass run sends at most ``max_requests`` specs (a duration run counts as it sends).

    Raises ``ValueError`` for a duration-limited run without any spec.
    """
    if not specs and cfg.duration_s is not None:
        raise ValueError("a duration-limited run needs at least one request spec to cycle through")
    return specs[:cfg.max_requests] if cfg.max_requests is not None and cfg.duration_s is None else specs


def _plan(cfg: LoadConfig, specs: list[RequestSpec], offsets: list[float] | None,
          ) -> tuple[list[RequestSpec], list[int]]:
    """The requests to send and their dataset positions: the dataset itself, or for an open-loop
    duration run one spec per scheduled arrival, cycling through the dataset (references, not copies)."""
    if offsets is not None and cfg.duration_s is not None:
        idx = [g % len(specs) for g in range(len(offsets))]
        return [specs[i] for i in idx], idx
    return specs, list(range(len(specs)))


def _initial_total(cfg: LoadConfig, specs: list[RequestSpec], offsets: list[float] | None) -> int:
    if offsets is not None:
        return len(offsets)
    return 0 if cfg.duration_s is not None else len(specs)


# ---------------------------------------------------------------------- worker processes
def _worker_main(conn: Any, cfg: LoadConfig, specs: list[RequestSpec], due_offsets: list[float] | None,
                 slots: int | None, warmup_specs: list[RequestSpec], worker: int, indices: list[int],
                 cap: int | None = None, spool: str = "") -> None:
    """Body of one worker process: warm up, report ready, wait for t0, run, report the end.

    Every measured request is appended to the spool file ``spool`` as it is sent and again when
    it comes back (:class:`_Ledger`): that file, not the pipe, is how the records reach the
    parent. While warming up it sends ``("warmup", (warm-up requests ended, warm-up start in
    perf_counter ns))`` every :data:`WORKER_REPORT_S` and once more when the warm-up has ended,
    then ``("ready", None)``. While measuring it sends ``("progress", (done, failed, output_tokens, total, aborted,
    streamed, sent))`` every
    :data:`WORKER_REPORT_S`; at the end ``("done", stats)`` or ``("error", text)``. A
    ``("stop", reason)`` from the parent during the measured phase ends it early
    (``_Tally.stop``: nothing new sent, in-flight requests aborted) and it reports ``"done"``.
    """

    async def report(tally: _Tally) -> None:
        while True:
            await asyncio.sleep(WORKER_REPORT_S)
            conn.send(("progress", (tally.done, tally.failed, tally.tokens, tally.total, tally.aborted,
                                    tally.streamed, tally.sent)))

    async def warm_report(warm: _Tally) -> None:
        while True:
            conn.send(("warmup", (warm.warm_done, warm.warm_t0)))
            await asyncio.sleep(WORKER_REPORT_S)

    async def main() -> None:
        async with _client(cfg) as client:
            if warmup_specs:
                warm = _Tally(0)
                warm.warm_t0 = time.perf_counter_ns()
                warm_reporter = asyncio.ensure_future(warm_report(warm))
                try:
                    await _warmup(client, cfg, warmup_specs, slots or cfg.concurrency or 1, warm)
                finally:
                    warm_reporter.cancel()
                conn.send(("warmup", (warm.warm_done, warm.warm_t0)))
            # Collect and freeze before "ready", so that pass never eats into t0's lead time.
            with _quiet_gc():
                conn.send(("ready", None))
                t0 = conn.recv()
                tally = _Tally(_initial_total(cfg, specs, due_offsets))
                tally.client = client
                tally.spool = spool_fd
                loop = asyncio.get_running_loop()

                def on_message() -> None:
                    try:
                        kind, payload = conn.recv()
                    except (EOFError, OSError):  # the parent is gone: stop, nobody wants the rest
                        loop.remove_reader(conn.fileno())
                        tally.stop("the parent process went away")
                        return
                    if kind == "stop":
                        tally.stop(str(payload))

                loop.add_reader(conn.fileno(), on_message)
                reporter = asyncio.ensure_future(report(tally))
                try:
                    store, stats = await _measured(client, cfg, specs, _due(t0, due_offsets), slots, t0, worker,
                                                   indices, tally, cap)
                finally:
                    reporter.cancel()
                    loop.remove_reader(conn.fileno())
        conn.send(("progress", (tally.done, tally.failed, tally.tokens, tally.total, tally.aborted, tally.streamed,
                                tally.sent)))
        conn.send(("done", stats))

    spool_fd = os.open(spool, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        asyncio.run(main())
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        os.close(spool_fd)
        conn.close()


def _run_processes(cfg: LoadConfig, specs: list[RequestSpec], warmup: list[RequestSpec], n: int,
                   offsets: list[float] | None, progress: Progress | None,
                   should_stop: Callable[[], bool | str | None] | None = None,
                   ) -> tuple[RecordStore, list[WorkerStats], int, tuple[float | None, list[str]], str | None,
                              list[int]]:
    """Run the measured phase in ``n`` spawned worker processes (:func:`_worker_main`); returns the
    merged records, each worker's stats, ``t0``, the first scrape, the stop reason (None unless
    ``should_stop`` stopped the measured phase) and the workers that did not answer such a stop
    within :data:`STOP_RESULTS_S` (killed; their records are what their spool files held, their
    requests in flight recorded as aborted at the stop, their stats ``unanswered``). A stop before
    ``t0`` kills the workers and raises :class:`LoadgenStopped` without a result. The spool files
    live in a temporary directory removed before this returns."""
    ctx = multiprocessing.get_context("spawn")
    conc_parts = _split(cfg.concurrency, n) if cfg.concurrency else [None] * n
    warm_parts = _split(len(warmup), n)
    procs, conns, w0 = [], [], 0
    planned, positions = _plan(cfg, specs, offsets)
    caps = _split(cfg.max_requests, n) if cfg.max_requests is not None else [None] * n
    spool_dir = tempfile.mkdtemp(prefix="ceiling-loadgen-")
    spools = [os.path.join(spool_dir, f"worker-{i}.spool") for i in range(n)]
    try:
        for i in range(n):
            if cfg.duration_s is not None and offsets is None:
                # A duration-limited closed loop cycles: every worker gets the whole dataset, each
                # starting at its own place, so a dataset smaller than the worker count still works.
                mine, where = specs[i:] + specs[:i], positions[i:] + positions[:i]
            else:
                mine, where = planned[i::n], positions[i::n]
            due = offsets[i::n] if offsets is not None else None
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(child, cfg, mine, due, conc_parts[i],
                                                       warmup[w0:w0 + warm_parts[i]], i, where, caps[i], spools[i]),
                            daemon=True)
            w0 += warm_parts[i]
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        stats, t0, before, halted, halted_ns, missing = _drive_processes(cfg, specs, offsets, n, procs, conns,
                                                                         progress, should_stop, warm_parts)
        stores = []
        for i in range(n):
            if i in missing:
                store = _spool_load(spools[i], worker=i, reason=halted, at_ns=halted_ns)
                stats[i] = WorkerStats(worker=i, cpu_ns=0, wall_ns=max(0, halted_ns - t0), events=0,
                                       requests=len(store), stopped_early=halted, not_sent=None, unanswered=True)
            else:
                store = _spool_load(spools[i], worker=i)
            stores.append(store)
    finally:
        shutil.rmtree(spool_dir, ignore_errors=True)
    return RecordStore.merge(stores), [stats[i] for i in range(n)], t0, before, halted, missing


def _drive_processes(cfg: LoadConfig, specs: list[RequestSpec], offsets: list[float] | None, n: int,
                     procs: list[Any], conns: list[Any], progress: Progress | None,
                     should_stop: Callable[[], bool | str | None] | None, warm_parts: list[int] | None = None,
                     ) -> tuple[dict[int, WorkerStats], int, tuple[float | None, list[str]], str | None, int,
                                list[int]]:
    """The parent's side of :func:`_run_processes` once the workers are started: wait for their
    warmups (relaying their warm-up counts, ``warm_parts`` requests each), hand out ``t0``, relay
    their progress, pass a stop on, collect their stats. Returns
    ``(stats by worker, t0, first scrape, stop reason, stop instant in perf_counter ns, workers
    that did not answer the stop)``; every worker process has ended (or been killed) when it
    returns. Raises :class:`LoadgenStopped` for a stop before ``t0`` and ``RuntimeError`` for a
    worker that failed (or ended without reporting while not stopped)."""
    reporter = _Reporter(progress) if progress is not None else None
    warm_parts = warm_parts if warm_parts is not None else [0] * n
    stopped = False  # kill the workers on the way out
    halted: str | None = None
    halted_at = 0.0
    halted_ns = 0
    missing: list[int] = []

    counts: dict[int, tuple[int, int, int, int]] = {}
    t0 = 0

    def check_stop() -> bool:
        """Before t0 a stop kills the workers and raises; after it each worker is told to stop
        (once) and True is returned once they have had :data:`STOP_RESULTS_S` to answer."""
        nonlocal stopped, halted, halted_at, halted_ns
        if halted is not None:
            return time.monotonic() - halted_at >= STOP_RESULTS_S
        reason = _stop_reason(should_stop()) if should_stop is not None else None
        if reason is None:
            return False
        if not t0:
            stopped = True
            raise LoadgenStopped("the run was stopped before it finished")
        halted, halted_at, halted_ns = reason, time.monotonic(), time.perf_counter_ns()
        for c in pending.values():
            try:
                c.send(("stop", reason))
            except OSError:  # that worker already ended; its records or error are in the pipe
                pass
        return False

    pending: dict[int, Any] = {}
    results: dict[int, WorkerStats] = {}
    warm_total = sum(warm_parts)
    warm: dict[int, tuple[int, int]] = {}  # per worker: warm-up requests ended, its warm-up start
    try:
        unready = dict(enumerate(conns))
        while unready:
            check_stop()
            for c in multiprocessing.connection.wait(list(unready.values()), timeout=STOP_POLL_S):
                i = next(k for k, v in unready.items() if v is c)
                try:
                    kind, payload = c.recv()
                except EOFError:
                    raise RuntimeError(f"load worker {i} exited during warmup "
                                       f"(exit code {procs[i].exitcode})") from None
                if kind == "error":
                    raise RuntimeError(f"load worker failed during warmup: {payload}")
                if kind == "warmup":
                    warm[i] = payload
                elif kind == "ready":
                    del unready[i]
            if reporter is not None and warm:
                reporter.warming(started=min(w[1] for w in warm.values()), done=sum(w[0] for w in warm.values()),
                                 total=warm_total)
        before = server_generation_tokens(cfg.metrics_urls) if cfg.metrics_urls else (None, [])
        t0 = time.perf_counter_ns() + int(START_DELAY_S * 1e9)
        for c in conns:
            c.send(t0)
        # Latest counts per worker: done, failed, output tokens (of successes and requests in
        # flight), total, aborted, output tokens streamed by every request (_Tally.streamed), sent.
        counts = {i: (0, 0, 0, len(offsets[i::n]) if offsets is not None else
                      (0 if cfg.duration_s is not None else len(specs[i::n])), 0, 0, 0) for i in range(n)}
        pending = dict(enumerate(conns))
        while pending:
            if check_stop():  # stopped, and some worker never answered: its records come from its spool
                missing = sorted(set(missing) | set(pending))
                stopped = True
                break
            ready = multiprocessing.connection.wait(list(pending.values()), timeout=PROGRESS_PERIOD_S / 2)
            for c in ready:
                i = next(k for k, v in pending.items() if v is c)
                try:
                    kind, payload = c.recv()
                except EOFError:
                    if halted is not None:  # ended after the stop without answering: same as silent
                        missing.append(i)
                        del pending[i]
                        continue
                    raise RuntimeError(f"load worker {i} exited without sending its records "
                                       f"(exit code {procs[i].exitcode})") from None
                if kind == "error":
                    raise RuntimeError(f"load worker failed: {payload}")
                if kind == "progress":
                    counts[i] = payload
                elif kind == "done":
                    results[i] = payload
                    del pending[i]
            if reporter is not None:
                sums = [sum(c[k] for c in counts.values()) for k in range(7)]
                reporter.report(t0=t0, done=sums[0], failed=sums[1], tokens=sums[2], total=sums[3], aborted=sums[4],
                                streamed=sums[5], sent=sums[6], final=not pending or stopped)
    except LoadgenStopped:
        if reporter is not None and counts:  # the counts up to the stop, for whoever shows them
            sums = [sum(c[k] for c in counts.values()) for k in range(7)]
            reporter.report(t0=t0, done=sums[0], failed=sums[1], tokens=sums[2], total=sums[3], aborted=sums[4],
                            streamed=sums[5], sent=sums[6], final=True)
        raise
    finally:
        for p in procs:
            if stopped:  # abort the requests in flight: the workers' sockets close with them
                p.kill()
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    return results, t0, before, halted, halted_ns, sorted(missing)


# ---------------------------------------------------------------------- entry points
class _StopFlag:
    """A stop asked for from another thread, with its reason (``None`` until :meth:`set`) and
    when: ``at`` (``time.monotonic``) and ``at_ns`` (``perf_counter_ns``)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.at = 0.0
        self.at_ns = 0

    def set(self, reason: str) -> None:
        if self.reason is None:
            self.at, self.at_ns = time.monotonic(), time.perf_counter_ns()
            self.reason = reason


def _stop_reason(answer: Any) -> str | None:
    """``should_stop``'s answer as a reason: a non-empty string is the reason, any other true value
    ``the run was stopped``, a false one None (go on)."""
    if not answer:
        return None
    return answer if isinstance(answer, str) else "the run was stopped"


async def _until_stopped(coro: Any, stop: _StopFlag | None, tally: _Tally) -> Any:
    """Await ``coro`` (:func:`_one_loop`), checking ``stop`` every :data:`STOP_POLL_S` seconds.

    A stop before the measured phase cancels ``coro`` (which closes its client) and raises
    :class:`LoadgenStopped` without a result. A stop during it goes through ``tally.stop``
    (nothing new sent, in-flight requests aborted as failures), waits up to
    :data:`STOP_RESULTS_S` for ``coro`` to return what was sent, and raises
    :class:`LoadgenStopped` with that outcome in ``partial``; when ``coro`` has not returned by
    then, ``partial`` is :meth:`_Tally.partial` (every record so far, the requests still in
    flight recorded as aborted) and ``coro`` is cancelled without waiting more than
    :data:`STOP_POLL_S` for it (a request that swallows its cancellation cannot hold the run)."""
    if stop is None:
        return await coro
    task = asyncio.ensure_future(coro)
    halted_at: float | None = None
    while True:
        done, _ = await asyncio.wait({task}, timeout=STOP_POLL_S)
        if done:
            out = task.result()
            if halted_at is None:
                return out
            exc = LoadgenStopped(f"the run was stopped: {stop.reason}")
            exc.partial = out
            raise exc
        if stop.reason is None:
            continue
        if halted_at is None and tally.measuring:
            tally.stop(stop.reason)
            halted_at = time.monotonic()
            continue
        if halted_at is not None and time.monotonic() - halted_at < STOP_RESULTS_S:
            continue
        partial = tally.partial(stop.reason) if halted_at is not None else None
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_POLL_S)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: what the cancellation interrupted is not news
        if halted_at is None:
            raise LoadgenStopped("the run was stopped before it finished")
        exc = LoadgenStopped(f"the run was stopped: {stop.reason} (its requests did not all end within "
                             f"{STOP_RESULTS_S:g} s; the ones still in flight are recorded as aborted)")
        exc.partial = partial
        raise exc


async def _one_loop(config: LoadConfig, specs: list[RequestSpec], warmup: list[RequestSpec],
                    offsets: list[float] | None, tally: _Tally) -> tuple[RecordStore, WorkerStats, int, tuple, tuple]:
    """Warmup, scrape, measured phase and scrape again in the running event loop."""
    planned, positions = _plan(config, specs, offsets)
    async with _client(config) as client:
        tally.client = client
        if warmup:
            await _warmup(client, config, warmup, config.concurrency or 1, tally)
        before = (await asyncio.to_thread(server_generation_tokens, config.metrics_urls)
                  if config.metrics_urls else (None, []))
        tally.before = before
        with _quiet_gc():
            t0 = time.perf_counter_ns() + int(START_DELAY_S * 1e9)
            store, stats = await _measured(client, config, planned, _due(t0, offsets), config.concurrency, t0, 0,
                                           positions, tally, config.max_requests)
    # A stopped run's servers may be gone: no second scrape (and no token cross-check).
    after = (await asyncio.to_thread(server_generation_tokens, config.metrics_urls)
             if config.metrics_urls and tally.stop_reason is None else (None, []))
    return store, stats, t0, before, after


def _result(config: LoadConfig, store: RecordStore, stats: list[WorkerStats], t0: int, offsets: list[float] | None,
            before: tuple, after: tuple, warm_fraction: float | None = None, *, halted: str | None = None,
            workers_missing: bool = False) -> RunResult:
    # Workers stop on their own when their target goes; the first one's reason stands for the run.
    stopped = [w for w in stats if w.stopped_early is not None]
    not_sent = None if any(w.not_sent is None for w in stats) else sum(w.not_sent or 0 for w in stats)
    if workers_missing or any(w.unanswered for w in stats):  # a worker's plan is not in the sum
        not_sent = None
    return RunResult(records=store, config=replace(config), t0=t0, workers=stats,
                     scheduled_rate=scheduled_rate(offsets) if offsets else None, warmup_cpu_fraction=warm_fraction,
                     server_tokens_before=before[0], server_tokens_after=after[0],
                     server_scrape_errors=before[1] + after[1], duration_limited=config.duration_s is not None,
                     stopped_early=stopped[0].stopped_early if stopped else None,
                     not_sent=not_sent if stopped else 0, halted=halted,
                     unanswered_workers=[w.worker for w in stats if w.unanswered])


def _report_final(reporter: _Reporter | None, tally: _Tally) -> None:
    if reporter is not None:
        reporter.report(t0=tally.t0, done=tally.done, total=tally.total, failed=tally.failed, tokens=tally.tokens,
                        aborted=tally.aborted, streamed=tally.streamed, sent=tally.sent, final=True)


async def loadgen_run_async(*, config: LoadConfig, specs: list[RequestSpec],
                            warmup_specs: list[RequestSpec] | None = None,
                            progress: Progress | None = None) -> RunResult:
    """Run ``specs`` in this process's event loop (one worker; ``config.workers`` is ignored).

    ``warmup_specs`` default to the first ``config.warmup`` specs (reused, not consumed). Scrapes
    ``metrics_urls`` from a thread so the loop keeps running. ``progress`` (optional) is called
    from this event loop at most every :data:`PROGRESS_PERIOD_S` during the measured phase and
    once at its end with ``{"done", "total", "failed", "aborted", "sent", "output_tokens", "elapsed_s",
    "tok_s", "tok_s_mean"}``: requests finished (succeeded or failed) / to send (for a duration-limited
    closed loop, which cannot know, the number started so far) / failed (of those finished) / aborted in
    flight by a stop (neither finished nor failed) / sent so far (finished, aborted and still in flight:
    ``sent - done - aborted`` are in flight), output tokens streamed so far by the requests that
    succeeded or are still in flight (the server's per-event count when it sends one, else one per
    output event; a request that comes back failed or aborted takes its tokens out, as the run's
    output throughput never counts them), seconds
    since ``t0``, output tokens/s over the window since the latest call at least
    :data:`PROGRESS_PERIOD_S` back (or ``t0``; see :class:`_Reporter`) and output tokens/s since
    ``t0`` (None before any token). Before that, while the warm-up requests run, it is called
    with ``{"phase": WARMUP_PHASE, "warmup_done", "warmup_total", "warmup_elapsed_s"}`` (warm-up
    requests that ended, succeeded or failed, / to send, seconds since the warm-up began): once as
    it starts, then at most every :data:`PROGRESS_PERIOD_S`, and once as its last request ends
    (:meth:`_Reporter.warming`); warm-up requests never count in the measured reports. Keep it
    quick: it runs between the network reads it is reporting on.
    """
    config.validate()
    warmup = warmup_specs if warmup_specs is not None else specs[:config.warmup]
    specs = _capped(config, specs)
    offsets = _schedule(config, len(specs))
    tally = _Tally(_initial_total(config, specs, offsets))
    reporter = _Reporter(progress) if progress is not None else None

    async def report() -> None:
        assert reporter is not None
        while True:
            await asyncio.sleep(PROGRESS_PERIOD_S / 2)
            reporter.warming_from(tally)
            reporter.report(t0=tally.t0, done=tally.done, total=tally.total, failed=tally.failed, tokens=tally.tokens,
                            aborted=tally.aborted, streamed=tally.streamed, sent=tally.sent)

    task = asyncio.ensure_future(report()) if reporter is not None else None
    try:
        store, stats, t0, before, after = await _one_loop(config, specs, warmup, offsets, tally)
    finally:
        if task is not None:
            task.cancel()
    _report_final(reporter, tally)
    return _result(config, store, [stats], t0, offsets, before, after)


def loadgen_run(*, config: LoadConfig, specs: list[RequestSpec], warmup_specs: list[RequestSpec] | None = None,
                progress: Progress | None = None, should_stop: Callable[[], bool | str | None] | None = None,
                ) -> RunResult:
    """Run ``specs`` with ``config`` (blocking; call it outside a running event loop).

    ``workers`` = 1: one event loop here. ``workers`` = N: N spawned processes. ``workers`` None:
    the warmup runs here first and its CPU use decides N (at most the CPU count); with no warmup,
    one process. ``progress``: as for :func:`loadgen_run_async` (same dict), but always called from
    the thread that called this function, never from the measuring event loop: with one worker
    the loop then runs in a helper thread of this process, with N workers the counts come from
    the workers' pipes. ``should_stop`` (optional) is called from that same thread every
    :data:`STOP_POLL_S` seconds (warmup included); once it returns true (a string: the reason,
    kept on the result and on every aborted request) no new request is sent, the requests in
    flight are aborted and :class:`LoadgenStopped` is raised within about a second. Stopped during
    the measured phase, the exception's ``result`` holds what was sent: the finished requests, the
    aborted ones as failures ``aborted: <reason>``, ``halted`` and ``not_sent`` (every mode; N
    workers are each told to stop and hand back their records). An event loop or worker that has
    not answered within :data:`STOP_RESULTS_S` is given up on (a worker killed, a loop's thread
    left behind) and loses nothing that came back before: its records come from its ledger or
    spool file, its requests still in flight are recorded as aborted at the stop
    (``unanswered_workers``, ``not_sent`` then None); so this returns within about
    ``STOP_RESULTS_S`` + :data:`STOP_LOOP_GRACE_S` of the stop whatever the workers do. Stopped
    before it (prompts, warmup: one worker's loop is cancelled, N workers are killed) it has none.
    Raises ``ValueError`` for a bad config and ``RuntimeError`` when a worker fails.
    """
    config.validate()
    warmup = warmup_specs if warmup_specs is not None else specs[:config.warmup]
    specs = _capped(config, specs)
    n = config.workers
    warm_fraction = None
    if n is None:
        n = 1
        if warmup:
            warm_fraction = asyncio.run(_measure_warmup(config, warmup))
            n = max(1, min(os.cpu_count() or 1, math.ceil(warm_fraction / CPU_BUSY_FRACTION)))
    offsets = _schedule(config, len(specs))
    if should_stop is not None and should_stop():
        raise LoadgenStopped("the run was stopped before it started")
    if n > 1:
        store, stats, t0, before, halted, missing = _run_processes(config, specs, warmup, n, offsets, progress,
                                                                   should_stop)
        if halted is None:
            after = server_generation_tokens(config.metrics_urls) if config.metrics_urls else (None, [])
            return _result(config, store, stats, t0, offsets, before, after, warm_fraction)
        result = _result(config, store, stats, t0, offsets, before, (None, []), warm_fraction, halted=halted,
                         workers_missing=bool(missing))
        raise LoadgenStopped(f"the run was stopped: {halted}" + (
            f" (worker{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not answer the stop "
            f"within {STOP_RESULTS_S:g} s: {'their' if len(missing) > 1 else 'its'} records up to then are kept, "
            f"{'their' if len(missing) > 1 else 'its'} requests still in flight recorded as aborted)"
            if missing else ""), result=result)
    tally = _Tally(_initial_total(config, specs, offsets))
    if progress is None and should_stop is None:
        store, one, t0, before, after = asyncio.run(_one_loop(config, specs, warmup, offsets, tally))
        return _result(config, store, [one], t0, offsets, before, after, warm_fraction)
    reporter = _Reporter(progress) if progress is not None else None
    stop = _StopFlag() if should_stop is not None else None
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["out"] = asyncio.run(_until_stopped(_one_loop(config, specs, warmup, offsets, tally), stop, tally))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread below
            box["error"] = exc

    thread = threading.Thread(target=body, name="loadgen-loop", daemon=True)
    thread.start()
    left_behind: LoadgenStopped | None = None
    while thread.is_alive():
        thread.join(STOP_POLL_S)
        if not thread.is_alive():
            break
        if stop is not None and stop.reason is None:
            reason = _stop_reason(should_stop())
            if reason is not None:
                stop.set(reason)
        if stop is not None and stop.reason is not None \
                and time.monotonic() - stop.at >= STOP_RESULTS_S + STOP_LOOP_GRACE_S:
            # The loop enforces STOP_RESULTS_S itself: one still busy now no longer runs at all.
            # Keep what it recorded; the daemon thread is left behind.
            left_behind = LoadgenStopped(f"the run was stopped: {stop.reason} (its event loop did not end within "
                                         f"{STOP_RESULTS_S + STOP_LOOP_GRACE_S:g} s; the requests still in flight "
                                         "are recorded as aborted)")
            left_behind.partial = tally.partial(stop.reason, stop.at_ns)
            break
        if reporter is not None:
            reporter.warming_from(tally)
            reporter.report(t0=tally.t0, done=tally.done, total=tally.total, failed=tally.failed, tokens=tally.tokens,
                            aborted=tally.aborted, streamed=tally.streamed, sent=tally.sent)
    if left_behind is not None:
        box = {"error": left_behind}
    if "error" in box:
        err = box["error"]
        if isinstance(err, LoadgenStopped):
            _report_final(reporter, tally)  # the counts up to the stop, for whoever shows them
            if err.partial is not None:
                store, one, t0, before, after = err.partial
                err.result = _result(config, store, [one], t0, offsets, before, after, warm_fraction,
                                     halted=stop.reason if stop is not None else None)
        raise err
    _report_final(reporter, tally)
    store, one, t0, before, after = box["out"]
    return _result(config, store, [one], t0, offsets, before, after, warm_fraction)


async def _measure_warmup(cfg: LoadConfig, warmup: list[RequestSpec]) -> float:
    async with _client(cfg) as client:
        cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
        await _warmup(client, cfg, warmup, cfg.concurrency or 1)
        wall = time.perf_counter_ns() - wall0
        return (time.process_time_ns() - cpu0) / wall if wall > 0 else 0.0
