"""An open live socket (``ws/live/``) stays authorised only as long as its user does: it is closed
with ``live.error`` and 4401 when the session ends (logout, session deleted), the account is
deactivated or deleted or its password changes, and with 4403 when the viewer role goes; a
socket whose user is still authorised stays open through its re-checks.

Two paths are covered separately: the notices sent by the signals (``CEILING_LIVE_REAUTH_S``
set far beyond the test's timeout, so only a notice can close the socket in time) and the
periodic re-check alone (a short period, and changes that send no signal). Real ASGI
application, real Redis channel layer, real logout view; names carry a random suffix as in
``test_live_consumer``.
"""
from __future__ import annotations

import json
import logging
import time
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse

from controlplane.asgi import application
from controlplane.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED, live_user_recheck, subscription_refusal
from controlplane.realtime import abroadcast, live_user_group, node_group
from deployments.models import Node
from deployments.tests.factories import cpu_node_create

pytestmark = [pytest.mark.django_db(transaction=True)]

HEADERS = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
# Longer than any wait below: a socket closed in time was closed by a notice, not by the period.
NO_PERIOD_S = 600.0
# Seconds a notice may take to close a socket (one Redis round trip and one check in practice).
PROMPT_S = 3.0


def _signed_in_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _session_key(client: Client) -> str:
    return client.cookies[django_settings.SESSION_COOKIE_NAME].value


async def _open(client: Client, subs: list[str]) -> WebsocketCommunicator:
    """A socket with ``client``'s session cookie, accepted, its ``live.subscribed`` read."""
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={_session_key(client)}".encode()
    query = "&".join(f"sub={s}" for s in subs)
    ws = WebsocketCommunicator(application, f"/ws/live/?{query}", headers=[*HEADERS, (b"cookie", cookie)])
    connected, code = await ws.connect(timeout=5)
    assert connected, f"refused with {code}"
    assert (await ws.receive_json_from(timeout=5))["type"] == "live.subscribed"
    return ws


async def _closed(ws: WebsocketCommunicator, timeout: float = 5) -> tuple[dict, dict, float]:
    """Read up to the server's close: ``(last frame before it, the close, seconds waited)``."""
    started = time.monotonic()
    frames: list[dict] = []
    while True:
        out = await ws.receive_output(timeout=timeout)
        if out["type"] == "websocket.close":
            await ws.disconnect()
            return frames[-1], out, time.monotonic() - started
        frames.append(json.loads(out["text"]))


async def _assert_open_and_streaming(ws: WebsocketCommunicator, group: str, i: int) -> None:
    await abroadcast(group, "node.sample", {"i": i})
    while True:
        msg = await ws.receive_json_from(timeout=3)
        if "group" in msg:
            assert (msg["group"], msg["data"]["i"]) == (group, i)
            return


@pytest.fixture
def node(db) -> Node:
    return cpu_node_create(name=f"reauth-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def notices_only(settings):
    """Only the signals' notices can close a socket within the test."""
    settings.CEILING_LIVE_REAUTH_S = NO_PERIOD_S
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0
    return settings


@pytest.fixture
def short_period(settings):
    """Re-check every 0.2 s."""
    settings.CEILING_LIVE_REAUTH_S = 0.2
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0
    return settings


# --- the notices: closed at once ------------------------------------------------------------


@pytest.mark.asyncio
async def test_it_closes_the_socket_of_a_session_that_logs_out_with_4401(viewer, node, notices_only):
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [node_group(node.name)])
    response = await sync_to_async(client.post)(reverse("logout"))
    assert response.status_code == 302
    error, closed, waited = await _closed(ws)
    assert error == {"type": "live.error", "code": CLOSE_UNAUTHENTICATED,
                     "error": "signed out: sign in again to see live data"}
    assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED, "reason": error["error"]}
    assert waited < PROMPT_S


@pytest.mark.asyncio
async def test_it_keeps_the_socket_of_the_users_other_session_when_one_logs_out(viewer, node, notices_only):
    group = node_group(node.name)
    laptop = await sync_to_async(_signed_in_client)(viewer)
    wall = await sync_to_async(_signed_in_client)(viewer)
    laptop_ws, wall_ws = await _open(laptop, [group]), await _open(wall, [group])
    await sync_to_async(laptop.post)(reverse("logout"))
    error, closed, _ = await _closed(laptop_ws)
    assert closed["code"] == CLOSE_UNAUTHENTICATED
    await _assert_open_and_streaming(wall_ws, group, 1)
    await wall_ws.disconnect()


@pytest.mark.asyncio
@pytest.mark.parametrize("removal", ["user.groups.remove", "group.user_set.remove", "group.user_set.clear",
                                     "user.groups.set([])"])
async def test_it_closes_the_socket_of_a_user_whose_viewer_role_is_removed_with_4403(viewer, node, notices_only,
                                                                                     removal):
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [node_group(node.name)])

    def remove() -> None:
        group = Group.objects.get(name="viewer")
        {"user.groups.remove": lambda: viewer.groups.remove(group),
         "group.user_set.remove": lambda: group.user_set.remove(viewer),
         "group.user_set.clear": lambda: group.user_set.clear(),
         "user.groups.set([])": lambda: viewer.groups.set([])}[removal]()

    await sync_to_async(remove)()
    error, closed, waited = await _closed(ws)
    assert error == {"type": "live.error", "code": CLOSE_FORBIDDEN,
                     "error": "your account no longer has a role that may read live data (viewer or above)"}
    assert closed["code"] == CLOSE_FORBIDDEN
    assert waited < PROMPT_S


@pytest.mark.asyncio
async def test_it_closes_the_socket_of_a_deactivated_user_with_4401(viewer, node, notices_only):
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [node_group(node.name)])
    viewer.is_active = False
    await sync_to_async(viewer.save)()
    error, closed, waited = await _closed(ws)
    assert error == {"type": "live.error", "code": CLOSE_UNAUTHENTICATED, "error": "your account is deactivated"}
    assert closed["code"] == CLOSE_UNAUTHENTICATED
    assert waited < PROMPT_S


@pytest.mark.asyncio
async def test_it_closes_the_socket_of_a_user_whose_password_changed_with_4401(viewer, node, notices_only):
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [node_group(node.name)])
    viewer.set_password("another-horse-battery")
    await sync_to_async(viewer.save)()
    error, closed, waited = await _closed(ws)
    assert error["code"] == CLOSE_UNAUTHENTICATED and "password changed" in error["error"]
    assert closed["code"] == CLOSE_UNAUTHENTICATED
    assert waited < PROMPT_S


@pytest.mark.asyncio
async def test_it_closes_the_socket_of_a_deleted_user_with_4401(viewer, node, notices_only):
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [node_group(node.name)])
    await sync_to_async(viewer.delete)()
    error, closed, waited = await _closed(ws)
    assert (error["code"], error["error"]) == (CLOSE_UNAUTHENTICATED, "your account no longer exists")
    assert closed["code"] == CLOSE_UNAUTHENTICATED
    assert waited < PROMPT_S


@pytest.mark.asyncio
async def test_it_keeps_a_socket_whose_user_only_gained_or_kept_rights(viewer, node, notices_only):
    group = node_group(node.name)
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [group])

    def promote() -> None:
        viewer.groups.add(Group.objects.get_or_create(name="operator")[0])
        viewer.first_name = "Vera"
        viewer.save()

    await sync_to_async(promote)()
    assert await sync_to_async(live_user_recheck)(viewer.pk)
    await _assert_open_and_streaming(ws, group, 1)
    assert await ws.receive_nothing(timeout=0.5)
    await ws.disconnect()


# --- the periodic re-check: what no signal reports --------------------------------------------


@pytest.mark.asyncio
async def test_it_closes_a_socket_whose_session_row_was_deleted_within_a_period(viewer, node, short_period):
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [node_group(node.name)])
    await sync_to_async(Session.objects.filter(session_key=_session_key(client)).delete)()
    error, closed, waited = await _closed(ws)
    assert error["code"] == CLOSE_UNAUTHENTICATED and error["error"].startswith("signed out: the session ended")
    assert closed["code"] == CLOSE_UNAUTHENTICATED
    assert waited < 0.2 + 1.0


@pytest.mark.asyncio
async def test_it_closes_a_socket_whose_role_rows_were_deleted_within_a_period(viewer, node, short_period):
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [node_group(node.name)])
    # A queryset delete of the through rows sends no m2m_changed: only the period can see it.
    await sync_to_async(User.groups.through.objects.filter(user_id=viewer.pk).delete)()
    error, closed, waited = await _closed(ws)
    assert error["code"] == CLOSE_FORBIDDEN and closed["code"] == CLOSE_FORBIDDEN
    assert waited < 0.2 + 1.0


@pytest.mark.asyncio
async def test_it_keeps_an_authorised_socket_open_and_streaming_across_many_periods(viewer, node, short_period):
    group = node_group(node.name)
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [group])
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < 1.5:  # about seven re-checks
        i += 1
        await _assert_open_and_streaming(ws, group, i)
        await ws.send_json_to({"action": "ping"})
        assert (await ws.receive_json_from(timeout=3))["type"] == "live.pong"
        await ws.send_json_to({"action": "ack", "count": i})
    assert i >= 5
    assert await ws.receive_nothing(timeout=0.5)
    await ws.disconnect()


@pytest.mark.asyncio
async def test_it_refuses_a_subscribe_from_a_user_who_lost_the_role_before_the_next_period(viewer, node, notices_only):
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [node_group(node.name)])
    other = await sync_to_async(cpu_node_create)(name=f"{node.name}-b")
    await sync_to_async(User.groups.through.objects.filter(user_id=viewer.pk).delete)()
    await ws.send_json_to({"action": "subscribe", "groups": [node_group(other.name)]})
    error, closed, _ = await _closed(ws)
    assert error["code"] == CLOSE_FORBIDDEN and "no longer has a role" in error["error"]
    assert closed["code"] == CLOSE_FORBIDDEN


# --- the internal per-user group ------------------------------------------------------------


@pytest.mark.asyncio
async def test_it_never_lets_a_client_subscribe_to_or_read_a_users_internal_group(viewer, node, notices_only):
    group = node_group(node.name)
    internal = live_user_group(viewer.pk)
    assert "is not a live group" in await sync_to_async(subscription_refusal)(viewer, internal)
    client = await sync_to_async(_signed_in_client)(viewer)
    ws = await _open(client, [group])
    await abroadcast(internal, "node.sample", {"i": -1})
    await _assert_open_and_streaming(ws, group, 1)  # the first broadcast it gets is this one
    await ws.send_json_to({"action": "subscribe", "groups": [internal]})
    error, closed, _ = await _closed(ws)
    assert closed["code"] == CLOSE_FORBIDDEN and f"{internal}: " in error["error"]


def test_it_logs_and_carries_on_when_a_notice_cannot_be_sent(viewer, settings, caplog):
    """Redis away: removing a role still succeeds; the periodic re-check is the fallback."""
    layers = json.loads(json.dumps(settings.CHANNEL_LAYERS))
    layers["default"]["CONFIG"]["hosts"] = ["redis://127.0.0.1:1/0"]  # nothing listens on port 1
    settings.CHANNEL_LAYERS = layers
    with caplog.at_level(logging.WARNING, logger="controlplane.consumers"):
        viewer.groups.remove(Group.objects.get(name="viewer"))
    assert not viewer.groups.exists()
    assert any(f"sockets of user {viewer.pk} to re-check" in r.getMessage() for r in caplog.records)
