"""A node added by hand (the admin, the API) before its agent's first discovery has its CPU count
and memory stored as 0: the wall, the node list and the node page say they are unknown, not
reported yet, never "0 CPUs"; a reported count shows as before."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from deployments.models import Node

pytestmark = pytest.mark.django_db

UNKNOWN_TITLE = 'title="the node agent has not reported this node&#x27;s CPUs yet"'


@pytest.fixture
def viewer_client(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


@pytest.fixture
def added_by_hand(db) -> Node:
    """The row the admin's add form stores for a name alone: the model's defaults, nothing reported."""
    node = Node.objects.create(name="new-box")
    assert (node.cpu_count, node.memory_total_bytes, node.discovered_at) == (0, 0, None)
    return node


def test_the_wall_says_the_cpus_and_memory_are_unknown(viewer_client, added_by_hand):
    html = viewer_client.get(reverse("deployments:wall")).content.decode()
    tile = html[html.index('data-node="new-box"'):]
    tile = tile[:tile.index("</article>")]
    assert "0 CPU" not in tile
    assert f"<span data-cpus-unknown {UNKNOWN_TITLE}>CPUs unknown (not reported yet)</span>" in tile
    assert "host memory unknown (not reported yet)" in tile and "— GiB host memory" not in tile


def test_the_node_pages_say_the_cpus_are_unknown(viewer_client, added_by_hand):
    detail = viewer_client.get(reverse("deployments:node-detail", args=["new-box"])).content.decode()
    assert f"<dt>CPUs</dt><dd><span data-cpus-unknown {UNKNOWN_TITLE}>unknown (not reported yet)</span></dd>" in detail
    listed = viewer_client.get(reverse("deployments:node-list")).content.decode()
    row = listed[listed.index('>new-box</a>'):]
    assert f'<td class="num"><span data-cpus-unknown {UNKNOWN_TITLE}>—</span></td>' in row[:row.index("</tr>")]


def test_a_reported_count_shows_as_before(viewer_client, added_by_hand):
    Node.objects.filter(pk=added_by_hand.pk).update(cpu_count=1, memory_total_bytes=8 * 1024 ** 3)
    html = viewer_client.get(reverse("deployments:wall")).content.decode()
    tile = html[html.index('data-node="new-box"'):]
    tile = tile[:tile.index("</article>")]
    assert "· 1 CPU ·" in tile and "8.0 GiB host memory" in tile and "data-cpus-unknown" not in tile
    detail = viewer_client.get(reverse("deployments:node-detail", args=["new-box"])).content.decode()
    assert "<dt>CPUs</dt><dd>1</dd>" in detail


def test_the_node_list_says_numa_nodes_and_memory_are_unknown(viewer_client, added_by_hand):
    listed = viewer_client.get(reverse("deployments:node-list")).content.decode()
    row = listed[listed.index('>new-box</a>'):]
    row = row[:row.index("</tr>")]
    assert ('<td class="num"><span data-numa-unknown title="the node agent has not reported this node&#x27;s '
            'NUMA nodes yet">—</span></td>') in row
    assert ('<td class="num"><span data-memory-unknown title="the node agent has not reported this node&#x27;s '
            'memory yet">—</span></td>') in row
    assert '<td class="num">0</td>' not in row


def test_the_node_page_says_memory_is_unknown_and_nothing_is_sampled(viewer_client, added_by_hand):
    detail = viewer_client.get(reverse("deployments:node-detail", args=["new-box"])).content.decode()
    assert ('<dt>Memory</dt><dd><span data-memory-unknown title="the node agent has not reported this node&#x27;s '
            'memory yet">unknown (not reported yet)</span></dd>') in detail
    assert "— GiB" not in detail[:detail.index('id="node-live"')]
    assert ("No GPU reported yet. Nothing is sampled yet: the node agent has not been seen, so the host's CPU "
            "and memory below stay empty until it reports.") in detail
    assert "still sampled below" not in detail


def test_a_reported_node_keeps_its_numa_count_memory_and_sampling_line(viewer_client, added_by_hand):
    from django.utils import timezone

    Node.objects.filter(pk=added_by_hand.pk).update(cpu_count=2, memory_total_bytes=8 * 1024 ** 3,
                                                    discovered_at=timezone.now(), agent_heartbeat_at=timezone.now())
    listed = viewer_client.get(reverse("deployments:node-list")).content.decode()
    row = listed[listed.index('>new-box</a>'):]
    row = row[:row.index("</tr>")]
    assert '<td class="num">0</td>' in row and '<td class="num">8.0</td>' in row and "-unknown" not in row
    detail = viewer_client.get(reverse("deployments:node-detail", args=["new-box"])).content.decode()
    assert "<dt>Memory</dt><dd>8.0 GiB " in detail
    assert "The host's CPU per NUMA node and its memory are still sampled below." in detail


def test_the_api_gives_null_for_what_was_not_reported(viewer_api, added_by_hand):
    body = viewer_api.get("/api/nodes/new-box/").json()
    assert (body["cpu_count"], body["memory_total_bytes"], body["gpu_count"]) == (None, None, None)
    from deployments.topology import NodeFacts

    facts = NodeFacts.from_dict(body)   # the API's nulls read back as facts not reported
    assert (facts.cpu_count, facts.memory_total_bytes, facts.all_cpus()) == (0, 0, set())
    Node.objects.filter(pk=added_by_hand.pk).update(cpu_count=4, memory_total_bytes=1024)
    body = viewer_api.get("/api/nodes/new-box/").json()
    assert (body["cpu_count"], body["memory_total_bytes"]) == (4, 1024)


def test_pinning_cpus_on_a_node_not_reported_says_the_agent_has_not_reported(added_by_hand):
    from controlplane.errors import InvalidInput
    from deployments.examples import example_recipe
    from deployments.recipes import recipe_validate
    from deployments.topology import node_facts_from_row

    recipe = example_recipe("local-sim-single")
    facts = node_facts_from_row(added_by_hand)
    with pytest.raises(InvalidInput) as info:
        recipe_validate(engine=recipe["engine"], topology=recipe["topology"], spec=recipe["spec"], node=facts)
    assert info.value.errors["spec.roles.single.cpus"] == [
        "node new-box's agent has not reported its CPUs yet, so CPUs 0 cannot be checked: a recipe pinning CPUs on "
        "it can be saved and launched once the agent has reported (or leave cpus out)"]
    recipe["spec"]["roles"]["single"]["cpus"] = "70000"
    with pytest.raises(InvalidInput) as info:
        recipe_validate(engine=recipe["engine"], topology=recipe["topology"], spec=recipe["spec"], node=facts)
    assert info.value.errors["spec.roles.single.cpus"] == [
        "CPU 70000 is out of range: CPU ids are 0-65535, and node new-box has not reported its CPUs yet (its node "
        "agent has not discovered it)"]
