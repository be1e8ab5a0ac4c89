"""A receive cancelled while it waits for the channel layer's cleanup lock leaves nothing bound
to its event loop, so the next loop in the process (the next test's) receives normally.

channels_redis takes a per-channel cleanup lock in ``receive_single`` and its backup cleaner
task (one Redis round trip) gives it back. A socket that closes, or a loop that ends, during
that round trip cancels the receive waiting for the lock; upstream that waiter stayed counted,
the lock was kept, bound to the ended loop, and the next loop's receive that had to wait for
it failed with ``RuntimeError: <Lock [locked]> is bound to a different event loop``. Here the
cleaner is slowed so the window is always hit rather than only on a loaded machine."""
from __future__ import annotations

import asyncio
import uuid

import pytest
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer

from controlplane.realtime import CancelSafeChannelLock, abroadcast, node_group
from controlplane.tests.test_live_consumer import _next_broadcast, _open, _sample
from deployments.tests.factories import cpu_node_create


def _waits(layer) -> dict:
    return dict(layer.receive_clean_locks.wait_counts)


def test_a_waiter_cancelled_in_one_loop_leaves_no_lock_for_the_next_loop():
    locks = CancelSafeChannelLock()

    async def cancelled_waiter() -> None:
        await locks.acquire("c")
        waiter = asyncio.ensure_future(locks.acquire("c"))
        await asyncio.sleep(0)  # it waits, binding the lock to this loop
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        locks.release("c")

    asyncio.run(cancelled_waiter())
    assert dict(locks.wait_counts) == {} and dict(locks.locks) == {}

    async def contended() -> None:
        await locks.acquire("c")
        second = asyncio.ensure_future(locks.acquire("c"))
        await asyncio.sleep(0)
        locks.release("c")
        assert await asyncio.wait_for(second, 2) is True
        locks.release("c")

    asyncio.run(contended())
    assert dict(locks.wait_counts) == {}


@pytest.mark.django_db(transaction=True)
def test_a_socket_closed_while_the_cleaner_runs_leaves_the_next_loop_a_working_layer(viewer, settings, monkeypatch):
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0
    clean = RedisChannelLayer._clean_receive_backup

    async def slow_clean(self, index, channel):
        await asyncio.sleep(0.2)
        await clean(self, index, channel)

    monkeypatch.setattr(RedisChannelLayer, "_clean_receive_backup", slow_clean)
    node = cpu_node_create(name=f"live-{uuid.uuid4().hex[:10]}")
    group = node_group(node.name)

    async def one_socket(i: int) -> dict:
        ws, _ = await _open(viewer, [group])
        try:
            assert await abroadcast(group, "node.sample", _sample(node.name, i))
            return await _next_broadcast(ws)
        finally:
            await ws.disconnect()

    layer = get_channel_layer()
    for i in (1, 2, 3):  # each on a loop of its own, as each test has
        assert asyncio.run(one_socket(i))["data"]["i"] == i
        assert _waits(layer) == {} and layer.receive_count == 0 and not layer.receive_cleaners
