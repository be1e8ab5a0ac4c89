"""``manage.py kernel_job_export <job_id> --out DIR``: write ``variants.json``, the package and
``job.json`` (with the runner command lines) for a machine without Django (the GPU host)."""
from __future__ import annotations

from django.core.management.base import CommandError

from controlplane.commands import CeilingCommand
from controlplane.errors import InvalidInput
from kernels.models import KernelJob
from kernels.services import kernel_job_export


class Command(CeilingCommand):
    help = "Export a kernel job's variants and package for building and benchmarking elsewhere."

    def add_arguments(self, parser):
        parser.add_argument("job_id", type=int)
        parser.add_argument("--out", required=True, help="an empty or new directory")

    def handle(self, *args, **options):
        job = KernelJob.objects.select_related("package").filter(pk=options["job_id"]).first()
        if job is None:
            raise CommandError(f"no kernel job with id {options['job_id']}")
        try:
            paths = kernel_job_export(job=job, out_dir=options["out"])
        except InvalidInput as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"kernel job #{job.pk} ({job.package.name}, {job.variants_total} variants, cc {job.target_cc})")
        for key, path in paths.items():
            self.stdout.write(f"  {key}: {path}")
