"""KV hand-over between simulated prefill and decode servers, over loopback HTTP.

The prefill server runs a second listener on ``--bootstrap-port`` (the port the router puts into
every request as ``bootstrap_port``, as SGLang's prefill bootstrap server does). Routes:

- ``GET /health``: 200 once the listener is up.
- ``GET /kv/{room}?wait_s=S``: long-poll for the KV of ``bootstrap_room`` ``room``. Answers 200 with
  the room record ``{"room", "rid", "prompt_tokens", "kv_bytes", "digest"}`` as soon as prefill has
  computed it (each record is served once, then forgotten), 410 with ``{"error"}`` when the prefill
  side failed or abandoned that room, 404 when nothing arrived within ``S`` seconds.

The decode side calls :meth:`KvClient.fetch`; the modelled transfer time is slept by the decode
engine after the record arrives (see :mod:`.engine`). Records never fetched expire after
:data:`ROOM_TTL_S` so an abandoned room cannot grow the table without bound.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from aiohttp import web

from .metrics import SimMetrics

log = logging.getLogger("ceiling.sim.kv")

ROOM_TTL_S = 600.0
MAX_WAIT_S = 600.0


class KvFetchError(RuntimeError):
    """The prefill bootstrap listener did not hand over the room (failed, expired or unreachable)."""


class KvStore:
    """Rooms published by the prefill engine, awaited by the bootstrap listener's long-polls."""

    def __init__(self, metrics: SimMetrics) -> None:
        self._rooms: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._metrics = metrics

    def _future(self, room: int) -> asyncio.Future[dict[str, Any]]:
        fut = self._rooms.get(room)
        if fut is None:
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            self._rooms[room] = fut
            loop.call_later(ROOM_TTL_S, self._expire, room, fut)
        return fut

    def _expire(self, room: int, fut: asyncio.Future[dict[str, Any]]) -> None:
        if self._rooms.get(room) is fut:
            del self._rooms[room]
        if not fut.done():
            fut.set_exception(KvFetchError(f"room {room} expired"))
            fut.exception()  # mark retrieved: nobody may be waiting

    def publish(self, room: int, record: dict[str, Any] | None, error: str | None = None) -> None:
        """Make ``room``'s record available, or fail the room with ``error``."""
        fut = self._future(room)
        if fut.done():
            return
        if record is not None:
            fut.set_result(record)
        else:
            fut.set_exception(KvFetchError(error or "prefill failed"))
            fut.exception()

    def pending(self) -> int:
        """Rooms published or awaited but not yet served."""
        return len(self._rooms)

    async def take(self, room: int, wait_s: float) -> dict[str, Any]:
        """Wait up to ``wait_s`` for ``room``; raises ``TimeoutError`` or :class:`KvFetchError`."""
        fut = self._future(room)
        record = await asyncio.wait_for(asyncio.shield(fut), timeout=wait_s)
        if self._rooms.get(room) is fut:
            del self._rooms[room]
        self._metrics.kv_served.labels(self._metrics.model_name).inc()
        return record


def bootstrap_app(store: KvStore) -> web.Application:
    """The prefill side's bootstrap listener (routes in the module docstring)."""

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "pending_rooms": store.pending()})

    async def kv(request: web.Request) -> web.Response:
        try:
            room = int(request.match_info["room"])
            wait_s = min(float(request.query.get("wait_s", "60")), MAX_WAIT_S)
        except ValueError:
            return web.json_response({"error": "room must be an integer and wait_s a number"}, status=400)
        try:
            record = await store.take(room, wait_s)
        except TimeoutError:
            return web.json_response({"error": f"room {room} not ready within {wait_s} s"}, status=404)
        except KvFetchError as exc:
            return web.json_response({"error": str(exc)}, status=410)
        log.info("kv served room=%s prompt_tokens=%s", room, record.get("prompt_tokens"))
        return web.json_response(record)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/kv/{room}", kv)
    return app


class KvClient:
    """The decode side's fetcher; one shared HTTP session to all bootstrap listeners."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self._session: aiohttp.ClientSession | None = None

    async def fetch(self, host: str, port: int, room: int) -> dict[str, Any]:
        """Long-poll ``http://host:port/kv/room``; raises :class:`KvFetchError` on any failure."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.wait_s + 10))
        url = f"http://{host}:{port}/kv/{room}"
        try:
            async with self._session.get(url, params={"wait_s": str(self.wait_s)}) as resp:
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise KvFetchError(f"bootstrap {host}:{port} unreachable: {exc!r}") from exc
        if resp.status != 200 or not isinstance(body, dict):
            detail = body.get("error") if isinstance(body, dict) else body
            raise KvFetchError(f"bootstrap {host}:{port} answered {resp.status}: {detail}")
        return body

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
