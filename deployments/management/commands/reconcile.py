"""``manage.py reconcile [--name NAME]``: compare this node's process rows with ``/proc`` once.

Runs on the node (it reads ``/proc`` and may signal processes it owns): rows whose engine still
runs are kept, rows whose engine is gone are marked exited (or restarted per policy when their
deployment is still wanted), a pid now used by another process is never signalled, and
pending, starting and stopping deployments are driven forward. The node agent does the same at
start-up and on every tick; this is the operator's manual pass. See
:func:`deployments.agent.node_reconcile`.
"""
from __future__ import annotations

from django.conf import settings
from django.core.management.base import CommandParser

from controlplane.commands import CeilingCommand
from deployments.agent import node_reconcile


class Command(CeilingCommand):
    help = "Reconcile this node's server process rows with the processes actually running."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default=None, help="node name (default: CEILING_NODE_NAME)")

    def handle(self, *args, **options) -> None:
        name = options["name"] or settings.CEILING_NODE_NAME
        counts = node_reconcile(node_name=name, at_startup=False)
        self.stdout.write(", ".join(f"{k} {v}" for k, v in counts.items()))
