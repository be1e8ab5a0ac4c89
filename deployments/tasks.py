"""Celery tasks of the deployments app: thin wrappers taking ids/names, calling services.

Node-bound tasks run on the queue ``node.<name>`` so they execute on the host they concern.
"""
from __future__ import annotations

import os

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

HEARTBEAT_PERIOD_S = 10.0


@shared_task(ignore_result=True)
def node_heartbeat_task(node_name: str) -> None:
    """Record that the agent consuming ``node.<node_name>`` is alive (runs on that node)."""
    from deployments.nodes import node_heartbeat

    node_heartbeat(name=node_name, pid=os.getpid())


@shared_task(ignore_result=True)
def nodes_heartbeat_fanout() -> int:
    """Beat task: send a heartbeat request to every registered node's queue.

    Each message expires after one period, so a node whose agent is down does not pile up
    work; its ``agent_heartbeat_at`` simply ages and the UI shows it offline.
    Returns the number of nodes asked.
    """
    from deployments.models import Node

    names = list(Node.objects.values_list("name", flat=True))
    for name in names:
        node_heartbeat_task.apply_async(args=[name], queue=f"node.{name}", expires=HEARTBEAT_PERIOD_S)
    return len(names)


@worker_ready.connect
def _register_local_node_on_start(sender=None, **kwargs) -> None:
    """A worker that consumes this host's node queue registers the host's topology at start."""
    queues = {q.name for q in getattr(sender.app.amqp, "queues", {}).values()} if sender else set()
    if f"node.{settings.CEILING_NODE_NAME}" not in queues:
        return
    from deployments.nodes import node_heartbeat, node_local_register

    node = node_local_register()
    node_heartbeat(name=node.name, pid=os.getpid())
