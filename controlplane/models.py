"""The installation's own identity, kept in its database.

:class:`Installation` is one row (``pk=1``) holding a random key made when the database is
created (its first migration, or the first use after a ``flush``). The live-data namespace
(:func:`controlplane.realtime.realtime_namespace`) is derived from it, so it names this
database's contents, not where the database lives: a database re-created at the same path (a
second ``make demo``) gets a new key and never reads the kept live messages of the one before,
whose ids it reuses.
"""
from __future__ import annotations

import uuid

from django.db import models


def installation_key_new() -> str:
    """A fresh random key (32 hex digits)."""
    return uuid.uuid4().hex


class Installation(models.Model):
    """This database's identity: one row, ``pk=1``."""

    key = models.CharField(max_length=32, unique=True, default=installation_key_new)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"installation {self.key}"
