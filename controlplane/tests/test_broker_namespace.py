"""Installations sharing one Redis database keep their Celery queues apart: every broker key
starts with the installation's namespace (``controlplane.celery.broker_key_prefix``), so one
installation's node agent never takes another's deploy or stop. Real Redis, real Celery
publishing."""
from __future__ import annotations

import uuid

import pytest
import redis
from django.conf import settings

from controlplane.celery import app, broker_key_prefix
from controlplane.realtime import realtime_namespace
from deployments.tasks import node_heartbeat_task


def test_the_prefix_is_the_live_data_namespace(settings):
    settings.CEILING_REALTIME_PREFIX = "site-a"
    assert broker_key_prefix() == "ceiling:site-a:"
    settings.CEILING_REALTIME_PREFIX = ""
    assert broker_key_prefix() == f"ceiling:{realtime_namespace()}:" and realtime_namespace().startswith("db-")


@pytest.mark.django_db
def test_two_installations_on_one_redis_database_publish_to_queues_of_their_own(settings):
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    tag = uuid.uuid4().hex[:8]
    queue = f"node.local-{tag}"
    sites = [f"site-a-{tag}", f"site-b-{tag}"]
    keys = [f"ceiling:{site}:{queue}" for site in sites]
    try:
        for count, site in enumerate(sites, start=1):
            settings.CEILING_REALTIME_PREFIX = site
            with app.connection_for_write() as conn:   # a connection made now takes the namespace now
                for _ in range(count):
                    node_heartbeat_task.apply_async(args=["local"], queue=queue, connection=conn)
        # each installation's messages wait in its own list; the bare queue name holds nothing
        assert [broker.llen(key) for key in keys] == [1, 2]
        assert broker.llen(queue) == 0
    finally:
        broker.delete(queue, *keys)


@pytest.mark.django_db
def test_a_process_whose_namespace_changes_publishes_under_the_new_one(settings):
    """The pooled connection and producer of the first namespace are not reused under the next
    (a test run switches to its test database after the process may have published)."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    tag = uuid.uuid4().hex[:8]
    queue = f"node.pooled-{tag}"
    sites = [f"site-a-{tag}", f"site-b-{tag}", f"site-a-{tag}"]
    keys = [f"ceiling:{site}:{queue}" for site in sites[:2]]
    try:
        for site in sites:
            settings.CEILING_REALTIME_PREFIX = site
            node_heartbeat_task.apply_async(args=["local"], queue=queue)   # the app's pools
        assert [broker.llen(key) for key in keys] == [2, 1]
        assert broker.llen(queue) == 0
    finally:
        broker.delete(queue, *keys)
