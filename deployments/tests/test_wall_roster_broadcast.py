"""A deployment that is created, cancelled or changes status is announced on its node's group
(``deployment.roster``), once the transaction commits, so the wall redraws its tiles at once
rather than at its next 10 s re-fetch."""
from __future__ import annotations

import pytest

from deployments.examples import example_recipe
from deployments.nodes import node_register, seed_node_facts
from deployments.services import deployment_cancel, deployment_create, recipe_create
from deployments.telemetry import events


@pytest.fixture
def seed_pd(db, operator):
    node = node_register(facts=seed_node_facts())
    ex = example_recipe("seed-v4-flash-pd")
    return recipe_create(user=operator, name=ex["name"], description=ex["description"], engine=ex["engine"],
                         topology=ex["topology"], node=node, spec=ex["spec"])


def _roster(sent):
    return [(group, data) for group, type_, data in sent if type_ == "deployment.roster"]


def test_a_new_deployment_is_announced_on_its_node_group_after_commit(seed_pd, operator, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        deployment = deployment_create(recipe=seed_pd, user=operator)
        assert _roster(sent) == [], "announced before the row is committed: the wall would re-fetch the old roster"
    assert _roster(sent) == [(f"node-{seed_pd.node.name}", {"deployment_id": deployment.pk, "status": "pending"})]


def test_a_cancelled_and_a_status_change_are_announced(seed_pd, operator, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        deployment = deployment_create(recipe=seed_pd, user=operator)
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        deployment_cancel(deployment=deployment, user=operator)
    assert _roster(sent) == [(f"node-{seed_pd.node.name}", {"deployment_id": deployment.pk, "status": "stopped"})]

    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        events.deployment_status_broadcast(deployment_id=deployment.pk, status="failed", reason="gone")
    assert _roster(sent) == [(f"node-{seed_pd.node.name}", {"deployment_id": deployment.pk, "status": "failed"})]
    assert ("deployment-%d" % deployment.pk, "deployment.status",
            {"deployment_id": deployment.pk, "status": "failed", "reason": "gone"}) in sent


def test_a_broadcast_failure_never_breaks_a_deploy(seed_pd, operator, monkeypatch, django_capture_on_commit_callbacks):
    def broken(*args, **kwargs):
        raise RuntimeError("redis away")

    monkeypatch.setattr(events, "broadcast", broken)
    with django_capture_on_commit_callbacks(execute=True):
        deployment = deployment_create(recipe=seed_pd, user=operator)
    assert deployment.pk
