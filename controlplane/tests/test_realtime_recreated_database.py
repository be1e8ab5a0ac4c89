"""A database re-created where another one was (``make demo`` run again) never shows the old
one's live data: it has the same path, so the same namespace, and Redis keeps the old
database's last messages for an hour; a kept message older than the object it would describe
is left out. Real Redis, real flush of the test database."""
from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from controlplane import realtime
from controlplane.consumers import _snapshot
from deployments.choices import DeploymentStatus
from deployments.models import Deployment
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db(transaction=True)


def _old_install_leaves_a_stopped_deployment(r: redis.Redis) -> tuple[str, int, str]:
    """Deployment #<id> of the database before: stopped, its process exited, a sample 30 min old."""
    call_command("flush", interactive=False, verbosity=0)   # ids from 1, as in a new database
    node = cpu_node_create(name="local")
    d = deployment_row_create(recipe=recipe_row_create(node=node, name="local-sim-single"), status=DeploymentStatus.STOPPED)
    Deployment.objects.filter(pk=d.pk).update(created_at=timezone.now() - timedelta(hours=2))
    group = realtime.deployment_group(d.pk)
    old_ts = time.time() - 1800
    for type_, data in (("deployment.status", {"status": "stopped"}),
                        ("deployment.sample", {"t": old_ts, "status": "stopped", "tok_s": 12.0,
                                               "processes": [{"id": 1, "role": "mixed", "status": "exited"}]})):
        msg = realtime.message_build(group=group, type_=type_, data=data, seq=3, ts=old_ts)
        r.hset(f"ceiling:{realtime.realtime_namespace()}:rt:last:{group}", type_, json.dumps(msg))
    return realtime.realtime_namespace(), d.pk, group


def _recreated_with_a_pending_deployment(pk: int, *, backdated: bool = False):
    call_command("flush", interactive=False, verbosity=0)   # the database file made anew
    node = cpu_node_create(name="local")
    d = deployment_row_create(recipe=recipe_row_create(node=node, name="local-sim-single"), status=DeploymentStatus.PENDING)
    assert d.pk == pk, "the new database reuses the id"
    if backdated:
        Deployment.objects.filter(pk=pk).update(created_at=timezone.now() - timedelta(hours=2))
    return d


def test_a_kept_message_older_than_its_object_is_left_out_even_in_one_namespace(django_user_model):
    """Both databases have one namespace (here a fixed CEILING_REALTIME_PREFIX, as a path would
    give): the creation time decides."""
    from django.contrib.auth.models import Group
    from rest_framework.test import APIClient

    r = redis.Redis.from_url(settings.REDIS_URL)
    with override_settings(CEILING_REALTIME_PREFIX="recreated-db-test", CEILING_REALTIME_MIN_INTERVAL_S=0.0):
        _, pk, group = _old_install_leaves_a_stopped_deployment(r)
        key = f"ceiling:recreated-db-test:rt:last:{group}"
        try:
            _recreated_with_a_pending_deployment(pk)
            assert r.hlen(key) == 2
            assert realtime.latest_messages(group) == {}
            assert _snapshot([group])[group]["latest"] == {}
            # the REST re-sync the pages make after a gap says nothing of it either
            user = django_user_model.objects.create_user(username="v", password="correct-horse-battery")
            user.groups.add(Group.objects.get_or_create(name="viewer")[0])
            api = APIClient()
            api.force_authenticate(user)
            body = api.get(f"/api/deployments/{pk}/telemetry/").json()
            assert body["latest"] == {"deployment.sample": None, "deployment.status": None}
            # what the new deployment itself sends is kept and served
            assert realtime.broadcast(group, "deployment.status", {"status": "pending"}, force=True)
            assert realtime.latest_messages(group)["deployment.status"]["data"] == {"status": "pending"}
            assert "deployment.sample" not in realtime.latest_messages(group)
        finally:
            r.delete(key, f"ceiling:recreated-db-test:rt:seq:{group}")
