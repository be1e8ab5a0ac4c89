"""A web process that was killed or restarted never leaves its channel-layer groups; its members
are dropped once not renewed for ``group_expiry`` (300 s, settings.CHANNEL_LAYERS), while a
running process's hub renews its own every :data:`~controlplane.consumers.GROUP_RENEW_S`. With
channels_redis's default (one day) the node agent's broadcasts kept failing "over capacity" on the
dead members for a day after each web restart. Real Redis, the project's layer."""
from __future__ import annotations

import asyncio
import time
import uuid

import channels_redis.core
import pytest
from channels.layers import get_channel_layer

from controlplane.consumers import GROUP_RENEW_S

def test_the_hub_renews_well_inside_the_expiry():
    layer = get_channel_layer()
    assert layer.group_expiry == 300
    assert GROUP_RENEW_S * 2 <= layer.group_expiry


@pytest.mark.asyncio
async def test_a_member_not_renewed_within_the_expiry_is_dropped_and_a_renewed_one_keeps_its_broadcasts(monkeypatch):
    layer = get_channel_layer()
    group = f"expiry-{uuid.uuid4().hex[:12]}"
    dead, live = await layer.new_channel(), await layer.new_channel()
    now = time.time
    # The dead process's membership was last renewed just over the expiry ago.
    monkeypatch.setattr(channels_redis.core.time, "time", lambda: now() - layer.group_expiry - 5)
    await layer.group_add(group, dead)
    monkeypatch.undo()
    await layer.group_add(group, live)
    try:
        await layer.group_send(group, {"type": "live.sample", "n": 1})
        assert (await asyncio.wait_for(layer.receive(live), 5))["n"] == 1
        members = await layer.connection(layer.consistent_hash(group)).zrange(layer._group_key(group), 0, -1)
        assert [m.decode() for m in members] == [live]
    finally:
        await layer.group_discard(group, live)
        await layer.group_discard(group, dead)
