"""A stop sets ``stop_requested`` only; ``cancel_requested`` says a cancel was asked for. Rows
from before the split keep the cancel flag only where the timeline records a cancel."""
from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from deployments.choices import DeploymentStatus
from deployments.models import Deployment
from deployments.services import deployment_event_add
from deployments.tests.factories import cpu_node_create, recipe_row_create

pytestmark = pytest.mark.django_db


def test_the_migration_keeps_the_cancel_flag_only_where_a_cancel_was_recorded():
    node = cpu_node_create()
    made = {}
    for name, kind in (("stopped", "stop-requested"), ("cancelled", "cancel-requested"),
                       ("cancelled-pending", "cancelled"), ("untouched", None)):
        recipe = recipe_row_create(node=node, name=name)
        row = Deployment.objects.create(recipe=recipe, recipe_version=1, node=node, status=DeploymentStatus.STOPPED,
                                        cancel_requested=kind is not None)
        if kind:
            deployment_event_add(deployment=row, kind=kind, message="someone asked")
        made[name] = row.pk

    migration = importlib.import_module("deployments.migrations.0008_deployment_stop_requested")
    migration.split_stop_from_cancel(apps, None)

    flags = {name: tuple(Deployment.objects.filter(pk=pk).values_list("stop_requested", "cancel_requested")[0])
             for name, pk in made.items()}
    assert flags == {"stopped": (True, False), "cancelled": (True, True), "cancelled-pending": (True, True),
                     "untouched": (False, False)}
