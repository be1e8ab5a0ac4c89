"""State-change messages: a process's health and a deployment's status, broadcast at once
(``force=True``: never dropped by the rate bound) on the deployment's group.

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

from controlplane.realtime import broadcast, deployment_group

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
    try:
        return broadcast(deployment_group(deployment_id), "deployment.status", data, force=True)
    except Exception:  # noqa: BLE001
        log.warning("deployment.status broadcast failed", exc_info=True)
        return False
