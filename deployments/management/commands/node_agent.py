"""``manage.py node_agent [--name NAME] [--concurrency N]``: run this host's node agent.

Registers the host (discovery) as node ``NAME`` (default ``CEILING_NODE_NAME``), adopts engine
processes that survived a previous agent and marks the rest exited, starts the monitor
thread (heartbeat, crash detection, restarts, readiness, liveness) and runs a Celery worker
on the queue ``node.<NAME>`` until SIGTERM or SIGINT. Engines keep running when the agent
stops; the next agent adopts them. See :mod:`deployments.agent`.

Only one agent per node name runs: a second one (same host, or another host while the first
still heartbeats) exits with status 1 and a message naming the running one, before it
registers, adopts or consumes anything (:func:`deployments.agent.agent_lock_acquire`).
"""
from __future__ import annotations

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from controlplane.commands import CeilingCommand
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_spelled
from deployments.agent import AgentAlreadyRunning, NodeAgent


class Command(CeilingCommand):
    help = "Run the node agent: register this host, supervise its engine processes, consume node.<name>."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default=None, help="node name (default: CEILING_NODE_NAME)")
        parser.add_argument("--concurrency", type=int, default=None,
                            help="worker threads for deploy/stop tasks (default: CEILING_AGENT_CONCURRENCY)")

    def handle(self, *args, **options) -> None:
        name = options["name"] or settings.CEILING_NODE_NAME
        concurrency = options["concurrency"]
        if concurrency is not None and concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        try:
            code = NodeAgent(name=name, concurrency=concurrency).run()
        except AgentAlreadyRunning as exc:
            raise CommandError(str(exc)) from exc
        except InvalidInput as exc:
            raise CommandError(f"cannot register node {json_spelled(name)}: {exc}") from exc
        if code:
            raise SystemExit(code)
