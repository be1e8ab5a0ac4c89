"""``manage.py forget_retired_secret_values (--name NAME ... | --before DATE | --all) [--dry-run]``:
stop masking earlier values of secrets since changed or deleted.

When a secret is changed or deleted its earlier value is kept (encrypted, like the secret) so that
every process keeps masking it in logs written while it was in use (:mod:`controlplane.redaction`).
This command deletes such kept values (:func:`deployments.services.retired_secret_values_forget`):
those of the secrets named with ``--name`` (repeatable), those retired before ``--before`` (a date,
``2026-12-07``, or a time, ``2026-12-07T13:00``; without a zone it is UTC), both together, or with
``--all`` every one. ``--dry-run`` lists what would be forgotten and changes nothing. Each value is
listed by its secret's name and the time it was retired, never by the value.

Running processes stop masking a forgotten value at their next read of the stored values (within
two seconds); a node agent that launched an engine with it masks it until it restarts. Exit status
2 with the reason for input refused: no selection, ``--all`` with another selection, a date that
cannot be read, a name no kept value belongs to.
"""
from __future__ import annotations

from datetime import datetime, time, timezone as dt_timezone

from django.utils.dateparse import parse_date, parse_datetime

from controlplane.commands import CeilingCommand, refused
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_spelled
from controlplane.redaction import STORED_VALUES_MAX_AGE_S
from deployments.services import retired_secret_values_forget


def before_parsed(text: str) -> datetime:
    """``--before``'s value: a date (its midnight) or a date and time, UTC unless it names its zone.

    Raises :class:`django.core.management.base.CommandError` (exit status 2) naming the value."""
    try:
        moment = parse_datetime(text)
        if moment is None:
            day = parse_date(text)
            moment = datetime.combine(day, time()) if day is not None else None
    except ValueError:
        moment = None
    if moment is None:
        raise refused(f"--before takes a date (2026-12-07) or a date and time (2026-12-07T13:00, UTC unless a zone "
                      f"is given), got {json_spelled(text)}")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt_timezone.utc)


class Command(CeilingCommand):
    help = ("Forget kept earlier values of changed or deleted secrets, so logs stop masking them "
            "(--name NAME, --before DATE, or --all; --dry-run lists them only).")

    def add_arguments(self, parser):
        parser.add_argument("--name", action="append", metavar="NAME", default=None,
                            help="the secret whose earlier values to forget (repeat for several)")
        parser.add_argument("--before", metavar="DATE",
                            help="only values retired before DATE (2026-12-07 or 2026-12-07T13:00; UTC unless a "
                                 "zone is given)")
        parser.add_argument("--all", action="store_true", dest="every", help="every kept earlier value")
        parser.add_argument("--dry-run", action="store_true", help="list what would be forgotten; change nothing")

    def handle(self, *args, name: list[str] | None, before: str | None, every: bool, dry_run: bool, **options):
        if every and (name or before is not None):
            raise refused("--all forgets every kept earlier value: give it alone, or select with --name and --before")
        if not every and not name and before is None:
            raise refused("say which earlier secret values to forget: --name NAME (repeatable), --before DATE, or "
                          "--all; --dry-run lists them without forgetting")
        cutoff = before_parsed(before) if before is not None else None
        try:
            forgotten = retired_secret_values_forget(names=name, before=cutoff, dry_run=dry_run)
        except InvalidInput as exc:
            raise refused("; ".join(m for ms in exc.errors.values() for m in ms)) from None
        if not forgotten:
            self.stdout.write("no kept earlier secret value matches; nothing forgotten")
            return
        for secret, retired_at, exists in forgotten:
            state = "changed since" if exists else "deleted"
            self.stdout.write(f"{'would forget' if dry_run else 'forgot'} the value secret {json_spelled(secret)} had "
                              f"until {retired_at.astimezone(dt_timezone.utc):%Y-%m-%d %H:%M:%S} UTC ({state})")
        if dry_run:
            self.stdout.write(f"{len(forgotten)} earlier value(s) would be forgotten; nothing was changed (--dry-run)")
            return
        self.stdout.write(f"forgot {len(forgotten)} earlier value(s): running processes stop masking them within "
                          f"{STORED_VALUES_MAX_AGE_S:g} s (a node agent that launched an engine with one, when it "
                          "restarts); a value that is also a secret's current value stays masked as that")
