"""The realtime vocabulary: group names, sequenced broadcasts through the real channel layer."""
from __future__ import annotations

import asyncio
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import override_settings

from controlplane import realtime


def test_it_names_groups_the_way_the_channel_layer_accepts():
    assert realtime.node_group("gpu-node.1_a") == "node-gpu-node.1_a"
    assert realtime.deployment_group(12) == "deployment-12"
    assert realtime.sweep_group("7") == "sweep-7"
    assert realtime.kernel_job_group(3) == "kernel-job-3"
    with pytest.raises(ValueError, match="invalid group name"):
        realtime.node_group("bad name/with spaces")


def test_it_splits_a_group_into_kind_and_key():
    assert realtime.group_kind("kernel-job-3") == ("kernel-job", "3")
    assert realtime.group_kind("deployment-12") == ("deployment", "12")
    assert realtime.group_kind("node-a-b") == ("node", "a-b")
    assert realtime.group_kind("secret-1") is None
    assert realtime.group_kind("node-") is None


@override_settings(CEILING_REALTIME_MIN_INTERVAL_S=0.0)
def test_it_delivers_sequenced_messages_and_keeps_the_last_of_each_type():
    layer = get_channel_layer()
    group = realtime.node_group(f"t{uuid.uuid4().hex[:10]}")
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    try:
        assert realtime.broadcast(group, "node.sample", {"n": 1})
        assert realtime.broadcast(group, "node.sample", {"n": 2})
        first = async_to_sync(layer.receive)(channel)
        second = async_to_sync(layer.receive)(channel)
        assert first["type"] == realtime.CONSUMER_EVENT
        assert [first["message"]["data"]["n"], second["message"]["data"]["n"]] == [1, 2]
        assert second["message"]["seq"] == first["message"]["seq"] + 1
        assert realtime.current_seq(group) == second["message"]["seq"]
        assert realtime.latest_messages(group)["node.sample"]["data"] == {"n": 2}
    finally:
        async_to_sync(layer.group_discard)(group, channel)


def test_a_message_carries_absent_text_as_null_never_an_empty_string():
    # A sweep that ended done has no reason: null, as the sweep API says it, at any depth.
    layer = get_channel_layer()
    group = realtime.sweep_group(int(uuid.uuid4().int % 10**6) + 1)
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    try:
        assert realtime.broadcast(group, "sweep.status", {"sweep_id": 20, "status": "done", "reason": "",
                                                          "summary": {"label": "", "flags": ["", "x"]}}, force=True)
        data = async_to_sync(layer.receive)(channel)["message"]["data"]
        assert data == {"sweep_id": 20, "status": "done", "reason": None, "summary": {"label": None, "flags": [None, "x"]}}
        assert realtime.latest_messages(group)["sweep.status"]["data"]["reason"] is None
    finally:
        async_to_sync(layer.group_discard)(group, channel)


@override_settings(CEILING_REALTIME_MIN_INTERVAL_S=10.0)
def test_it_drops_same_type_messages_faster_than_the_bound_unless_forced():
    group = realtime.deployment_group(int(uuid.uuid4().int % 10**9))
    assert realtime.broadcast(group, "deployment.sample", {"n": 1})
    assert not realtime.broadcast(group, "deployment.sample", {"n": 2})
    assert realtime.broadcast(group, "health.change", {"to": "ready"})  # another type has its own bound
    assert realtime.broadcast(group, "deployment.sample", {"n": 3}, force=True)
    assert realtime.latest_messages(group)["deployment.sample"]["data"] == {"n": 3}


@override_settings(CEILING_REALTIME_MIN_INTERVAL_S=0.0)
def test_it_broadcasts_from_async_code_too():
    layer = get_channel_layer()
    group = realtime.sweep_group(int(uuid.uuid4().int % 10**9))

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        try:
            assert await realtime.abroadcast(group, "sweep.progress", {"done": 5})
            got = await asyncio.wait_for(layer.receive(channel), 5)
            return got["message"]
        finally:
            await layer.group_discard(group, channel)

    msg = async_to_sync(scenario)()
    assert msg["type"] == "sweep.progress" and msg["data"] == {"done": 5} and msg["seq"] >= 1


def _redis():
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.REDIS_URL)


@pytest.mark.django_db
@override_settings(CEILING_REALTIME_MIN_INTERVAL_S=0.0)
def test_it_namespaces_keys_by_database_so_installations_sharing_redis_never_meet():
    from django.db import connection

    group = realtime.deployment_group(7)  # ids are reused by every installation and test run
    ns = realtime.realtime_namespace()
    assert ns.startswith("db-") and len(ns) == 15
    # A foreign installation (another database) left a kept message and a sequence in the same Redis.
    foreign = "db-" + "f" * 12
    r = _redis()
    r.hset(f"ceiling:{foreign}:rt:last:{group}", "deployment.sample", '{"type":"deployment.sample","seq":9}')
    r.set(f"ceiling:{foreign}:rt:seq:{group}", 9)
    try:
        before = realtime.current_seq(group)
        assert "deployment.sample" not in realtime.latest_messages(group) or \
            realtime.latest_messages(group)["deployment.sample"]["seq"] != 9
        assert realtime.broadcast(group, "deployment.status", {"status": "starting"}, force=True)
        assert realtime.current_seq(group) == before + 1
        # The sequence counter expires too (a day), like the kept messages (an hour).
        assert 0 < r.ttl(f"ceiling:{ns}:rt:seq:{group}") <= 86400
        assert 0 < r.ttl(f"ceiling:{ns}:rt:last:{group}") <= 3600
    finally:
        r.delete(f"ceiling:{foreign}:rt:last:{group}", f"ceiling:{foreign}:rt:seq:{group}",
                 f"ceiling:{ns}:rt:last:{group}", f"ceiling:{ns}:rt:seq:{group}")
    # The namespace follows the database the connection uses (a test database here).
    sd = connection.settings_dict
    with override_settings(CEILING_REALTIME_PREFIX="site-b"):
        assert realtime.realtime_namespace() == "site-b"
    original = sd["NAME"]
    try:
        sd["NAME"] = str(original) + ".other"
        assert realtime.realtime_namespace() != ns
    finally:
        sd["NAME"] = original
    assert realtime.realtime_namespace() == ns


@pytest.mark.django_db
def test_it_namespaces_channel_layer_groups_with_the_same_prefix():
    layer = get_channel_layer()
    assert isinstance(layer, realtime.NamespacedRedisChannelLayer)
    assert layer.prefix == f"ceiling:{realtime.realtime_namespace()}:asgi"
    assert layer._group_key("deployment-7") == f"ceiling:{realtime.realtime_namespace()}:asgi:group:deployment-7".encode()


def test_it_refuses_a_prefix_the_keys_cannot_carry():
    with override_settings(CEILING_REALTIME_PREFIX="bad prefix/with spaces"):
        with pytest.raises(ValueError, match="CEILING_REALTIME_PREFIX"):
            realtime.realtime_namespace()


@pytest.mark.django_db
def test_a_layer_built_under_another_namespace_is_dropped_when_the_setting_changes_back():
    """A test that overrides the prefix may be the first to build the default layer; once the
    override ends, broadcasts must reach listeners in this installation's namespace again."""
    from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

    channel_layers.backends = {}
    with override_settings(CEILING_REALTIME_PREFIX="site-c", CEILING_REALTIME_MIN_INTERVAL_S=0.0):
        assert get_channel_layer().prefix == "ceiling:site-c:asgi"
    ns = realtime.realtime_namespace()
    assert get_channel_layer().prefix == f"ceiling:{ns}:asgi"
    # A listener on a layer of its own (as a consumer in another process) gets the broadcast.
    listener = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    group = realtime.node_group(f"ns{uuid.uuid4().hex[:10]}")

    async def listen() -> dict:
        channel = await listener.new_channel()
        await listener.group_add(group, channel)
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: realtime.broadcast(group, "node.sample", {"n": 1}, force=True))
            return await asyncio.wait_for(listener.receive(channel), 5)
        finally:
            await listener.group_discard(group, channel)

    assert asyncio.run(listen())["message"]["data"] == {"n": 1}
