"""Helpers every page of the deployments app shares: the role decorator (:func:`role_page`),
times as UTC ISO plus "3 min 05 s ago", durations with units, status badge classes, the node
agent's state and bytes in GiB.

:func:`role_page` is also used by the benchmarks and kernels pages, so one authorisation rule
covers every server-rendered page; so is :func:`post_or_redirect`, for the addresses of forms.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect

from controlplane.permissions import has_role, refusal_message
from deployments.models import Node

GIB = 1024**3


# --- authorisation --------------------------------------------------------------------------


def post_or_redirect(target: Callable[..., str]) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """For a page address that only acts on POST (a form's action): a GET or HEAD, e.g. the address
    a failed form left in the browser and the user reloaded, is redirected (302) to the page with
    the form, ``target(request, *args, **kwargs)``, instead of answering a bare 405; any other
    method is 405 naming POST. Under ``role_page(methods=FORM_METHODS)``, as every such address
    is, that decorator answers any other method first, for every role alike."""
    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method in ("GET", "HEAD"):
                return redirect(target(request, *args, **kwargs))
            if request.method != "POST":
                return HttpResponseNotAllowed(["POST"])
            return view(request, *args, **kwargs)
        return wrapped
    return decorate




#: The methods a page answers unless its :func:`role_page` names others: a page to read.
READ_METHODS = ("GET", "HEAD")
#: The methods of a form's page (GET shows it, POST sends it) and of a form's action
#: (:func:`post_or_redirect`: GET goes back to the form).
FORM_METHODS = ("GET", "HEAD", "POST")


def role_page(read: str = "viewer", write: str = "operator", methods: tuple[str, ...] = READ_METHODS) -> Callable:
    """Decorate a page view: anonymous users go to the login page; a signed-in user needs
    role ``read`` for GET/HEAD and ``write`` for any other method, else 403 (the same rule as
    :class:`controlplane.permissions.RolePermission`).

    ``methods`` are the methods the page answers at all (a form's page and action add POST; an
    action's GET is its redirect to the form, :func:`post_or_redirect`): any other is a 405 with
    ``Allow`` for every signed-in user, whatever the role, before the role is judged (``POST
    /nodes/`` is 405 to a viewer as to an admin: no role could make it). A 403 is only for a
    method the page takes that the role may not use (a viewer's POST of a form). OPTIONS, a read,
    answers 200 with ``Allow`` and no body."""
    allowed = tuple(dict.fromkeys((*methods, "OPTIONS")))

    def decorator(view: Callable) -> Callable:
        @functools.wraps(view)
        @login_required
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in allowed:
                return HttpResponseNotAllowed(allowed)
            needed = read if request.method in ("GET", "HEAD", "OPTIONS") else write
            if not has_role(request.user, needed):
                raise PermissionDenied(refusal_message(request.user, needed))
            if request.method == "OPTIONS":
                # the methods the page answers, no page (as the API docs page answers it)
                response = HttpResponse(status=200, content_type="text/plain; charset=utf-8")
                response["Allow"] = ", ".join(allowed)
                return response
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def _can_write(request: HttpRequest) -> bool:
    return has_role(request.user, "operator")


def _is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


# --- times, durations and badges ----------------------------------------------------------


def _utc_iso(value: datetime) -> str:
    """``2025-06-01T12:00:05Z``: second precision, always UTC."""
    return value.astimezone(dt_timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc_text(value: datetime) -> str:
    """``2026-12-06 13:32:24 UTC``: the one readable form every deployments page shows a time in
    (the ISO value goes in the ``<time datetime>`` attribute and the tooltip)."""
    return value.astimezone(dt_timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration_text(seconds: float) -> str:
    """A human duration with units, two parts at most: ``42 s``, ``3 min 05 s``,
    ``2 h 07 min``, ``3 d 04 h``. Negative input (clock skew) counts as 0 s."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours:02d} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def _when(value: datetime | None, now: datetime) -> dict[str, str] | None:
    """``{"iso": UTC ISO 8601, "text": "2026-12-06 04:41:07 UTC" (what the pages show),
    "ago": "3 min 05 s ago"}`` for a timestamp (``"in 20 s"`` for one in the future, such as a
    scheduled restart), None when unset."""
    if value is None:
        return None
    age = (now - value).total_seconds()
    if abs(age) < 1:
        relative = "just now"
    elif age > 0:
        relative = f"{_duration_text(age)} ago"
    else:
        relative = f"in {_duration_text(-age)}"
    return {"iso": _utc_iso(value), "text": _utc_text(value), "ago": relative}


def _status_class(status: str) -> str:
    """CSS modifier of a status badge: ``ok`` for ready, ``bad`` for failed/killed, ``warn``
    for the transient states, none for a clean end (stopped, exited)."""
    if status == "ready":
        return "ok"
    if status in ("failed", "killed"):
        return "bad"
    if status in ("pending", "starting", "stopping", "spawned"):
        return "warn"
    return ""


def _agent_view(node: Node, now: datetime) -> dict[str, Any]:
    """Whether the node agent answers (heartbeat within ``CEILING_HEARTBEAT_TIMEOUT_S``) and
    when it last did."""
    return {"online": node.agent_online, "heartbeat": _when(node.agent_heartbeat_at, now)}


def _iso_ms(value: datetime) -> str:
    """``2025-06-01T12:00:05.123Z``: UTC with milliseconds, for the page's scripts."""
    return value.astimezone(dt_timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _heartbeat_clock(node: Node, now: datetime) -> dict[str, str]:
    """What the pages' script (the node page, each row of the nodes list, a deployment page's
    Node line) counts the agent's heartbeat age from: the last heartbeat and the server's time of rendering (ISO, milliseconds; the second corrects the browser's clock),
    the age past which the server calls the agent offline (``CEILING_HEARTBEAT_TIMEOUT_S``) and
    how often the agent heartbeats (``CEILING_AGENT_HEARTBEAT_S``, the page re-reads the node as
    often), in seconds."""
    return {
        "at": _iso_ms(node.agent_heartbeat_at) if node.agent_heartbeat_at else "",
        "now": _iso_ms(now),
        "offline_after_s": f"{settings.CEILING_HEARTBEAT_TIMEOUT_S:g}",
        "every_s": f"{settings.CEILING_AGENT_HEARTBEAT_S:g}",
    }


def _gib(value: int | None) -> str:
    """Bytes → GiB with one decimal (``150754820096`` → ``"140.4"``), ``"—"`` when unknown."""
    if not value:
        return "—"
    return f"{value / GIB:.1f}"
