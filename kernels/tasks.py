"""Celery tasks of the kernels app: thin wrappers taking ids, calling services.

A kernel job runs on the queue ``node.<name>`` of the node it builds on, inside that node's agent
(``manage.py node_agent``, which consumes its queue with a thread pool), the same way deployments
reach their node (:mod:`deployments.tasks`). The service claims the row with a conditional UPDATE,
so a second delivery of the same message does nothing. One kernel job runs per node at a time
(a build uses every core, a benchmark needs the GPU alone): a job whose node is busy stays pending
and its task is sent again later (:func:`kernels.services.jobs.kernel_job_wait_for_node`); the
job that frees the node sends the next one at once.
"""
from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True, acks_late=True)
def kernel_job_run_task(job_id: int, retry_when_busy: bool = True) -> str:
    """Build (and, on a node with a matching GPU, benchmark) kernel job ``job_id`` here (see
    :func:`kernels.services.kernel_job_execute`); returns the job's status when this delivery
    ends ("pending" when its node runs another kernel job).

    A job left pending because its node is busy is sent again to the same queue in
    :data:`kernels.services.jobs.NODE_BUSY_RETRY_S` seconds, unless ``retry_when_busy`` is False:
    the message the ending job sends to start the next one carries False, since the waiting job's
    own resend is already on its way."""
    from kernels.services import kernel_job_execute
    from kernels.services.jobs import kernel_job_wait_for_node

    status = kernel_job_execute(job_id=job_id)
    if status == "pending" and retry_when_busy:
        kernel_job_wait_for_node(job_id=job_id)
    return status


@shared_task(ignore_result=True)
def kernel_jobs_reap_task() -> int:
    """Periodic: fail kernel jobs stuck in a running state (see
    :func:`kernels.services.kernel_jobs_reap`); returns how many were failed."""
    from kernels.services import kernel_jobs_reap

    return kernel_jobs_reap()
