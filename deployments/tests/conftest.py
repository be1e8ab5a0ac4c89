"""Fixtures shared by the deployments tests."""
from __future__ import annotations

import os
import signal

import pytest
from django.test import Client

from deployments.supervisor import new_tag, process_find_by_tag
from deployments.telemetry import events


@pytest.fixture
def tag():
    """A fresh process tag (``CEILING_TAG``) for the test; every process still carrying it at the
    end is killed (SIGKILL), so a failed test leaves no orphan."""
    value = new_tag()
    yield value
    for found in process_find_by_tag(value):
        try:
            os.kill(found.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, str, dict]]:
    """The (group, type, data) of every broadcast, none sent; each must be forced past the rate
    bound, as a roster change is a state change."""
    calls: list[tuple[str, str, dict]] = []

    def fake_broadcast(group, type_, data, *, force=False):
        assert force, "a roster change is a state change: never dropped by the rate bound"
        calls.append((group, type_, data))
        return True

    monkeypatch.setattr(events, "broadcast", fake_broadcast)
    return calls


@pytest.fixture
def model_roots(settings):
    """Model paths under /models are the ones a recipe may name."""
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def operator_client(operator) -> Client:
    """A page client signed in as the operator."""
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def local_node(db):
    """A CPU node named ``local``, as this host's node is named."""
    from deployments.tests.factories import cpu_node_create

    return cpu_node_create(name="local")
