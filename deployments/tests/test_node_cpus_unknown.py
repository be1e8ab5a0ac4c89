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
