"""One long-lived asyncio event loop in a daemon thread, for the sampler's network work.

Scrapes (aiohttp) and broadcasts (the channel layer) are cheap on a loop that lives as long as
the sampler: connections are kept alive and reused. From sync code each ``async_to_sync`` call
would instead run on a fresh loop in a fresh thread, and the Redis channel layer keeps its
connections per loop, so every message would open a new connection; measured on the 2-core
development host, one ``node.sample`` broadcast cost 1340 µs of CPU through
``controlplane.realtime.broadcast`` and 465 µs through ``abroadcast`` on a loop like this one.

Plain Python (no Django).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any


class LoopThread:
    """Starts its loop on first use; :meth:`submit` schedules a coroutine from any thread and
    returns a ``concurrent.futures.Future``; :meth:`close` stops the loop and joins the thread."""

    def __init__(self, name: str = "telemetry-loop") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if needed)."""
        with self._guard:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name=self.name, daemon=True)
                self._thread.start()
                ready.wait(5)
                self._loop = loop
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        """Run ``coro`` on the loop; the returned future holds its result or exception."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
        """Run ``coro`` on the loop and wait up to ``timeout_s`` seconds for its result."""
        return self.submit(coro).result(timeout=timeout_s)

    def close(self) -> None:
        """Stop the loop (pending callbacks are dropped) and join its thread; safe to call twice."""
        with self._guard:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not loop.is_running():
            loop.close()
