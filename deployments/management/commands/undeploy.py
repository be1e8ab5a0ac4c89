"""``manage.py undeploy [--node NAME] [--wait S]``: stop every active deployment on a node.

Asks through :func:`deployments.services.deployment_stop` (so the node agent stops the
processes: SIGTERM, grace, SIGKILL) and waits for the rows to become terminal. When the node's
agent is not running, this host is that node, and a deployment is still active after the wait,
the same teardown the agent would run is run here. ``make stop`` calls it before stopping the
services, so no engine is left holding its ports.
"""
from __future__ import annotations

import time

from django.conf import settings

from controlplane.commands import CeilingCommand
from deployments.agent import deployment_teardown
from deployments.choices import DEPLOYMENT_ACTIVE
from deployments.models import Deployment
from deployments.services import deployment_stop


class Command(CeilingCommand):
    help = "Stop every active deployment on a node (default: this host's node) and wait for it."

    def add_arguments(self, parser):
        parser.add_argument("--node", default=settings.CEILING_NODE_NAME)
        parser.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the agent")

    def handle(self, *args, node: str, wait: float, **options):
        active = list(Deployment.objects.filter(node__name=node, status__in=DEPLOYMENT_ACTIVE).select_related("node"))
        if not active:
            self.stdout.write(f"no active deployments on node {node}")
            return
        for deployment in active:
            deployment_stop(deployment=deployment, user=None, requester="manage.py undeploy")
        deadline = time.monotonic() + wait
        ids = [d.pk for d in active]
        while time.monotonic() < deadline:
            if not Deployment.objects.filter(pk__in=ids, status__in=DEPLOYMENT_ACTIVE).exists():
                break
            if not active[0].node.agent_online:
                break
            time.sleep(0.25)
        for deployment in Deployment.objects.filter(pk__in=ids, status__in=DEPLOYMENT_ACTIVE):
            if node == settings.CEILING_NODE_NAME:
                deployment_teardown(deployment_id=deployment.pk)
        for deployment in Deployment.objects.filter(pk__in=ids).select_related("recipe"):
            self.stdout.write(f"deployment #{deployment.pk} ({deployment.deployed_recipe_label(version=True)}): {deployment.status}"
                              + (f" — {deployment.reason}" if deployment.reason else ""))
