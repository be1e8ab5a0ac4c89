"""State-change messages: a process's health and a deployment's status, broadcast at once
(``force=True``: never dropped by the rate bound) on the deployment's group.

A deployment that is created or changes status is also announced on its node's group
(``deployment.roster`` ``{"deployment_id", "status"}``, once the transaction commits): the wall
subscribes to every node's group, so it redraws its tiles at once instead of at its next 10 s
re-fetch (which stays as the fallback for a lost message).

A node that is registered or removed, or whose agent comes online (its first heartbeat, or the
first after a clean stop or a silence past ``CEILING_HEARTBEAT_TIMEOUT_S``), is announced on the
nodes' roster group (``roster-nodes``, ``node.roster`` ``{"node", "event"}``, once the
transaction commits): the wall subscribes to it without knowing the nodes, so a node that did
not exist when it subscribed appears at once too.

``health`` is derived from a :class:`~deployments.models.ServerProcess` row, since the row keeps
status and probe results rather than one health word:

==============  ==============================================================
``pending``     not started yet
``restarting``  crashed; waiting for its back-off before the restart policy starts it again
``starting``    spawned, readiness checks not passed yet
``healthy``     ready, last liveness check passed
``unhealthy``   ready, but the last liveness check(s) failed (``probe_failures`` > 0)
``stopped``     exited or killed (stopped on purpose or ended)
``failed``      failed (gave up; ``reason`` on the row)
==============  ==============================================================
"""
from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from controlplane.realtime import broadcast, deployment_group, node_group, node_roster_group

log = logging.getLogger(__name__)

HEALTH_STATES = ("pending", "restarting", "starting", "healthy", "unhealthy", "stopped", "failed")


def process_health(*, status: str, probe_failures: int = 0, next_restart_at: Any = None) -> str:
    """The health word of a process row's ``status``, ``probe_failures`` and
    ``next_restart_at`` (see the module table)."""
    if status == "pending":
        return "restarting" if next_restart_at is not None else "pending"
    if status == "spawned":
        return "starting"
    if status == "ready":
        return "unhealthy" if probe_failures else "healthy"
    if status == "failed":
        return "failed"
    return "stopped"


def row_health(row: Any) -> str:
    """:func:`process_health` of a ``ServerProcess`` row."""
    return process_health(status=row.status, probe_failures=row.probe_failures or 0,
                          next_restart_at=row.next_restart_at)


def health_change_broadcast(*, deployment_id: int, process_id: int, role: str, before: str | None, after: str,
                            detail: str = "") -> bool:
    """Send ``health.change`` ``{"process_id", "role", "from", "to", "detail"}`` to
    ``deployment-<id>`` (forced). ``from`` is None when the previous health is unknown (the first
    change this agent sees of a row). Returns what :func:`controlplane.realtime.broadcast`
    returns; never raises for a transport problem."""
    data = {"process_id": int(process_id), "role": role, "from": before, "to": after, "detail": detail}
    try:
        return broadcast(deployment_group(deployment_id), "health.change", data, force=True)
    except Exception:  # noqa: BLE001 - a broadcast must never break supervision
        log.warning("health.change broadcast failed", exc_info=True)
        return False


def deployment_status_broadcast(*, deployment_id: int, status: str, reason: str = "") -> bool:
    """Send ``deployment.status`` ``{"deployment_id", "status", "reason"}`` to
    ``deployment-<id>`` (forced). Never raises for a transport problem."""
    data = {"deployment_id": int(deployment_id), "status": status, "reason": reason}
    deployment_roster_broadcast(deployment_id=deployment_id, status=status)
    try:
        return broadcast(deployment_group(deployment_id), "deployment.status", data, force=True)
    except Exception:  # noqa: BLE001
        log.warning("deployment.status broadcast failed", exc_info=True)
        return False


def deployment_roster_broadcast(*, deployment_id: int, status: str, node_name: str | None = None) -> None:
    """Send ``deployment.roster`` ``{"deployment_id", "status"}`` (forced) to the group of the
    deployment's node (``node_name``, read from the row when not given) once the current
    transaction commits (at once outside one), so a page that re-fetches on it reads the new
    row. Never raises for a transport or database problem."""
    data = {"deployment_id": int(deployment_id), "status": status}

    def send() -> None:
        try:
            name = node_name
            if name is None:
                from deployments.models import Deployment

                name = Deployment.objects.filter(pk=deployment_id).values_list("node__name", flat=True).first()
            if name:
                broadcast(node_group(name), "deployment.roster", data, force=True)
        except Exception:  # noqa: BLE001 - a broadcast must never break a deploy or supervision
            log.warning("deployment.roster broadcast failed", exc_info=True)

    transaction.on_commit(send)


#: ``event`` values of ``node.roster``.
NODE_ROSTER_EVENTS = ("registered", "removed", "online")


def node_roster_broadcast(*, node_name: str, event: str) -> None:
    """Send ``node.roster`` ``{"node": node_name, "event": event}`` (forced; ``event`` one of
    :data:`NODE_ROSTER_EVENTS`) to ``roster-nodes`` once the current transaction commits (at
    once outside one), so a page that re-fetches on it reads the new row. Never raises for a
    transport problem."""
    if event not in NODE_ROSTER_EVENTS:
        raise ValueError(f"node.roster event {event!r}: one of {', '.join(NODE_ROSTER_EVENTS)}")
    data = {"node": node_name, "event": event}

    def send() -> None:
        try:
            broadcast(node_roster_group(), "node.roster", data, force=True)
        except Exception:  # noqa: BLE001 - a broadcast must never break a registration or a heartbeat
            log.warning("node.roster broadcast failed", exc_info=True)

    transaction.on_commit(send)
