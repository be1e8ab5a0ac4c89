"""Celery tasks of the benchmarks app: thin wrappers taking ids, calling services.

Sweeps run on the ``control`` queue (the control worker is the benchmark client; its host name is
recorded in each run's snapshot). Every task is safe to run twice: the service claims the row
with a conditional UPDATE and does nothing for a claimed or terminal row.
"""
from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True, acks_late=True)
def sweep_run_task(sweep_id: int) -> str:
    """Run sweep ``sweep_id`` point by point (see :func:`benchmarks.services.sweep_execute`);
    returns the sweep's final status."""
    from benchmarks.services import sweep_execute

    return sweep_execute(sweep_id=sweep_id)


@shared_task(ignore_result=True)
def sweeps_reconcile_task() -> int:
    """Periodic (``CELERY_BEAT_SCHEDULE``, every 60 s): fail waiting/running sweeps whose worker
    is gone and send the task again for pending sweeps whose task was lost (see
    :func:`benchmarks.services.sweeps_reconcile`); returns how many were failed."""
    from benchmarks.services import sweeps_reconcile

    return sweeps_reconcile()
