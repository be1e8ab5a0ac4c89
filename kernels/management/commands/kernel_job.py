"""``manage.py kernel_job <package> (--node NAME | --external) [--cc 9.0] [--params JSON]
[--shapes a,b] [--batches 1,8] [--wait SECONDS]``: create a kernel job (queued on the node's agent,
or waiting for builds and results made elsewhere) and optionally wait for it to end."""
from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError

from controlplane.errors import InvalidInput
from deployments.models import Node
from kernels.choices import JOB_TERMINAL
from kernels.models import KernelPackage
from kernels.services import job_progress_total, kernel_job_create


class Command(BaseCommand):
    help = "Create a kernel job of a registered package (on a node, or for results measured elsewhere)."

    def add_arguments(self, parser):
        parser.add_argument("package")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--node", help="run on this node's agent (queue node.<name>)")
        where.add_argument("--external", action="store_true",
                           help="builds and results are made elsewhere (kernel_job_export / kernel_job_ingest)")
        parser.add_argument("--cc", help="target compute capability, e.g. 9.0 (default: the node's GPU)")
        parser.add_argument("--params", help='grid subset as JSON, e.g. {"impl": ["split_k"]}')
        parser.add_argument("--shapes", help="comma-separated shape names to benchmark")
        parser.add_argument("--batches", help="comma-separated batch sizes to benchmark")
        parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the job to end")

    def handle(self, *args, **options):
        if not 0 <= options["wait"] < float("inf"):  # also NaN
            raise CommandError(f"--wait must be a finite number of seconds >= 0, got {options['wait']}")
        pkg = KernelPackage.objects.filter(name=options["package"]).first()
        if pkg is None:
            raise CommandError(f"no registered kernel package {options['package']!r} (run kernel_register)")
        node = None
        if options["node"]:
            node = Node.objects.filter(name=options["node"]).first()
            if node is None:
                raise CommandError(f"no node named {options['node']!r}")
        try:
            subset = json.loads(options["params"]) if options["params"] else None
        except ValueError as exc:
            raise CommandError(f"--params is not JSON: {exc}") from None
        try:
            batches = [int(b) for b in options["batches"].split(",") if b] if options["batches"] else None
        except ValueError:
            raise CommandError("--batches must be comma-separated integers") from None
        shapes = [s for s in options["shapes"].split(",") if s] if options["shapes"] else None
        try:
            job = kernel_job_create(package=pkg, node=node, cc=options["cc"], params_subset=subset, shapes=shapes,
                                    batches=batches, dispatch=not options["external"])
        except InvalidInput as exc:
            for path, msgs in exc.errors.items():
                for m in msgs:
                    self.stderr.write(f"{path}: {m}")
            raise CommandError("the job was not created") from None
        self.stdout.write(f"kernel job #{job.pk}: {pkg.name}, {job.variants_total} variants, target {job.target}, "
                          + (f"queued on node.{node.name}" if node else "waiting for external builds and results"))
        deadline = time.monotonic() + options["wait"]
        last = None
        while options["wait"] and time.monotonic() < deadline:
            job.refresh_from_db()
            line = f"  {job.status} {job.phase} {job.progress_done}/{job_progress_total(job)}"
            if line != last:
                self.stdout.write(line)
                last = line
            if job.status in JOB_TERMINAL:
                break
            time.sleep(1.0)
        if options["wait"]:
            job.refresh_from_db()
            self.stdout.write(f"kernel job #{job.pk}: {job.status}"
                              + (f" ({job.reason})" if job.reason else "") + (f"; {job.note}" if job.note else ""))
