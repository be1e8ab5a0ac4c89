"""Celery tasks of the telemetry history (imported by the worker through ``CELERY_IMPORTS``)."""
from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def telemetry_prune_task() -> dict[str, int]:
    """Beat task (hourly, on the ``control`` queue): delete telemetry rollups older than
    ``CEILING_TELEMETRY_RETENTION_DAYS``; returns the rows deleted per table (see
    :func:`deployments.telemetry.history.telemetry_prune`)."""
    from deployments.telemetry.history import telemetry_prune

    return telemetry_prune()
