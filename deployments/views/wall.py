"""The wall display (``/wall/``): every node and every running deployment at a glance, for a
screen across the room.

The page is a dark, full-screen skeleton of tiles (one per node with a bar per GPU, one per
deployment with its status, health per role, tok/s and running requests) that
``static/ceiling/dashboards.js`` fills from the live websocket. The page re-fetches
:func:`wall_tiles_partial` at once when a node's group carries ``deployment.roster`` (a
deployment was created or changed status, :func:`deployments.telemetry.events.deployment_roster_broadcast`)
or the nodes' roster group (``roster-nodes``, always subscribed: it names no node) carries
``node.roster`` (a node was registered or removed, or its agent came online,
:func:`deployments.telemetry.events.node_roster_broadcast`), and every 10 s in any case; when its ``data-roster`` (the nodes, the deployments with their
status and processes, the agents' state) changed, the tiles are swapped and the socket's
subscriptions follow, so a new deployment appears without a reload.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from controlplane.realtime import deployment_group, node_group, node_roster_group
from controlplane.redaction import redact_text
from deployments import selectors, services
from deployments.choices import DEPLOYMENT_TERMINAL, PROCESS_TERMINAL
from deployments.models import NodeTelemetry, ServerProcess
from deployments.nodes import GPU_STATUS_NOT_REPORTED, node_gpu_status
from deployments.views.common import _gib, _status_class, role_page
from deployments.views.deployment_pages import _being_stopped, _health_view

# An ended deployment stays on the wall this long (a failure should be seen, then go).
WALL_ENDED_VISIBLE = timedelta(minutes=15)
# At most this many live deployment tiles (newest first): a wall is read at a glance.
WALL_MAX_DEPLOYMENTS = 24
# At most this many ended deployments, most recently ended first, in the one-line strip under the
# live tiles (the deployments page lists them all).
WALL_MAX_ENDED = 6


def _gpu_text(status: dict) -> str:
    """A node's GPU status as its wall line begins: the status's text, which for a node not
    reported yet names what is unknown (``GPUs unknown (not reported yet) · 8 CPUs``), since the
    line holds its CPUs and host memory too."""
    if status["status"] == GPU_STATUS_NOT_REPORTED:
        return f"GPUs {status['text']}"
    return status["text"]


def _node_tiles() -> list[dict[str, Any]]:
    """A tile per node; an offline node that never sent a sample is ``compact`` (its GPUs in one
    line, not a bar each: there is nothing to draw in them)."""
    sampled = set(NodeTelemetry.objects.values_list("node_id", flat=True).distinct())
    tiles = []
    for node in selectors.node_list():
        gpus = sorted(node.gpus.all(), key=lambda g: g.index)
        gib_each = sorted({_gib(g.memory_total_bytes) for g in gpus})
        status = node_gpu_status(node)
        tiles.append({
            "compact": not node.agent_online and node.pk not in sampled,
            "gpu_gib_each": gib_each[0] if len(gib_each) == 1 else None,
            "node": node,
            "group": node_group(node.name),
            "gpus": [{"gpu": g, "memory_gib": _gib(g.memory_total_bytes)} for g in gpus],
            "gpu_status": status,
            "gpu_text": _gpu_text(status),
            "numa": sorted(n.index for n in node.numa_nodes.all()),
            "memory_gib": _gib(node.memory_total_bytes),
        })
    return tiles


def _deployment_tiles(now) -> list[dict[str, Any]]:
    """The live deployments (pending, starting, ready, stopping), newest first, then the ones that
    ended in the last :data:`WALL_ENDED_VISIBLE` (at most :data:`WALL_MAX_ENDED`, most recently
    ended first): the page draws the first as tiles and the others in a one-line strip."""
    processes = ServerProcess.objects.order_by("role", "ordinal", "id")
    with_processes = Prefetch("processes", queryset=processes)
    live = list(selectors.deployment_list().exclude(status__in=DEPLOYMENT_TERMINAL)
                .prefetch_related(with_processes)[:WALL_MAX_DEPLOYMENTS])
    ended = list(selectors.deployment_list().filter(status__in=DEPLOYMENT_TERMINAL, ended_at__gte=now - WALL_ENDED_VISIBLE)
                 .order_by("-ended_at", "-id")[:WALL_MAX_ENDED])
    tiles = []
    for d in live + ended:
        ended = d.status in DEPLOYMENT_TERMINAL
        shown = [] if ended else [p for p in d.processes.all() if p.status not in PROCESS_TERMINAL]
        as_of = services.deployment_as_last_seen(deployment=d)  # the agent is offline: not live
        tiles.append({
            "deployment": d,
            "group": deployment_group(d.pk),
            "ended": ended,
            "status_class": _status_class(d.status),
            "reason": redact_text(d.reason),
            "processes": [{"row": p, "health": _health_view(p, now, as_of, stopping=_being_stopped(d))} for p in shown],
            # Offline agent: the status reads "ready (as last seen)" and the tile carries the
            # deployment page's note, so a replayed sample cannot pass for a live one.
            "as_of": as_of,
            "state_note": "" if ended else services.deployment_state_note(deployment=d, readable=True),
        })
    return tiles


def _wall_context() -> dict[str, Any]:
    """Tiles of every node and of the deployments that run or ended in the last
    :data:`WALL_ENDED_VISIBLE`, plus the roster string the page compares to notice changes."""
    now = timezone.now()
    nodes = _node_tiles()
    deployments = _deployment_tiles(now)
    roster = [f"n:{t['node'].name}:{int(t['node'].agent_online)}:{len(t['gpus'])}" for t in nodes]
    roster += [
        f"d:{t['deployment'].pk}:{t['deployment'].status}:" + ",".join(str(p["row"].pk) for p in t["processes"])
        for t in deployments
    ]
    return {
        "nodes": nodes, "roster": "|".join(roster),
        "deployments": [t for t in deployments if not t["ended"]],
        "ended": [t for t in deployments if t["ended"]],
    }


@role_page()
def wall(request: HttpRequest) -> HttpResponse:
    """The wall display: a full-screen dark page of node and deployment tiles, live over the
    websocket, recovering by itself after a network drop or a server restart."""
    return render(request, "deployments/wall.html", {**_wall_context(), "roster_group": node_roster_group()})


@role_page()
def wall_tiles_partial(request: HttpRequest) -> HttpResponse:
    """The wall's tiles alone (what the page re-fetches every 10 s to follow new deployments)."""
    return render(request, "deployments/_wall_tiles.html", _wall_context())
