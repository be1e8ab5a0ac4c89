"""The one websocket endpoint for live data: ``ws/live/``.

A browser opens ``ws/live/?sub=node-local&sub=deployment-3`` with its session cookie. Everything
is decided in :meth:`LiveConsumer.connect`, *before* the handshake is accepted:

* an anonymous user is refused (``CLOSE_UNAUTHENTICATED``); a wrong ``Origin`` never reaches
  this class (:class:`SameOriginValidator` in :mod:`controlplane.asgi` refuses it first);
* a signed-in user without at least the ``viewer`` role is refused (``CLOSE_FORBIDDEN``);
* every ``sub`` must name a group of :mod:`controlplane.realtime` whose object exists (node by
  name, deployment / sweep / kernel job by id; kernel jobs only once ``kernels.models`` has a
  ``KernelJob``) or one of its rosters (``roster-nodes``: the set of nodes, whatever they are)
  and that the user may see; one refused subscription refuses the socket.

A refusal before ``accept()`` is an HTTP 403 to the browser; the reason is logged on the server.
After accepting, the consumer sends ``live.subscribed`` with, per group, the current sequence
number and the last message of each type (:func:`controlplane.realtime.latest_messages`), so a
page shows the current state at once and knows where the sequence stands.

Client → server messages (JSON text frames, ``{"action": ...}``):

* ``{"action": "ack", "count": N}``: the client has processed N broadcast messages since it
  connected (control messages, ``live.*``, are not counted);
* ``{"action": "ping"}`` → ``{"type": "live.pong", "t": unix_s}`` (lets the client notice a dead
  connection that TCP has not reported yet);
* ``{"action": "subscribe", "groups": [...]}`` → ``live.subscribed`` for the new groups; a
  refused one gets ``live.error`` with the reason and the socket is closed (``CLOSE_FORBIDDEN``);
* ``{"action": "unsubscribe", "groups": [...]}`` → ``live.unsubscribed``;
* ``{"action": "resync", "groups": [...]}`` → ``live.snapshot`` (sequence + last messages) for
  subscribed groups, after the client saw a gap in a group's ``seq``.

Anything else gets ``live.error`` and ``CLOSE_BAD_REQUEST``, a frame that gives a key more than
once too (``{"action": "ack", "count": 1, "count": 5}``: ``key 'count' is given 2 times: give it
once``; neither value is taken).

Fan-out: the sockets of one server process share one channel-layer membership per group
(:class:`LiveHub`): a broadcast costs one Redis message per server process, not one per open
socket, and the hub hands it to every local socket of the group without waiting on any of them.
The hub re-joins its groups after a Redis error (a restarted Redis forgets memberships) and
renews them every minute (channels_redis forgets a member after ``group_expiry``, 5 minutes here, so
the members of a web process that was killed or restarted are dropped soon).

Flow control (a client that does not read must not slow the others): the producers never wait
on a socket (``channel_layer.group_send`` skips a channel that is full instead of blocking,
and the hub drains its channel at once), but daphne buffers outgoing frames without a
bound when a client stops reading. So the client acknowledges: it sends ``ack`` at least every
``CEILING_LIVE_ACK_EVERY`` messages. The socket is closed with ``CLOSE_NOT_READING`` when more
than ``CEILING_LIVE_WINDOW`` messages are unacknowledged, or when an acknowledgement has been
due (``ack_every`` or more unacknowledged) for longer than ``CEILING_LIVE_ACK_TIMEOUT_S``. The
server's memory per slow client is therefore bounded by a window of messages, and the other
clients' sends never wait for it.

Authorisation after the handshake (a wall stays open for weeks; its user may sign out, lose
the role or be deactivated meanwhile): every accepted socket re-checks its user every
``CEILING_LIVE_REAUTH_S`` seconds (:func:`live_session_refusal`, from a fresh load of the
session the socket was opened with, never the scope's cached copy; a quarter of the period of
jitter spreads sockets opened together) and at once when the server sends a notice to the
user's internal group (:func:`live_user_recheck`, sent by :mod:`controlplane.signals` on
logout, on a save or deletion of the user and on a removal from a role group). A socket whose
user is no longer authorised gets ``live.error`` with the reason and is closed:

* ``CLOSE_UNAUTHENTICATED`` (4401): the session is gone (signed out, expired, deleted), the user
  is deactivated or deleted, or the session's auth hash no longer matches (password changed);
* ``CLOSE_FORBIDDEN`` (4403): the user has no ``viewer`` role (or above) any more.

A ``subscribe`` runs the same check before its groups are authorised. A check that fails for a
database error keeps the socket and logs a warning (while the database is away no logout or role
change can be recorded either); the next period checks again. The notices are the fast path,
the period the guarantee: a notice lost with Redis, or a change no signal reports (a session
row deleted, a role group renamed or deleted), is caught within one period. The check costs one
session load and two or three queries per socket and period, on the database thread, never on
the hub's delivery loop.

Settings (all optional, read at connect time): ``CEILING_LIVE_ACK_EVERY`` (16 messages),
``CEILING_LIVE_WINDOW`` (256 messages: at the sampler's 2 Hz per group that is about a minute
of a wall subscribed to two nodes and a deployment), ``CEILING_LIVE_ACK_TIMEOUT_S`` (15 s),
``CEILING_LIVE_MAX_GROUPS`` (256 subscriptions per socket), ``CEILING_LIVE_REAUTH_S`` (5 s
between authorisation re-checks of a socket; at least ``MIN_REAUTH_S``, 0.1 s).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
import weakref
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import async_to_sync, sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.apps import apps
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model, load_backend
from django.core.exceptions import ValidationError
from django.db import DatabaseError
from django.utils.crypto import constant_time_compare

from controlplane.drf_defaults import json_loads, repeated_key_errors
from controlplane.jsonsafe import json_spelled
from controlplane.permissions import has_role
from controlplane.realtime import ROSTERS, current_seq, group_kind, latest_messages, live_user_group

log = logging.getLogger(__name__)

__all__ = [
    "LiveConsumer", "LiveHub", "SameOriginValidator", "UnknownPathConsumer", "origin_refusal",
    "subscription_refusal", "subscriptions_from_query", "live_session_refusal", "live_user_recheck",
    "session_digest",
    "CLOSE_UNAUTHENTICATED", "CLOSE_FORBIDDEN", "CLOSE_BAD_REQUEST", "CLOSE_NOT_READING", "CLOSE_TOO_MANY",
]

# Close codes (4000-4999 is the range RFC 6455 leaves to applications); the HTTP-like last
# three digits say what went wrong.
CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_READING = 4408
CLOSE_TOO_MANY = 4413

# channels_redis forgets a group member after its ``group_expiry`` (300 s in settings.CHANNEL_LAYERS,
# so a dead web process's members go soon); a wall stays open for weeks, so the hub renews its
# memberships this often (seconds), well inside the expiry.
GROUP_RENEW_S = 60.0
# Seconds the hub waits before retrying after a channel-layer (Redis) error.
HUB_RETRY_S = 1.0
# A client frame larger than this is not one of ours.
MAX_CLIENT_FRAME_CHARS = 64 * 1024
# The shortest authorisation re-check period a setting may ask for (seconds): each check is a
# few queries per socket.
MIN_REAUTH_S = 0.1
# Channel-layer message type of the "re-check now" notice sent to a user's internal group.
REAUTH_EVENT = "live.reauth"

_ID_KINDS = {
    "deployment": ("deployments", "Deployment"),
    "sweep": ("benchmarks", "BenchmarkSweep"),
    "kernel-job": ("kernels", "KernelJob"),
}


def _setting(name: str, default: Any, cast: type) -> Any:
    return cast(getattr(settings, name, default))


def subscriptions_from_query(query_string: bytes | str) -> list[str]:
    """The ``sub`` values of a websocket URL's query string, in order, without repeats
    (``b"sub=node-a&sub=deployment-3&sub=node-a"`` → ``["node-a", "deployment-3"]``)."""
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    out: list[str] = []
    for value in parse_qs(query_string, keep_blank_values=True).get("sub", []):
        if value not in out:
            out.append(value)
    return out


def subscription_refusal(user, group: str) -> str | None:
    """Why ``user`` may not subscribe to ``group``, or None when they may.

    The rule: the user needs the ``viewer`` role (every role can read every live object in
    Ceiling, as on the pages and the API) and the object must exist: a node by name, a
    deployment, sweep or kernel job by id; a roster must be one of
    :data:`controlplane.realtime.ROSTERS` (``roster-nodes``, which a viewer reads as the node
    list). A kind whose model does not exist yet (kernel jobs before
    ``kernels.models.KernelJob``) is refused as unknown. Reads the database.
    """
    if not has_role(user, "viewer"):
        return "your account has no role that may read live data (viewer or above)"
    parsed = group_kind(group)
    if parsed is None:
        return (f"{json_spelled(group)} is not a live group: use node-<name>, deployment-<id>, sweep-<id>, "
                "kernel-job-<id> or roster-nodes")
    kind, key = parsed
    if kind == "roster":
        return None if key in ROSTERS else f"no roster named {json_spelled(key)}: roster-nodes is the one there is"
    if kind == "node":
        model = apps.get_model("deployments", "Node")
        return None if model.objects.filter(name=key).exists() else f"no node named {json_spelled(key)}"
    app_label, model_name = _ID_KINDS[kind]
    try:
        model = apps.get_model(app_label, model_name)
    except LookupError:
        return f"live data of kind {json_spelled(kind)} is not available on this server"
    if not (key.isascii() and key.isdigit()) or len(key) > 18:
        return f"{kind} ids are numbers, not {json_spelled(key)}"
    if str(int(key)) != key:
        # Broadcasts go to the canonical name (deployment-4), never to deployment-0004.
        return f"write {kind} ids without leading zeros: {kind}-{int(key)}, not {json_spelled(group)}"
    try:
        exists = model.objects.filter(pk=int(key)).exists()
    except DatabaseError:
        # The model is there but its table is not (a migration not applied yet).
        return f"live data of kind {json_spelled(kind)} is not available on this server"
    return None if exists else f"no {kind} with id {key}"


def session_digest(session_key: str | None) -> str:
    """What names a session on the channel layer: the first 32 hex digits of the SHA-256 of its
    key ('' for none), so a logout notice says which session ended without putting a credential
    into Redis. No side effects."""
    if not session_key:
        return ""
    return hashlib.sha256(session_key.encode()).hexdigest()[:32]


def live_session_refusal(session_key: str | None, user_id: Any) -> tuple[int, str] | None:
    """Why a live socket opened by user ``user_id`` with session ``session_key`` may no longer
    stream, as ``(close code, reason)``; None while it still may.

    The rule of Django's ``get_user`` applied to a fresh load of the session from the session
    engine (the socket's cached copy says nothing about a logout since): the session must still
    exist and name the same user and a configured backend, that backend must return the user
    (``ModelBackend`` returns no inactive user), the user must be active and the session's auth
    hash must match the user's (current secret or one of ``SECRET_KEY_FALLBACKS``; a changed
    password changes it). Any of these failing is ``CLOSE_UNAUTHENTICATED``; a user without the
    ``viewer`` role (or above) is ``CLOSE_FORBIDDEN``. Reads the session store and the database;
    unlike ``get_user`` it never flushes or cycles the session (the browser's cookie must stay
    valid for its pages). Raises what the database raises (``DatabaseError``).
    """
    ended = (CLOSE_UNAUTHENTICATED, "signed out: the session ended; sign in again to see live data")
    if not session_key:
        return ended
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    model = get_user_model()
    try:
        session_user_id = model._meta.pk.to_python(session[SESSION_KEY])
        backend_path = session[BACKEND_SESSION_KEY]
    except (KeyError, ValidationError):
        return ended
    if session_user_id != user_id or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return ended
    user = load_backend(backend_path).get_user(session_user_id)
    if user is None or not getattr(user, "is_active", True):
        if model._default_manager.filter(pk=user_id).exists():
            return CLOSE_UNAUTHENTICATED, "your account is deactivated"
        return CLOSE_UNAUTHENTICATED, "your account no longer exists"
    if hasattr(user, "get_session_auth_hash"):
        session_hash = session.get(HASH_SESSION_KEY)
        hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
        if not session_hash or not any(constant_time_compare(session_hash, h) for h in hashes):
            return CLOSE_UNAUTHENTICATED, "signed out: your password changed; sign in again to see live data"
    if not has_role(user, "viewer"):
        return CLOSE_FORBIDDEN, "your account no longer has a role that may read live data (viewer or above)"
    return None


def live_user_recheck(user_id: int, *, ended_session_key: str | None = None) -> bool:
    """Tell every open live socket of user ``user_id``, on every server process, to re-check the
    user's authorisation now (:func:`live_session_refusal`) instead of at its next period.

    ``ended_session_key`` names a session that is ending (a logout, which sends its signal before
    it deletes the session): the sockets opened with it close with ``CLOSE_UNAUTHENTICATED``
    without a check, so the deletion cannot race the check. For sync code (signal receivers).
    One channel-layer message (Redis); returns False when it could not be sent, with a warning
    logged: the sockets' periodic re-check is the fallback. Never raises for a transport problem.
    """
    layer = get_channel_layer()
    if layer is None:
        return False
    group = live_user_group(user_id)
    try:
        async_to_sync(layer.group_send)(group, {"type": REAUTH_EVENT, "group": group,
                                                "session": session_digest(ended_session_key)})
    except Exception:  # noqa: BLE001 - Redis away: never fail the request that changed the user
        log.warning("live: could not ask the sockets of user %s to re-check (the periodic check "
                    "still will)", user_id, exc_info=True)
        return False
    return True


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_tuple(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or scheme not in _DEFAULT_PORTS:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def origin_refusal(scope: dict[str, Any]) -> str | None:
    """Why a websocket handshake's ``Origin`` is refused, or None when it is accepted.

    Rule (same-origin, RFC 6454): the ``Origin`` header's scheme, host and port must equal those
    of the request itself (the ``Host`` header, with the port implied by the scheme when it has
    none; ``ws`` pairs with ``http``, ``wss`` with ``https``) and the host must be one of
    ``ALLOWED_HOSTS``; or the Origin must be listed in ``CEILING_WS_ALLOWED_ORIGINS``
    (``scheme://host[:port]`` strings, e.g. for a TLS-terminating proxy). A missing Origin or
    Host is refused. ``AllowedHostsOriginValidator`` compares hosts only, so a page on another
    port of the same host would pass it; this does not. No side effects.
    """
    from django.http.request import split_domain_port, validate_host

    headers = {k.lower(): v for k, v in scope.get("headers", [])}
    raw_origin = headers.get(b"origin", b"").decode("latin-1").strip()
    if not raw_origin or raw_origin == "null":
        return "no Origin header"
    scheme, _, rest = raw_origin.partition("://")
    origin = _origin_tuple(scheme.lower(), rest.rstrip("/"))
    if origin is None:
        return f"unreadable Origin {raw_origin!r}"
    for allowed in getattr(settings, "CEILING_WS_ALLOWED_ORIGINS", []) or []:
        a_scheme, _, a_rest = str(allowed).partition("://")
        if _origin_tuple(a_scheme.lower(), a_rest.rstrip("/")) == origin:
            return None
    host = headers.get(b"host", b"").decode("latin-1").strip()
    if not host and scope.get("server"):
        server_host, server_port = scope["server"][0], scope["server"][1]
        host = f"{server_host}:{server_port}" if server_port else str(server_host)
    if not host:
        return "no Host header"
    request_scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    request = _origin_tuple(request_scheme, host)
    if request is None:
        return f"unreadable Host {host!r}"
    domain, _port = split_domain_port(host.lower())
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return f"host {host!r} is not in ALLOWED_HOSTS"
    if origin != request:
        return (f"Origin {raw_origin!r} is not this server ({request[0]}://{request[1]}:{request[2]}); "
                "list it in CEILING_WS_ALLOWED_ORIGINS to allow it")
    return None


class SameOriginValidator:
    """ASGI middleware: refuse a websocket handshake whose ``Origin`` fails
    :func:`origin_refusal` (close before accept, an HTTP 403 to the browser), before any
    session lookup or consumer code runs. Other scope types pass through."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        """Check the scope and either hand it on or refuse it (logs the reason)."""
        if scope.get("type") == "websocket":
            reason = origin_refusal(scope)
            if reason:
                log.info("live: refused a websocket before accepting it: %s", reason)
                from channels.security.websocket import WebsocketDenier

                return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


class UnknownPathConsumer(AsyncWebsocketConsumer):
    """The router's fallback: a websocket to any path but ``ws/live/`` is refused before accept
    (HTTP 403 to the browser) with one log line, instead of a routing error and a traceback."""

    async def connect(self) -> None:
        """Refuse the handshake."""
        log.info("live: refused a websocket to unknown path %r", self.scope.get("path"))
        await self.close(code=CLOSE_BAD_REQUEST)


def _refusals(user, groups: list[str]) -> dict[str, str]:
    """Refusal reason per group that ``user`` may not join (empty when all are allowed)."""
    out = {}
    for group in groups:
        reason = subscription_refusal(user, group)
        if reason:
            out[group] = reason
    return out


def _subscribe_refusal(session_key: str | None, user_id: Any, user, groups: list[str]) -> tuple[int, str] | None:
    """``(close code, reason)`` when a ``subscribe`` of ``groups`` is refused: the user's fresh
    authorisation first (:func:`live_session_refusal`), then each group."""
    refusal = live_session_refusal(session_key, user_id)
    if refusal:
        return refusal
    refused = _refusals(user, groups)
    if refused:
        return CLOSE_FORBIDDEN, "; ".join(f"{g}: {r}" for g, r in refused.items())
    return None


def _snapshot(groups: list[str]) -> dict[str, dict[str, Any]]:
    """``{group: {"seq": current sequence, "latest": {type: last wire message}}}`` from Redis."""
    return {g: {"seq": current_seq(g), "latest": latest_messages(g)} for g in groups}


class LiveHub:
    """One channel-layer channel per event loop (one per server process) that is a member of
    every group some local socket subscribed to, and forwards each broadcast to those sockets.

    ``join``/``leave`` keep ``members`` (group -> set of consumers) and the channel layer's
    membership in step: the first local subscriber of a group adds the hub's channel, the last
    one to leave discards it. Delivery calls :meth:`LiveConsumer.realtime_message` of each member
    in turn; that never waits on a client (daphne queues the frame), so a slow socket cannot
    hold up the others. The internal ``live-user-<id>`` groups (one per user with a local socket)
    carry ``REAUTH_EVENT`` notices, handed on with :meth:`LiveConsumer.reauth_soon`, which only
    wakes the socket's re-check task.
    """

    _by_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, layer) -> None:
        self.layer = layer
        self.channel: str | None = None
        self.members: dict[str, set[LiveConsumer]] = {}
        self.task: asyncio.Task | None = None
        self.renewer: asyncio.Task | None = None
        self._ready = asyncio.Lock()

    @classmethod
    def get(cls) -> "LiveHub":
        """The hub of the running event loop (created on first use)."""
        loop = asyncio.get_running_loop()
        hub = cls._by_loop.get(loop)
        if hub is None:
            hub = cls._by_loop[loop] = cls(get_channel_layer())
        return hub

    async def _start(self) -> None:
        async with self._ready:
            if self.task is None or self.task.done():
                if self.channel is None:
                    # The default prefix: channels_redis reads every process-local channel of a
                    # loop through one Redis key, and a channel with another prefix would wait
                    # behind the reader of that key forever.
                    self.channel = await self.layer.new_channel()
                self.task = asyncio.get_running_loop().create_task(self._run(), name="live-hub")
                self.renewer = asyncio.get_running_loop().create_task(self._renew(), name="live-hub-renew")

    async def join(self, group: str, consumer: "LiveConsumer") -> None:
        """Add ``consumer`` to ``group`` (joining the channel-layer group on the first one)."""
        await self._start()
        members = self.members.setdefault(group, set())
        if not members:
            await self.layer.group_add(group, self.channel)
        members.add(consumer)

    async def leave(self, group: str, consumer: "LiveConsumer") -> None:
        """Remove ``consumer`` from ``group`` (leaving the channel-layer group with the last one)."""
        members = self.members.get(group)
        if not members or consumer not in members:
            return
        members.discard(consumer)
        if not members:
            del self.members[group]
            try:
                await self.layer.group_discard(group, self.channel)
            except Exception:  # noqa: BLE001 - Redis away: the membership expires by itself
                log.warning("live hub: could not leave %s", group, exc_info=True)

    async def _rejoin(self) -> None:
        for group in list(self.members):
            await self.layer.group_add(group, self.channel)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(GROUP_RENEW_S)
            try:
                await self._rejoin()
            except Exception:  # noqa: BLE001 - the receive loop re-joins after the error it sees
                log.warning("live hub: could not renew group memberships", exc_info=True)

    async def _run(self) -> None:
        failed = False
        while True:
            try:
                if failed:
                    await self._rejoin()
                    failed = False
                event = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Redis restarting: retry, then join the groups again
                log.warning("live hub: channel layer error; retrying in %.1f s", HUB_RETRY_S, exc_info=True)
                failed = True
                await asyncio.sleep(HUB_RETRY_S)
                continue
            if event.get("type") == REAUTH_EVENT:
                for consumer in list(self.members.get(event.get("group"), ())):
                    consumer.reauth_soon(str(event.get("session") or ""))
                continue
            group = (event.get("message") or {}).get("group")
            for consumer in list(self.members.get(group, ())):
                try:
                    await consumer.realtime_message(event)
                except Exception:  # noqa: BLE001 - one broken socket must not stop the others
                    log.warning("live hub: delivery to a socket failed", exc_info=True)


class LiveConsumer(AsyncWebsocketConsumer):
    """Streams the broadcasts of :mod:`controlplane.realtime` to one browser (see the module
    docstring for the protocol, the authorisation rule, the re-checks and the flow control)."""

    async def connect(self) -> None:
        """Authenticate, authorise every subscription of the URL, join the groups, accept, send
        ``live.subscribed`` and start the authorisation re-check task; refuse (close before
        accept) on any failure."""
        self.live_closing = False
        self.session_ended = False
        self.reauth_wake = asyncio.Event()
        self.reauth_task: asyncio.Task | None = None
        self.user_group: str | None = None
        self.sent = 0
        self.acked = 0
        self.ack_due_since: float | None = None
        self.live_groups: list[str] = []
        self.ack_every = max(1, _setting("CEILING_LIVE_ACK_EVERY", 16, int))
        self.window = max(self.ack_every, _setting("CEILING_LIVE_WINDOW", 256, int))
        self.ack_timeout_s = _setting("CEILING_LIVE_ACK_TIMEOUT_S", 15.0, float)
        self.max_groups = _setting("CEILING_LIVE_MAX_GROUPS", 256, int)
        self.reauth_s = max(MIN_REAUTH_S, _setting("CEILING_LIVE_REAUTH_S", 5.0, float))
        user = self.scope.get("user")
        self.who = getattr(user, "username", "") or "anonymous"
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED, "not signed in")
            return
        wanted = subscriptions_from_query(self.scope.get("query_string", b""))
        if len(wanted) > self.max_groups:
            await self._refuse(CLOSE_TOO_MANY, f"{len(wanted)} subscriptions, at most {self.max_groups}")
            return
        allowed = await database_sync_to_async(has_role)(user, "viewer")
        if not allowed:
            await self._refuse(CLOSE_FORBIDDEN, "no viewer role")
            return
        refused = await database_sync_to_async(_refusals)(user, wanted)
        if refused:
            await self._refuse(CLOSE_FORBIDDEN, "; ".join(f"{g}: {r}" for g, r in refused.items()))
            return
        # The key the browser's cookie named; re-checks load that session afresh each time.
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        self.user_id = user.pk
        hub = LiveHub.get()
        self.user_group = live_user_group(user.pk)
        await hub.join(self.user_group, self)
        for group in wanted:
            await hub.join(group, self)
            self.live_groups.append(group)
        await self.accept()
        await self._send_control("live.subscribed", {
            "groups": await sync_to_async(_snapshot, thread_sensitive=False)(wanted),
            "ack_every": self.ack_every,
            "window": self.window,
        })
        self.reauth_task = asyncio.get_running_loop().create_task(self._reauth_loop(), name="live-reauth")

    async def _refuse(self, code: int, reason: str) -> None:
        log.info("live: refused a socket of %s before accepting it (%s): %s", self.who, code, reason)
        await self.close(code=code)

    async def _send_control(self, type_: str, body: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps({"type": type_, **body}, separators=(",", ":")))

    async def _fail(self, code: int, reason: str) -> None:
        """Tell the client why (``live.error``), then close the accepted socket with ``code``."""
        if self.live_closing:
            return
        self.live_closing = True
        log.info("live: closing the socket of %s (%s): %s", self.who, code, reason)
        await self._send_control("live.error", {"code": code, "error": reason})
        await self.close(code=code, reason=reason[:120])

    async def disconnect(self, code: int) -> None:
        """Stop the re-check task and leave the hub's groups (the socket is gone)."""
        self.live_closing = True
        task = getattr(self, "reauth_task", None)
        if task is not None:
            task.cancel()
        hub = LiveHub.get()
        for group in getattr(self, "live_groups", []):
            await hub.leave(group, self)
        self.live_groups = []
        if getattr(self, "user_group", None):
            await hub.leave(self.user_group, self)
            self.user_group = None

    # --- authorisation re-checks --------------------------------------------------------------

    def reauth_soon(self, ended_session: str) -> None:
        """A ``REAUTH_EVENT`` notice for this socket's user (called by the hub; never waits):
        wake the re-check task now. ``ended_session`` is the :func:`session_digest` of a session
        that is ending ('' for none); when it is this socket's, the socket closes without a check."""
        if ended_session and ended_session == session_digest(self.session_key):
            self.session_ended = True
        self.reauth_wake.set()

    async def _reauth_loop(self) -> None:
        """Re-check the user every ``reauth_s`` seconds (up to a quarter earlier, so sockets
        opened together spread their checks) or when woken by :meth:`reauth_soon`; close the
        socket (``live.error``, then 4401 or 4403) at the first refusal."""
        while not self.live_closing:
            try:
                await asyncio.wait_for(self.reauth_wake.wait(), timeout=self.reauth_s * random.uniform(0.75, 1.0))
            except asyncio.TimeoutError:
                pass
            self.reauth_wake.clear()
            if self.live_closing:
                return
            if self.session_ended:
                refusal: tuple[int, str] | None = (CLOSE_UNAUTHENTICATED,
                                                   "signed out: sign in again to see live data")
            else:
                try:
                    # Off the shared database thread: every client frame's dispatch passes through
                    # that thread (channels closes old connections there), so a slow check on it
                    # would hold up the acknowledgements of every socket of this process.
                    refusal = await database_sync_to_async(live_session_refusal, thread_sensitive=False)(
                        self.session_key, self.user_id)
                except Exception:  # noqa: BLE001 - the database away: keep the socket, check again
                    log.warning("live: could not re-check the socket of %s; trying again in %.1f s",
                                self.who, self.reauth_s, exc_info=True)
                    continue
            if refusal:
                await self._fail(*refusal)
                return

    # --- channel layer -> client --------------------------------------------------------------

    async def realtime_message(self, event: dict[str, Any]) -> None:
        """One broadcast (``{"type": "realtime.message", "message": <wire message>}``): forward
        it unless the socket is closing or the group was left; enforce the ack window."""
        message = event.get("message") or {}
        if self.live_closing or message.get("group") not in self.live_groups:
            return
        self.sent += 1
        unacked = self.sent - self.acked
        now = time.monotonic()
        if unacked > self.window:
            await self._fail(CLOSE_NOT_READING,
                             f"not reading: {unacked} messages unacknowledged, the window is {self.window}")
            return
        if unacked >= self.ack_every:
            if self.ack_due_since is None:
                self.ack_due_since = now
            elif now - self.ack_due_since > self.ack_timeout_s:
                await self._fail(CLOSE_NOT_READING,
                                 f"not reading: no acknowledgement for {now - self.ack_due_since:.0f} s "
                                 f"with {unacked} messages outstanding")
                return
        await self.send(text_data=json.dumps(message, separators=(",", ":")))

    # --- client -> server ----------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Dispatch one client frame (see the module docstring for the actions)."""
        if self.live_closing:
            return
        if text_data is None or len(text_data) > MAX_CLIENT_FRAME_CHARS:
            await self._fail(CLOSE_BAD_REQUEST, "frames must be JSON text of at most 64 KiB")
            return
        try:
            content = json_loads(text_data)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
            await self._fail(CLOSE_BAD_REQUEST, "frames must be JSON objects")
            return
        # plain json.loads keeps a repeated key's last value: {"count": 1, "count": 5} would ack 5
        repeated = repeated_key_errors(content, values_shown=False)
        if repeated:
            await self._fail(CLOSE_BAD_REQUEST, "; ".join(
                f"key {json_spelled(path)} {message}" for path, messages in repeated.items() for message in messages))
            return
        action = content.get("action") if isinstance(content, dict) else None
        handler = {
            "ack": self._on_ack, "ping": self._on_ping, "subscribe": self._on_subscribe,
            "unsubscribe": self._on_unsubscribe, "resync": self._on_resync,
        }.get(action) if isinstance(action, str) else None
        if handler is None:
            await self._fail(CLOSE_BAD_REQUEST,
                             f"unknown action {json_spelled(action)}: use ack, ping, subscribe, unsubscribe or resync")
            return
        await handler(content)

    async def _on_ack(self, content: dict[str, Any]) -> None:
        count = content.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0 or count > self.sent:
            await self._fail(CLOSE_BAD_REQUEST,
                             f"ack count must be a whole number between 0 and {self.sent} (messages sent)")
            return
        self.acked = max(self.acked, count)
        # Any progress restarts the clock: a client that reads, however slowly, is not stuck.
        self.ack_due_since = time.monotonic() if self.sent - self.acked >= self.ack_every else None

    async def _on_ping(self, content: dict[str, Any]) -> None:
        await self._send_control("live.pong", {"t": time.time()})

    def _groups_of(self, content: dict[str, Any]) -> list[str] | None:
        groups = content.get("groups")
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            return None
        return list(dict.fromkeys(groups))

    async def _on_subscribe(self, content: dict[str, Any]) -> None:
        groups = self._groups_of(content)
        if groups is None:
            await self._fail(CLOSE_BAD_REQUEST, "subscribe needs groups: a list of group names")
            return
        new = [g for g in groups if g not in self.live_groups]
        if len(self.live_groups) + len(new) > self.max_groups:
            await self._fail(CLOSE_TOO_MANY, f"at most {self.max_groups} subscriptions per socket")
            return
        refusal = await database_sync_to_async(_subscribe_refusal)(
            self.session_key, self.user_id, self.scope["user"], new)
        if refusal:
            await self._fail(*refusal)
            return
        hub = LiveHub.get()
        for group in new:
            await hub.join(group, self)
            self.live_groups.append(group)
        await self._send_control("live.subscribed", {
            "groups": await sync_to_async(_snapshot, thread_sensitive=False)(new),
            "ack_every": self.ack_every,
            "window": self.window,
        })

    async def _on_unsubscribe(self, content: dict[str, Any]) -> None:
        groups = self._groups_of(content)
        if groups is None:
            await self._fail(CLOSE_BAD_REQUEST, "unsubscribe needs groups: a list of group names")
            return
        left = [g for g in groups if g in self.live_groups]
        hub = LiveHub.get()
        for group in left:
            await hub.leave(group, self)
            self.live_groups.remove(group)
        await self._send_control("live.unsubscribed", {"groups": left})

    async def _on_resync(self, content: dict[str, Any]) -> None:
        groups = self._groups_of(content)
        if groups is None:
            await self._fail(CLOSE_BAD_REQUEST, "resync needs groups: a list of group names")
            return
        unknown = [g for g in groups if g not in self.live_groups]
        if unknown:
            await self._fail(CLOSE_BAD_REQUEST, f"resync of groups not subscribed: {', '.join(unknown)}")
            return
        await self._send_control("live.snapshot", {
            "groups": await sync_to_async(_snapshot, thread_sensitive=False)(groups),
        })

