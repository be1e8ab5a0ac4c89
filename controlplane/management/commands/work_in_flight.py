"""``manage.py work_in_flight [--node NAME]``: what a restart of the local services would cut off.

Prints one JSON object, ``{"worker": [...], "agent": [...]}``: the sweeps the control worker is
running (``waiting`` for their deployment or ``running``: their load generator lives in a worker
process) and the kernel jobs the agent of node ``--node`` (default ``local``) is building or
benchmarking, each as ``"sweep #9 (running)"``. ``scripts/services.py start`` asks before it
restarts a service that is running, and leaves one with work in flight as it is. A pending sweep or
kernel job is not listed: it waits in the broker's queue and the restarted service takes it.
"""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from kernels.choices import JOB_RUNNING
from kernels.models import KernelJob


class Command(BaseCommand):
    help = "Print, as JSON, the sweeps and kernel jobs the local worker and agent are running."

    def add_arguments(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("--node", default="local", help="the node whose agent's kernel jobs are listed")

    def handle(self, *args, **opts) -> None:  # type: ignore[no-untyped-def]
        try:
            self._write(opts["node"])
        except DatabaseError as exc:
            raise CommandError(f"cannot read the sweeps and kernel jobs ({exc}); has `manage.py migrate` run?") from exc

    def _write(self, node: str) -> None:
        sweeps = BenchmarkSweep.objects.filter(status__in=[SweepStatus.WAITING, SweepStatus.RUNNING]).order_by("pk")
        jobs = KernelJob.objects.filter(status__in=JOB_RUNNING, node__name=node).order_by("pk")
        self.stdout.write(json.dumps({
            "worker": [f"sweep #{s.pk} ({s.status})" for s in sweeps.only("pk", "status")],
            "agent": [f"kernel job #{j.pk} ({j.status})" for j in jobs.only("pk", "status")],
        }))
