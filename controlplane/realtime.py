"""One realtime vocabulary: group names and the single broadcast helper.

Every live message in Ceiling goes through :func:`broadcast` (sync code: node agent, Celery tasks)
or :func:`abroadcast` (async code) to a channel-layer group named by one of the ``*_group``
functions below. A message on the wire is ``{"type": <str>, "seq": <int>, "group": <str>,
"ts": <float, unix seconds>, "data": <JSON object>}``; ``seq`` increases by one per message of a
group (kept in Redis with ``INCR``, so several producers share one sequence), which is what lets a
browser detect a gap and re-sync from the REST API. Text a message does not have is null in its
``data``, never ``""``, as in the REST API (a sweep that ended done has ``"reason": null``):
:func:`message_build` turns every empty string in ``data``, at any depth, into null.

Rates are bounded here, per group and message type: a message that arrives sooner than
``CEILING_REALTIME_MIN_INTERVAL_S`` after the last one of the same (group, type) is dropped unless
``force=True`` (state changes such as health transitions are always forced). Group names use only
letters, digits, ``-``, ``_`` and ``.`` (the channel layer's rule, ``channels.layers``
``group_name_regex``), so a name is validated before use.

Namespacing: several Ceiling installations (another checkout, a test run) may share one Redis.
Every Redis key of this module and every channel-layer group and channel carry the
installation's namespace (:func:`realtime_namespace`): ``CEILING_REALTIME_PREFIX`` when set,
otherwise a hash of the database identity (engine + name, the resolved file path for SQLite), so
two installations with different databases never see each other's live data, and each test
run (its own per-pid SQLite file) is kept apart from the others and from the demo.

A database re-created at the same path (a second ``make demo``) has the same namespace, and
Redis keeps the old database's last messages for an hour: :func:`latest_messages` leaves out a
kept message older than the object of its group (its ``created_at``), since it was about another
object that had the same id or name. The pages' scripts apply the same rule to every message,
streamed or kept, against the object's creation time the page carries (``data-created``, whole
unix seconds, as :func:`group_created_at`).
"""
from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
import threading
import time
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings

log = logging.getLogger(__name__)

__all__ = [
    "node_group", "deployment_group", "sweep_group", "kernel_job_group", "group_kind", "live_user_group",
    "node_roster_group", "ROSTERS",
    "broadcast", "abroadcast", "message_build", "CONSUMER_EVENT", "current_seq", "latest_messages",
    "group_created_at", "realtime_namespace", "NamespacedRedisChannelLayer", "CancelSafeChannelLock",
    "namespace_setting_changed",
]

_GROUP_RE = re.compile(r"^[A-Za-z0-9._-]{1,90}$")
#: The consumer method the channel layer calls for every broadcast (``{"type": "realtime.message"}``).
CONSUMER_EVENT = "realtime.message"
_KINDS = ("node", "deployment", "sweep", "kernel-job", "roster")
#: The keys of the ``roster`` kind: groups about a set of objects rather than one, which a page
#: subscribes to without knowing the objects in advance (``roster-nodes``: every node).
ROSTERS = ("nodes",)

_last_sent: dict[tuple[str, str], float] = {}
_last_lock = threading.Lock()
_redis_client: Any = None


def realtime_namespace() -> str:
    """This installation's namespace for live-data Redis keys and channel-layer names.

    ``settings.CEILING_REALTIME_PREFIX`` when it is set (letters, digits, ``-``, ``_``, ``.``),
    otherwise ``db-`` + the first 12 hex digits of the SHA-256 of the database identity: the
    engine and the database name (for SQLite the resolved file path). It is read from the live
    connection, so a test run that switched to its test database gets that database's
    namespace, the same one a subprocess pointed at that database derives. No side effects.
    """
    configured = str(getattr(settings, "CEILING_REALTIME_PREFIX", "") or "")
    if configured:
        if not re.match(r"^[A-Za-z0-9._-]{1,40}$", configured):
            raise ValueError(f"CEILING_REALTIME_PREFIX {configured!r}: letters, digits, '-', '_', '.' only, "
                             "1-40 characters")
        return configured
    from django.db import connections

    sd = connections["default"].settings_dict
    engine = str(sd.get("ENGINE", ""))
    name = str(sd.get("NAME", ""))
    if engine.endswith("sqlite3") and name and name != ":memory:" and "mode=memory" not in name:
        name = str(Path(name).resolve())
    return "db-" + hashlib.sha256(f"{engine}|{name}".encode()).hexdigest()[:12]


def _key(kind: str, group: str) -> str:
    return f"ceiling:{realtime_namespace()}:rt:{kind}:{group}"


try:
    from channels_redis.core import ChannelLock as _ChannelLock
    from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
except ImportError:  # pragma: no cover - channels_redis is a requirement; keeps the module importable
    _RedisChannelLayer = _ChannelLock = object  # type: ignore[assignment,misc]


class CancelSafeChannelLock(_ChannelLock):  # type: ignore[misc,valid-type]
    """channels_redis's per-channel lock table, with a waiter that is cancelled (or fails) while
    waiting no longer counted.

    The layer's ``receive_single`` takes this lock for the process-local channel key (one key
    for every ``!`` channel of the process) and its backup cleaner task gives it back. Upstream
    ``acquire`` counts the waiter before awaiting and never uncounts it when the wait is
    cancelled, so a receive cancelled during the cleaner's Redis round trip (a socket closing,
    or its event loop ending, right after a message) leaves the count above zero for good: the
    ``asyncio.Lock`` is then never dropped and stays bound to that loop. The next receive on
    another loop that has to wait for it raises ``RuntimeError: <Lock [locked]> is bound to a
    different event loop``. One server process has one loop, so there it only keeps an idle
    lock; a test process runs a loop per test and meets the error."""

    async def acquire(self, channel: str) -> bool:
        self.wait_counts[channel] += 1
        try:
            return await self.locks[channel].acquire()
        except BaseException:
            # asyncio.Lock.acquire that raises never holds the lock: uncount this waiter only.
            self.wait_counts[channel] -= 1
            if self.wait_counts[channel] < 1:
                self.locks.pop(channel, None)
                del self.wait_counts[channel]
            raise


class NamespacedRedisChannelLayer(_RedisChannelLayer):  # type: ignore[misc,valid-type]
    """channels_redis's layer with its ``prefix`` option defaulting to this installation's
    namespace (``ceiling:<realtime_namespace()>:asgi``), so groups and channels of two
    installations sharing a Redis never meet. An explicit ``prefix`` in ``CHANNEL_LAYERS``
    CONFIG wins. The namespace is read when the layer is created (first ``get_channel_layer()``),
    i.e. after a test run has switched to its test database. Its receive cleanup locks are a
    :class:`CancelSafeChannelLock`, so a cancelled receive leaves no lock bound to its loop."""

    def __init__(self, *args: Any, prefix: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, prefix=prefix or f"ceiling:{realtime_namespace()}:asgi", **kwargs)
        self.receive_clean_locks = CancelSafeChannelLock()


#: Settings that decide a layer's namespace; a layer made under other values is dropped when one changes.
_NAMESPACE_SETTINGS = frozenset({"CEILING_REALTIME_PREFIX", "DATABASES"})


def namespace_setting_changed(*, setting: str, **_: Any) -> None:
    """``setting_changed`` receiver: when a setting :func:`realtime_namespace` reads changes, drop
    the process's channel layers, so the next ``get_channel_layer()`` builds one in the new
    namespace. Without it the default layer keeps the prefix of whatever namespace was in force
    when it was first built, and a broadcast made after the change goes to groups nobody in the
    new namespace listens to (channels itself drops its layers only when ``CHANNEL_LAYERS``
    changes). Settings change at run time only under ``override_settings`` and the pytest
    ``settings`` fixture."""
    if setting not in _NAMESPACE_SETTINGS:
        return
    from channels.layers import channel_layers

    channel_layers.backends = {}


def _checked(name: str) -> str:
    if not _GROUP_RE.match(name):
        raise ValueError(f"invalid group name {name!r}: letters, digits, '-', '_', '.' only, 1-90 characters")
    return name


def node_group(name: str) -> str:
    """Group for a node's samples (``node-<name>``). Raises ValueError on a name the layer refuses."""
    return _checked(f"node-{name}")


def deployment_group(deployment_id: int) -> str:
    """Group for a deployment's process telemetry, health changes and state (``deployment-<id>``)."""
    return _checked(f"deployment-{int(deployment_id)}")


def sweep_group(sweep_id: int) -> str:
    """Group for a sweep's progress and completed points (``sweep-<id>``)."""
    return _checked(f"sweep-{int(sweep_id)}")


def kernel_job_group(job_id: int) -> str:
    """Group for a kernel job's build and benchmark progress (``kernel-job-<id>``)."""
    return _checked(f"kernel-job-{int(job_id)}")


def node_roster_group() -> str:
    """Group of the set of nodes (``roster-nodes``): a node was registered or removed, or its
    agent came online (:func:`deployments.telemetry.events.node_roster_broadcast`). It names no
    node, so a page (the wall) follows nodes that did not exist when it subscribed."""
    return _checked("roster-nodes")


def live_user_group(user_id: int) -> str:
    """Internal group of one user's open live sockets (``live-user-<id>``): the server tells them
    to re-check the user's authorisation through it (:func:`controlplane.consumers.live_user_recheck`).
    Never subscribable: it is not a kind :func:`group_kind` knows, so a client asking for it is
    refused like any unknown name, and broadcasts to it never reach a browser."""
    return _checked(f"live-user-{int(user_id)}")


def group_kind(group: str) -> tuple[str, str] | None:
    """Split a group name into (kind, key), e.g. ``("deployment", "12")``; None if it is not one of ours."""
    if not _GROUP_RE.match(group or ""):
        return None
    for kind in sorted(_KINDS, key=len, reverse=True):
        prefix = kind + "-"
        if group.startswith(prefix) and len(group) > len(prefix):
            return kind, group[len(prefix):]
    return None


def _redis() -> Any:
    global _redis_client
    if _redis_client is None:
        import redis

        _redis_client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2.0)
    return _redis_client


def _next_seq(group: str) -> int:
    try:
        key = _key("seq", group)
        pipe = _redis().pipeline()
        pipe.incr(key)
        # Kept a day after the last message (a client re-syncs from REST after a gap anyway).
        pipe.expire(key, _SEQ_TTL_S)
        return int(pipe.execute()[0])
    except Exception:  # noqa: BLE001 - a sequence is best effort; the message still goes out
        log.warning("realtime: no sequence for %s (Redis unavailable)", group)
        return 0


def _rate_ok(group: str, type_: str, force: bool) -> bool:
    interval = float(getattr(settings, "CEILING_REALTIME_MIN_INTERVAL_S", 0.05))
    now = time.monotonic()
    with _last_lock:
        last = _last_sent.get((group, type_))
        # 10% slack: a producer ticking at exactly 1 / interval jitters a little early sometimes.
        if not force and last is not None and now - last < interval * 0.9:
            return False
        _last_sent[(group, type_)] = now
    return True


_LAST_TTL_S = 3600
#: Seconds a group's sequence counter outlives its last message (one day).
_SEQ_TTL_S = 86400


def _keep_last(group: str, msg: dict[str, Any]) -> None:
    # The last message of each type per group, so a client that reconnects or sees a gap can
    # re-sync from REST without waiting for the next sample (``latest_messages``).
    import json

    try:
        key = _key("last", group)
        pipe = _redis().pipeline()
        pipe.hset(key, msg["type"], json.dumps(msg, separators=(",", ":")))
        pipe.expire(key, _LAST_TTL_S)
        pipe.execute()
    except Exception:  # noqa: BLE001 - best effort, like the sequence
        log.debug("realtime: could not keep the last %s of %s", msg.get("type"), group)


def _sequenced(group: str, type_: str, data: dict[str, Any]) -> dict[str, Any]:
    msg = message_build(group=group, type_=type_, data=data, seq=_next_seq(group))
    _keep_last(group, msg)
    return msg


def current_seq(group: str) -> int:
    """The sequence number of the last message sent to ``group`` (0 if none or Redis is down)."""
    _checked(group)
    try:
        raw = _redis().get(_key("seq", group))
    except Exception:  # noqa: BLE001
        return 0
    return int(raw or 0)


def latest_messages(group: str) -> dict[str, dict[str, Any]]:
    """The last message of each type sent to ``group`` within the past hour, keyed by type.

    A message older than the group's object (:func:`group_created_at`) is left out: it was about
    another object that had the same id or name (one of a database re-created at the same path).
    """
    import json

    _checked(group)
    try:
        raw = _redis().hgetall(_key("last", group))
    except Exception:  # noqa: BLE001
        return {}
    out = {k.decode(): json.loads(v) for k, v in raw.items()}
    if not out:
        return out
    created = group_created_at(group)
    if created is None:
        return out
    return {t: m for t, m in out.items() if isinstance(m.get("ts"), (int, float)) and m["ts"] >= created}


#: The model and lookup field of each group kind, for :func:`group_created_at`.
_KIND_OBJECTS = {"node": ("deployments.Node", "name"), "deployment": ("deployments.Deployment", "pk"),
                 "sweep": ("benchmarks.BenchmarkSweep", "pk"), "kernel-job": ("kernels.KernelJob", "pk")}


def group_created_at(group: str) -> float | None:
    """Unix seconds (whole, rounded down, as the pages' ``data-created``) of the creation of the
    object of ``group``, or None if it is not one of ours, does not exist or cannot be read."""
    parsed = group_kind(group)
    if parsed is None:
        return None
    kind, key = parsed
    if kind not in _KIND_OBJECTS:  # a roster: about no one object
        return None
    try:
        from django.apps import apps

        label, field = _KIND_OBJECTS[kind]
        if field == "pk" and not key.isdigit():
            return None
        created = apps.get_model(label).objects.filter(**{field: key}).values_list("created_at", flat=True).first()
    except Exception:  # noqa: BLE001 - no database here: serve the messages unfiltered
        log.debug("realtime: no creation time for %s", group, exc_info=True)
        return None
    return None if created is None else float(int(created.timestamp()))


def _absent_text_null(value: Any) -> Any:
    """``value`` with every ``""`` in it, at any depth of dicts, lists and tuples, as None."""
    if isinstance(value, str):
        return None if value == "" else value
    if isinstance(value, dict):
        return {k: _absent_text_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_absent_text_null(v) for v in value]
    return value


def message_build(*, group: str, type_: str, data: dict[str, Any], seq: int, ts: float | None = None) -> dict[str, Any]:
    """The wire form of one message (see the module docstring), its absent text null, never ``""``."""
    return {"type": type_, "seq": seq, "group": group, "ts": time.time() if ts is None else ts,
            "data": _absent_text_null(data)}


def broadcast(group: str, type_: str, data: dict[str, Any], *, force: bool = False) -> bool:
    """Send one message to ``group`` from sync code; return False if rate-limited or the layer failed.

    Never raises for a transport problem (telemetry must not take the node agent down); a bad
    group name raises ValueError. ``data`` must be JSON-serialisable (numbers, strings, lists,
    dicts, None).
    """
    _checked(group)
    if not _rate_ok(group, type_, force):
        return False
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return False
    msg = _sequenced(group, type_, data)
    try:
        async_to_sync(layer.group_send)(group, {"type": CONSUMER_EVENT, "message": msg})
    except Exception:  # noqa: BLE001
        log.warning("realtime: broadcast to %s failed", group, exc_info=True)
        return False
    return True


async def abroadcast(group: str, type_: str, data: dict[str, Any], *, force: bool = False) -> bool:
    """Async twin of :func:`broadcast` (same rules, same return value)."""
    _checked(group)
    if not _rate_ok(group, type_, force):
        return False
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return False
    # One thread hop for the sequence number and the kept copy (each hop costs ~0.2 ms).
    msg = await sync_to_async(_sequenced, thread_sensitive=False)(group, type_, data)
    try:
        await layer.group_send(group, {"type": CONSUMER_EVENT, "message": msg})
    except Exception:  # noqa: BLE001
        log.warning("realtime: broadcast to %s failed", group, exc_info=True)
        return False
    return True
