"""The node pages give the node agent's last heartbeat's age as every other page gives a time's
(``42 s ago``, ``3 min 05 s ago``, ``just now``), not Django's ``timesince`` (``0 minutes``)."""
from __future__ import annotations

from datetime import timedelta

import re
import time

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deployments.models import Node
from deployments.views.common import _duration_text
from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db


def _page(user, name: str, *args) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse(name, args=list(args)))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize(("age", "shown"), [(timedelta(seconds=12), "12 s ago"),
                                             (timedelta(minutes=3, seconds=5), "3 min 05 s ago")])
def test_the_last_heartbeat_reads_its_age_in_the_pages_words(viewer, age, shown):
    node = cpu_node_create(name="cpu-box")
    # a little over, the age shown is in whole seconds counted down
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now() - age - timedelta(milliseconds=300))

    started = time.monotonic()
    detail = _page(viewer, "deployments:node-detail", "cpu-box")
    listed = _page(viewer, "deployments:node-list")
    # On a loaded host the pages may render a second or more after the update: the age shown is
    # the set one plus the whole seconds that passed, in the same words.
    late = int(time.monotonic() - started) + 1
    words = [_duration_text(age.total_seconds() + extra) + " ago" for extra in range(late + 1)]
    assert shown == words[0]
    assert any(f" UTC</time> (<span data-age>{w}</span>)" in detail for w in words), re.search(r"last heartbeat.{0,160}", detail).group(0)
    assert any(f"last seen <span data-age>{w}</span>" in listed for w in words), words
    assert "minutes ago" not in detail + listed and "minute ago" not in detail + listed
