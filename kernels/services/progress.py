"""Job rows as the truth: conditional status transitions (the claim), progress columns written at a
bounded rate, and the ``kernel.progress`` broadcast on ``kernel-job-<id>``.

Part of :mod:`kernels.services`, which lists the rules and where they come from.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from controlplane.realtime import broadcast, kernel_job_group
from kernels.choices import JOB_ACTIVE, JOB_RUNNING, KernelJobStatus
from kernels.models import KernelJob
from kernels.services.common import NO_GPU_PREFIX, PROGRESS_PERIOD_S


_progress_lock = threading.Lock()


_progress_last: dict[int, float] = {}


# One kernel job per node at a time (the ``kernels_one_running_job_per_node`` constraint): what a
# pending job whose node is busy shows, in its ``note`` and as its ``waiting_reason``.
NODE_BUSY_PREFIX = "waiting for kernel job #"
NODE_BUSY_NOTE = (NODE_BUSY_PREFIX + "{running} on node {node} to finish (one kernel job per node at a time: "
                  "builds use every core and timings need the GPU alone)")


def job_progress_total(job: KernelJob) -> int:
    """The N of a job's progress "done / N" wherever it is shown (the job page, the API's
    ``progress_total``, ``kernel.progress`` messages): the total its last phase reported (variants
    to build, then measurements), or, before any phase has reported one (a pending job), the
    variants the job holds."""
    return job.progress_total or job.variants_total or 0


def job_progress_data(job: KernelJob) -> dict[str, Any]:
    """The live view of a job (what ``kernel.progress`` messages carry and the REST API returns):
    status, reason, note, phase, done/total of the phase (:func:`job_progress_total`), build and
    benchmark counts, and why a pending job waits (:func:`kernel_job_waiting_reason`)."""
    return {
        "job": job.pk, "status": job.status, "reason": job.reason, "note": job.note, "phase": job.phase,
        "done": job.progress_done, "total": job_progress_total(job), "variants": job.variants_total,
        "builds_ok": job.builds_ok, "builds_failed": job.builds_failed, "builds_discarded": job.builds_discarded,
        "benchmarks": job.benchmarks_total, "benchmarks_correct": job.benchmarks_correct,
        "benchmarks_wrong": job.benchmarks_wrong, "cancel_requested": job.cancel_requested,
        "waiting_reason": kernel_job_waiting_reason(job=job),
    }


def kernel_job_waiting_reason(*, job: KernelJob) -> str:
    """Why a pending job does not start, "" when nothing is known to hold it.

    * A job dispatched to a node whose agent has not heartbeated within
      ``CEILING_HEARTBEAT_TIMEOUT_S`` reads "waiting for node agent <name> (last heartbeat <ISO
      time> | never)", as deployments say it (:func:`deployments.services.deployment_waiting_reason`).
    * A job whose node runs another kernel job (building or benchmarking) reads
      :data:`NODE_BUSY_NOTE`: "waiting for kernel job #<id> on node <name> to finish (one kernel job
      per node at a time: ...)". Only one kernel job runs per node: a build uses every core and a
      benchmark needs the GPU alone, so two at once would skew each other's timings.

    A job waiting for builds and results measured elsewhere (its ``note`` says so) reads "". A job
    on a node without a GPU of its target keeps its "builds only" note while it waits: the reason
    is said here alone.
    Costs one query for a pending job on a node whose agent is online.
    """
    node = job.node
    if job.status != KernelJobStatus.PENDING or node is None:
        return ""
    if job.note and not job.note.startswith((NODE_BUSY_PREFIX, NO_GPU_PREFIX)):
        return ""
    if not node.agent_online:
        seen = node.agent_heartbeat_at.isoformat(timespec="seconds") if node.agent_heartbeat_at else "never"
        return f"waiting for node agent {node.name} (last heartbeat {seen})"
    running = running_job_on_node(node_id=node.pk, exclude=job.pk)
    return NODE_BUSY_NOTE.format(running=running, node=node.name) if running is not None else ""


def running_job_on_node(*, node_id: int | None, exclude: int | None = None) -> int | None:
    """Id of the kernel job building or benchmarking on node ``node_id`` (other than ``exclude``),
    None when there is none or ``node_id`` is None. The database holds at most one
    (``kernels_one_running_job_per_node``)."""
    if node_id is None:
        return None
    running = KernelJob.objects.filter(node_id=node_id, status__in=list(JOB_RUNNING))
    if exclude is not None:
        running = running.exclude(pk=exclude)
    return running.order_by("started_at", "id").values_list("pk", flat=True).first()


def _broadcast(job_id: int, *, force: bool = False) -> None:
    job = KernelJob.objects.filter(pk=job_id).first()
    if job is not None:
        broadcast(kernel_job_group(job_id), "kernel.progress", job_progress_data(job), force=force)


def _progress(job_id: int, phase: str, done: int, total: int, *, force: bool = False) -> None:
    """Write ``phase``/``done``/``total`` on the row at most every :data:`PROGRESS_PERIOD_S`
    seconds (always when ``force`` or when the phase is complete) and broadcast it.

    Only ``force`` sets ``progress_done`` lower than the row holds (a phase's start): otherwise a
    progress line read late never takes back builds already stored and counted
    (:func:`kernels.services.results.kernel_builds_store` raises ``progress_done`` to them)."""
    now = time.monotonic()
    with _progress_lock:
        last = _progress_last.get(job_id, 0.0)
        if not force and done < total and now - last < PROGRESS_PERIOD_S:
            return
        _progress_last[job_id] = now
    KernelJob.objects.filter(pk=job_id).update(
        phase=phase, progress_done=done if force else Greatest(F("progress_done"), Value(done)), progress_total=total)
    _broadcast(job_id, force=force or done >= total)


def _transition(job_id: int, from_states: set[str] | tuple[str, ...], to: str, **fields: Any) -> bool:
    """Conditional UPDATE of the status (the claim): True when this caller moved the row.

    A move into a running state that the database refuses because the job's node already runs
    another kernel job (``kernels_one_running_job_per_node``) moves nothing: False, no error."""
    try:
        with transaction.atomic():
            moved = KernelJob.objects.filter(pk=job_id, status__in=list(from_states)).update(status=to, **fields)
    except IntegrityError:
        return False
    if moved:
        _broadcast(job_id, force=True)
    return bool(moved)


class _Cancelled(Exception):
    pass


def _check_cancel(job_id: int) -> None:
    if KernelJob.objects.filter(pk=job_id, cancel_requested=True).exists():
        raise _Cancelled()


def _status(job_id: int) -> str:
    return KernelJob.objects.filter(pk=job_id).values_list("status", flat=True).first() or "missing"


def _finish(job_id: int, status: str, reason: str, *, note: str | None = None) -> None:
    fields: dict[str, Any] = {"reason": reason[:8000], "ended_at": timezone.now()}
    if note is not None:
        fields["note"] = note
    _transition(job_id, JOB_ACTIVE, status, **fields)
