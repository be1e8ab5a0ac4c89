"""A node that is registered or removed, or whose agent comes online, is announced on the nodes'
roster group (``roster-nodes``, ``node.roster``) once the transaction commits, so the wall draws
it at once rather than at its next 10 s re-fetch; a viewer may subscribe to that group without
naming a node. The node API gives the agent's pid, to a signed-in user with a role only."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.consumers import subscription_refusal
from controlplane.realtime import group_created_at, group_kind, node_roster_group
from deployments.models import Node
from deployments.nodes import node_agent_stopped, node_heartbeat, node_register, seed_node_facts
from deployments.telemetry import events
from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db


def _roster(sent) -> list[dict]:
    return [data for group, type_, data in sent if type_ == "node.roster" and group == "roster-nodes"]


def test_the_group_is_one_the_kinds_know_about_no_one_object():
    assert node_roster_group() == "roster-nodes"
    assert group_kind("roster-nodes") == ("roster", "nodes")
    # A node whose name begins with "roster" keeps its own group.
    assert group_kind("node-roster-nodes") == ("node", "roster-nodes")
    assert group_created_at("roster-nodes") is None


def test_a_registered_node_is_announced_after_commit(sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        node = node_register(facts=seed_node_facts())
        assert _roster(sent) == [], "announced before the row is committed: the wall would re-fetch without it"
    assert _roster(sent) == [{"node": node.name, "event": "registered"}]

    # Registering it again (an agent's restart) creates nothing: no announcement.
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        node_register(facts=seed_node_facts())
    assert _roster(sent) == []


def test_a_node_created_another_way_and_one_deleted_are_announced(sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        node = cpu_node_create(name="made-here")
    assert _roster(sent) == [{"node": "made-here", "event": "registered"}]
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        node.delete()
    assert _roster(sent) == [{"node": "made-here", "event": "removed"}]


def test_the_heartbeat_that_brings_an_agent_online_is_announced_and_no_other(
        sent, settings, django_capture_on_commit_callbacks):
    settings.CEILING_HEARTBEAT_TIMEOUT_S = 30.0
    with django_capture_on_commit_callbacks(execute=True):
        cpu_node_create(name="beats")
    sent.clear()

    def beat(pid: int = 11) -> list[dict]:
        sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            node_heartbeat(name="beats", pid=pid)
        return _roster(sent)

    online = [{"node": "beats", "event": "online"}]
    assert beat() == online, "the first heartbeat"
    assert beat() == [], "a heartbeat of an agent already online"
    assert Node.objects.get(name="beats").agent_online

    # A clean stop, then the agent back.
    node_agent_stopped(name="beats", pid=11)
    assert not Node.objects.get(name="beats").agent_online
    assert beat(pid=12) == online
    assert Node.objects.get(name="beats").agent_pid == 12

    # Silent past the limit, then back.
    Node.objects.filter(name="beats").update(agent_heartbeat_at=timezone.now() - timedelta(seconds=31))
    assert not Node.objects.get(name="beats").agent_online
    assert beat() == online
    assert beat() == []

    # A heartbeat never moves the last one backwards (a later one is already recorded).
    later = timezone.now() + timedelta(seconds=60)
    Node.objects.filter(name="beats").update(agent_heartbeat_at=later)
    assert beat() == []
    assert Node.objects.get(name="beats").agent_heartbeat_at == later


def test_a_broadcast_failure_never_breaks_a_heartbeat(monkeypatch, django_capture_on_commit_callbacks):
    def broken(*args, **kwargs):
        raise RuntimeError("redis away")

    monkeypatch.setattr(events, "broadcast", broken)
    with django_capture_on_commit_callbacks(execute=True):
        cpu_node_create(name="quiet")
        node_heartbeat(name="quiet", pid=5)
    assert Node.objects.get(name="quiet").agent_pid == 5


def test_a_viewer_may_subscribe_to_the_roster_and_no_one_without_a_role(viewer, outsider):
    assert subscription_refusal(viewer, "roster-nodes") is None
    assert "no role" in subscription_refusal(outsider, "roster-nodes")
    assert subscription_refusal(viewer, "roster-secrets") == "no roster named 'secrets': roster-nodes is the one there is"
    assert "roster-nodes" in subscription_refusal(viewer, "metrics-1")


def test_the_node_api_gives_the_agents_pid_to_a_role_only(viewer_api, anon_api, outsider_api, settings):
    node = cpu_node_create(name="pid-box")
    assert viewer_api.get("/api/nodes/pid-box/").json()["agent_pid"] is None
    node_heartbeat(name=node.name, pid=4321)
    assert viewer_api.get("/api/nodes/pid-box/").json()["agent_pid"] == 4321
    listed = viewer_api.get("/api/nodes/").json()["results"]
    assert [n["agent_pid"] for n in listed if n["name"] == "pid-box"] == [4321]
    for client, status in ((anon_api, 401), (outsider_api, 403)):
        for url in ("/api/nodes/", "/api/nodes/pid-box/", f"/api/nodes/{node.pk}/", "/api/nodes/pid-box.json/",
                    "/api/nodes/.csv/", "/api/nodes/?format=csv"):
            response = client.get(url)
            assert response.status_code == status, (url, response.status_code)
            assert b"4321" not in response.content, url


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_socket_subscribed_to_the_roster_hears_of_a_node_it_did_not_know(viewer):
    from asgiref.sync import sync_to_async

    from controlplane.tests.test_live_consumer import _next_broadcast, _open

    ws, hello = await _open(viewer, ["roster-nodes"])
    assert list(hello["groups"]) == ["roster-nodes"]
    await sync_to_async(cpu_node_create)(name="brand-new")
    msg = await _next_broadcast(ws)
    assert (msg["type"], msg["group"], msg["data"]) == ("node.roster", "roster-nodes",
                                                         {"node": "brand-new", "event": "registered"})
    await ws.disconnect()
