"""``manage.py import_results FILE``: import a SGLang ``bench_serving`` JSONL or vLLM ``bench serve``
JSON file as runs (original file kept), through :func:`benchmarks.services.run_import`."""
from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from benchmarks.services import run_import, run_metrics
from controlplane.errors import CeilingError


class Command(BaseCommand):
    help = "Import another harness's result file (SGLang bench_serving JSONL, vLLM bench serve JSON) as runs."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--user", default=None, help="username recorded as importer")
        parser.add_argument("--allow-duplicate", action="store_true",
                            help="import even if a file with the same content was imported before")

    def handle(self, *args, **o):
        path = Path(o["file"])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        user = User.objects.filter(username=o["user"]).first() if o["user"] else None
        try:
            runs = run_import(text=text, filename=path.name, user=user, allow_duplicate=o["allow_duplicate"])
        except CeilingError as exc:
            raise CommandError(f"{path.name}: {exc}") from None
        for run in runs:
            m = run_metrics(run=run)
            tok = m["output_throughput_tok_s"]
            self.stdout.write(f"run #{run.pk} ({run.import_format}, line {run.source_line}): {run.label}, "
                              f"{m['successes']} requests ok, "
                              + (f"{tok:.1f} output tok/s" if tok is not None else "no output tok/s")
                              + (f", flags {','.join(run.flags)}" if run.flags else ""))
