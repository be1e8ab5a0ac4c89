"""The simulator's scheduler: a performance profile turned into batches, steps and queues.

One asyncio task per server runs the role's loop; request handlers only submit a
:class:`SimRequest` and read its event queue. Times come from the profile (modelled seconds)
multiplied by ``time_scale``; deadlines are kept on a running cursor so that timer overshoot in one
step is absorbed by the next instead of adding up over hundreds of steps.

Roles (mirroring SGLang's schedulers):

- ``single``: prefill has priority (SGLang's default): whenever queued requests fit the KV cache
  and the running limit, the loop runs a prefill batch (up to ``prefill.max_batch_tokens`` prompt
  tokens, decode paused meanwhile) whose end emits each request's first token; otherwise it runs
  one decode step over the running batch.
- ``prefill``: FIFO prefill batches; at the end of a batch each request's KV is published under its
  ``bootstrap_room`` on the bootstrap listener (:mod:`.kv`) and the request finishes with the one
  token the prefill forward produced.
- ``decode``: a request first waits for KV space (SGLang's pre-allocation queue: prompt tokens plus
  ``admission_reserve_tokens`` must fit), then fetches its room's KV from the prefill bootstrap
  listener, sleeps the modelled transfer time (the bandwidth term is serialised on one link), and
  joins the running batch at the next step boundary; its first token comes out of that step.

KV accounting (``single`` and ``decode``): a running request holds ``prompt + generated`` tokens and
every decode step needs one more token per running request. When the cache cannot hold them, the
request with the least progress is retracted (SGLang's ``retract_decode``): it stops, frees its KV
and waits, ahead of new requests, until its tokens fit again; its stream simply pauses.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .metrics import SimMetrics
from .profile import SimProfile

log = logging.getLogger("ceiling.sim.engine")

ROLES = ("single", "prefill", "decode")
# Past this lag behind the planned cursor the loop stops trying to catch up (the host is
# overloaded) and restarts timing from now, so it never emits a burst of back-to-back steps.
_MAX_CATCH_UP_S = 0.05


class RequestRejected(Exception):
    """A request the engine will not take; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(eq=False)
class SimRequest:
    """One generation request inside the engine.

    ``target_tokens`` is how many tokens it will produce (``max_new_tokens``, or fewer when the
    pseudo-EOS comes first); ``finish_type`` is ``"length"`` or ``"stop"`` accordingly. Events on
    ``events``: ``("token", n)`` after the n-th token, ``("done", finish_type)``, or
    ``("error", message, http_status)``.
    """

    rid: str
    prompt_tokens: int
    target_tokens: int
    finish_type: str
    digest: int
    arrived: float
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    seq: int = 0
    generated: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    cancelled: bool = False
    retractions: int = 0
    kv_held: int = 0
    fetch_task: asyncio.Task[None] | None = None
    events: asyncio.Queue[tuple[Any, ...]] = field(default_factory=asyncio.Queue)


KvFetcher = Callable[[str, int, int], Awaitable[dict[str, Any]]]
KvPublisher = Callable[[int, dict[str, Any] | None, str | None], None]


class SimEngine:
    """The scheduler of one simulated server (role ``single``, ``prefill`` or ``decode``).

    ``kv_fetch(host, port, room)`` (decode) returns the prefill side's room record or raises;
    ``kv_publish(room, record, error)`` (prefill) stores it for the bootstrap listener.
    """

    def __init__(
        self,
        *,
        profile: SimProfile,
        role: str,
        time_scale: float,
        metrics: SimMetrics,
        seed: int = 0,
        kv_fetch: KvFetcher | None = None,
        kv_publish: KvPublisher | None = None,
    ) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}")
        if time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self.profile, self.role, self.time_scale, self.metrics = profile, role, time_scale, metrics
        self.kv_fetch, self.kv_publish = kv_fetch, kv_publish
        self._rng = random.Random(seed)
        self._seq = itertools.count(1)
        self.waiting: deque[SimRequest] = deque()
        self.resume: deque[SimRequest] = deque()
        self.fetching: set[SimRequest] = set()
        self.ready: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.kv_used = 0
        self.kv_fetch_count = 0
        self._wake = asyncio.Event()
        self._link_free = 0.0
        self._cursor: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._labels = (metrics.model_name,)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the role's loop on the running event loop."""
        loop = {"single": self._loop_single, "prefill": self._loop_prefill, "decode": self._loop_decode}[self.role]
        self._task = asyncio.get_running_loop().create_task(loop(), name=f"sim-{self.role}-loop")

    async def stop(self) -> None:
        """Cancel the loop and every pending KV fetch."""
        for req in list(self.fetching):
            if req.fetch_task:
                req.fetch_task.cancel()
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # ------------------------------------------------------------------ requests
    def submit(self, req: SimRequest) -> None:
        """Queue ``req``; raises :class:`RequestRejected` when it can never fit this server."""
        d = self.profile.decode
        if req.prompt_tokens < 1:
            raise RequestRejected("the prompt must hold at least one token")
        if req.prompt_tokens + req.target_tokens > self.profile.context_length:
            raise RequestRejected(
                f"prompt ({req.prompt_tokens} tokens) plus max new tokens exceeds the context length "
                f"({self.profile.context_length} tokens)"
            )
        if self.role != "prefill" and req.prompt_tokens + d.admission_reserve_tokens > d.kv_capacity_tokens:
            raise RequestRejected(
                f"prompt ({req.prompt_tokens} tokens) does not fit the KV cache ({d.kv_capacity_tokens} tokens)"
            )
        if self.role == "prefill" and req.prompt_tokens > self.profile.prefill.max_batch_tokens:
            raise RequestRejected(
                f"prompt ({req.prompt_tokens} tokens) exceeds the prefill batch limit "
                f"({self.profile.prefill.max_batch_tokens} tokens)"
            )
        req.seq = next(self._seq)
        self.waiting.append(req)
        self._gauges()
        self._wake.set()

    def in_flight(self) -> int:
        """Requests submitted and neither finished nor cancelled: queued, being fetched, ready
        to decode or running."""
        queued = (*self.waiting, *self.resume, *self.fetching, *self.ready, *self.running)
        return sum(1 for req in queued if not req.cancelled and req.finished_at is None)

    def cancel(self, req: SimRequest) -> None:
        """Mark ``req`` abandoned (client went away); the loop frees its KV at the next boundary."""
        if req.finished_at is not None or req.cancelled:
            return
        req.cancelled = True
        self.metrics.num_aborted.labels(*self._labels).inc()
        if req.fetch_task and not req.fetch_task.done():
            req.fetch_task.cancel()
        self._wake.set()

    # ------------------------------------------------------------------ time
    def _model_s(self, seconds: float) -> float:
        jitter = self.profile.jitter
        factor = 1.0 + self._rng.uniform(-jitter, jitter) if jitter else 1.0
        return seconds * self.time_scale * factor

    def _start_at(self) -> float:
        now = time.monotonic()
        if self._cursor is None or now - self._cursor > _MAX_CATCH_UP_S:
            return now
        return self._cursor

    async def _busy(self, seconds: float) -> float:
        """Occupy the loop for ``seconds`` wall seconds from the cursor; returns the end time."""
        end = self._start_at() + seconds
        delay = end - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        self._cursor = end
        return end

    async def _idle(self) -> None:
        self._cursor = None
        await self._wake.wait()
        self._wake.clear()

    # ------------------------------------------------------------------ shared pieces
    def _gauges(self) -> None:
        m, lab = self.metrics, self._labels
        m.num_running_reqs.labels(*lab).set(len(self.running))
        m.num_queue_reqs.labels(*lab).set(len(self.waiting) + len(self.resume))
        m.num_retracted_reqs.labels(*lab).set(len(self.resume))
        m.num_used_tokens.labels(*lab).set(self.kv_used)
        m.token_usage.labels(*lab).set(self.kv_used / self.profile.decode.kv_capacity_tokens)
        m.prealloc_queue.labels(*lab).set(len(self.waiting) if self.role == "decode" else 0)
        m.transfer_queue.labels(*lab).set(len(self.fetching))

    def _release(self, req: SimRequest) -> None:
        self.kv_used -= req.kv_held
        req.kv_held = 0

    def _drop_cancelled(self) -> None:
        for queue in (self.waiting, self.resume):
            for req in [r for r in queue if r.cancelled]:
                queue.remove(req)
                self._release(req)
        for req in [r for r in self.running if r.cancelled]:
            self.running.remove(req)
            self._release(req)
        for req in [r for r in self.ready if r.cancelled]:
            self.ready.remove(req)
            self._release(req)

    def _slots_used(self) -> int:
        return len(self.running) + len(self.fetching) + len(self.ready)

    def _resume_retracted(self) -> None:
        d = self.profile.decode
        while self.resume and self._slots_used() < d.max_running_requests:
            req = self.resume[0]
            need = req.prompt_tokens + req.generated
            if self.kv_used + need + d.admission_reserve_tokens > d.kv_capacity_tokens:
                break
            self.resume.popleft()
            req.kv_held = need
            self.kv_used += need
            self.running.append(req)

    def _admit(self, max_batch_tokens: int | None) -> list[SimRequest]:
        """Pop FIFO requests that fit the running limit, the KV cache and the batch token limit."""
        d = self.profile.decode
        batch: list[SimRequest] = []
        tokens = 0
        if self.resume:
            return batch  # retracted requests go first, as in SGLang
        while self.waiting and self._slots_used() + len(batch) < d.max_running_requests:
            req = self.waiting[0]
            if self.kv_used + req.prompt_tokens + d.admission_reserve_tokens > d.kv_capacity_tokens:
                break
            if max_batch_tokens is not None and batch and tokens + req.prompt_tokens > max_batch_tokens:
                break
            self.waiting.popleft()
            req.kv_held = req.prompt_tokens
            self.kv_used += req.prompt_tokens
            tokens += req.prompt_tokens
            batch.append(req)
        return batch

    def _retract_if_needed(self) -> None:
        cap = self.profile.decode.kv_capacity_tokens
        while self.running and self.kv_used + len(self.running) > cap:
            if len(self.running) == 1:
                req = self.running.pop()
                self._release(req)
                self._finish_error(req, "the request no longer fits the KV cache", 500)
                return
            victim = min(self.running, key=lambda r: (r.generated, -r.seq))
            self.running.remove(victim)
            self._release(victim)
            victim.retractions += 1
            self.resume.append(victim)
            log.info("retracted rid=%s generated=%d kv_used=%d", victim.rid, victim.generated, self.kv_used)

    def _emit_token(self, req: SimRequest, now: float) -> None:
        req.generated += 1
        m, lab = self.metrics, self._labels
        if req.first_token_at is None:
            req.first_token_at = now
            m.ttft.labels(*lab).observe(now - req.arrived)
        elif req.last_token_at is not None:
            m.itl.labels(*lab).observe(now - req.last_token_at)
        req.last_token_at = now
        if self.role != "prefill":
            m.generation_tokens.labels(*lab).inc()
        req.events.put_nowait(("token", req.generated))

    def _finish(self, req: SimRequest, now: float) -> None:
        req.finished_at = now
        self.metrics.num_requests.labels(*self._labels).inc()
        self.metrics.e2e.labels(*self._labels).observe(now - req.arrived)
        req.events.put_nowait(("done", req.finish_type if self.role != "prefill" else "length"))
        log.info(
            "finished rid=%s role=%s prompt_tokens=%d completion_tokens=%d ttft_s=%.3f e2e_s=%.3f retractions=%d",
            req.rid, self.role, req.prompt_tokens, req.generated,
            (req.first_token_at or now) - req.arrived, now - req.arrived, req.retractions,
        )

    def _finish_error(self, req: SimRequest, message: str, status: int) -> None:
        req.finished_at = time.monotonic()
        req.events.put_nowait(("error", message, status))

    async def _decode_step(self) -> None:
        d = self.profile.decode
        batch = list(self.running)
        seconds = self._model_s(d.step_time_s(len(batch), sum(r.kv_held for r in batch)))
        self._gauges()
        now = await self._busy(seconds)
        self.metrics.gen_throughput.labels(*self._labels).set(len(batch) / seconds if seconds > 0 else 0.0)
        for req in batch:
            if req.cancelled or req not in self.running:
                continue
            self.kv_used += 1
            req.kv_held += 1
            self._emit_token(req, now)
            if req.generated >= req.target_tokens:
                self.running.remove(req)
                self._release(req)
                self._finish(req, now)
        self._gauges()

    # ------------------------------------------------------------------ role loops
    async def _loop_single(self) -> None:
        p = self.profile.prefill
        while True:
            self._drop_cancelled()
            self._resume_retracted()
            batch = self._admit(p.max_batch_tokens)
            if batch:
                tokens = sum(r.prompt_tokens for r in batch)
                for req in batch:
                    self.metrics.queue_time.labels(*self._labels).observe(time.monotonic() - req.arrived)
                self._gauges()
                now = await self._busy(self._model_s(p.batch_time_s(tokens)))
                self.metrics.prompt_tokens.labels(*self._labels).inc(tokens)
                for req in batch:
                    if req.cancelled:
                        self._release(req)
                        continue
                    # The prefill forward samples the first output token.
                    self.kv_used += 1
                    req.kv_held += 1
                    self._emit_token(req, now)
                    if req.generated >= req.target_tokens:
                        self._release(req)
                        self._finish(req, now)
                    else:
                        self.running.append(req)
                self._gauges()
                continue
            if self.running:
                self._retract_if_needed()
                if self.running:
                    await self._decode_step()
                continue
            self._gauges()
            await self._idle()

    async def _loop_prefill(self) -> None:
        p = self.profile.prefill
        while True:
            self._drop_cancelled()
            batch: list[SimRequest] = []
            tokens = 0
            while self.waiting and (not batch or tokens + self.waiting[0].prompt_tokens <= p.max_batch_tokens):
                req = self.waiting.popleft()
                batch.append(req)
                tokens += req.prompt_tokens
            if not batch:
                self._gauges()
                await self._idle()
                continue
            self.running = batch
            self._gauges()
            now = await self._busy(self._model_s(p.batch_time_s(tokens)))
            self.metrics.prompt_tokens.labels(*self._labels).inc(tokens)
            self.running = []
            for req in batch:
                record = {
                    "room": req.bootstrap_room,
                    "rid": req.rid,
                    "prompt_tokens": req.prompt_tokens,
                    "kv_bytes": req.prompt_tokens * self.profile.kv_transfer.bytes_per_token,
                    "digest": req.digest,
                }
                if self.kv_publish and req.bootstrap_room is not None:
                    self.kv_publish(req.bootstrap_room, None if req.cancelled else record,
                                    "prefill request was abandoned" if req.cancelled else None)
                if req.cancelled:
                    continue
                self._emit_token(req, now)
                self._finish(req, now)
            self._gauges()

    async def _loop_decode(self) -> None:
        while True:
            self._drop_cancelled()
            self._resume_retracted()
            for req in self._admit(None):
                self.fetching.add(req)
                req.fetch_task = asyncio.get_running_loop().create_task(self._receive_kv(req))
            if self.ready:
                self.running.extend(self.ready)
                self.ready.clear()
            if self.running:
                self._retract_if_needed()
                if self.running:
                    await self._decode_step()
                    continue
            self._gauges()
            await self._idle()

    async def _receive_kv(self, req: SimRequest) -> None:
        """Fetch ``req``'s room from the prefill bootstrap listener, then model the transfer."""
        kv = self.profile.kv_transfer
        try:
            assert self.kv_fetch is not None and req.bootstrap_host and req.bootstrap_port is not None
            record = await self.kv_fetch(req.bootstrap_host, req.bootstrap_port, int(req.bootstrap_room or 0))
            tokens = int(record.get("prompt_tokens", req.prompt_tokens))
            started = time.monotonic()
            # One link: the bandwidth term queues behind earlier transfers; the fixed latency does
            # not. Absolute deadlines keep timer overshoot from adding up.
            self._link_free = max(started, self._link_free) + self._model_s(kv.wire_time_s(tokens))
            done = self._link_free + self._model_s(kv.fixed_s)
            await asyncio.sleep(max(0.0, done - time.monotonic()))
        except asyncio.CancelledError:
            self.fetching.discard(req)
            self._release(req)
            self._wake.set()
            raise
        except Exception as exc:  # noqa: BLE001 - any fetch failure fails this one request
            self.fetching.discard(req)
            self._release(req)
            log.warning("kv fetch failed rid=%s room=%s: %s", req.rid, req.bootstrap_room, exc)
            self._finish_error(req, f"KV transfer for bootstrap_room {req.bootstrap_room} failed: {exc}", 500)
            self._wake.set()
            return
        nbytes = tokens * kv.bytes_per_token
        self.kv_fetch_count += 1
        self.metrics.kv_fetches.labels(*self._labels).inc()
        self.metrics.kv_fetch_bytes.labels(*self._labels).inc(nbytes)
        log.info(
            "kv fetched room=%s rid=%s from=%s:%s tokens=%d bytes=%d transfer_s=%.4f",
            req.bootstrap_room, req.rid, req.bootstrap_host, req.bootstrap_port, tokens, nbytes,
            time.monotonic() - started,
        )
        self.fetching.discard(req)
        if req.cancelled:
            self._release(req)
        else:
            self.ready.append(req)
        self._wake.set()
