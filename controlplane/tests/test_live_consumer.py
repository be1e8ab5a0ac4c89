"""The live websocket (``ws/live/``) as a browser meets it: the project's real ASGI application
(Origin check, session authentication, routing), the real Redis channel layer and the real
broadcast helper, driven through ``channels.testing.WebsocketCommunicator``.

Group names carry a random suffix so tests running at the same time in this checkout never
see each other's messages.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from benchmarks.models import BenchmarkSweep
from controlplane.asgi import application
from controlplane.consumers import (
    CLOSE_BAD_REQUEST,
    CLOSE_FORBIDDEN,
    CLOSE_NOT_READING,
    CLOSE_UNAUTHENTICATED,
    subscription_refusal,
    subscriptions_from_query,
)
from controlplane.realtime import abroadcast, deployment_group, node_group, sweep_group
from deployments.models import Node
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = [pytest.mark.django_db(transaction=True)]

ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")


def _cookie_of(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}".encode()


async def _socket(user=None, subs: list[str] = (), origin: tuple[bytes, bytes] | None = ORIGIN,
                  host: tuple[bytes, bytes] | None = HOST, path: str = "/ws/live/") -> WebsocketCommunicator:
    headers = [origin] if origin else []
    if host:
        headers.append(host)
    if user is not None:
        headers.append((b"cookie", await sync_to_async(_cookie_of)(user)))
    query = "&".join(f"sub={s}" for s in subs)
    return WebsocketCommunicator(application, f"{path}?{query}", headers=headers)


async def _open(user, subs: list[str]) -> tuple[WebsocketCommunicator, dict]:
    """Connect, assert accepted, return the communicator and its ``live.subscribed`` message."""
    ws = await _socket(user, subs)
    connected, code = await ws.connect(timeout=5)
    assert connected, f"refused with {code}"
    hello = await ws.receive_json_from(timeout=5)
    assert hello["type"] == "live.subscribed"
    return ws, hello


async def _next_broadcast(ws: WebsocketCommunicator, timeout: float = 3) -> dict:
    """The next message that is a broadcast (skips control messages such as ``live.pong``)."""
    while True:
        msg = await ws.receive_json_from(timeout=timeout)
        if "group" in msg:
            return msg


@pytest.fixture
def node(db) -> Node:
    return cpu_node_create(name=f"live-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def fast_broadcasts(settings):
    """No per-type rate bound: these tests publish faster than the sampler ever does."""
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0
    return settings


def _sample(node_name: str, i: int) -> dict:
    return {"node": node_name, "t": time.time(), "interval_s": 0.5, "gpus": [], "i": i,
            "host": {"cpu_pct": 12.5, "cpu_pct_per_numa": {"0": 12.5}, "loadavg": [0.1, 0.2, 0.3],
                     "memory": {"used_bytes": 1, "total_bytes": 2, "available_bytes": 1}}, "nvml": "no GPU"}


# --- who may connect ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_it_streams_a_broadcast_to_a_subscribed_viewer_with_type_seq_group_ts_and_data(viewer, node, fast_broadcasts):
    group = node_group(node.name)
    ws, hello = await _open(viewer, [group])
    before = hello["groups"][group]["seq"]
    assert hello["ack_every"] >= 1 and hello["window"] >= hello["ack_every"]
    assert await abroadcast(group, "node.sample", _sample(node.name, 1))
    msg = await _next_broadcast(ws)
    assert msg["type"] == "node.sample" and msg["group"] == group and msg["seq"] == before + 1
    assert msg["data"]["node"] == node.name and msg["data"]["i"] == 1
    assert abs(msg["ts"] - time.time()) < 5
    await ws.disconnect()


@pytest.mark.asyncio
async def test_it_refuses_an_anonymous_socket_before_accepting(node):
    ws = await _socket(None, [node_group(node.name)])
    connected, code = await ws.connect(timeout=5)
    assert (connected, code) == (False, CLOSE_UNAUTHENTICATED)


@pytest.mark.asyncio
@pytest.mark.parametrize("origin", [(b"origin", b"http://evil.example"), (b"origin", b"http://testserver.evil.example"), None])
async def test_it_refuses_a_foreign_or_missing_origin_before_accepting(viewer, node, origin):
    ws = await _socket(viewer, [node_group(node.name)], origin=origin)
    connected, _code = await ws.connect(timeout=5)
    assert connected is False


@pytest.mark.asyncio
@pytest.mark.parametrize("origin, host", [
    (b"http://127.0.0.1:9999", b"127.0.0.1:8000"),   # same host, another port
    (b"http://localhost:8000", b"127.0.0.1:8000"),   # another host name, same port
    (b"https://127.0.0.1:8000", b"127.0.0.1:8000"),  # another scheme
    (b"http://127.0.0.1", b"127.0.0.1:8000"),        # port 80 implied
])
async def test_it_refuses_an_origin_whose_scheme_host_or_port_differs_from_the_request(viewer, node, origin, host):
    ws = await _socket(viewer, [node_group(node.name)], origin=(b"origin", origin), host=(b"host", host))
    connected, _code = await ws.connect(timeout=5)
    assert connected is False


@pytest.mark.asyncio
async def test_it_accepts_the_same_origin_with_its_port(viewer, node):
    ws = await _socket(viewer, [node_group(node.name)], origin=(b"origin", b"http://127.0.0.1:8000"),
                       host=(b"host", b"127.0.0.1:8000"))
    connected, code = await ws.connect(timeout=5)
    assert connected, f"refused with {code}"
    await ws.disconnect()


@pytest.mark.asyncio
async def test_it_accepts_an_origin_listed_in_ceiling_ws_allowed_origins(viewer, node, settings):
    settings.CEILING_WS_ALLOWED_ORIGINS = ["https://ceiling.example.org"]
    ws = await _socket(viewer, [node_group(node.name)], origin=(b"origin", b"https://ceiling.example.org"),
                       host=(b"host", b"127.0.0.1:8000"))
    connected, code = await ws.connect(timeout=5)
    assert connected, f"refused with {code}"
    await ws.disconnect()
    other = await _socket(viewer, [node_group(node.name)], origin=(b"origin", b"https://ceiling.example.org:8443"),
                          host=(b"host", b"127.0.0.1:8000"))
    assert (await other.connect(timeout=5))[0] is False


@pytest.mark.asyncio
async def test_it_refuses_an_unknown_websocket_path_without_a_routing_error(viewer, node, caplog):
    ws = await _socket(viewer, [node_group(node.name)], path="/ws/nothing/")
    assert await ws.connect(timeout=5) == (False, CLOSE_BAD_REQUEST)
    assert not [r for r in caplog.records if r.exc_info]
    assert any("unknown path '/ws/nothing/'" in r.getMessage() for r in caplog.records)


@pytest.mark.asyncio
async def test_it_refuses_an_id_with_leading_zeros_before_accepting(viewer, node):
    recipe = await sync_to_async(recipe_row_create)(node=node, name=f"z-{node.name}")
    deployment = await sync_to_async(deployment_row_create)(recipe=recipe)
    ws = await _socket(viewer, [f"deployment-00{deployment.pk}"])
    assert await ws.connect(timeout=5) == (False, CLOSE_FORBIDDEN)
    reason = await sync_to_async(subscription_refusal)(viewer, f"deployment-00{deployment.pk}")
    assert reason and f"deployment-{deployment.pk}" in reason and "leading zeros" in reason


@pytest.mark.asyncio
async def test_it_refuses_a_signed_in_user_without_a_role_before_accepting(outsider, node):
    ws = await _socket(outsider, [node_group(node.name)])
    assert await ws.connect(timeout=5) == (False, CLOSE_FORBIDDEN)


@pytest.mark.asyncio
@pytest.mark.parametrize("sub", ["node-no-such-node", "deployment-999999", "sweep-999999", "kernel-job-999999",
                                 "deployment-abc", "somethingelse-1", "node-bad name"])
async def test_it_refuses_a_subscription_to_an_object_that_does_not_exist_before_accepting(viewer, node, sub):
    ws = await _socket(viewer, [node_group(node.name), sub])
    assert await ws.connect(timeout=5) == (False, CLOSE_FORBIDDEN)


@pytest.mark.asyncio
async def test_it_accepts_every_kind_of_object_that_exists(viewer, node):
    recipe = await sync_to_async(recipe_row_create)(node=node, name=f"r-{node.name}")
    deployment = await sync_to_async(deployment_row_create)(recipe=recipe)
    sweep = await sync_to_async(BenchmarkSweep.objects.create)(name="live test")
    subs = [node_group(node.name), deployment_group(deployment.pk), sweep_group(sweep.pk)]
    ws, hello = await _open(viewer, subs)
    assert sorted(hello["groups"]) == sorted(subs)
    await ws.disconnect()


def test_it_explains_each_refusal(viewer, outsider, node):
    assert subscription_refusal(viewer, node_group(node.name)) is None
    assert subscription_refusal(viewer, "node-nope") == "no node named 'nope'"
    assert subscription_refusal(viewer, "deployment-424242") == "no deployment with id 424242"
    assert subscription_refusal(viewer, "sweep-x1") == "sweep ids are numbers, not 'x1'"
    # '²' passes str.isdigit() but is no number int() reads: a refusal, not an error
    assert subscription_refusal(viewer, "sweep-\u00b2")
    # the name as messages quote input: a hidden character as its code point, a quote kept readable
    assert subscription_refusal(viewer, "node-h6\u202etest").startswith("'node-h6<U+202E>test' is not a live group")
    assert subscription_refusal(viewer, "node-it's").startswith("\"node-it's\" is not a live group")
    assert "is not a live group" in subscription_refusal(viewer, "metrics-1")
    assert "no role" in subscription_refusal(outsider, node_group(node.name))
    # Kernel jobs are refused as unknown until the kernels app has its KernelJob table.
    assert subscription_refusal(viewer, "kernel-job-999999") in (
        "live data of kind 'kernel-job' is not available on this server", "no kernel-job with id 999999")


def test_it_reads_subscriptions_from_the_query_string_in_order_without_repeats():
    assert subscriptions_from_query(b"sub=node-a&sub=deployment-3&x=1&sub=node-a") == ["node-a", "deployment-3"]
    assert subscriptions_from_query("") == []


# --- messages over the socket ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_it_closes_with_the_reason_when_a_later_subscription_is_refused(viewer, node):
    ws, _ = await _open(viewer, [node_group(node.name)])
    await ws.send_json_to({"action": "subscribe", "groups": ["deployment-999999"]})
    error = await ws.receive_json_from(timeout=5)
    assert error == {"type": "live.error", "code": CLOSE_FORBIDDEN, "error": "deployment-999999: no deployment with id 999999"}
    closed = await ws.receive_output(timeout=5)
    assert closed["type"] == "websocket.close" and closed["code"] == CLOSE_FORBIDDEN


@pytest.mark.asyncio
async def test_it_subscribes_and_unsubscribes_over_the_socket(viewer, node, fast_broadcasts):
    other = await sync_to_async(cpu_node_create)(name=f"{node.name}-b")
    first, second = node_group(node.name), node_group(other.name)
    ws, _ = await _open(viewer, [first])
    await ws.send_json_to({"action": "subscribe", "groups": [second]})
    reply = await ws.receive_json_from(timeout=5)
    assert reply["type"] == "live.subscribed" and list(reply["groups"]) == [second]
    await abroadcast(second, "node.sample", _sample(other.name, 7))
    assert (await _next_broadcast(ws))["data"]["i"] == 7
    await ws.send_json_to({"action": "unsubscribe", "groups": [second]})
    assert await ws.receive_json_from(timeout=5) == {"type": "live.unsubscribed", "groups": [second]}
    await abroadcast(second, "node.sample", _sample(other.name, 8))
    await abroadcast(first, "node.sample", _sample(node.name, 9))
    msg = await _next_broadcast(ws)
    assert (msg["group"], msg["data"]["i"]) == (first, 9)
    await ws.disconnect()


@pytest.mark.asyncio
async def test_it_sends_the_last_message_of_each_type_on_subscribe_and_on_resync(viewer, node, fast_broadcasts):
    group = node_group(node.name)
    await abroadcast(group, "node.sample", _sample(node.name, 41))
    await abroadcast(group, "node.sample", _sample(node.name, 42))
    ws, hello = await _open(viewer, [group])
    snap = hello["groups"][group]
    assert snap["latest"]["node.sample"]["data"]["i"] == 42
    assert snap["latest"]["node.sample"]["seq"] == snap["seq"]
    await ws.send_json_to({"action": "resync", "groups": [group]})
    again = await ws.receive_json_from(timeout=5)
    assert again["type"] == "live.snapshot" and again["groups"][group] == snap
    await ws.disconnect()


@pytest.mark.asyncio
async def test_it_answers_a_ping_and_closes_on_an_unknown_action(viewer, node):
    ws, _ = await _open(viewer, [node_group(node.name)])
    await ws.send_json_to({"action": "ping"})
    pong = await ws.receive_json_from(timeout=5)
    assert pong["type"] == "live.pong" and abs(pong["t"] - time.time()) < 5
    await ws.send_json_to({"action": "shout"})
    error = await ws.receive_json_from(timeout=5)
    assert error["code"] == CLOSE_BAD_REQUEST and "unknown action 'shout'" in error["error"]
    assert (await ws.receive_output(timeout=5))["code"] == CLOSE_BAD_REQUEST


@pytest.mark.asyncio
async def test_a_frame_nested_deeper_than_the_parser_goes_is_a_bad_request_not_an_internal_error(viewer, node):
    ws, _ = await _open(viewer, [node_group(node.name)])
    await ws.send_to(text_data="[" * 20000 + "]" * 20000)  # 40,000 characters: under the 64 KiB cap
    error = await ws.receive_json_from(timeout=5)
    assert error["code"] == CLOSE_BAD_REQUEST and error["error"] == "frames must be JSON objects"
    assert (await ws.receive_output(timeout=5))["code"] == CLOSE_BAD_REQUEST


@pytest.mark.asyncio
async def test_it_refuses_an_ack_for_messages_it_never_sent(viewer, node):
    ws, _ = await _open(viewer, [node_group(node.name)])
    await ws.send_json_to({"action": "ack", "count": 5})
    error = await ws.receive_json_from(timeout=5)
    assert error["code"] == CLOSE_BAD_REQUEST and "between 0 and 0" in error["error"]


# --- flow control -----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_it_drops_a_client_that_does_not_read_while_a_reading_one_keeps_the_full_rate(viewer, node, fast_broadcasts):
    settings = fast_broadcasts
    settings.CEILING_LIVE_WINDOW = 32
    settings.CEILING_LIVE_ACK_EVERY = 8
    group = node_group(node.name)
    reader, _ = await _open(viewer, [group])
    laggard, _ = await _open(viewer, [group])
    total, period_s = 150, 0.01
    arrivals: list[tuple[int, float, float]] = []

    async def read_and_ack() -> None:
        while len(arrivals) < total:
            msg = await _next_broadcast(reader, timeout=5)
            arrivals.append((msg["seq"], time.time(), msg["ts"]))
            if len(arrivals) % 8 == 0:
                await reader.send_json_to({"action": "ack", "count": len(arrivals)})

    reading = asyncio.create_task(read_and_ack())
    started = time.monotonic()
    for i in range(total):
        assert await abroadcast(group, "node.sample", _sample(node.name, i))
        await asyncio.sleep(period_s)
    published_s = time.monotonic() - started
    await asyncio.wait_for(reading, timeout=10)

    # The reader got every message, in order, with no gap, while the laggard was being dropped.
    seqs = [s for s, _, _ in arrivals]
    assert seqs == list(range(seqs[0], seqs[0] + total))
    latencies = sorted(arrival - ts for _, arrival, ts in arrivals)
    receive_span_s = arrivals[-1][1] - arrivals[0][1]
    assert receive_span_s <= published_s + 0.5, (receive_span_s, published_s)
    assert latencies[int(0.99 * (total - 1))] < 0.5, latencies[-5:]

    # The laggard got exactly a window of messages, then the reason, then the close code.
    outputs = []
    while not await laggard.receive_nothing(timeout=0.2):
        outputs.append(await laggard.receive_output(timeout=1))
    frames = [json.loads(o["text"]) for o in outputs if o["type"] == "websocket.send"]
    assert sum(1 for f in frames if "group" in f) == 32
    assert frames[-1]["type"] == "live.error" and "32" in frames[-1]["error"] and "not reading" in frames[-1]["error"]
    assert outputs[-1] == {"type": "websocket.close", "code": CLOSE_NOT_READING, "reason": frames[-1]["error"][:120]}
    await reader.disconnect()


@pytest.mark.asyncio
async def test_it_drops_a_client_whose_acknowledgement_is_overdue(viewer, node, fast_broadcasts):
    settings = fast_broadcasts
    settings.CEILING_LIVE_WINDOW = 10_000
    settings.CEILING_LIVE_ACK_EVERY = 4
    settings.CEILING_LIVE_ACK_TIMEOUT_S = 0.3
    group = node_group(node.name)
    ws, _ = await _open(viewer, [group])
    started = time.monotonic()
    for i in range(40):
        await abroadcast(group, "node.sample", _sample(node.name, i))
        await asyncio.sleep(0.025)
    frames, closed = [], None
    while closed is None:
        out = await ws.receive_output(timeout=2)
        if out["type"] == "websocket.close":
            closed = out
        else:
            frames.append(json.loads(out["text"]))
    assert closed["code"] == CLOSE_NOT_READING
    assert "no acknowledgement for" in frames[-1]["error"]
    # Dropped about 0.3 s after the fourth message, not at the end of the 1 s of publishing.
    broadcasts = [f for f in frames if "group" in f]
    assert 6 <= len(broadcasts) <= 30, len(broadcasts)
    assert time.monotonic() - started < 5


@pytest.mark.asyncio
async def test_it_keeps_a_reader_that_acknowledges_slowly_but_steadily(viewer, node, fast_broadcasts):
    settings = fast_broadcasts
    settings.CEILING_LIVE_WINDOW = 16
    settings.CEILING_LIVE_ACK_EVERY = 8
    group = node_group(node.name)
    ws, _ = await _open(viewer, [group])
    got = 0
    for i in range(60):
        await abroadcast(group, "node.sample", _sample(node.name, i))
        await _next_broadcast(ws)
        got += 1
        if got % 8 == 0:
            await ws.send_json_to({"action": "ack", "count": got})
            # the consumer reads the socket and the channel layer concurrently: a ping answered
            # means the ack before it was taken, so the next broadcasts cannot overtake it
            await ws.send_json_to({"action": "ping"})
            assert (await ws.receive_json_from(timeout=5))["type"] == "live.pong"
    assert got == 60
    await ws.send_json_to({"action": "ping"})
    assert (await ws.receive_json_from(timeout=5))["type"] == "live.pong"
    await ws.disconnect()


@pytest.mark.asyncio
async def test_it_never_blocks_a_broadcast_on_a_channel_nobody_drains(viewer, node, fast_broadcasts):
    """channels_redis skips a full channel in group_send (capacity from CHANNEL_LAYERS) instead of
    waiting for it: a dead consumer's channel cannot slow the producers or the other sockets."""
    group = node_group(node.name)
    layer = get_channel_layer()
    capacity = django_settings.CHANNEL_LAYERS["default"]["CONFIG"]["capacity"]
    dead = await layer.new_channel()
    await layer.group_add(group, dead)
    ws, _ = await _open(viewer, [group])
    total = capacity + 50
    received = 0

    async def read() -> None:
        nonlocal received
        while received < total:
            await _next_broadcast(ws, timeout=5)
            received += 1
            if received % 16 == 0:
                await ws.send_json_to({"action": "ack", "count": received})

    reading = asyncio.create_task(read())
    started = time.monotonic()
    for i in range(total):
        assert await abroadcast(group, "node.sample", {"i": i})
    publish_s = time.monotonic() - started
    await asyncio.wait_for(reading, timeout=15)
    assert received == total
    assert publish_s < 10, publish_s
    await layer.group_discard(group, dead)
    await ws.disconnect()


@pytest.mark.asyncio
async def test_it_joins_a_group_once_per_server_process_however_many_sockets_subscribe(viewer, node, fast_broadcasts):
    """Twenty sockets of one process cost one channel-layer member (one Redis message per
    broadcast); every socket still gets the message, and the last one out leaves the group."""
    import redis

    group = node_group(node.name)
    members = redis.Redis.from_url(django_settings.REDIS_URL)
    sockets = [(await _open(viewer, [group]))[0] for _ in range(20)]
    key = get_channel_layer()._group_key(group)  # namespaced: ceiling:<installation>:asgi:group:<group>
    assert key.startswith(b"ceiling:db-")
    assert members.zcard(key) == 1
    await abroadcast(group, "node.sample", _sample(node.name, 5))
    for ws in sockets:
        assert (await _next_broadcast(ws))["data"]["i"] == 5
    for ws in sockets:
        await ws.disconnect()
    assert members.zcard(key) == 0
