"""``manage.py prune_telemetry [--older-than-days N]``: delete telemetry rollups older than N
days (default ``CEILING_TELEMETRY_RETENTION_DAYS``). Beat runs the same pass hourly; see
:func:`deployments.telemetry.history.telemetry_prune`."""
from __future__ import annotations

import math

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from controlplane.commands import CeilingCommand
from controlplane.jsonsafe import js_number
from deployments.telemetry.history import telemetry_prune

# The oldest cut-off the option takes, in days (100 years): far past any retention, and far from
# the oldest date Python can write (year 1), which an age of a million days would pass.
MAX_DAYS = 36500


class Command(CeilingCommand):
    help = "Delete node and deployment telemetry rollups older than the retention."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than-days", type=float, default=None,
            help=f"age in days, 0 to {MAX_DAYS} (default CEILING_TELEMETRY_RETENTION_DAYS = {settings.CEILING_TELEMETRY_RETENTION_DAYS:g})",
        )

    def handle(self, *args, **options) -> None:
        days = options["older_than_days"]
        if days is not None and not (math.isfinite(days) and 0 <= days <= MAX_DAYS):
            raise CommandError(f"--older-than-days must be a number of days from 0 to {MAX_DAYS}, got {js_number(days)}")
        try:
            counts = telemetry_prune(older_than_days=days)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        days = settings.CEILING_TELEMETRY_RETENTION_DAYS if days is None else days
        self.stdout.write(f"deleted {counts['node_rows']} node and {counts['deployment_rows']} deployment "
                          f"telemetry rows older than {days:g} days")
