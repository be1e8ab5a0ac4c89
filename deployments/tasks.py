"""Celery tasks of the deployments app: thin wrappers taking ids/names, calling services.

Node-bound tasks run on the queue ``node.<name>`` so they execute on the host they concern,
inside that node's agent (``manage.py node_agent``, see :mod:`deployments.agent`). Every task is
safe to run twice: it claims its work with a conditional UPDATE on the row's status and does
nothing for a terminal row. Tasks only spawn or stop and return; readiness is followed by the
agent's monitor loop, so a long model load never holds a worker thread.
"""
from __future__ import annotations

import os

from celery import shared_task

HEARTBEAT_PERIOD_S = 10.0
RECONCILE_PERIOD_S = 60.0
#: Seconds after its agent's last heartbeat that a node still gets the beat's messages. An
#: expired message leaves a queue only when a worker consumes it, so a node without an agent
#: (a captured host such as the seed machine, a host switched off) would pile up one message
#: per period for ever; past this grace it gets none. Its agent heartbeats by itself when it
#: starts (:mod:`deployments.agent`), which brings it back into the fan-out.
FANOUT_GRACE_S = 300.0


def _fanout_names() -> list[str]:
    """Nodes whose agent heartbeated within :data:`FANOUT_GRACE_S` seconds."""
    from datetime import timedelta

    from django.utils import timezone

    from deployments.models import Node

    since = timezone.now() - timedelta(seconds=FANOUT_GRACE_S)
    return list(Node.objects.filter(agent_heartbeat_at__gte=since).values_list("name", flat=True))


@shared_task(ignore_result=True)
def node_heartbeat_task(node_name: str) -> None:
    """Record that the agent consuming ``node.<node_name>`` is alive (runs on that node)."""
    from deployments.nodes import node_heartbeat

    node_heartbeat(name=node_name, pid=os.getpid())


@shared_task(ignore_result=True)
def nodes_heartbeat_fanout() -> int:
    """Beat task: send a heartbeat request to the queue of every node whose agent heartbeated
    within :data:`FANOUT_GRACE_S` (the agent also heartbeats by itself from its monitor loop;
    this is the broker-path check).

    Each message expires after one period, so an agent that was down a while finds no backlog
    to run; a node whose agent has been silent longer than the grace gets nothing, so its queue
    does not grow (expired messages are only dropped when consumed), its
    ``agent_heartbeat_at`` ages and the UI shows it offline. Returns the number of nodes asked.
    """
    names = _fanout_names()
    for name in names:
        node_heartbeat_task.apply_async(args=[name], queue=f"node.{name}", expires=HEARTBEAT_PERIOD_S)
    return len(names)


@shared_task(ignore_result=True, acks_late=True)
def deployment_start_task(deployment_id: int) -> None:
    """Start deployment ``deployment_id`` on this node: claim pending → starting, then spawn
    each missing process (see :func:`deployments.agent.deployment_launch`). A cancelled,
    stopped or failed row is left alone; a row already starting is resumed idempotently."""
    from deployments.agent import deployment_launch

    deployment_launch(deployment_id=deployment_id)


@shared_task(ignore_result=True, acks_late=True)
def deployment_stop_task(deployment_id: int) -> None:
    """Stop deployment ``deployment_id`` on this node (see
    :func:`deployments.agent.deployment_teardown`); a terminal row is left alone."""
    from deployments.agent import deployment_teardown

    deployment_teardown(deployment_id=deployment_id)


@shared_task(ignore_result=True)
def node_reconcile_task(node_name: str) -> None:
    """Compare this node's process rows with ``/proc`` (see :func:`deployments.agent.node_reconcile`)."""
    from deployments.agent import node_reconcile

    node_reconcile(node_name=node_name)


@shared_task(ignore_result=True)
def nodes_reconcile_fanout() -> int:
    """Beat task: ask the agent of every node heard from within :data:`FANOUT_GRACE_S` to
    reconcile; each message expires after one period so an agent that was down does not find a
    backlog. Returns the number of nodes asked."""
    names = _fanout_names()
    for name in names:
        node_reconcile_task.apply_async(args=[name], queue=f"node.{name}", expires=RECONCILE_PERIOD_S)
    return len(names)
