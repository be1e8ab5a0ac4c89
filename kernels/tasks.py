"""Celery tasks of the kernels app: thin wrappers taking ids, calling services.

A kernel job runs on the queue ``node.<name>`` of the node it builds on, inside that node's agent
(``manage.py node_agent``, which consumes its queue with a thread pool), the same way deployments
reach their node (:mod:`deployments.tasks`). The service claims the row with a conditional UPDATE,
so a second delivery of the same message does nothing.
"""
from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True, acks_late=True)
def kernel_job_run_task(job_id: int) -> str:
    """Build (and, on a node with a matching GPU, benchmark) kernel job ``job_id`` here (see
    :func:`kernels.services.kernel_job_execute`); returns the job's final status."""
    from kernels.services import kernel_job_execute

    return kernel_job_execute(job_id=job_id)


@shared_task(ignore_result=True)
def kernel_jobs_reap_task() -> int:
    """Periodic: fail kernel jobs stuck in a running state (see
    :func:`kernels.services.kernel_jobs_reap`); returns how many were failed."""
    from kernels.services import kernel_jobs_reap

    return kernel_jobs_reap()
