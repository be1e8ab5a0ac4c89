"""The beat's heartbeat and reconcile messages go only to nodes whose agent was heard from
lately: an expired message leaves a Redis queue only when a worker consumes it, so a node with no
agent (the seed machine, a host switched off) would otherwise collect one message per period for
ever. Real Redis (the broker of ``REDIS_URL``), real Celery publishing."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from controlplane.celery import broker_key_prefix
from deployments import tasks
from deployments.tests.factories import cpu_node_create


@pytest.mark.django_db
def test_only_nodes_heard_from_within_the_grace_get_the_beats_messages():
    tag = uuid.uuid4().hex[:8]
    now = timezone.now()
    online = cpu_node_create(name=f"fan-on-{tag}")
    lately = cpu_node_create(name=f"fan-late-{tag}")
    silent = cpu_node_create(name=f"fan-off-{tag}")
    never = cpu_node_create(name=f"fan-never-{tag}")
    type(online).objects.filter(pk=online.pk).update(agent_heartbeat_at=now)
    type(online).objects.filter(pk=lately.pk).update(agent_heartbeat_at=now - timedelta(seconds=tasks.FANOUT_GRACE_S - 30))
    type(online).objects.filter(pk=silent.pk).update(agent_heartbeat_at=now - timedelta(seconds=tasks.FANOUT_GRACE_S + 30))
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queues = {n.name: f"{broker_key_prefix()}node.{n.name}" for n in (online, lately, silent, never)}
    try:
        for _ in range(3):  # three beat periods
            tasks.nodes_heartbeat_fanout()
            tasks.nodes_reconcile_fanout()
        lengths = {name: broker.llen(queue) for name, queue in queues.items()}
    finally:
        broker.delete(*queues.values())
    assert lengths == {online.name: 6, lately.name: 6, silent.name: 0, never.name: 0}
