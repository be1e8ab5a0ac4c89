"""Sweeps: create, cancel, execute (the body of the sweep task: wait for ready, snapshot, run the
points with live progress, store them), analyse, and follow one from a terminal.

Rules and where they come from:

* A sweep runs only when its deployment is ready; it waits at most ``grid.wait_ready_s`` (default:
  the deployment's startup timeout + 60 s) and then fails with the reason.
* Sweeps of two deployments whose processes share a CPU or a GPU on one node run one at a time,
  in the order they were created: a sweep stays pending (never claimed, so never ``waiting``)
  while such a sweep runs or an older such sweep is held in line before it (its ``queue_note``
  names that sweep and what they share) and its task looks again every :data:`SHARED_RECHECK_S`
  seconds, so it starts within seconds of its turn (:func:`_claim_or_hold`,
  :func:`_start_or_hold`, :func:`_hold`).
* Points run one after the other. The sweep stops when ``cancel_requested`` is set (cancelled) or
  its deployment is no longer ready (failed, with the deployment's status): both are read at most
  once per :data:`STOP_CHECK_S` while waiting, while the prompts are built and while a point runs,
  and a running point is stopped at once (the load generator's ``should_stop``: nothing new is
  sent, the requests in flight are aborted). A point cancelled after it sent requests keeps what
  was sent (records and a summary marked partial, :func:`benchmarks.sweeps.summary_mark_partial`:
  completed vs planned requests, flag ``cancelled_partial``), stored cancelled, so the analysis
  and the comparison leave it out; a point stopped because its deployment went down keeps what
  was sent (records, a summary, ``not_sent``), stored failed like any point the deployment went
  down under.
* The process running a sweep records itself (``worker``: ``host:pid``) and a heartbeat every
  :data:`HEARTBEAT_S`. A sweep whose worker is gone (the pid no longer exists on this host, or no
  heartbeat for :data:`HEARTBEAT_STALE_S`) is failed "worker lost: ..." by the redelivered task or
  by :func:`sweeps_reconcile` (celery beat, every minute), unless a heartbeat came after the row
  was read; cancelling it ends it at once. The point it was running keeps what its last progress
  report counted (:func:`lost_point_progress`): the requests it had in flight were sent and are
  counted aborted, so the sweep's total says what was sent, finished and aborted, as of that
  report, or that the total is unknown where the report did not count what was sent.
* A write that meets a locked database (SQLite's one writer at a time) is tried again with backoff
  (:func:`controlplane.dbbusy.retry_locked`); a heartbeat or progress write that still fails is
  skipped with a warning, and a sweep that must fail on it says so in plain words ("the database
  was busy (locked) for 47 s while point c=8 256/256 ran"), never with the exception's repr.
* Live progress is the load generator's own count of requests and output tokens (the servers'
  counters do not exist on every engine: llama.cpp has none). Each report is broadcast to the
  sweep's realtime group (``sweep.progress``); it is written to the run row and the sweep's
  progress columns at most every :data:`RUN_PROGRESS_WRITE_S` seconds. A finished point is
  broadcast as ``sweep.point``, the end of the sweep as ``sweep.status`` (both forced).
* Fixed-length points send ``ignore_eos`` and check every request's length
  (``/work/shared/design/metrics.md``).
* A point whose deployment went down under it (a process ended, the deployment left ready, or the
  entry server fails its health checks), or that the load generator stopped because its target
  stopped answering (``stopped_early``: planned requests not sent), is stored failed, not as a
  measurement, and fails the sweep. The reason leads with what ended and how, as the node agent
  recorded it (``router #0 killed by signal 9 (SIGKILL); ... during point c=64
  256/256: ...``, :func:`process_down`), or, for a stop someone asked for, with who asked and when,
  as the deployment's timeline recorded it (``oscar requested a stop of deployment #7 at ...``,
  :func:`stop_request`), then the point's failures and what was not sent.
* A point whose every request failed at a healthy server (an error answer each, none aborted by a
  stop) measured nothing: it is stored failed with the server's answer
  (:func:`_all_failed_reason`) and the sweep goes on to its next point; a sweep with no point done
  at its end fails "no point measured anything: ..." (:func:`_nothing_measured_reason`).
* A point may be limited by time (``duration_s``), alone or with a request count (whichever ends
  first, :func:`point_limits`).
* The ceiling analysis (:mod:`benchmarks.analysis`) is stored on the sweep when it finishes,
  compared with the latest finished sweep of the same served model and lengths on the other
  topology (PD vs single) when one exists.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import socket
import textwrap
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import timezone as dt_timezone
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
from django.conf import settings
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from benchmarks.analysis import ANALYSIS_VERSION, LatencyStats, SweepPoint, ceiling_analyse
from benchmarks.analysis.model import MAX_FAILED_FRACTION, SHARED_LOAD_FLAG
from benchmarks.choices import SWEEP_ACTIVE, SWEEP_TERMINAL, RunStatus, SweepStatus
from benchmarks.loadgen import (
    Api, LoadConfig, LoadgenStopped, RequestSpec, RunResult, Slo, TextCalibration, arrival_offsets,
    dataset_calibrate_text_at, loadgen_run, prompts_token_counts, random_dataset, run_summary,
)
from benchmarks.loadgen.driver import ABORTED_PREFIX, UNREACHABLE_PREFIX, WARMUP_PHASE
from benchmarks.loadgen.driver import PROGRESS_PERIOD_S as LOADGEN_PROGRESS_PERIOD_S
from benchmarks.loadgen.metrics import input_length_check
from benchmarks.loadgen.tokenized import tokenized_text_dataset
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services.runs import _store_summary, records_dir
from benchmarks.sweeps import (
    WAIT_READY_MARGIN_S, counted, duration_prompt_pool, failure_counts, grid_points, grid_requests_total, grid_validate,
    partial_text,
    point_limited_by, recipe_gpu_count, summary_mark_partial, summary_point,
)
from controlplane.dbbusy import DatabaseBusy, busy_text, is_locked, retry_locked
from controlplane.errors import Conflict, InvalidInput
from controlplane.jsonsafe import json_safe
from controlplane.redaction import redact_text

log = logging.getLogger(__name__)

# Seconds between the sweep thread's ticks while a point runs: cancel checks, and broadcasts of
# the load generator's newest progress report.
PROGRESS_PERIOD_S = 0.5
# The running point's progress is written to its run row at most this often (seconds); the
# load generator reports up to twice a second and every report is broadcast.
RUN_PROGRESS_WRITE_S = 1.0
# Seconds between deployment-row polls while a sweep waits for ready.
WAIT_POLL_S = 0.5
SERVER_INFO_TIMEOUT_S = 5.0
# Engines whose servers take a prompt as token ids (exact input lengths); others get text.
TOKEN_ID_ENGINES = ("sim", "sglang", "vllm")
# The running sweep reads its cancel flag and its deployment's status at most this often
# (seconds): one or two small SELECTs a second, and a cancel takes effect within about a second.
STOP_CHECK_S = 1.0
# Seconds between heartbeats of the process running a sweep (one UPDATE each).
HEARTBEAT_S = 5.0
# Backoff (seconds) of a heartbeat or progress write that met a locked database: short, since
# the next one comes a few seconds later anyway and the sweep's thread must go on reading its
# cancel flag; one that still fails is skipped with a warning, never fails the sweep.
BEST_EFFORT_RETRY_DELAYS_S = (0.5, 1.0, 2.0)
# A waiting or running sweep without a heartbeat for this long has lost its worker (seconds):
# 24 missed heartbeats, far beyond a slow database write, and short enough that a dead worker's
# sweep stops blocking its deployment within ~3 minutes (this plus the minute of the beat pass).
HEARTBEAT_STALE_S = 120.0
# Seconds before a sweep held back by a running sweep of a deployment sharing a CPU or GPU with its
# own looks again (its task is sent again with this countdown, :func:`_hold`): a few small reads
# each time, and a start at most this long after the other sweep ended.
SHARED_RECHECK_S = 5.0
# A pending sweep no task has looked at for this long (seconds; held, its task looks every
# SHARED_RECHECK_S; queued, a free worker takes it within a second or two) while a worker slot is
# free has lost its task: the reconcile pass sends it again (:func:`sweeps_pending_resend`). The
# same window after which a held sweep stops keeping newer ones in line
# (:data:`benchmarks.selectors.HELD_STALE_S`).
PENDING_LOST_S = 60.0
# Seconds the sweep waits for the load generator's thread after telling it to stop (it stops
# within about a second; a thread still alive after this is left behind as a daemon).
STOP_JOIN_S = 30.0


# ---------------------------------------------------------------------------------------- create


def sweep_create(*, deployment, user, grid: dict, name: str = "") -> BenchmarkSweep:
    """Create a sweep of ``deployment`` over ``grid`` and enqueue it on the ``control`` queue.

    ``grid`` is validated by :func:`benchmarks.sweeps.grid_validate` (the deployment's engine
    picks the default API; the default wait for ready is the recipe's ``startup_timeout_s`` + 60 s).
    The GPU count for per-GPU numbers comes from the deployment's spec snapshot
    (:func:`benchmarks.sweeps.recipe_gpu_count`). The task is sent after the transaction commits.
    Raises :class:`InvalidInput` for a bad grid (an ``api`` the deployment's engine does not
    serve included; a length pair one request cannot fit even alone: input + output above the
    context length or KV cache the engine servers reported once ready, else above the context
    length the recipe's engine flags or sim profile set, or the sim profile's KV cache,
    :func:`benchmarks.sweeps.grid_context_problems`) and :class:`Conflict` for a stopped, failed or stopping deployment (a stop
    requested counts), one whose node agent is offline (:func:`_agent_offline_refusal`), one this host has
    no entry URL for (:func:`deployments.services.deployment_entry_url_problem`) or one that already
    has an active sweep, also when two creates race: the database allows one active sweep per
    deployment (:data:`benchmarks.models.ONE_ACTIVE_SWEEP_CONSTRAINT`).
    """
    from deployments.choices import DEPLOYMENT_TERMINAL, DeploymentStatus
    from deployments.services import deployment_entry_url_problem, secret_value_in_text

    # The name is shown in clear on every page, export and CLI line naming the sweep.
    if problem := secret_value_in_text("name", name):
        raise InvalidInput({"name": [problem]})
    if deployment.status in DEPLOYMENT_TERMINAL:
        raise Conflict(f"deployment #{deployment.pk} is {deployment.status}; "
                       "deploy its recipe again and sweep the new deployment")
    spec = deployment.spec_snapshot or {}
    engine = deployment.recipe.engine
    startup = int(spec.get("startup_timeout_s") or 1800)
    # A bad grid is a 400 whatever else is running: validate before the conflict check.
    # A point longer than the recipe's context would measure only refused requests: named with
    # the grid's other errors (grid_validate's spec).
    norm = grid_validate(grid, engine=engine, default_wait_ready_s=startup + WAIT_READY_MARGIN_S, spec=spec,
                         reported=deployment.engine_limits)
    # A deployment being stopped (a stop requested, perhaps not yet seen by its node's agent)
    # would be gone before the sweep's first request.
    if deployment.status == DeploymentStatus.STOPPING or deployment.stop_requested:
        raise Conflict(f"deployment #{deployment.pk} is being stopped; "
                       "deploy its recipe again and sweep the new deployment")
    # The load goes out from the control plane's worker, but only the node agent watches the
    # processes: without it "ready" is as last seen and a server ending mid-point goes unnoticed.
    offline = _agent_offline_refusal(deployment)
    if offline:
        raise Conflict(offline)
    # The load goes to the entry URL: a deployment this host has none for cannot be measured from here.
    if not deployment.entry_url and (no_url := deployment_entry_url_problem(deployment)):
        raise Conflict(f"deployment #{deployment.pk} has no entry URL for the benchmark worker: {no_url}")
    # Two sweeps against one deployment at once would each measure the other's load.
    _refuse_if_busy(deployment)
    points = grid_points(norm)
    load = (f"c={','.join(map(str, norm['concurrency']))}" if norm["concurrency"] else "")
    if norm.get("request_rates"):
        load = " ".join(x for x in (load, f"{','.join(f'{r:g}' for r in norm['request_rates'])} req/s") if x)
    # A name made up here starts with the recipe's name as shown (a stored secret's value in a
    # name saved before such values were refused is masked), so it is never stored in clear; the
    # engine still serves the model under the name as stored.
    fields = dict(
        deployment=deployment, grid=norm, created_by=user if getattr(user, "pk", None) else None,
        name=name or f"{deployment.deployed_recipe_name} {load} "
                     f"{' '.join(f'{a}/{b}' for a, b in norm['lengths'])}"
                     + (f" {norm['duration_s']:g} s/point" if norm.get("duration_s") else ""),
        points_total=len(points), requests_total=grid_requests_total(points),
        num_gpus=recipe_gpu_count(spec=spec, engine=engine),
        served_model_name=spec.get("served_model_name") or deployment.deployed_recipe_name_stored,
        topology=deployment.recipe.topology, engine=engine,
    )
    # The check above is for the message; the partial unique index (ONE_ACTIVE_SWEEP_CONSTRAINT)
    # is what holds when creates race: the second insert fails and is answered like the check.
    for attempt in range(2):
        try:
            with transaction.atomic():
                sweep = BenchmarkSweep.objects.create(**fields)
            break
        except IntegrityError:
            _refuse_if_busy(deployment)
            if attempt:  # refused again with no active sweep to name: not this rule
                raise
    sweep_enqueue(sweep=sweep)
    return sweep


def _agent_offline_refusal(deployment) -> str:
    """Why a sweep of ``deployment`` is refused because its node agent is offline (no heartbeat
    within ``CEILING_HEARTBEAT_TIMEOUT_S``, or shut down since: ``Node.agent_online``), "" when
    the agent is online. Names the node, the last heartbeat (UTC, or never) and, after a clean
    shutdown, when it stopped."""
    node = deployment.node
    if node.agent_online:
        return ""

    def utc(value) -> str:
        return value.astimezone(dt_timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

    seen = f"last heartbeat {utc(node.agent_heartbeat_at)}" if node.agent_heartbeat_at else "last heartbeat never"
    if node.agent_stopped_cleanly:
        seen = f"stopped at {utc(node.agent_stopped_at)}; {seen}"
    return (f"node agent {node.name} of deployment #{deployment.pk} is offline ({seen}): the sweep sends its "
            "load from the control plane's worker, but only the agent watches the deployment's processes, so "
            "its state is only as last seen and a server that ended would go unnoticed while the points are "
            f"measured; start the agent on {node.name} (manage.py node_agent), then sweep again")


#: How long after its cancel was asked for a sweep still active is said to stop "in a few seconds"
#: (a cancel stops a running point within about a second, :data:`STOP_CHECK_S`).
CANCEL_STOPS_WITHIN_S = 60.0


def _refuse_if_busy(deployment) -> None:
    """Raise :class:`Conflict` naming the active (pending, waiting or running) sweep of
    ``deployment``, if it has one: its status as stored, read now, and for a sweep not started yet
    what it waits for (:func:`benchmarks.selectors.sweep_queue_note`): ``sweep #15 is already
    running on deployment #2; wait for it or cancel it first ...``, ``sweep #16 is already pending
    on deployment #2 (queued for a benchmark worker); ...``; or, once its cancel was asked for, that
    it is being cancelled and when that was asked (:func:`_being_cancelled_text`): it still holds
    the deployment until its task sees the flag, and telling the caller to cancel it would read
    as if the cancel had not been taken."""
    from benchmarks.selectors import sweep_queue_note

    busy = BenchmarkSweep.objects.filter(deployment=deployment, status__in=SWEEP_ACTIVE).order_by("pk").first()
    if busy is None:
        return
    if busy.cancel_requested:
        raise Conflict(_being_cancelled_text(busy, deployment))
    # Its status as stored now, with what it waits for while it has not started (the queue note
    # its page and the API show): "pending (queued for a benchmark worker)", "waiting (waiting for
    # the deployment to be ready: ...)", or plain "running".
    note = sweep_queue_note(sweep=busy) if busy.status != SweepStatus.RUNNING else ""
    raise Conflict(f"sweep #{busy.pk} is already {busy.status} on deployment #{deployment.pk}"
                   + (f" ({note})" if note else "")
                   + "; wait for it or cancel it first (concurrent sweeps would skew each other)")


def _being_cancelled_text(busy: BenchmarkSweep, deployment) -> str:
    """Why a new sweep of ``deployment`` is refused while ``busy``, whose cancel was asked for,
    has not stopped yet: ``sweep #15 on deployment #2 is being cancelled (cancel requested at
    14:03:07 UTC); start the new sweep once it has stopped, in a few seconds``. The time is UTC,
    with its date when that is not today's; a cancel asked for more than
    :data:`CANCEL_STOPS_WITHIN_S` ago is not promised to end in seconds, and one of a row older
    than ``cancel_requested_at`` has no time to name."""
    at = busy.cancel_requested_at
    when, soon = "", True
    if at is not None:
        now = timezone.now()
        at_utc = at.astimezone(dt_timezone.utc)
        today = at_utc.date() == now.astimezone(dt_timezone.utc).date()
        when = f" (cancel requested at {at_utc.strftime('%H:%M:%S' if today else '%Y-%m-%d %H:%M:%S')} UTC)"
        soon = (now - at).total_seconds() <= CANCEL_STOPS_WITHIN_S
    return (f"sweep #{busy.pk} on deployment #{deployment.pk} is being cancelled{when}; start the new sweep "
            f"once it has stopped{', in a few seconds' if soon else ''}")


def sweep_enqueue(*, sweep: BenchmarkSweep) -> None:
    """Send ``sweep_run_task(sweep.id)`` to the ``control`` queue once the current transaction commits."""
    from benchmarks.tasks import sweep_run_task

    sweep_id = sweep.pk
    transaction.on_commit(lambda: sweep_run_task.apply_async(args=[sweep_id], queue="control"))


def sweep_cancel(*, sweep: BenchmarkSweep, user) -> BenchmarkSweep:
    """Request cancellation: sets ``cancel_requested`` first, with ``cancelled_by`` (the running task
    sees it at its next progress tick or between points and records ``cancelled by <user>``); a
    sweep no task has claimed yet becomes ``cancelled`` at once, with the same reason. Raises :class:`Conflict` (409) for a sweep that already ended, naming its state: like a
    cancel of a deployment that is over, there is nothing left to cancel, and a 200 would read as
    if this request had ended it (docs/api.md)."""
    if sweep.status in SWEEP_TERMINAL:
        raise Conflict(f"sweep #{sweep.pk} already ended ({sweep.status}); cancel only applies to a sweep that is "
                       "pending, waiting or running. There is nothing to cancel.")
    # Who asked goes with the flag, so the running task's reason names them as a pending one does.
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(
        cancel_requested=True, cancelled_by=user.get_username() if getattr(user, "pk", None) else "",
        cancel_requested_at=Coalesce(F("cancel_requested_at"), Value(timezone.now())))  # the first ask's time
    BenchmarkSweep.objects.filter(pk=sweep.pk, status=SweepStatus.PENDING).update(
        status=SweepStatus.CANCELLED, reason=_by("cancelled", user), ended_at=timezone.now(),
        requests_total=0)  # nothing was sent
    sweep.refresh_from_db()
    lost = sweep_worker_lost(sweep=sweep)
    if lost:  # nobody is left to see the flag: end it here
        _finish(sweep.pk, SweepStatus.CANCELLED, f"{_by('cancelled', user)} ({lost})", worker_lost=True)
        sweep.refresh_from_db()
    return sweep


def _worker_id() -> str:
    """``host:pid`` of this process, as stored in ``BenchmarkSweep.worker``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def sweep_worker_lost(*, sweep: BenchmarkSweep) -> str | None:
    """Why no live process runs the waiting/running ``sweep`` ("worker lost: ..."), or None when
    one may (or the sweep is not waiting/running). Lost: its ``worker`` is a pid of this host that
    no longer exists, or its last heartbeat (else its start) is older than
    :data:`HEARTBEAT_STALE_S` seconds. Reads only the row given; no side effects."""
    if sweep.status not in (SweepStatus.WAITING, SweepStatus.RUNNING):
        return None
    host, _, pid = (sweep.worker or "").rpartition(":")
    if host and host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid)):
        return f"worker lost: process {pid} on {host} is gone"
    last = sweep.heartbeat_at or sweep.started_at or sweep.created_at
    age = (timezone.now() - last).total_seconds() if last else HEARTBEAT_STALE_S + 1
    if age > HEARTBEAT_STALE_S:
        alive = host and host == socket.gethostname() and pid.isdigit()
        return (f"worker lost: no heartbeat from {sweep.worker or 'its worker'} for {age:.0f} s"
                + (f" (process {pid} is still running but wrote none)" if alive else ""))
    return None


def sweeps_reconcile() -> int:
    """Fail every waiting/running sweep whose worker is gone (:func:`sweep_worker_lost`), with
    that reason; its running point is failed too, keeping what its last progress report counted
    (:func:`_finish` with ``worker_lost``), and the end is broadcast. Then send the task
    again for every pending sweep whose task seems lost (:func:`sweeps_pending_resend`). The body
    of the periodic ``sweeps_reconcile_task`` (every 60 s, ``CELERY_BEAT_SCHEDULE``). Returns how
    many were failed."""
    failed = 0
    for sweep in BenchmarkSweep.objects.filter(status__in=(SweepStatus.WAITING, SweepStatus.RUNNING)):
        lost = sweep_worker_lost(sweep=sweep)
        # Only if no heartbeat came since the row was read: a worker that was kept from writing
        # (a locked database) and wrote meanwhile is alive.
        if lost and _finish(sweep.pk, SweepStatus.FAILED, lost, heartbeat_at=sweep.heartbeat_at, worker_lost=True):
            log.warning("sweep %s: %s", sweep.pk, lost)
            failed += 1
    sweeps_pending_resend()
    return failed


def sweeps_pending_resend(*, now=None) -> list[int]:
    """Send ``sweep_run_task`` again for each pending sweep no task has looked at for
    :data:`PENDING_LOST_S` seconds, and return their ids in order. Nobody looked: held back for
    sharing a CPU or GPU but its ``held_at`` (each look's mark, every :data:`SHARED_RECHECK_S`) is
    older than that, or never held and created longer ago than that. Its task was lost (e.g. the
    worker restarted while the task waited out its countdown) unless it waits in the broker for a
    worker slot, so nothing is sent while ``CEILING_CONTROL_CONCURRENCY`` sweeps are waiting or
    running (every slot busy). A sweep cancel-requested is left alone (its cancel ended it). A
    copy sent for a task that was not lost after all is harmless: the claim is a conditional
    UPDATE, so the sweep runs once."""
    from datetime import timedelta

    from django.db.models import Q

    from benchmarks.tasks import sweep_run_task

    now = now or timezone.now()
    busy = BenchmarkSweep.objects.filter(status__in=(SweepStatus.WAITING, SweepStatus.RUNNING)).count()
    if busy >= settings.CEILING_CONTROL_CONCURRENCY:
        return []
    before = now - timedelta(seconds=PENDING_LOST_S)
    lost = list(BenchmarkSweep.objects.filter(status=SweepStatus.PENDING, cancel_requested=False)
                .filter(Q(held_at__lt=before) | Q(held_at__isnull=True, created_at__lt=before))
                .order_by("created_at", "pk").values_list("pk", flat=True))
    for sweep_id in lost:
        log.warning("sweep %s: pending and not looked at for %.0f s; its task is sent again", sweep_id,
                    PENDING_LOST_S)
        sweep_run_task.apply_async(args=[sweep_id], queue="control")
    return lost


def _by(what: str, user) -> str:
    return f"{what} by {user.get_username()}" if getattr(user, "pk", None) else what


def _cancel_reason(sweep_id: int, default: str) -> str:
    """``cancelled by <user>`` for a cancel someone asked for (:func:`sweep_cancel` stores the
    name with the flag), else ``default``."""
    name = BenchmarkSweep.objects.filter(pk=sweep_id).values_list("cancelled_by", flat=True).first()
    return f"cancelled by {name}" if name else default


# ---------------------------------------------------------------------------------------- execute


class _Cancelled(Exception):
    pass


def sweep_execute(*, sweep_id: int, requeue: bool = True) -> str:
    """Run sweep ``sweep_id`` here (the body of :func:`benchmarks.tasks.sweep_run_task`); blocking.

    Claims pending → waiting with a conditional UPDATE, so a second delivery of the same task
    returns without doing anything; a sweep held back for sharing a CPU or GPU is never claimed
    (:func:`_claim_or_hold`), so it stays ``pending`` and never shows ``waiting`` while held.
    Waits for the deployment to be ready, stores the snapshot, runs every grid point with the
    load generator (one :class:`BenchmarkRun` each, records in a file), then stores the ceiling
    analysis. Ends done, failed (``reason``) or cancelled. Returns the final status, or
    ``pending`` when a sweep of a deployment sharing a CPU or GPU with this one's runs or is held
    in line before it (:func:`_claim_or_hold`, :func:`_start_or_hold`): the sweep is (back) in the
    queue and its task sent again (:func:`_hold`). An expected failure (:class:`_SweepFailed`: the deployment went
    down or never became ready, a point was not a measurement) is logged as a warning with its
    reason; any other exception as an error with its traceback.
    """
    now = timezone.now()
    claimed, held = _claim_or_hold(sweep_id, now) if requeue else _claim_or_hold(sweep_id, now, dedupe=False)
    if held == LOOK_DUPLICATE:
        # The other chain of looks goes on; this one ends (a cancel or a stopped deployment is
        # still seen here).
        return _hold(sweep_id, held, requeue=False)
    if held:
        return _hold(sweep_id, held, requeue=requeue)
    if not claimed:
        BenchmarkSweep.objects.filter(pk=sweep_id, status=SweepStatus.PENDING, cancel_requested=True).update(
            status=SweepStatus.CANCELLED, reason=_cancel_reason(sweep_id, "cancelled before it started"),
            ended_at=now, requests_total=0)
        row = BenchmarkSweep.objects.filter(pk=sweep_id).first()
        lost = sweep_worker_lost(sweep=row) if row is not None else None
        if lost:  # a redelivery after the worker running it died (WorkerLostError)
            log.warning("sweep %s: %s", sweep_id, lost)
            _finish(sweep_id, SweepStatus.FAILED, lost, worker_lost=True)
        return BenchmarkSweep.objects.filter(pk=sweep_id).values_list("status", flat=True).first() or "missing"
    sweep = BenchmarkSweep.objects.select_related("deployment__recipe", "deployment__node").get(pk=sweep_id)
    watch = _Watch(sweep.pk, sweep.deployment_id)
    try:
        deployment = _wait_ready(sweep, watch)
        held = _start_or_hold(sweep)
        if held:
            return _hold(sweep.pk, held, requeue=requeue)
        snapshot = sweep_snapshot(sweep=sweep, deployment=deployment)
        retry_locked(lambda: BenchmarkSweep.objects.filter(pk=sweep.pk).update(snapshot=json_safe(snapshot)),
                     what="storing the sweep's snapshot")
        engine_limits_backfill(deployment)
        points = grid_points(sweep.grid)
        for ordinal, point in enumerate(points):
            watch.point = ""
            watch.check(force=True)
            run = _run_point(sweep, deployment, ordinal, point, snapshot, watch)
            # One update for both: the point counted done and the next one named, so a progress
            # line never numbers the next point with the label of the one just done.
            following = _point_label(points[ordinal + 1]) if ordinal + 1 < len(points) else ""
            retry_locked(lambda: BenchmarkSweep.objects.filter(pk=sweep.pk).update(
                points_done=F("points_done") + 1, current_point=following, current_tok_s=None),
                what=f"counting point {_point_label(point)} done")
            _broadcast_point(sweep.pk, run)
        sweep.refresh_from_db()
        if not sweep.runs.filter(status=RunStatus.DONE).exists():
            # Every point failed at the server (each one's reason says how): nothing to analyse, and
            # a sweep that measured nothing is not done.
            reason = _nothing_measured_reason(sweep)
            log.warning("sweep %s failed: %s", sweep.pk, reason)
            _finish(sweep.pk, SweepStatus.FAILED, reason)
            return BenchmarkSweep.objects.get(pk=sweep_id).status
        analysis = sweep_analyse(sweep=sweep)
        _finish(sweep.pk, SweepStatus.DONE, "", analysis=analysis)
    except _Cancelled:
        _finish(sweep.pk, SweepStatus.CANCELLED, _cancel_reason(sweep.pk, "cancelled on request"))
    except _SweepFailed as exc:
        # An outcome the sweep expects (its deployment went down or never became ready, a point
        # was not a measurement): a warning with the reason, which the row keeps; no traceback,
        # which would point at this module rather than at what ended.
        reason = redact_text(str(exc))
        log.warning("sweep %s failed: %s", sweep_id, reason)
        _finish(sweep.pk, SweepStatus.FAILED, reason)
    except (DatabaseBusy, OperationalError) as exc:
        if not isinstance(exc, DatabaseBusy) and not is_locked(exc):
            log.exception("sweep %s failed", sweep_id)
            _finish(sweep.pk, SweepStatus.FAILED, redact_text(f"{type(exc).__name__}: {exc}"))
        else:
            # Said in plain words: the raw "OperationalError: database is locked" tells a reader of
            # the sweep page neither what waited nor for how long.
            during = f"point {watch.point} ran" if watch.point else "the sweep ran"
            reason = busy_text(exc, what=during) + "; the sweep stopped"
            log.warning("sweep %s failed: %s", sweep_id, reason, exc_info=True)
            _finish(sweep.pk, SweepStatus.FAILED, reason)
    except Exception as exc:  # the row must say why; an unexpected error is also logged with its traceback
        log.exception("sweep %s failed", sweep_id)
        _finish(sweep.pk, SweepStatus.FAILED, redact_text(f"{type(exc).__name__}: {exc}"))
    return BenchmarkSweep.objects.get(pk=sweep_id).status


#: The ``why`` of a look at a held sweep that ends its chain (:func:`_claim_or_hold` with ``dedupe``).
LOOK_DUPLICATE = ("another look marked it held less than half a recheck ago; this look ends and sends nothing, "
                  "the other chain looks again")


def _claim_or_hold(sweep_id: int, now, *, dedupe: bool = True) -> tuple[bool, str]:
    """Claim pending sweep ``sweep_id`` (pending → waiting, this worker, heartbeat ``now``) unless
    a sweep it must wait for (:func:`benchmarks.selectors.sweep_sharing_blocker`: one running on a
    deployment sharing a CPU or GPU with its own, or an older such sweep held in line) holds it
    back: then it stays pending with ``held_at`` set to now and the reason is returned. Returns
    ``(claimed, why)``; ``(False, "")`` when the sweep is not pending (a second delivery, a cancel).

    The check comes before the claim so a held sweep never shows ``waiting`` (the status of a
    sweep whose turn came, waiting for its deployment to be ready): the API's answer and the first
    line of ``manage.py sweep --wait`` say ``pending``, as the docs promise. The check and the claim
    are one transaction that first locks the deployment's node row, as :func:`_start_or_hold` does,
    so two tasks looking at once see each other's mark or claim. The claim clears ``held_at``:
    a sweep waiting for its deployment holds no newer one back.

    Two chains of looks (a resent copy of the task and the original, each sending itself again
    every :data:`SHARED_RECHECK_S`) would both run until the sweep starts. With ``dedupe``, a look
    that finds the sweep held and ``held_at`` marked less than half of :data:`SHARED_RECHECK_S`
    ago (by the other chain: a chain's own marks are a whole recheck apart) leaves the mark
    alone and returns ``(False, LOOK_DUPLICATE)``: its caller sends nothing, so that chain ends.
    The read of ``held_at`` and the mark are in the same transaction, after the node row lock, so
    of two looks at once exactly one marks and goes on. A chain dropped by mistake is covered by
    :func:`sweeps_pending_resend` (no mark for :data:`PENDING_LOST_S`). ``manage.py sweep --here``
    (which looks again itself) passes ``dedupe=False``."""
    from benchmarks.selectors import sweep_sharing_blocker
    from deployments.models import Node

    row = BenchmarkSweep.objects.select_related("deployment__node").filter(pk=sweep_id).first()

    def attempt() -> tuple[bool, str]:
        with transaction.atomic():
            if (row is not None and row.deployment is not None and row.status == SweepStatus.PENDING
                    and not row.cancel_requested):
                Node.objects.select_for_update().filter(pk=row.deployment.node_id).first()
                held = sweep_sharing_blocker(sweep=row)
                if held is not None and dedupe:
                    marked = BenchmarkSweep.objects.filter(pk=sweep_id).values_list("held_at", flat=True).first()
                    if marked is not None and (timezone.now() - marked).total_seconds() < SHARED_RECHECK_S / 2:
                        return False, LOOK_DUPLICATE
                if held is not None and BenchmarkSweep.objects.filter(
                        pk=sweep_id, status=SweepStatus.PENDING, cancel_requested=False).update(
                        held_at=timezone.now()):
                    return False, held[1]
            claimed = BenchmarkSweep.objects.filter(
                pk=sweep_id, status=SweepStatus.PENDING, cancel_requested=False).update(
                status=SweepStatus.WAITING, started_at=now, worker=_worker_id(), heartbeat_at=now, held_at=None)
            return bool(claimed), ""

    return retry_locked(attempt, what=f"starting sweep #{sweep_id}")


def _start_or_hold(sweep: BenchmarkSweep) -> str:
    """Move the waiting ``sweep`` to running, unless a sweep runs on a deployment whose processes
    share a CPU or GPU with its deployment's on the same node
    (:func:`benchmarks.selectors.sweep_sharing_blocker`), or an older sweep sharing one with it
    is held in line before it: then put it back to pending (no worker, no start time, ``held_at``
    now, so newer sweeps sharing with it queue behind it) and return why, in one sentence; ``""``
    when it now runs. This second look is for a sweep claimed while nothing held it
    (:func:`_claim_or_hold`) that then waited for its deployment to be ready.

    The check and the move are one transaction that first locks the deployment's node row
    (``select_for_update``: a row lock on PostgreSQL; SQLite's immediate transactions serialise
    writers anyway), as deploys do for their port and GPU checks, so of two sweeps sharing CPUs
    that reach this at once exactly one runs and the other sees it running."""
    from benchmarks.selectors import sweep_sharing_blocker
    from deployments.models import Node

    def attempt() -> str:
        with transaction.atomic():
            Node.objects.select_for_update().filter(pk=sweep.deployment.node_id).first()
            held = sweep_sharing_blocker(sweep=sweep)
            if held is not None:
                BenchmarkSweep.objects.filter(pk=sweep.pk, status=SweepStatus.WAITING).update(
                    status=SweepStatus.PENDING, worker="", heartbeat_at=None, started_at=None,
                    held_at=timezone.now())
                return held[1]
            BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.RUNNING)
            return ""

    return retry_locked(attempt, what=f"starting sweep #{sweep.pk}")


def _hold(sweep_id: int, why: str, *, requeue: bool = True) -> str:
    """After :func:`_start_or_hold` put sweep ``sweep_id`` back to pending (``why``): send its
    task again with a countdown of :data:`SHARED_RECHECK_S` seconds and return ``pending``; a
    cancel asked for meanwhile ends it here instead (cancelled, nothing sent), and so does its own
    deployment no longer running or starting (stopping, stopped, failed, or deleted: failed with
    the reason a waiting sweep gets, ``deployment #4 is stopped: ...; nothing to benchmark``, nothing
    sent), rather than waiting for the sweep ahead of it to end first. With ``requeue``
    false nothing is sent: the caller runs the sweep itself (``manage.py sweep --here``) and calls
    :func:`sweep_execute` again after that many seconds.

    The task is sent again rather than waiting here: a worker slot held by a sweep that measures
    nothing would keep a sweep of an unrelated deployment from starting (the control worker has
    ``CEILING_CONTROL_CONCURRENCY`` slots, 2 by default). It is sent again rather than started by
    the sweep it waits for when that one ends: a sweep ends in many places (its own worker, the
    reconcile pass for a lost worker, a cancel), and a look every few seconds covers them all,
    also a sweep started by hand; the look costs a few small reads. The task is idempotent (the
    claim is a conditional UPDATE), so a copy delivered twice runs the sweep once."""
    from benchmarks.tasks import sweep_run_task

    log.info("sweep %s: %s", sweep_id, why)
    if BenchmarkSweep.objects.filter(pk=sweep_id, status=SweepStatus.PENDING, cancel_requested=True).update(
            status=SweepStatus.CANCELLED, reason=_cancel_reason(sweep_id, "cancelled before it started"),
            ended_at=timezone.now(), requests_total=0):
        return SweepStatus.CANCELLED
    row = BenchmarkSweep.objects.select_related("deployment").filter(pk=sweep_id, status=SweepStatus.PENDING).first()
    gone = _nothing_to_benchmark(row.deployment) if row is not None else ""
    if gone:
        # Its own deployment stopped (or failed, or is stopping) while it was held: waiting for the
        # sweep ahead of it would only delay the same failure a claim would meet in _wait_ready.
        log.warning("sweep %s failed: %s", sweep_id, gone)
        _finish(sweep_id, SweepStatus.FAILED, gone)
        return BenchmarkSweep.objects.filter(pk=sweep_id).values_list("status", flat=True).first() or "missing"
    if requeue:
        sweep_run_task.apply_async(args=[sweep_id], queue="control", countdown=SHARED_RECHECK_S)
    return SweepStatus.PENDING


class _SweepFailed(Exception):
    """The sweep fails with this text as its reason. ``cause``: what ended, in a few words
    (``single #0 killed by signal 9 (SIGKILL); restart policy is 'never'``, ``deployment #4 is
    stopping``), when the deployment went down under a running point: the point's aborted
    requests carry it and its stored reason leads with it."""

    def __init__(self, message: str, *, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


_UNSET: Any = object()


def _finish(sweep_id: int, status: str, reason: str, *, analysis: dict | None = None,
            heartbeat_at: Any = _UNSET, worker_lost: bool = False) -> bool:
    """End the active sweep ``sweep_id`` (and its running point) with ``status`` and ``reason``,
    and broadcast it; with ``heartbeat_at``, only while its heartbeat is still that one. Each write
    outlasts a transiently locked database (:func:`controlplane.dbbusy.retry_locked`). Returns
    whether the sweep was ended here.

    A sweep that ended otherwise than done (failed, stopped by its deployment, cancelled) gives what
    its points sent: ``requests_total`` becomes the sum over the points that ran of the requests
    each sent (:func:`_requests_sent`), one that never ran adding 0, whether limited by a request
    count or by time alone. A done sweep ran every point: its total stays as its points left it
    (the planned counts, a time-limited point's what fitted in its time).

    A running point is ended with the sweep's status and reason, led, for one stopped before its
    first measured request, by when it stopped (:func:`ended_before_sending_text`); the sweep's own
    reason then ends with the phase it stopped in (:func:`_stopped_phase_reason`: ``cancelled by
    oscar while warming up``).

    With ``worker_lost`` (the process running the sweep is gone, :func:`sweep_worker_lost`) nobody
    is left to store the running point: its progress becomes what its last report counted
    (:func:`lost_point_progress`: the requests it had in flight were cut off with the process and
    count as aborted, never as done), and its reason and the sweep's say what it had sent, finished
    and had in flight, as of that report (``worker lost: process 24824 on vm is gone during point
    c=16 256/256; 16 requests sent: 5 finished, 11 in flight when the worker was lost (...)``,
    :func:`benchmarks.sweeps.lost_point_text`), so no total reads as complete."""
    from benchmarks.sweeps import lost_point_text

    point_reason = reason   # a point's own reason says its phase already
    running = list(BenchmarkRun.objects.filter(sweep_id=sweep_id, status=RunStatus.RUNNING).order_by("ordinal"))
    lost = {run.pk: lost_point_progress(run.progress) for run in running} if worker_lost else {}
    if status != SweepStatus.DONE:
        reason = _stopped_phase_reason(sweep_id, reason, progress=lost)
        reason += "".join(f" during point {run.label}; {text}" for run in running
                          if (text := lost_point_text(lost.get(run.pk))))
    fields: dict[str, Any] = {"status": status, "reason": reason, "ended_at": timezone.now(), "current_point": "",
                              "current_tok_s": None}
    if status != SweepStatus.DONE:
        fields["requests_total"] = _requests_sent(sweep_id, progress=lost)
    if analysis is not None:
        fields["analysis"] = json_safe(analysis)
    rows = BenchmarkSweep.objects.filter(pk=sweep_id, status__in=SWEEP_ACTIVE)
    if heartbeat_at is not _UNSET:
        rows = rows.filter(heartbeat_at__isnull=True) if heartbeat_at is None else rows.filter(
            heartbeat_at=heartbeat_at)
    what = f"ending sweep #{sweep_id} {status}"
    if not retry_locked(lambda: rows.update(**fields), what=what):
        return False
    run_status = RunStatus.CANCELLED if status == SweepStatus.CANCELLED else RunStatus.FAILED
    for run in running:
        progress = lost.get(run.pk, run.progress)
        run_reason = ended_before_sending_text(progress, run.num_requests) + (point_reason or status)
        if text := lost_point_text(progress):
            run_reason += f"; {text}"
        update: dict[str, Any] = {"status": run_status, "reason": run_reason, "ended_at": timezone.now()}
        if run.pk in lost:
            update["progress"] = json_safe(progress)
        retry_locked(lambda run_id=run.pk, update=update: BenchmarkRun.objects.filter(
            pk=run_id, status=RunStatus.RUNNING).update(**update), what=what)
    _broadcast(sweep_id, "sweep.status", {"sweep_id": sweep_id, "status": status, "reason": reason}, force=True)
    return True


def lost_point_progress(progress: Mapping[str, Any] | None) -> dict[str, Any]:
    """The progress a running point keeps when the worker running its sweep is lost: its last
    report as the worker wrote it (at most :data:`RUN_PROGRESS_WRITE_S` before a crash; its
    ``updated_at`` kept as ``counts_as_of``), with ``ended_by`` ``"worker_lost"``
    (:data:`benchmarks.sweeps.WORKER_LOST`). The process took the point's per-request records
    and their outcomes with it, so that report is all there is.

    * In its measured phase: the requests it had in flight then (``sent - done - aborted``) were
      cut off with the process. They count as aborted (never done, never failures of the
      server), and apart in ``lost_in_flight``; ``requests_sent`` is its ``sent``, so the sweep's
      total counts them.
    * A report that does not count the requests sent (written before ``sent`` was counted), or no
      report at all: ``requests_sent`` and ``lost_in_flight`` are None, unknown, never guessed
      from the plan.
    * Building its prompts or warming up: as :meth:`_PointProgress.ended_before_sending` writes
      a point stopped then (``ended_during``, ``requests_sent`` 0, ``lost_in_flight`` 0)."""
    from benchmarks.sweeps import WORKER_LOST

    p = dict(progress) if isinstance(progress, Mapping) else {}
    phase = p.pop("phase", None)
    out = {**p, "ended_by": WORKER_LOST, "counts_as_of": p.get("updated_at")}
    if phase in (PREPARING_PHASE, WARMUP_PHASE):
        return {**out, "ended_during": phase, "requests_sent": 0, "lost_in_flight": 0}

    def count(key: str) -> int | None:
        value = p.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    sent, done, aborted = count("sent"), count("done"), count("aborted") or 0
    if sent is None or done is None:
        return {**out, "requests_sent": None, "lost_in_flight": None}
    in_flight = max(0, sent - done - aborted)
    return {**out, "requests_sent": max(sent, done + aborted), "lost_in_flight": in_flight,
            "aborted": aborted + in_flight}


def _stopped_phase_reason(sweep_id: int, reason: str, *,
                          progress: Mapping[int, Mapping[str, Any]] | None = None) -> str:
    """``reason`` of sweep ``sweep_id`` ending otherwise than done, with `` while warming up`` or
    `` while preparing prompts`` added where its running point stopped in that phase, before its
    first measured request (its progress's ``ended_during``): ``cancelled by oscar while warming
    up``, ``...during point c=4 64/64; the sweep stopped while preparing prompts``. ``reason``
    itself otherwise. ``progress``: run id → the progress a running point is about to be stored
    with (one whose worker was lost), read in place of its row's."""
    progress = progress or {}
    phases = [progress[run_id].get("ended_during") if run_id in progress else phase
              for run_id, phase in BenchmarkRun.objects.filter(sweep_id=sweep_id, status=RunStatus.RUNNING)
              .values_list("id", "progress__ended_during")]
    phase = next((p for p in phases if p in (PREPARING_PHASE, WARMUP_PHASE)), None)
    return f"{reason} while {phase}" if phase and reason and not reason.endswith(f" while {phase}") else reason


def ended_before_sending_text(progress: Mapping[str, Any] | None, planned: int | None) -> str:
    """The start of the reason of a point stopped before its first measured request (its progress
    has ``ended_during``, :meth:`_PointProgress.ended_before_sending`): ``stopped while warming up
    (2/2 warm-up requests ended), before its first measured request (0 of 4 planned requests
    sent): `` or ``stopped while preparing prompts (3/11 prompts built), ...``; ``""`` for any
    other point."""
    if not isinstance(progress, Mapping) or progress.get("ended_during") not in (PREPARING_PHASE, WARMUP_PHASE):
        return ""
    phase = progress["ended_during"]
    if phase == WARMUP_PHASE:
        counts = (f"{int(progress.get('warmup_done') or 0)}/{progress.get('warmup_total') or 0} warm-up "
                  "requests ended")
    else:
        counts = f"{int(progress.get('prepared') or 0)}/{progress.get('total') or 0} prompts built"
    sent = (f"0 of {planned:,} planned requests sent" if isinstance(planned, int) and not progress.get("duration_s")
            else "no measured request sent")
    return f"stopped while {phase} ({counts}), before its first measured request ({sent}): "


def _requests_sent(sweep_id: int, *, progress: Mapping[int, Mapping[str, Any]] | None = None) -> int:
    """The requests the points of sweep ``sweep_id`` sent: each run's ``summary.requests`` (aborted
    ones included), or for a point stored without a summary its progress's ``requests_sent`` where
    known (a point whose worker was lost: what its last report counted as sent, those it had in
    flight included, :func:`lost_point_progress`), else the requests its live counts saw come back
    (``done`` + ``aborted``: a point stopped before it sent anything adds 0; a lost point whose
    requests sent are unknown adds those, and the sweep's total is then unknown,
    :attr:`benchmarks.models.BenchmarkSweep.requests_total_known`); a point that never ran (no run
    row) adds 0. Never below the sweep's ``requests_done``. ``progress``: run id → the progress a
    running point is about to be stored with, read in place of its row's."""
    progress = progress or {}
    total = 0
    for run_id, summary, stored in BenchmarkRun.objects.filter(sweep_id=sweep_id).values_list(
            "id", "summary", "progress"):
        p = progress.get(run_id, stored)
        sent = p.get("requests_sent") if isinstance(p, Mapping) else None
        if isinstance(summary, Mapping) and isinstance(summary.get("requests"), int):
            total += summary["requests"]
        elif isinstance(sent, int) and not isinstance(sent, bool):
            total += sent
        elif isinstance(p, Mapping):
            total += int(p.get("done") or 0) + int(p.get("aborted") or 0)
    done = BenchmarkSweep.objects.filter(pk=sweep_id).values_list("requests_done", flat=True).first() or 0
    return max(total, done)


def _broadcast(sweep_id: int, type_: str, data: dict[str, Any], *, force: bool = False) -> None:
    """Send one message to the sweep's realtime group (``sweep-<id>``); a transport problem never
    stops a sweep (the rows stay the truth and the pages poll them)."""
    from controlplane.realtime import broadcast, sweep_group

    try:
        broadcast(sweep_group(sweep_id), type_, json_safe(data), force=force)
    except Exception:  # noqa: BLE001 - best effort by design
        log.warning("sweep %s: %s broadcast failed", sweep_id, type_, exc_info=True)


def _broadcast_point(sweep_id: int, run: BenchmarkRun) -> None:
    """``sweep.point`` (forced: a state change) once a point is stored: ``{"sweep_id", "run_id",
    "point_index", "points_done", "points_total", "summary"}``, the summary being the run's label,
    status, request counts, headline numbers (tok/s; TTFT p99 and TPOT mean in ms), how long it
    took (``measured_duration_s``, seconds; also ``duration_s``, its name in the summary) and, for
    a time-limited point, what ended it."""
    row = BenchmarkSweep.objects.filter(pk=sweep_id).values_list("points_done", "points_total").first()
    done, total = row or (0, 0)
    s = run.summary or {}
    _broadcast(sweep_id, "sweep.point", {
        "sweep_id": sweep_id, "run_id": run.pk, "point_index": run.ordinal, "points_done": done, "points_total": total,
        "summary": {"label": run.label, "status": run.status, "concurrency": run.concurrency,
                    "request_rate": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
                    "requests": s.get("requests"), "successes": s.get("successes"), "failures": s.get("failures"),
                    "output_tok_s": run.output_tok_s, "ttft_p99_ms": run.ttft_p99_ms, "tpot_mean_ms": run.tpot_mean_ms,
                    "duration_s": s.get("duration_s"), "measured_duration_s": s.get("duration_s"),
                    "ended_by": s.get("ended_by"), "flags": list(run.flags)},
    }, force=True)


def _check_cancel(sweep_id: int) -> None:
    if BenchmarkSweep.objects.filter(pk=sweep_id, cancel_requested=True).exists():
        raise _Cancelled()


class _Watch:
    """What stops a running sweep, read from its thread: :meth:`check` writes the heartbeat
    (every :data:`HEARTBEAT_S`), then raises :class:`_Cancelled` when ``cancel_requested`` is set
    and, with ``deployment=True``, :class:`_SweepFailed` when the deployment is no longer ready, its
    stop was asked for, or one of its processes ended (naming the process, how it ended and ``point``, the label of the
    point running, when one is). Reads at most once per :data:`STOP_CHECK_S` unless ``force``."""

    def __init__(self, sweep_id: int, deployment_id: int | None) -> None:
        self.sweep_id, self.deployment_id = sweep_id, deployment_id
        self.worker = _worker_id()
        self.point = ""
        self._checked = self._beat = time.monotonic()

    def check(self, *, force: bool = False, deployment: bool = True) -> None:
        now = time.monotonic()
        if not force and now - self._checked < STOP_CHECK_S:
            return
        self._checked = now
        if now - self._beat >= HEARTBEAT_S:
            self._beat = now
            try:
                retry_locked(lambda: BenchmarkSweep.objects.filter(pk=self.sweep_id).update(
                    heartbeat_at=timezone.now(), worker=self.worker),
                    what=f"writing sweep #{self.sweep_id}'s heartbeat", delays=BEST_EFFORT_RETRY_DELAYS_S)
            except DatabaseBusy as exc:  # the next heartbeat is a few seconds away
                log.warning("sweep %s: %s; the sweep goes on", self.sweep_id, exc)
        _check_cancel(self.sweep_id)
        if deployment and self.deployment_id is not None:
            from deployments.choices import DeploymentStatus
            from deployments.models import Deployment

            row = Deployment.objects.filter(pk=self.deployment_id).values_list(
                "status", "reason", "stop_requested").first()
            if row is None:
                raise _SweepFailed(f"deployment #{self.deployment_id} was deleted; the sweep stopped",
                                   cause=f"deployment #{self.deployment_id} was deleted")
            down = process_down(deployment_id=self.deployment_id)
            during = f" during point {self.point}" if self.point else ""
            if row[0] != DeploymentStatus.READY or down or row[2]:
                # A stop someone asked for leads: the processes it ends and the state it moves the
                # deployment to are its consequences, not why the sweep stopped. It counts from the
                # moment it is asked for, before the agent marks the deployment stopping.
                stop = stop_request(deployment_id=self.deployment_id)
                if stop:
                    state = "still marked ready" if row[0] == DeploymentStatus.READY else row[0]
                    raise _SweepFailed(f"{stop}{during}; deployment #{self.deployment_id} is {state}; "
                                       "the sweep stopped", cause=stop)
            if row[0] != DeploymentStatus.READY:
                if down:  # a crash: the process and how it ended lead, the deployment's state follows
                    raise _SweepFailed(f"{down}{during}; deployment #{self.deployment_id} is {row[0]}; "
                                       "the sweep stopped", cause=down)
                state = f"deployment #{self.deployment_id} is {row[0]}" + (f": {row[1]}" if row[1] else "")
                raise _SweepFailed(state + "; the sweep stopped", cause=state)
            if down:
                # The agent marks the process first and the deployment a few seconds later: a
                # point must not go on measuring a half-dead deployment meanwhile.
                raise _SweepFailed(f"{down}{during} while deployment #{self.deployment_id} was still marked "
                                   "ready; the sweep stopped", cause=down)


def stop_request(*, deployment_id: int) -> str:
    """Who asked for the deployment's stop and when, as its timeline recorded it, or ``""`` when no
    stop was asked for (``stop_requested`` unset, or no ``stop-requested`` event):
    ``"oscar requested a stop of deployment #7 at 2026-12-05 01:58:03 UTC"`` (the event's message
    leads; a stop from the command line, which has no user, reads ``someone requested a stop``).
    The latest such event counts; times in UTC to the second. Redacted."""
    event = _stop_event(deployment_id=deployment_id)
    if event is None:
        return ""
    message = (event[0] or "").split("\n", 1)[0].strip()[:200] or "a stop was requested"
    at = timezone.localtime(event[1], dt_timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return redact_text(f"{message} of deployment #{deployment_id} at {at} UTC")


def _stop_event(*, deployment_id: int) -> tuple[str, Any] | None:
    """``(message, at)`` of the deployment's latest ``stop-requested`` event while its stop is
    requested, else None."""
    from deployments.models import Deployment, ProcessEvent

    if not Deployment.objects.filter(pk=deployment_id, stop_requested=True).exists():
        return None
    return (ProcessEvent.objects.filter(deployment_id=deployment_id, kind="stop-requested")
            .order_by("-at", "-id").values_list("message", "at").first())


#: The start of a request's error when its connection was refused, reset or closed before any
#: byte of an answer (:mod:`benchmarks.loadgen.client`).
CONNECT_ERROR_PREFIX = "cannot connect to "


def _ended_by_stop(result, *, deployment_id: int, reason: str) -> int:
    """Mark the requests of ``result`` that ended unsuccessfully once the deployment's stop had been
    asked for (ended at or after its ``stop-requested`` event) as aborted by that stop
    (``aborted: <reason>``), whatever their error: a refused connection, a reset, an empty answer
    or a stream cut short, the server was going away on request, not failing. Errors that ended
    before the event stay failures, and requests already aborted are left as they are. Returns how
    many were marked."""
    event = _stop_event(deployment_id=deployment_id)
    if event is None:
        return 0
    # The records' times are CLOCK_MONOTONIC nanoseconds: the event's wall-clock time, moved there.
    at_ns = int(event[1].timestamp() * 1e9) - (time.time_ns() - time.perf_counter_ns())
    rec = result.records
    marked = 0
    for i, message in list(rec.errors.items()):
        if not message.startswith(ABORTED_PREFIX) and rec.end[i] >= at_ns:
            rec.errors[i] = ABORTED_PREFIX + reason
            marked += 1
    return marked


#: ``stopped_early`` of a point whose load generator stopped at the refusals of a server its
#: deployment's stop was ending, after the stop's own text: the stop ended the point, not its target.
REFUSED_AFTER_STOP_TEXT = ": its server refused connections after the stop was asked for"


def process_down(*, deployment_id: int) -> str:
    """How the first process of the deployment that ended did so, from the rows the node agent
    writes, or ``""`` when none has: ``"router #0 killed by signal 9 (SIGKILL); restart policy is
    'never'"`` or ``"decode #0 exited with code 3 (...)"`` when the agent recorded an exit code
    (negative: the signal, as the agent stores it), else ``"decode #0 is failed: liveness failed 3 times: ..."``. A process that
    crashed and waits for its restart (pending with a restart time) counts as ended (``...; a
    restart is pending``). The process that failed is named, not a sibling the agent then stopped
    because of it. Only the first line of the agent's reason is kept (the log tail after it is
    on the process page), at most 200 characters; redacted."""
    from django.db.models import Q

    from deployments.choices import PROCESS_TERMINAL, ProcessStatus
    from deployments.models import ServerProcess
    from deployments.supervisor import returncode_text

    rows = list(ServerProcess.objects.filter(deployment_id=deployment_id)
                .filter(Q(status__in=PROCESS_TERMINAL) | Q(status=ProcessStatus.PENDING, next_restart_at__isnull=False))
                .values_list("role", "ordinal", "status", "reason", "exit_code"))
    if not rows:
        return ""
    rank = {"failed": 0, "pending": 0, "killed": 1, "exited": 2}
    role, ordinal, status, reason, exit_code = min(rows, key=lambda r: (rank.get(r[2], 3), r[1], r[0]))
    why = (reason or "").split("\n", 1)[0].strip()[:200]
    if exit_code is not None:
        how = returncode_text(int(exit_code))
        if why.startswith(how):  # the agent's reason already leads with how it ended
            text = f"{role} #{ordinal} {why}"
        else:
            text = f"{role} #{ordinal} {how}" + (f" ({why})" if why else "")
    elif status == ProcessStatus.PENDING:
        text = f"{role} #{ordinal} ended" + (f" ({why})" if why else "")
    else:
        text = f"{role} #{ordinal} is {status}" + (f": {why}" if why else "")
    if status == ProcessStatus.PENDING:
        text += "; a restart is pending"
    return redact_text(text)


def _wait_ready(sweep: BenchmarkSweep, watch: _Watch | None = None):
    """Poll the deployment row until ready; raise :class:`_SweepFailed` with the reason (C14)."""
    from deployments.choices import DeploymentStatus

    deployment = sweep.deployment
    if deployment is None:
        raise _SweepFailed("the sweep has no deployment")
    limit = float(sweep.grid.get("wait_ready_s", 0))
    start = time.monotonic()
    while True:
        deployment.refresh_from_db()
        if deployment.status == DeploymentStatus.READY and deployment.entry_url:
            return deployment
        gone = _nothing_to_benchmark(deployment)
        if gone:
            raise _SweepFailed(gone)
        waited = time.monotonic() - start
        if waited >= limit:
            raise _SweepFailed(f"deployment #{deployment.pk} was not ready after {limit:.0f} s of waiting "
                               f"(status {deployment.status}" + (f": {deployment.reason}" if deployment.reason else "")
                               + ")")
        if watch is not None:
            watch.check(deployment=False)
        _check_cancel(sweep.pk)
        time.sleep(min(WAIT_POLL_S, max(0.01, limit - waited)))


def _nothing_to_benchmark(deployment) -> str:
    """Why a sweep of ``deployment`` (as read) can never run, or ``""``: the deployment is
    stopping, stopped or failed (``deployment #4 is stopped: <its reason>; nothing to benchmark``),
    or there is none (``the sweep has no deployment``). Pending, starting and ready leave hope."""
    from deployments.choices import DEPLOYMENT_TERMINAL, DeploymentStatus

    if deployment is None:
        return "the sweep has no deployment"
    if deployment.status in DEPLOYMENT_TERMINAL or deployment.status == DeploymentStatus.STOPPING:
        return (f"deployment #{deployment.pk} is {deployment.status}"
                + (f": {deployment.reason}" if deployment.reason else "") + "; nothing to benchmark")
    return ""


def sweep_snapshot(*, sweep: BenchmarkSweep, deployment) -> dict[str, Any]:
    """What was running, taken when the sweep starts: recipe name and version, the spec snapshot,
    each process's role, argv and env (already redacted by the agent), GPU ids, intended and
    effective pinning; what each server says about itself (:func:`server_info_fetch` of the entry
    URL and of each worker, under ``server_info``); ``engine_version`` and ``router_version`` with
    where each came from (:func:`snapshot_versions`: for PD the router reports no engine version,
    so it comes from the workers); the node; the client host (this worker's
    ``socket.gethostname()``) and Ceiling's version. Each server is asked where this worker
    reaches it (:func:`deployments.services.deployment_url_from_here`)."""
    from deployments.services import deployment_url_from_here

    processes = []
    versions: dict[str, Any] = {}
    for p in deployment.processes.order_by("role", "ordinal"):
        processes.append({
            "role": p.role, "ordinal": p.ordinal, "argv": list(p.argv), "env_redacted": dict(p.env_redacted),
            # An absent CPU or memory-node list is null, as in /api/processes/ (older snapshots keep "").
            "gpu_ids": list(p.gpu_ids), "cpus": p.cpus or None, "numa_node": p.numa_node,
            "mem_nodes": p.mem_nodes or None, "pin_method": p.pin_method,
            "effective_cpus": p.effective_cpus or None, "effective_mems": p.effective_mems or None,
            "pinning_verified": p.pinning_verified, "ports": dict(p.ports),
        })
        if p.health_url and p.role != "router":
            # The server's origin, not the health route's folder: llama.cpp's health route is /v1/models;
            # asked where this worker reaches it (a process of another node there, not on loopback here).
            base = urlsplit(p.health_url)._replace(path="", query="", fragment="").geturl()
            here, why = deployment_url_from_here(deployment=deployment, role=p.role, url=base)
            versions[f"{p.role}{p.ordinal}"] = (server_info_fetch(base_url=here) if here
                                                else {"version": None, "error": why})
    versions["entry"] = server_info_fetch(base_url=deployment.entry_url)
    topology = deployment.recipe.topology
    return {
        "deployment_id": deployment.pk, "recipe": deployment.deployed_recipe_name, "recipe_id": deployment.recipe_id,
        "recipe_version": deployment.recipe_version, "engine": deployment.recipe.engine,
        "topology": topology, "spec": deployment.spec_snapshot, "entry_url": deployment.entry_url,
        "processes": processes, "server_info": versions, **snapshot_versions(server_info=versions, topology=topology),
        "node": {"name": deployment.node.name, "hostname": deployment.node.hostname},
        "client_host": socket.gethostname(), "ceiling_version": settings.CEILING_VERSION,
        "taken_at": timezone.now().isoformat(),
    }


def snapshot_versions(*, server_info: Mapping[str, Mapping[str, Any]], topology: str) -> dict[str, Any]:
    """``{"engine_version", "engine_version_source", "router_version", "router_version_source"}``
    from the per-server info of :func:`sweep_snapshot` (keys ``entry``, ``prefill0``,
    ``decode0``, ``single0`` ...).

    PD: the entry URL is the router. Its own ``version`` (when it reports one; sglang-router 0.3.2's
    ``/get_server_info`` answers ``{"router_manager": true, ...}`` without one) is the router
    version, never the engine's; the engine version comes from the decode workers, else the
    prefill workers. When workers disagree, every distinct version is kept, ``role0=version``
    joined by ``, ``. Single: the entry's version, else the single worker's. Sources name the
    server key the value came from; versions are None (source None) when nothing reported one.
    """
    def version_of(key: str) -> str | None:
        v = (server_info.get(key) or {}).get("version")
        return str(v) if v not in (None, "") else None

    out: dict[str, Any] = {"engine_version": None, "engine_version_source": None, "router_version": None,
                           "router_version_source": None}
    if topology == "pd":
        if version_of("entry"):
            out["router_version"], out["router_version_source"] = version_of("entry"), "entry"
        for role in ("decode", "prefill"):
            found = {k: version_of(k) for k in sorted(server_info) if k.startswith(role) and version_of(k)}
            if not found:
                continue
            distinct = sorted(set(found.values()))
            out["engine_version"] = (distinct[0] if len(distinct) == 1
                                     else ", ".join(f"{k}={v}" for k, v in found.items()))
            out["engine_version_source"] = ", ".join(found)
            break
        return out
    for key in ["entry"] + sorted(k for k in server_info if k != "entry"):
        if version_of(key):
            out["engine_version"], out["engine_version_source"] = version_of(key), key
            break
    return out


def engine_limits_backfill(deployment) -> bool:
    """Store what ``deployment``'s engine servers report about their capacity
    (:func:`deployments.engine_limits.deployment_limits_read`, each request timing out after
    :data:`SERVER_INFO_TIMEOUT_S` seconds) when it holds no such report: its ``engine_limits`` is
    null (ready before the report was kept) or reported nothing that bounds a request (every read
    failed when it became ready; then only a new record that does report something replaces it).
    Run as a sweep starts, so the next sweep creation is judged against the servers' own report.
    Returns whether a record was stored; never raises and never fails the sweep. A record written
    meanwhile (the deployment became ready again) is left as it is."""
    from deployments.engine_limits import deployment_limits_read, reported_capacity
    from deployments.models import Deployment

    try:
        current = Deployment.objects.filter(pk=deployment.pk).values_list("engine_limits", flat=True).first()
        if reported_capacity(current) is not None:
            return False
        record = deployment_limits_read(deployment, timeout_s=SERVER_INFO_TIMEOUT_S)
        if current is not None and reported_capacity(record) is None:
            return False
        rows = Deployment.objects.filter(pk=deployment.pk)
        rows = (rows.filter(engine_limits__isnull=True) if current is None
                else rows.filter(engine_limits__read_at=current.get("read_at")))
        stored = bool(retry_locked(lambda: rows.update(engine_limits=record),
                                   what="storing the deployment's engine-reported limits"))
    except Exception:  # noqa: BLE001 - a report the sweep could not store must not fail the sweep
        log.warning("deployment %s: engine-reported limits not stored", deployment.pk, exc_info=True)
        return False
    if stored:
        deployment.engine_limits = record
    return stored


# Routes asked, in order, for what a server says about itself: SGLang's (and the sim's and the
# router's) ``/get_server_info``, newer SGLang's ``/server_info``, vLLM's ``/version``.
SERVER_INFO_ROUTES = ("/get_server_info", "/server_info", "/version")


def server_info_fetch(*, base_url: str) -> dict[str, Any]:
    """What the server at ``base_url`` says about itself, from the first of
    :data:`SERVER_INFO_ROUTES` that answers 200 with a JSON object: ``{"version", "model",
    "disaggregation_mode", "sim_profile", "max_running_requests", "route"}`` (absent values None;
    ``max_running_requests`` is SGLang's cap on running sequences, which bounds the ceiling). When none does:
    ``{"version": None, "error": "<what each route answered>"}``. Each request times out after
    :data:`SERVER_INFO_TIMEOUT_S` seconds; nothing is raised."""
    if not base_url:
        return {"version": None, "error": "no URL"}
    errors = []
    for route in SERVER_INFO_ROUTES:
        url = base_url.rstrip("/") + route
        try:
            resp = httpx.get(url, timeout=SERVER_INFO_TIMEOUT_S)
            if resp.status_code != 200:
                errors.append(f"HTTP {resp.status_code} from {route}")
                continue
            info = resp.json()
        except httpx.TransportError as exc:
            # The server is not answering at all: asking the other routes would only wait again.
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            break
        except (httpx.HTTPError, ValueError) as exc:
            errors.append(f"{route}: {type(exc).__name__}: {exc}"[:300])
            continue
        if not isinstance(info, dict):
            errors.append(f"{route}: not a JSON object")
            continue
        sim = info.get("sim") if isinstance(info.get("sim"), dict) else {}
        return {"version": info.get("version"), "model": info.get("served_model_name") or info.get("model_path"),
                "disaggregation_mode": info.get("disaggregation_mode"),
                "sim_profile": (sim.get("profile") or {}).get("name") if isinstance(sim.get("profile"), dict) else None,
                "max_running_requests": _positive_int(info.get("max_running_requests")), "route": route}
    return {"version": None, "error": "; ".join(errors)}


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _running_cap(snapshot: Mapping[str, Any] | None, topology: str) -> int | None:
    """The deployment's cap on running decode sequences from its snapshot's ``server_info``: the sum
    over the decode workers for PD (each runs its own batch), else the entry server's; None when a
    server did not say (llama.cpp, vLLM), so the ceiling is not bounded by a guess."""
    info = (snapshot or {}).get("server_info") or {}
    if not isinstance(info, Mapping):
        return None
    if topology == "pd":
        caps = [(v or {}).get("max_running_requests") for k, v in info.items() if k.startswith("decode")]
        caps = [c for c in caps if _positive_int(c)]
        return sum(caps) or None
    return _positive_int((info.get("entry") or {}).get("max_running_requests"))


def _metrics_urls(deployment) -> list[str]:
    """Prometheus endpoints whose generation counters cover the run: decode servers for PD,
    the single server otherwise (the router would double count), where this worker reaches them
    (:func:`deployments.services.deployment_url_from_here`). llama.cpp exposes none."""
    from deployments.services import deployment_url_from_here

    if deployment.recipe.engine == "llamacpp":
        return []
    roles = ("decode",) if deployment.recipe.topology == "pd" else ("single",)
    urls = []
    for p in deployment.processes.filter(role__in=roles):
        if p.health_url:
            # where this worker reaches the server (deployment_url_from_here), none when it cannot
            here, _ = deployment_url_from_here(deployment=deployment, role=p.role,
                                               url=p.health_url.rsplit("/", 1)[0] + "/metrics")
            if here:
                urls.append(here)
    return urls


def _point_label(point: Mapping[str, Any]) -> str:
    label = (f"c={point['concurrency']}" if point["concurrency"] is not None else f"{point['request_rate']:g} req/s")
    return label + f" {point['input_len']}/{point['output_len']}"


# Keys of the load generator's progress report (``loadgen_run(progress=...)``), kept on the run row.
# ``done`` counts the requests that finished (succeeded or failed), ``failed`` those of them that
# failed, ``aborted`` those a stop ended in flight (in neither), ``sent`` the requests sent so far
# (``sent - done - aborted`` are in flight: what a point whose worker is lost had out, :func:`lost_point_progress`).
# ``tok_s`` is the output rate over the last report window (:data:`TOK_S_WINDOW_S`); ``tok_s_mean``
# the output tokens so far over the seconds since the point's first request (null before any token).
PROGRESS_KEYS = ("done", "total", "failed", "aborted", "sent", "output_tokens", "elapsed_s", "tok_s", "tok_s_mean")

#: The ``phase`` of a running point's progress while its prompts are built (before the load
#: generator's first report; its measured-phase reports have no ``phase``).
PREPARING_PHASE = "preparing prompts"

#: Keys of the load generator's reports while the point's warm-up requests run, phase
#: :data:`WARMUP_PHASE` (``"warming up"``): warm-up requests that ended (succeeded or failed) and
#: to send, and seconds since the warm-up began. They are never the point's ``done``/``failed``/
#: ``aborted`` nor in the sweep's ``requests_done``.
WARMUP_PROGRESS_KEYS = ("phase", "warmup_done", "warmup_total", "warmup_elapsed_s")

#: Seconds of the load generator's report window, over which ``tok_s`` is measured: at least this
#: (:data:`benchmarks.loadgen.driver.PROGRESS_PERIOD_S`), usually no more than half as long again.
TOK_S_WINDOW_S = LOADGEN_PROGRESS_PERIOD_S


class _PointProgress:
    """The running point's progress as the load generator counts it (every engine, llama.cpp
    included, whatever counters the servers expose).

    The load generator calls :meth:`report` (at most twice a second, from the thread that runs
    it); the sweep's thread calls :meth:`tick` every :data:`PROGRESS_PERIOD_S` seconds, which
    broadcasts a new report as ``sweep.progress`` at once and writes it to the run row and the
    sweep's progress columns at most every :data:`RUN_PROGRESS_WRITE_S` seconds (``final`` always
    writes). A report broadcast inside that interval is written by a later tick once the interval
    has passed, new report or not, so the rows (what a reload and the polled status block show)
    never stay behind the last broadcast. The message and the row carry the same report and its
    ``updated_at`` (:meth:`message`). Database writes stay in the sweep's thread.
    """

    def __init__(self, sweep: BenchmarkSweep, run: BenchmarkRun, point: Mapping[str, Any], done_before: int) -> None:
        self.sweep_id, self.run_id, self.ordinal = sweep.pk, run.pk, run.ordinal
        self.points_total = sweep.points_total
        self.label, self.duration_s, self.done_before = _point_label(point), point.get("duration_s"), done_before
        # A closed loop limited by time cannot know its total: the load generator's ``total`` is
        # the requests sent so far, and the page says so.
        self.total_sent_so_far = bool(self.duration_s) and point.get("request_rate") is None
        self._lock = threading.Lock()
        self._latest: dict[str, Any] | None = None
        self._new = False
        self._written_at = 0.0
        self._unwritten: dict[str, Any] | None = None   # the last message broadcast and not yet stored

    def report(self, snapshot: Mapping[str, Any]) -> None:
        """The load generator's callback: keep the newest ``{"done", "total", "failed", "aborted",
        "sent", "output_tokens", "elapsed_s", "tok_s", "tok_s_mean"}`` (counts, seconds, output tok/s over
        its last window of about :data:`TOK_S_WINDOW_S` s, output tok/s since the first request),
        or while the warm-up runs ``{"phase": "warming up", "warmup_done", "warmup_total",
        "warmup_elapsed_s"}`` (:data:`WARMUP_PROGRESS_KEYS`; no request count of the point)."""
        keys = WARMUP_PROGRESS_KEYS if snapshot.get("phase") == WARMUP_PHASE else PROGRESS_KEYS
        clean = {k: snapshot.get(k) for k in keys}
        with self._lock:
            self._latest, self._new = clean, True

    def aborted_not_failed(self, n: int) -> None:
        """Count ``n`` of the last report's failed requests as aborted by a stop instead: out of
        ``failed`` and out of ``done`` (an aborted request is neither), into ``aborted``."""
        with self._lock:
            if self._latest is not None and "failed" in self._latest:
                failed = int(self._latest.get("failed") or 0)
                moved = min(n, failed)
                self._latest = {**self._latest, "failed": failed - moved,
                                "done": max(0, int(self._latest.get("done") or 0) - moved),
                                "aborted": int(self._latest.get("aborted") or 0) + moved}
                self._new = True

    def measured(self, summary: Mapping[str, Any]) -> None:
        """The point's summary is made (:func:`benchmarks.loadgen.run_summary`): its last report
        takes the stored figures, ``output_tokens`` (the tokens its output throughput counts: the
        successful requests' ``output_tokens`` plus ``output_tokens_aborted``, what the requests a
        stop aborted in flight had streamed), ``elapsed_s`` (the summary's ``duration_s``, first
        request sent to last one back) and ``tok_s_mean`` (its ``output_throughput_tok_s``, null
        when none succeeded, and then ``output_tokens`` the successes' alone, 0), so the mean since start a page or the API last shows is the point's
        output throughput, also for a point a stop cut short. While it runs the load generator's
        mean counts the same tokens (never those of a request the server failed) over the seconds
        since its first request."""
        with self._lock:
            if self._latest is None or "done" not in self._latest:
                return
            rate = summary.get("output_throughput_tok_s")
            counted = summary.get("output_tokens")
            if (isinstance(rate, (int, float)) and isinstance(counted, int)
                    and isinstance(summary.get("output_tokens_aborted"), int)):
                counted += summary["output_tokens_aborted"]
            self._latest = {**self._latest, "output_tokens": counted,
                            "elapsed_s": summary.get("duration_s"),
                            "tok_s_mean": rate if isinstance(rate, (int, float)) and rate > 0 else None}
            self._new = True

    def preparing(self, prepared: int, total: int) -> None:
        """Called while the point's prompts are built, before any request (from the thread that
        builds them, after each prompt): keep ``{"phase": "preparing prompts", "prepared", "total"}``
        (prompts built so far, and to build, warmup prompts included), which :meth:`tick`
        broadcasts and writes as it does the load generator's reports (throttled alike)."""
        with self._lock:
            self._latest, self._new = {"phase": PREPARING_PHASE, "prepared": prepared, "total": total}, True

    def ended_before_sending(self) -> None:
        """The point stopped (a cancel, its deployment going down) before its first measured
        request: while its prompts were built or its warm-up requests ran. Its last report is
        broadcast and written as any (:meth:`tick`), then the row's progress is written once more
        as what it ended as: that report's counts without ``phase`` (which says the point still
        runs), with ``ended_during`` (``"preparing prompts"`` or ``"warming up"``) and
        ``requests_sent`` 0 (no measured request went out; warm-up requests are never counted),
        so the run's page and the API never show a stopped point as still in that phase. Not
        broadcast: the sweep's own status message ends its live panel."""
        self.tick(final=True)
        with self._lock:
            latest = dict(self._latest or {})
        phase = latest.pop("phase", None)
        if phase not in (PREPARING_PHASE, WARMUP_PHASE):
            return
        ended = json_safe({**latest, "ended_during": phase, "requests_sent": 0, "duration_s": self.duration_s,
                           "total_sent_so_far": self.total_sent_so_far,
                           "updated_at": timezone.now().isoformat().replace("+00:00", "Z")})
        retry_locked(lambda: BenchmarkRun.objects.filter(pk=self.run_id).update(progress=ended),
                     what=f"storing how point {self.label} ended")

    def message(self, latest: Mapping[str, Any]) -> dict[str, Any]:
        """The ``sweep.progress`` data of report ``latest``: ``{"sweep_id", "run_id",
        "point_index", "points_total", <the report's keys>, "point", "duration_s",
        "total_sent_so_far", "requests_done", "updated_at"}`` (``updated_at``: ISO 8601 UTC, when it
        was made). The sweep page builds the same from the rows this writes
        (:func:`benchmarks.views.sweep_pages.progress_message`)."""
        return {"sweep_id": self.sweep_id, "run_id": self.run_id, "point_index": self.ordinal,
                "points_total": self.points_total, **latest, "point": self.label, "duration_s": self.duration_s,
                "total_sent_so_far": self.total_sent_so_far,
                # 0 while preparing prompts or warming up: warm-up requests are never counted
                "requests_done": self.done_before + int(latest.get("done") or 0),
                "updated_at": timezone.now().isoformat().replace("+00:00", "Z")}

    def tick(self, *, final: bool = False) -> None:
        """Broadcast a new report, and store the last one broadcast when the last write is old
        enough (or ``final``)."""
        with self._lock:
            latest, new = self._latest, self._new
            self._new = False
        if latest is None:
            return
        if new:
            self._unwritten = self.message(latest)
            _broadcast(self.sweep_id, "sweep.progress", self._unwritten)
        elif final and self._unwritten is None:
            self._unwritten = self.message(latest)
        message = self._unwritten
        if message is None:
            return
        now = time.monotonic()
        if final or now - self._written_at >= RUN_PROGRESS_WRITE_S:
            self._written_at = now
            self._unwritten = None
            report = {k: message[k] for k in latest}
            fields: dict[str, Any] = {"requests_done": message["requests_done"]}
            if latest.get("tok_s") is not None:
                fields["current_tok_s"] = latest["tok_s"]

            def write() -> None:
                # One transaction: a worker killed between the two writes must not leave the run's
                # counts ahead of the sweep's requests_done (the API and the lost-worker reason
                # read both).
                with transaction.atomic():
                    BenchmarkRun.objects.filter(pk=self.run_id).update(progress=json_safe(
                        {**report, "duration_s": self.duration_s, "total_sent_so_far": self.total_sent_so_far,
                         "updated_at": message["updated_at"]}))
                    BenchmarkSweep.objects.filter(pk=self.sweep_id).update(**fields)

            what = f"writing the progress of point {self.label}"
            if final:  # the point's last counts: worth the full wait, and a failure fails the sweep
                retry_locked(write, what=what)
                return
            try:
                retry_locked(write, what=what, delays=BEST_EFFORT_RETRY_DELAYS_S)
            except DatabaseBusy as exc:  # the next write carries the newer counts anyway
                if self._unwritten is None:
                    self._unwritten = message   # written by a later tick
                log.warning("sweep %s: %s; the sweep goes on", self.sweep_id, exc)


#: A closed-loop rate (requests/s per concurrency slot, 50 ms a request) that caps the text prompts
#: built for a closed-loop point with a duration (:func:`point_limits`): each costs about three
#: tokenize calls to the server (~6 ms on localhost llama.cpp), so a 60 s point at c=4 builds 4800
#: prompts in about 30 s rather than a time-only pool of tens of thousands in minutes. A server
#: faster than that cycles through the pool (the summary's ``prompts_reused``).
PROMPT_POOL_REQ_S_PER_SLOT = 20


def point_limits(*, point: Mapping[str, Any], seed: int, text_prompts: bool = False) -> dict[str, Any]:
    """How the load generator is told to end ``point`` (a :func:`benchmarks.sweeps.grid_points`
    entry): ``{"duration_s": seconds | None, "max_requests": count | None, "specs": prompts to
    generate, "ends_by": "requests" | "duration" | "first"}``.

    Without a time limit the point is one pass over ``max_requests`` prompts. A time limit alone
    is the load generator's duration mode (it cycles through the prompt pool until the time is
    up). With both, whichever ends first: an open-loop point's arrival times are known in advance
    (:func:`benchmarks.loadgen.arrival_offsets`, same seed as the run), so it becomes one pass when
    all its ``max_requests`` arrivals fall inside the time, else the duration mode over those
    prompts (fewer arrivals than prompts, so none repeats). A closed-loop point cannot know its
    end in advance: it runs in duration mode with the load generator's request cap
    (``LoadConfig.max_requests``) where the load generator has one (``ends_by`` "first"); where it
    has none the time limit applies and the request count only sizes the pool, which the run's
    summary says (``request_cap_applied`` false).

    Prompts are all built before the point starts, so a point with both limits builds only what
    its time can use: an open loop that ends by time the arrivals that fall inside it (exactly
    those it sends, none reused); a closed loop at most the pool of a point limited by time alone
    (:func:`benchmarks.sweeps.duration_prompt_pool`, 1 ms plus 0.1 ms per output token a
    request per slot: token ids are cheap), and for ``text_prompts`` (here and for a closed loop limited by time alone) (sized with the server's tokenizer or calibrated: a llama.cpp
    prompt costs about three tokenize calls) at most ``ceil(duration_s * concurrency *
    PROMPT_POOL_REQ_S_PER_SLOT)`` (:data:`PROMPT_POOL_REQ_S_PER_SLOT` requests/s per slot, a
    generous rate), never fewer than one prompt per slot. A closed loop faster than that cycles
    through its pool (the summary's ``prompts_reused``).
    """
    cap, duration = point.get("max_requests"), point.get("duration_s")
    if duration is None:
        return {"duration_s": None, "max_requests": cap, "specs": point["num_requests"], "ends_by": "requests"}
    if cap is None:
        specs = point["num_requests"]
        if text_prompts and point.get("request_rate") is None:
            c = int(point["concurrency"])
            specs = min(specs, max(c, math.ceil(duration * c * PROMPT_POOL_REQ_S_PER_SLOT)))
        return {"duration_s": duration, "max_requests": None, "specs": specs, "ends_by": "duration"}
    if point.get("request_rate") is not None:
        offsets = arrival_offsets(n=cap, rate=point["request_rate"], burstiness=1.0, seed=seed)
        if offsets and offsets[-1] < duration:
            return {"duration_s": None, "max_requests": cap, "specs": cap, "ends_by": "requests"}
        inside = sum(1 for o in offsets if o < duration)
        return {"duration_s": duration, "max_requests": None, "specs": max(1, inside), "ends_by": "duration"}
    c = int(point["concurrency"])
    pool = duration_prompt_pool(duration_s=duration, input_len=point.get("input_len") or 1,
                                output_len=point.get("output_len") or 0, concurrency=c)
    if text_prompts:
        pool = min(pool, max(c, math.ceil(duration * c * PROMPT_POOL_REQ_S_PER_SLOT)))
    return {"duration_s": duration, "max_requests": cap, "specs": min(cap, pool), "ends_by": "first"}


def _loadconfig_has(name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(LoadConfig))


class _StopAsk:
    """The sweep thread's stop request to the point's helper thread, with its reason: the load
    generator's ``should_stop`` (called, it answers the reason or None)."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def is_set(self) -> bool:
        return self.reason is not None

    def __call__(self) -> str | None:
        return self.reason


def _text_calibration(*, base_url: str, api: Api, model: str, input_len: int,
                      seed: int) -> tuple[TextCalibration | None, dict[str, Any]]:
    """How many words make a text prompt of ``input_len`` server tokens, for an API that takes text
    only (chat, and any engine that is not sent token ids): a chat request's prompt also holds its
    template's tokens, so words alone come out longer than asked (64 words were 70 tokens on
    llama.cpp). Probed against the server's ``usage.prompt_tokens``
    (:func:`benchmarks.loadgen.dataset_calibrate_text_at`: three one-token requests before the
    warmup, each asked again without streaming where the stream carries no usage; more checks at
    the requested length until one lands within the run's tolerance). Returns the calibration (None
    when the server reports no prompt tokens: the prompts are then one word per token) and its
    evidence for the summary's ``input_calibration`` (or ``{"error"}``). Either way the run's
    ``input_length_check`` says how long the prompts came out: from the stream's usage, else from
    the prompts counted again after the point (:func:`_prompt_recount`); with neither the run is
    flagged ``input_length_unchecked``."""
    try:
        cal, evidence = asyncio.run(dataset_calibrate_text_at(base_url=base_url, api=api, model=model,
                                                              input_len=input_len, seed=seed))
    except (RuntimeError, ValueError) as exc:
        return None, {"error": f"prompts not calibrated: {exc}"[:500]}
    return cal, evidence


def _tokenized_prompts(*, base_url: str, api: Api, model: str, point: dict, num: int, warmup: int, seed: int,
                       warmup_seed: int, should_stop,
                       progress=None) -> tuple[list[RequestSpec], list[RequestSpec], dict] | str | None:
    """A text point's prompts and warmup prompts at exactly the requested length in server tokens,
    where the server offers a tokenize endpoint
    (:func:`benchmarks.loadgen.tokenized.tokenized_text_dataset`: one one-token probe for the
    request's own tokens, then each prompt cut with the server's tokenizer and confirmed), with the
    evidence for the summary's ``input_calibration`` (``"method": "tokenize"``, and ``warmup_exact``
    with warmup requests). None where the server has no such endpoint, and why in plain words
    where sizing failed (the overhead probe or a tokenize call failed or answered an error): either
    way the point keeps the calibration (:func:`_text_calibration`), those words kept as its
    ``tokenize_error``. The run's ``input_length_check`` still comes from the server's count of the
    prompts sent (stream or :func:`_prompt_recount`), not from this. ``progress(prepared, total)``
    (optional) is called after each prompt (warmup prompts counted after the point's). Raises
    :class:`benchmarks.loadgen.LoadgenStopped` when ``should_stop()`` turns true."""
    total = num + warmup
    point_built = (lambda k: progress(k, total)) if progress is not None else None
    warm_built = (lambda k: progress(num + k, total)) if progress is not None else None
    try:
        specs, evidence = asyncio.run(tokenized_text_dataset(
            base_url=base_url, api=api, model=model, num=num, input_len=point["input_len"],
            output_len=point["output_len"], seed=seed, should_stop=should_stop, progress=point_built))
        if specs is None:
            return None
        warm, warm_evidence = asyncio.run(tokenized_text_dataset(
            base_url=base_url, api=api, model=model, num=warmup, input_len=point["input_len"],
            output_len=point["output_len"], seed=warmup_seed, should_stop=should_stop,
            overhead=evidence["overhead_tokens"], progress=warm_built)) if warmup else ([], None)
    except RuntimeError as exc:
        if isinstance(exc, LoadgenStopped):
            raise
        log.warning("text prompts not sized with the server's tokenizer, calibrating instead: %s", exc)
        return f"prompts not sized with the server's tokenizer: {exc}"[:500]
    if warm is None:
        return None
    if warm_evidence is not None:
        evidence["warmup_exact"] = warm_evidence["exact"]
    return specs, warm, evidence


# Text prompts of a point whose stream carried no usage (llama_cpp.server streams none) are counted
# again after the point, each sent once more without streaming: at most this many (the first
# successful requests' distinct prompts, one prefill each) within this many seconds, so a point of
# thousands of long prompts does not hold the sweep for as long again.
PROMPT_RECOUNT_MAX = 32
PROMPT_RECOUNT_BUDGET_S = 60.0


def _stream_counted_prompts(result: RunResult) -> bool:
    """Whether the stream reported the prompt tokens of some successful request of ``result``."""
    ok = result.records.column("ok").astype(bool)
    return bool((result.records.column("input_tokens")[ok] >= 0).any())


def _prompt_recount(*, base_url: str, api: Api, model: str, specs: list[RequestSpec], result: RunResult,
                    should_stop=None) -> dict[str, Any]:
    """The input-length check of a point whose stream reported no prompt tokens, from its own
    prompts counted again (:func:`benchmarks.loadgen.prompts_token_counts`): the distinct prompts of
    its first :data:`PROMPT_RECOUNT_MAX` successful requests (records' dataset ``index``), within
    :data:`PROMPT_RECOUNT_BUDGET_S` seconds, and before each unless ``should_stop()`` (the point's
    stop: a cancel ends the counting, not the point's result). Returns the summary keys ``input_length_check`` (the
    load generator's figures over the prompts counted, with ``"source": "recount"``; None when none
    was counted) and ``input_length_recount`` ``{"prompts", "successes", "error"}`` (prompts
    counted, the point's successful requests, and why counting stopped short, None when it did
    not). Never raises for request faults."""
    rec = result.records
    ok = rec.column("ok").astype(bool)
    index = rec.column("index")
    chosen: list[int] = []
    for i in np.flatnonzero(ok):
        j = int(index[i])
        if 0 <= j < len(specs) and specs[j].input_len >= 0 and j not in chosen:
            chosen.append(j)
            if len(chosen) == PROMPT_RECOUNT_MAX:
                break
    if not chosen:
        return {"input_length_check": None,
                "input_length_recount": {"prompts": 0, "successes": int(ok.sum()),
                                         "error": "no successful request with a requested length to count"}}
    counts, why = asyncio.run(prompts_token_counts(base_url=base_url, api=api, model=model,
                                                   specs=[specs[j] for j in chosen],
                                                   budget_s=PROMPT_RECOUNT_BUDGET_S, should_stop=should_stop))
    check = input_length_check(np.array([specs[j].input_len for j in chosen[:len(counts)]], dtype=np.int64),
                               np.array(counts, dtype=np.int64)) if counts else None
    if check is not None:
        check["source"] = "recount"
    return {"input_length_check": check,
            "input_length_recount": {"prompts": len(counts), "successes": int(ok.sum()),
                                     "error": f"prompts not counted: {why}"[:500] if why else None}}


def _input_tokens_from_recount(summary: dict[str, Any]) -> None:
    """Fill ``summary``'s input-token figures from the prompts counted again after the point
    (:func:`_prompt_recount`) where the stream reported none, in place.

    ``input_tokens_source`` says where they come from: ``"stream"`` (the server's per-request
    ``usage``), ``"recount"`` or None (unknown). Only when the recount counted one prompt per
    successful request (``input_length_recount.prompts == successes``, nothing cut short) is it the
    run's own: then ``input_tokens_actual_mean`` (tokens per request) is its mean,
    ``input_tokens`` (tokens) that times the successes and ``total_token_throughput_tok_s``
    (tokens/s) is recomputed over the measured window (``request_throughput_req_s / successes`` is
    one over its seconds). A recount of a sample leaves them null; its mean is kept apart as
    ``input_tokens_recount_sample_mean`` (tokens per request over the prompts counted)."""
    if summary.get("input_tokens_actual_mean") is not None:
        summary["input_tokens_source"] = "stream"
        return
    summary["input_tokens_source"] = None
    check, recount = summary.get("input_length_check"), summary.get("input_length_recount")
    if not isinstance(check, Mapping) or check.get("source") != "recount" or not isinstance(recount, Mapping):
        return
    successes = int(summary.get("successes") or 0)
    mean = float(check["actual_mean"])
    if successes <= 0 or recount.get("error") or recount.get("prompts") != successes:
        summary["input_tokens_recount_sample_mean"] = mean
        return
    summary["input_tokens_actual_mean"] = mean
    summary["input_tokens"] = int(round(mean * successes))
    summary["input_tokens_source"] = "recount"
    req_s = summary.get("request_throughput_req_s")
    if isinstance(req_s, (int, float)) and req_s > 0:
        # The output tokens the output throughput counts (those the aborted requests streamed too).
        summary["total_token_throughput_tok_s"] = (int(summary.get("output_tokens") or 0)
                                                   + int(summary.get("output_tokens_aborted") or 0)
                                                   + summary["input_tokens"]) * req_s / successes


def _run_point(sweep: BenchmarkSweep, deployment, ordinal: int, point: dict, snapshot: dict,
               watch: _Watch | None = None) -> BenchmarkRun:
    """Run one grid point and store it. Live progress comes from the load generator's own counts
    (:class:`_PointProgress`). A point with ``duration_s`` ends after that many seconds, or with
    a request count as well whichever comes first (:func:`point_limits`); its summary says what
    ended it (``ended_by``: ``duration``, ``requests``, ``target_unreachable`` or
    ``deployment_down``). The prompts are built and the load generator run in a helper thread;
    this thread ticks the progress and asks ``watch`` (cancel, deployment no longer ready,
    heartbeat), and once more, at once, between the prompts built and the first request sent:
    when it raises, the helper is told to stop (prompt building and sending end within
    about a second, in-flight requests are aborted). Requests refused once the deployment's stop
    was asked for, and every other request that ended unsuccessfully after it, are aborted by that stop
    (:func:`_ended_by_stop`), not failed; when the load generator stopped at such refusals, its
    ``stopped_early`` names the stop, not the target. A cancel stores the point cancelled with
    what was sent (records and a summary marked partial: completed vs planned requests, flag
    ``cancelled_partial``, ``ended_by`` ``cancelled``) and propagates; cancelled before anything
    was sent, it keeps only its progress counts. A deployment that went down
    (:class:`_SweepFailed`) while requests were being sent stores the point failed with what was
    sent (records, summary, ``not_sent``: the load generator's partial result, the aborted
    requests failed ``aborted: <what ended>``) and fails the sweep with the counts
    (:func:`_went_down_reason`); stopped before anything was sent (prompts, warmup), the watch's
    reason propagates as it is."""
    grid = sweep.grid
    api = Api(grid["api"])
    engine = deployment.recipe.engine
    seed = grid.get("seed", 0)
    limits = point_limits(point=point, seed=seed,
                          text_prompts=not (engine in TOKEN_ID_ENGINES and api is not Api.CHAT))
    run, _ = retry_locked(lambda: BenchmarkRun.objects.update_or_create(
        sweep=sweep, ordinal=ordinal,
        defaults=dict(status=RunStatus.RUNNING, concurrency=point["concurrency"], request_rate=point["request_rate"],
                      input_len=point["input_len"], output_len=point["output_len"],
                      num_requests=point.get("max_requests"), duration_s=point.get("duration_s"), api=api.value,
                      served_model_name=sweep.served_model_name, num_gpus=sweep.num_gpus,
                      snapshot=json_safe(snapshot), started_at=timezone.now(), created_by=sweep.created_by,
                      progress={}),
    ), what=f"starting point {_point_label(point)}")
    label = _point_label(point)
    retry_locked(lambda: BenchmarkSweep.objects.filter(pk=sweep.pk).update(current_point=label, current_tok_s=None),
                 what=f"starting point {label}")
    if watch is not None:
        watch.point = label
    token_ids = engine in TOKEN_ID_ENGINES and api is not Api.CHAT
    stop = _StopAsk()
    extra: dict[str, Any] = {}
    if limits["duration_s"] is not None:
        extra["duration_s"] = limits["duration_s"]
    cap_applied = limits["ends_by"] != "first" or _loadconfig_has("max_requests")
    if limits["ends_by"] == "first" and cap_applied:
        extra["max_requests"] = limits["max_requests"]
    cfg = LoadConfig(base_url=deployment.entry_url, api=api, model=sweep.served_model_name,
                     concurrency=point["concurrency"], rate=point["request_rate"], seed=seed,
                     warmup=int(grid.get("warmup", 0)), ignore_eos=True, fixed_output=True, metrics_urls=_metrics_urls(deployment),
                     **extra)
    done_before = BenchmarkSweep.objects.filter(pk=sweep.pk).values_list("requests_done", flat=True).first() or 0
    progress = _PointProgress(sweep, run, point, done_before)
    outcome: dict[str, Any] = {}

    def work() -> None:
        n_warm = int(grid.get("warmup", 0))
        prep_total = limits["specs"] + n_warm
        try:
            calibration = None
            sized = None
            progress.preparing(0, prep_total)
            if not token_ids:
                sized = _tokenized_prompts(base_url=deployment.entry_url, api=api, model=sweep.served_model_name,
                                           point=point, num=limits["specs"], warmup=int(grid.get("warmup", 0)),
                                           seed=seed + ordinal, warmup_seed=seed + 10_000 + ordinal,
                                           should_stop=stop.is_set, progress=progress.preparing)
                if isinstance(sized, tuple):
                    specs, warmup, outcome["calibration"] = sized
                else:
                    calibration, outcome["calibration"] = _text_calibration(
                        base_url=deployment.entry_url, api=api, model=sweep.served_model_name,
                        input_len=point["input_len"], seed=seed + ordinal)
                    if sized is not None:
                        outcome["calibration"]["tokenize_error"] = sized
                    sized = None
            if sized is None:
                specs = random_dataset(num=limits["specs"], input_len=point["input_len"],
                                       output_len=point["output_len"], seed=seed + ordinal, token_ids=token_ids,
                                       chat=api is Api.CHAT, calibration=calibration, should_stop=stop.is_set,
                                       progress=lambda k: progress.preparing(k, prep_total))
                warmup = random_dataset(num=n_warm, input_len=point["input_len"],
                                        output_len=point["output_len"], seed=seed + 10_000 + ordinal,
                                        token_ids=token_ids, chat=api is Api.CHAT, calibration=calibration,
                                        should_stop=stop.is_set,
                                        progress=lambda k: progress.preparing(limits["specs"] + k, prep_total))
            # The sweep's thread looks at the deployment once more right before the first request:
            # one stopped while the prompts were built gets none.
            built.set()
            while not send.wait(0.05):
                if stop.is_set():
                    return
            if stop.is_set():
                return
            outcome["result"] = loadgen_run(config=cfg, specs=specs, warmup_specs=warmup, progress=progress.report,
                                            should_stop=stop)
            if not token_ids and not _stream_counted_prompts(outcome["result"]):
                # Here, not after: this thread's watch keeps the heartbeat and the cancel going meanwhile.
                outcome["recount"] = _prompt_recount(base_url=deployment.entry_url, api=api,
                                                     model=sweep.served_model_name, specs=specs,
                                                     result=outcome["result"], should_stop=stop.is_set)
        except BaseException as exc:  # re-raised in the sweep's thread below
            outcome["error"] = exc

    built, send = threading.Event(), threading.Event()
    thread = threading.Thread(target=work, name=f"sweep-{sweep.pk}-point-{ordinal}", daemon=True)
    thread.start()
    went_down: _SweepFailed | None = None
    cancelled_here = False
    while thread.is_alive():
        if send.is_set():
            thread.join(PROGRESS_PERIOD_S)
        else:
            built.wait(PROGRESS_PERIOD_S)
        if not thread.is_alive():
            break
        try:
            before_send = built.is_set() and not send.is_set()
            if watch is not None:
                watch.check(force=before_send)
            else:
                _check_cancel(sweep.pk)
            if before_send:
                send.set()
        except _Cancelled:
            stop.set("the sweep was cancelled")  # no new request, in-flight ones aborted
            thread.join(STOP_JOIN_S)
            err = outcome.get("error")
            if outcome.get("result") is None and getattr(err, "result", None) is None:
                progress.ended_before_sending()  # nothing was sent yet (or it never came back): the counts only
                raise
            cancelled_here = True  # what completed is kept, marked partial
            break
        except _SweepFailed as exc:
            stop.set(exc.cause or str(exc))
            thread.join(STOP_JOIN_S)
            err = outcome.get("error")
            if outcome.get("result") is None and getattr(err, "result", None) is None:
                progress.ended_before_sending()  # nothing was sent yet (or it never came back): the counts only
                raise
            went_down = exc
            break
        progress.tick()
    err = outcome.get("error")
    if went_down is not None or cancelled_here:
        # The load generator's partial result (or, in a close race, its complete one).
        result = outcome["result"] if outcome.get("result") is not None else err.result
    elif isinstance(err, LoadgenStopped):
        raise _Cancelled()
    elif err is not None:
        raise err
    else:
        result = outcome["result"]
    stop_reason = ""
    ended_by_stop = 0
    if (not cancelled_here and watch is not None
            and any(not m.startswith(ABORTED_PREFIX) for m in result.records.errors.values())):
        # Once the deployment's stop was asked for, every request that ended unsuccessfully was
        # ended by it, whatever its error (refused, reset, an empty answer, a stream cut short; the
        # load generator ends on its own when its target refuses it, often before the watch has
        # looked again): the stop aborted them, the server did not fail them.
        stop_reason = stop_request(deployment_id=deployment.pk)
        if stop_reason and (went_down is None or went_down.cause == stop_reason):
            ended_by_stop = _ended_by_stop(result, deployment_id=deployment.pk, reason=stop_reason)
            if ended_by_stop:
                progress.aborted_not_failed(ended_by_stop)
                if went_down is None:
                    went_down = _SweepFailed(f"{stop_reason} during point {label}; the sweep stopped",
                                             cause=stop_reason)
    slo = Slo(**grid["slo"]) if grid.get("slo") else None
    summary = run_summary(result, slo=slo)
    unreachable = summary.get("stopped_early")
    if (ended_by_stop and isinstance(unreachable, str) and unreachable.startswith(UNREACHABLE_PREFIX)
            and not any(m.startswith(CONNECT_ERROR_PREFIX) for m in result.records.errors.values())):
        # Every refusal that stopped the load generator came after the stop was asked for (none is
        # left a failure): the stop ended the point, its target did not fail.
        summary["stopped_early"] = stop_reason + REFUSED_AFTER_STOP_TEXT
    if "calibration" in outcome:
        summary["input_calibration"] = outcome["calibration"]
        # Calibration sets the prompts' mean only (each prompt's random words vary): where the stream
        # gave no prompt tokens, the point's own prompts are counted again after it.
        if summary.get("input_length_check") is None and "recount" in outcome:
            summary.update(outcome["recount"])
    # Every point says where its input-token figures come from, token-id prompts (the sim, SGLang,
    # vLLM) as well as text ones.
    _input_tokens_from_recount(summary)
    if "calibration" in outcome:
        check = summary.get("input_length_check")
        summary["flags"]["input_length_mismatch"] = bool(check is not None and check["mismatch"])
        # Text prompts whose length the server reported neither per request nor counted again: the
        # requested length is a claim nobody checked, calibrated or not.
        summary["flags"]["input_length_unchecked"] = check is None
    sent = int(summary.get("requests") or 0)
    timed = point.get("duration_s") is not None
    if timed:
        cap = point.get("max_requests")
        # Without the load generator's cap a closed loop may send past the count: time ended it.
        summary["ended_by"] = "requests" if cap is not None and cap_applied and sent >= cap else "duration"
        summary["prompt_pool"] = limits["specs"]
        summary["prompts_reused"] = sent > limits["specs"]
        if cap is not None:
            summary["request_cap_applied"] = cap_applied
    else:
        summary["ended_by"] = "requests"  # a point without a time limit runs its request count out
    stopped = summary.get("stopped_early")
    if stopped:
        summary["ended_by"] = "target_unreachable"
    if went_down is not None:
        summary["ended_by"] = "deployment_down"
    if cancelled_here:
        # Stopped partway by the cancel: what completed is kept, marked so that nothing reads it as
        # the point's measurement (stored cancelled; the analysis and the comparison leave it out).
        summary_mark_partial(summary, reason="the sweep was cancelled", planned_requests=point.get("max_requests"),
                             planned_duration_s=point.get("duration_s"))
    path = records_dir() / f"run-{run.pk}.npz"
    result.records.save(path)
    progress.measured(summary)   # its last report says what is stored
    progress.tick(final=True)
    run.refresh_from_db(fields=["progress"])
    # Belt and braces beside the one-at-a-time rule: a run of another sweep on a deployment sharing
    # this one's CPUs or GPUs that ran meanwhile (started by hand, or by an older Ceiling).
    shared = run_shared_load(run=run, end=timezone.now())
    if shared:
        summary["flags"][SHARED_LOAD_FLAG] = True
        summary[SHARED_LOAD_FLAG] = shared
    _store_summary(run, summary)
    run.records_path = str(path)
    if timed:
        run.num_requests = sent  # a time-limited point's count is what fitted in its time
    cancelled = went_down is None and (
        cancelled_here or BenchmarkSweep.objects.filter(pk=sweep.pk, cancel_requested=True).exists())
    # Any failed request: is the deployment still whole? A process that ended, the deployment no
    # longer ready, or (where failures are many) an entry server that keeps failing its health
    # check means the engine went down under the point (its row may still say ready until the
    # agent notices): the point's numbers are not a measurement of the deployment, and the later
    # points would only repeat that. A healthy server that fails requests (overload, timeouts) is
    # a measurement: the point is kept and the sweep goes on. A point the load generator stopped
    # because its target stopped answering is never a measurement (most of it was not sent), nor
    # is one the sweep stopped because its deployment went down.
    failures = int(summary.get("failures") or 0)
    had_failures = not cancelled and went_down is None and sent > 0 and failures > 0
    many = had_failures and failures / sent > MAX_FAILED_FRACTION
    down, healthy, health = (went_down.cause or str(went_down)) if went_down is not None else "", None, ""
    # What leads is a stop someone asked for (the watch names it so, as the requests it ended do).
    by_stop = bool(down) and down == (stop_reason or (stop_request(deployment_id=deployment.pk) if watch else ""))
    if had_failures:
        down, healthy, health = _point_down(deployment, check_health=many or bool(stopped))
    failed = went_down is not None or (not cancelled and (bool(stopped) or (had_failures and (bool(down)
                                                                                             or healthy is False))))
    # A whole deployment that failed every request of the point (each one answered with an error,
    # none aborted by a stop) measured nothing: the point is failed with the server's answer, not
    # done, and the sweep goes on to its next point (a shorter one may fit).
    refused = (not cancelled and not failed and sent > 0 and int(summary.get("successes") or 0) == 0
               and (failure_counts(summary)[0] or 0) > 0)
    run.status = (RunStatus.CANCELLED if cancelled else RunStatus.FAILED if failed or refused
                  else RunStatus.DONE)
    run.reason = ("sweep cancelled while this point ran" + (f"; partial: {partial_text(summary)} (kept for the "
                                                            "record, not analysed or ranked)" if cancelled_here else "")
                  if cancelled
                  else _went_down_reason(summary, label, deployment, down=down, healthy=healthy,
                                         health=health, by_stop=by_stop) if failed
                  else _all_failed_reason(summary, label) if refused else "")
    run.ended_at = timezone.now()
    retry_locked(run.save, what=f"storing point {label}")
    if shared:
        _shared_load_mark_back(run=run, shared=shared)
    # Requests done are the ones that finished (a success, or a failure the server answered or cut
    # off: an error status, a connection it closed, reset or refused, a crashing server's too): a
    # request a stop ended in flight (a cancel, a stop someone asked for, or the sweep once its
    # watch saw the deployment go down) did not, and is counted apart (the summary's ``aborted``),
    # the same way whichever stop it was.
    finished = sent - int(summary.get("aborted") or 0)
    fields: dict[str, Any] = {"requests_done": done_before + max(0, finished),
                              "current_tok_s": summary.get("output_throughput_tok_s")}
    if timed:
        # While the sweep runs its total follows what was sent only for a time-limited point (what
        # fitted in its time); a point with a request count keeps its planned count until the sweep
        # ends, when one that ended otherwise than done counts what each point sent (_finish).
        fields["requests_total"] = F("requests_total") + sent - (point.get("max_requests") or 0)
    retry_locked(lambda: BenchmarkSweep.objects.filter(pk=sweep.pk).update(**fields),
                 what=f"storing point {label}")
    if cancelled:
        _broadcast_point(sweep.pk, run)
        raise _Cancelled()
    if failed:
        _broadcast_point(sweep.pk, run)
        raise _SweepFailed(run.reason + "; its numbers are not kept as a measurement" + _later_points_text(
            sweep.points_total - ordinal - 1))
    return run


def _later_points_text(later: int) -> str:
    """What a failed point's reason adds about the points after it: ``" and the 3 later points were
    not run"`` (``" and the later point was not run"`` for one), ``""`` when it was the last."""
    if later <= 0:
        return ""
    return " and the later point was not run" if later == 1 else f" and the {later:,} later points were not run"


def _run_bindings(run: BenchmarkRun) -> tuple[str, set[int], set[int]] | None:
    """``(node name, CPUs, GPUs)`` the deployment of measured ``run`` held while it ran: from the
    processes and node of its snapshot (what was running when its sweep started; a process counts
    with ``effective_cpus``, else ``cpus``, only when it was pinned, and its ``gpu_ids``), else,
    for a row without them, from its sweep's deployment now
    (:func:`benchmarks.selectors.deployment_bindings`); None when neither is known."""
    from benchmarks.selectors import deployment_bindings
    from deployments.topology import parse_cpulist

    snap = run.snapshot if isinstance(run.snapshot, Mapping) else {}
    node = (snap.get("node") or {}).get("name") if isinstance(snap.get("node"), Mapping) else None
    processes = snap.get("processes")
    if node and isinstance(processes, list) and processes:
        cpus: set[int] = set()
        gpus: set[int] = set()
        for p in processes:
            if not isinstance(p, Mapping):
                continue
            if p.get("cpus") and isinstance(p.get("cpus"), str):
                try:
                    cpus.update(parse_cpulist(p.get("effective_cpus") or p["cpus"]))
                except (ValueError, TypeError):
                    pass
            gpus.update(g for g in p.get("gpu_ids") or [] if isinstance(g, int) and not isinstance(g, bool))
        return node, cpus, gpus
    deployment = run.sweep.deployment if run.sweep is not None else None
    if deployment is None:
        return None
    return (deployment.node.name, *deployment_bindings(deployment=deployment))


def run_shared_load(*, run: BenchmarkRun, end) -> list[dict[str, Any]]:
    """The runs of other sweeps whose time overlapped measured ``run``'s (from its ``started_at``
    to ``end``, a datetime) on a deployment that shares a CPU or GPU with ``run``'s on the same
    node (:func:`_run_bindings`): each ``{"run_id", "sweep_id", "deployment_id", "shares"}``,
    ``shares`` in words (``CPU 0``, ``CPUs 0-1 and GPU 3``), by run id; empty when none did or
    ``run``'s bindings are unknown. Another run's time is its ``started_at`` to its ``ended_at``
    (a run still running: to ``end``). Such a run measured the other's load as well as its own,
    so :data:`SHARED_LOAD_FLAG` is raised on it; the rule that sweeps of such deployments run one
    at a time (:func:`_start_or_hold`) keeps this from happening to sweeps Ceiling starts."""
    from django.db.models import Q

    from benchmarks.choices import RunSource
    from benchmarks.selectors import shared_text

    if run.started_at is None or run.sweep_id is None:
        return []
    mine = _run_bindings(run)
    if mine is None or not (mine[1] or mine[2]):
        return []
    others = (BenchmarkRun.objects.filter(source=RunSource.MEASURED, sweep__isnull=False, started_at__isnull=False,
                                          started_at__lt=end)
              .filter(Q(ended_at__gt=run.started_at) | Q(ended_at__isnull=True, status=RunStatus.RUNNING))
              .exclude(sweep_id=run.sweep_id).select_related("sweep__deployment__node").order_by("pk"))
    out = []
    for other in others:
        theirs = _run_bindings(other)
        if theirs is None or theirs[0] != mine[0]:
            continue
        cpus, gpus = mine[1] & theirs[1], mine[2] & theirs[2]
        if cpus or gpus:
            out.append({"run_id": other.pk, "sweep_id": other.sweep_id, "deployment_id": other.sweep.deployment_id,
                        "shares": f"{shared_text(cpus, gpus)} on node {mine[0]}"})
    return out


def _shared_load_mark_back(*, run: BenchmarkRun, shared: list[dict[str, Any]]) -> None:
    """Raise :data:`SHARED_LOAD_FLAG` on each run of ``shared`` that already ended, naming ``run``
    (a run still running finds ``run`` itself when it ends), and store its sweep's analysis again
    when one is stored, so the report leaves the point out. Best effort: a failure is logged,
    never fails this sweep."""
    for entry in shared:
        try:
            other = BenchmarkRun.objects.select_related("sweep").filter(pk=entry["run_id"]).first()
            if other is None or other.status == RunStatus.RUNNING:
                continue
            summary = dict(other.summary) if isinstance(other.summary, Mapping) else {}
            noted = [e for e in summary.get(SHARED_LOAD_FLAG) or [] if isinstance(e, Mapping)]
            if any(e.get("run_id") == run.pk for e in noted):
                continue
            summary[SHARED_LOAD_FLAG] = [*noted, {"run_id": run.pk, "sweep_id": run.sweep_id,
                                                  "deployment_id": run.sweep.deployment_id if run.sweep else None,
                                                  "shares": entry["shares"]}]
            flags = summary.get("flags")
            if isinstance(flags, dict):
                summary["flags"] = {**flags, SHARED_LOAD_FLAG: True}
            other.summary = json_safe(summary)
            other.flags = sorted({*(other.flags or []), SHARED_LOAD_FLAG})
            retry_locked(lambda: other.save(update_fields=["summary", "flags"]),
                         what=f"flagging run #{other.pk} {SHARED_LOAD_FLAG}")
            if other.sweep is not None and other.sweep.analysis:
                analysis = json_safe(sweep_analyse(sweep=other.sweep))
                retry_locked(lambda: BenchmarkSweep.objects.filter(pk=other.sweep_id).update(analysis=analysis),
                             what=f"storing sweep #{other.sweep_id}'s analysis again")
        except Exception:  # noqa: BLE001 - the other run's flag must not fail this sweep
            log.warning("run %s: flagging run %s %s failed", run.pk, entry.get("run_id"), SHARED_LOAD_FLAG,
                        exc_info=True)


#: Seconds one health check of the entry server may take, and how many checks (2 s apart) must all
#: fail before a point with many failed requests counts as "the deployment went down".
ENTRY_HEALTH_TIMEOUT_S = 3.0
ENTRY_HEALTH_ATTEMPTS = 3
ENTRY_HEALTH_GAP_S = 2.0
#: Seconds between reads of the process rows while :func:`_point_down` waits between health checks
#: (the node agent marks a dead process within its tick, 0.5 s by default).
DOWN_POLL_S = 0.25
#: Seconds a point's failure reason waits for a deployment still marked ready to be marked down
#: after one of its processes ended (the agent marks the deployment right after the process), so
#: the stored text names the state the deployment was going to.
REASON_STATUS_WAIT_S = 1.0


def _deployment_down(deployment) -> str:
    """Why the deployment is no longer whole, from its rows: a stop someone asked for
    (:func:`stop_request`, which leads since what it ends follows from it), a process that ended
    (:func:`process_down`), or the deployment no longer ready (e.g. a worker waiting for its
    restart, which moves it to starting); ``""`` when neither."""
    from deployments.choices import DeploymentStatus
    from deployments.models import Deployment

    down = process_down(deployment_id=deployment.pk)
    status = Deployment.objects.filter(pk=deployment.pk).values_list("status", flat=True).first()
    if down or status != DeploymentStatus.READY:
        stop = stop_request(deployment_id=deployment.pk)
        if stop:
            return stop
    if down:
        return down
    return "" if status == DeploymentStatus.READY else f"the deployment became {status or 'gone'}"


def entry_health(*, deployment, attempts: int = 1) -> tuple[bool | None, str]:
    """Ask the deployment's entry server (the router of a PD deployment, else the single server)
    for its health: ``(True, detail)`` as soon as one of ``attempts`` checks (each at most
    :data:`ENTRY_HEALTH_TIMEOUT_S` s, :data:`ENTRY_HEALTH_GAP_S` s apart) answers HTTP 200,
    ``(False, detail of the last)`` when none does, ``(None, why)`` when the entry process has no
    health URL recorded or this worker has no URL for it. The URL is the one the node agent probes,
    as this worker reaches it (:func:`deployments.services.deployment_url_from_here`)."""
    from deployments.models import ServerProcess
    from deployments.services import deployment_url_from_here

    entry = (ServerProcess.objects.filter(deployment=deployment, role__in=("router", "single"))
             .exclude(health_url="").order_by("ordinal").values_list("role", "health_url").first())
    if not entry:
        return None, "no health URL recorded for the entry process"
    # the URL the agent probes on the node, as this worker reaches it (another node's, not loopback here)
    row, why = deployment_url_from_here(deployment=deployment, role=entry[0], url=entry[1])
    if not row:
        return None, why
    detail = ""
    for attempt in range(max(1, attempts)):
        if attempt:
            time.sleep(ENTRY_HEALTH_GAP_S)
        try:
            resp = httpx.get(row, timeout=ENTRY_HEALTH_TIMEOUT_S, trust_env=False)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            detail = f"GET {row}: {type(exc).__name__}: {exc}"
            continue
        if resp.status_code == 200:
            return True, f"GET {row} answered 200"
        detail = f"GET {row} answered {resp.status_code}"
    return False, detail + (f" ({attempts} checks {ENTRY_HEALTH_GAP_S:g} s apart)" if attempts > 1 else "")


def _point_down(deployment, *, check_health: bool) -> tuple[str, bool | None, str]:
    """Whether the deployment went down under a point that had failed requests: ``(down, healthy,
    health)``. ``down`` is :func:`_deployment_down` (a process that ended, named with how it
    ended, or the deployment no longer ready), ``""`` when neither. With ``check_health`` and
    nothing down yet, the entry server's health is checked up to :data:`ENTRY_HEALTH_ATTEMPTS`
    times, :data:`ENTRY_HEALTH_GAP_S` apart (``healthy`` True as soon as one answers 200, False
    when none does, None when the entry has no health URL; ``health`` the detail); the node agent
    marks a dead process within its monitor tick, so the rows are read again between checks and
    once after them, and a process found ended there is ``down``."""
    down = _deployment_down(deployment)
    if down or not check_health:
        return down, None, down
    healthy, health = None, ""
    for attempt in range(ENTRY_HEALTH_ATTEMPTS):
        if attempt:
            waited = 0.0
            while waited < ENTRY_HEALTH_GAP_S:
                time.sleep(min(DOWN_POLL_S, ENTRY_HEALTH_GAP_S - waited))
                waited += DOWN_POLL_S
                down = _deployment_down(deployment)
                if down:
                    return down, healthy, health
        healthy, health = entry_health(deployment=deployment, attempts=1)
        if healthy is not False:
            break
    if healthy is False:
        health += f" ({ENTRY_HEALTH_ATTEMPTS} checks {ENTRY_HEALTH_GAP_S:g} s apart)"
        down = _deployment_down(deployment)
    return down, healthy, health


def _entry_name(deployment) -> str:
    """``router #0`` (PD) or ``single #0``: the deployment's entry process, or ``the entry server``."""
    from deployments.models import ServerProcess

    row = (ServerProcess.objects.filter(deployment=deployment, role__in=("router", "single"))
           .order_by("ordinal").values_list("role", "ordinal").first())
    return f"{row[0]} #{row[1]}" if row else "the entry server"


def _deployment_then(deployment, *, wait_s: float = 0.0) -> str:
    """The deployment's status as its row says when a reason is written, in words that stay true
    once stored: ``deployment #4 was marked failed at that moment`` or ``deployment #4 was still
    marked ready at that moment`` (the node agent marks a process that ended first and its
    deployment up to a few seconds later), ``deployment #4 had been deleted``. With ``wait_s``
    (seconds) a row still marked ready is read again every :data:`DOWN_POLL_S` until it is not or
    the time is up."""
    from deployments.choices import DeploymentStatus

    deadline = time.monotonic() + wait_s
    while True:
        status = type(deployment).objects.filter(pk=deployment.pk).values_list("status", flat=True).first()
        if status != DeploymentStatus.READY or time.monotonic() >= deadline:
            break
        time.sleep(DOWN_POLL_S)
    if status is None:
        return f"deployment #{deployment.pk} had been deleted"
    if status == DeploymentStatus.READY:
        return f"deployment #{deployment.pk} was still marked ready at that moment"
    return f"deployment #{deployment.pk} was marked {status} at that moment"


def _all_failed_reason(summary: Mapping[str, Any], label: str) -> str:
    """Why a point whose every request failed at a healthy server is failed, from the server's
    answers: ``every request failed at the server during point c=1 6000/4: 1 of 1 failed
    (commonest: 1 x HTTP 400: prompt (6000 tokens) does not fit the KV cache (5376 tokens));
    nothing was measured``. Redacted."""
    errors = summary.get("errors") or {}
    n = int(summary.get("requests") or 0)
    failed = failure_counts(summary)[0] or 0
    top = max(errors.items(), key=lambda kv: kv[1]) if isinstance(errors, Mapping) and errors else None
    what = f"{top[1]:,} x {_answer_message(top[0])}" if top else "no error text"
    return redact_text(f"every request failed at the server during point {label}: {failed:,} of {n:,} failed "
                       f"(commonest: {what}); nothing was measured")


def _answer_message(error: str) -> str:
    """A recorded request error with the message of a JSON error body said in plain words:
    ``HTTP 400: {"object": "error", "message": "prompt ... does not fit ...", ...}`` (SGLang's,
    vLLM's and the sim's OpenAI-style body; ``{"error": {"message": ...}}`` and ``{"detail": ...}``
    too) is ``HTTP 400: prompt ... does not fit ...``; any other text is returned as it is."""
    head, sep, body = error.partition(": ")
    if not sep or not body.lstrip().startswith("{"):
        return error
    try:
        data = json.loads(body)
    except ValueError:
        return error
    inner = data.get("error") if isinstance(data, Mapping) else None
    for source in (inner, data):
        if isinstance(source, Mapping):
            message = source.get("message") or source.get("detail")
            if isinstance(message, str) and message.strip():
                return f"{head}: {message.strip()}"
    return error


def _nothing_measured_reason(sweep: BenchmarkSweep) -> str:
    """The reason of a sweep that ran every point and measured nothing (no point had a successful
    request): ``no point measured anything: <each failed point's reason>`` (the first
    :data:`NOTHING_MEASURED_SHOWN`, then how many more)."""
    reasons = [r for r in sweep.runs.order_by("ordinal").values_list("reason", flat=True)]
    shown = [r or "no reason recorded" for r in reasons[:NOTHING_MEASURED_SHOWN]]
    more = len(reasons) - len(shown)
    return ("no point measured anything: " + "; ".join(shown)
            + (f"; and {more} more point{'s' if more != 1 else ''} the same way" if more > 0 else ""))


#: Failed points named in the reason of a sweep that measured nothing (:func:`_nothing_measured_reason`).
NOTHING_MEASURED_SHOWN = 3


def _went_down_reason(summary: Mapping[str, Any], label: str, deployment, *, down: str, healthy: bool | None,
                      health: str, by_stop: bool = False) -> str:
    """Why a point is not kept as a measurement, leading with what ended: ``router #0 exited with
    code -9 (killed by signal 9; restart policy is 'never') during point c=64 256/256: 96 of 96
    requests sent failed (commonest: 64 x cannot connect to ...), 3,904 not sent (target
    unreachable: 32 consecutive connection failures (connection refused to 127.0.0.1:30000));
    deployment #4 was marked failed at that moment``. What ended is ``down`` (:func:`process_down`,
    the deployment no longer ready, or what the sweep's watch saw when it stopped the point),
    else the entry process that failed its health checks (``single #0 stopped answering (GET
    .../health: ConnectError ...)``), else the load generator's own reason for stopping with what
    the health check said. Then the point's failures and commonest error, the requests never sent
    (with why, unless that is what leads), and the deployment's status as its row said then
    (:func:`_deployment_then`; read again for up to :data:`REASON_STATUS_WAIT_S` while it still
    says ready after a process ended; left out when what leads is the deployment's status).

    Requests a stop aborted are counted apart from the server's failures, as the sweep page's
    outcome counts them, and the commonest error is taken among the failures alone: ``oscar
    requested a stop of deployment #7 at ... UTC during point c=4 64/64: 55 requests sent: 3 failed
    (commonest: 2 x cannot connect to ...), 31 aborted by the stop, 1,945 not sent (its server
    refused connections after the stop was asked for)`` (``by_stop``: what leads is a stop someone
    asked for; otherwise they are ``aborted in flight when the point was stopped``, ``none failed``
    when every unfinished request was aborted). Redacted."""
    errors = summary.get("errors") or {}
    n = int(summary.get("requests") or 0)
    failed = int(summary.get("failures") or 0)
    aborted = int(summary.get("aborted") or 0)
    stopped = summary.get("stopped_early")
    not_sent = summary.get("not_sent")
    failures = {k: v for k, v in errors.items() if not str(k).startswith(ABORTED_PREFIX)} \
        if isinstance(errors, Mapping) else {}
    top = max(failures.items(), key=lambda kv: kv[1]) if failures else None
    if down:
        lead = down
    elif healthy is False:
        lead = f"{_entry_name(deployment)} stopped answering ({health})"
    else:
        lead = f"the load generator stopped sending ({stopped}" + (f"; {health}" if health else "") + ")"
    what = f"{top[1]} x {top[0]}" if top else "no error text"
    sent = " sent" if stopped else ""
    if aborted:
        counts = (f"{counted(n, 'request')}{sent}: " + (f"{failed:,} failed (commonest: {what})" if failed
                                                          else "none failed")
                  + f", {aborted:,} " + ("aborted by the stop" if by_stop
                                        else "aborted in flight when the point was stopped"))
    elif failed:
        counts = f"{failed:,} of {counted(n, 'request')}{sent} failed (commonest: {what})"
    elif n == 1:
        counts = f"the 1 request{sent} did not fail"
    else:
        counts = f"none of {counted(n, 'request')}{sent} failed"
    if stopped:
        rest = f"{not_sent:,} not sent" if isinstance(not_sent, int) else "the rest of its time not used"
        if (down or healthy is False) and stopped != lead:
            # A reason that leads with what leads (the stop) says only the rest.
            why = stopped[len(lead) + 2:] if stopped.startswith(lead + ": ") else stopped
            rest += f" ({why})"
        counts += f", {rest}"
    text = f"{lead} during point {label}: {counts}"
    if not lead.startswith(f"deployment #{deployment.pk} "):
        text += "; " + _deployment_then(deployment, wait_s=REASON_STATUS_WAIT_S if down else 0.0)
    return redact_text(text)


# ---------------------------------------------------------------------------------------- analysis


def _points_of(runs: Iterable[BenchmarkRun], num_gpus: int | None, grid: Any = None) -> list[SweepPoint]:
    out = []
    for run in runs:
        if run.status != RunStatus.DONE or not run.summary:
            continue
        limited_by = point_limited_by(grid=grid, request_rate=run.request_rate, duration_s=run.duration_s)
        d = summary_point(summary=run.summary, concurrency=run.concurrency, request_rate=run.request_rate,
                          input_len=run.input_len, output_len=run.output_len, num_gpus=num_gpus, flags=run.flags,
                          limited_by=limited_by)
        if d["output_throughput_tok_s"] is None:
            continue
        out.append(SweepPoint.from_summary(d))
    return out


def sweep_analyse(*, sweep: BenchmarkSweep) -> dict[str, Any]:
    """Compute the ceiling report of ``sweep`` (not stored; :func:`sweep_execute` stores it).

    One report per input/output length pair: ``{"lengths": {"256/256": report-dict, ...},
    "findings": [sentence, ...], "compared_with": sweep id | None, "errors": {...}, "notes": [...],
    "version": ANALYSIS_VERSION}`` (``version``: :data:`benchmarks.analysis.ANALYSIS_VERSION`, the
    analysis that made it; :func:`sweep_stored_analysis` computes a stored report again when it
    differs). The
    comparison sweep is the latest done sweep of the same served model on the other topology
    (PD vs single) with a report for the same lengths, when both GPU counts are known; a
    comparison whose other side has no usable point is left out with a note and this sweep's own
    report stands. GPU count: ``sweep.num_gpus``; with none (0: a deployment on CPUs only) or
    without one (None: unknown), no per-GPU figure, and a note says which.
    The engine's cap on running sequences, when its servers reported one (:func:`_running_cap`),
    bounds the fitted ceiling (``max_running_batch``).
    """
    num_gpus = sweep.num_gpus or 1
    topology = sweep.topology if sweep.topology in ("pd", "single") else "single"
    runs = list(sweep.runs.all())
    by_len: dict[tuple[int | None, int | None], list[BenchmarkRun]] = {}
    for run in runs:
        by_len.setdefault((run.input_len, run.output_len), []).append(run)
    other = None
    if sweep.served_model_name and topology in ("pd", "single") and sweep.num_gpus:
        other = (BenchmarkSweep.objects.filter(served_model_name=sweep.served_model_name, status=SweepStatus.DONE)
                 .exclude(pk=sweep.pk).exclude(topology=topology).exclude(topology="")
                 .exclude(num_gpus__isnull=True).exclude(num_gpus=0)
                 .order_by("-ended_at", "-id").first())
    out: dict[str, Any] = {"lengths": {}, "findings": [], "compared_with": None, "errors": {}, "notes": [],
                           "version": ANALYSIS_VERSION}
    cap = _running_cap(sweep.snapshot, sweep.topology)
    if sweep.num_gpus == 0:
        out["notes"].append("no GPUs (CPU-only): no per-GPU figure is given and no per-GPU comparison made")
    elif not sweep.num_gpus:
        out["notes"].append("the GPU count is unknown: no per-GPU figure is given and no per-GPU comparison made")
    for (in_len, out_len), group in sorted(by_len.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0)):
        key = f"{in_len}/{out_len}"
        points = _points_of(group, sweep.num_gpus, sweep.grid)
        if not points:
            out["errors"][key] = _no_output_error(_partial_exclusions(group))
            continue
        kwargs: dict[str, Any] = {}
        if other is not None:
            other_runs = list(other.runs.filter(input_len=in_len, output_len=out_len))
            other_points = _points_of(other_runs, other.num_gpus, other.grid)
            if other_points:
                kwargs = {"compare_with": other_points, "compare_num_gpus": other.num_gpus or 1,
                          "compare_topology": other.topology}
            elif other_runs:   # its runs at these lengths have no throughput (no successful request)
                out["notes"].append(f"{key}: no {other.topology}-vs-{topology} comparison with sweep #{other.pk}: "
                                    f"no point has successful output; nothing to analyse")
        try:
            report = ceiling_analyse(points, num_gpus=num_gpus, topology=topology, gpus_known=bool(sweep.num_gpus),
                                     max_running_batch=cap, **kwargs).as_dict()
        except InvalidInput as exc:
            if not (kwargs and set(exc.errors) == {"compare_with"}):
                out["errors"][key] = str(exc)
                continue
            # The other sweep's points are unusable (e.g. its only point failed): this sweep's own
            # analysis stands; only the comparison is left out, with the reason.
            out["notes"].append(f"{key}: no {other.topology}-vs-{topology} comparison with sweep #{other.pk}: "
                                f"{' '.join(exc.errors['compare_with'])}")
            kwargs = {}
            try:
                report = ceiling_analyse(points, num_gpus=num_gpus, topology=topology,
                                         gpus_known=bool(sweep.num_gpus), max_running_batch=cap).as_dict()
            except InvalidInput as again:
                out["errors"][key] = str(again)
                continue
        if kwargs:
            out["compared_with"] = other.pk
        report["excluded"].extend(_partial_exclusions(group))
        out["lengths"][key] = report
        prefix = f"[{key}] " if len(by_len) > 1 else ""
        out["findings"].extend(prefix + f for f in report["findings"])
    return out


def _no_output_error(left_out: list[str]) -> str:
    """The analysis error of a length pair with no finished point, naming the points left out
    (:func:`_partial_exclusions`) when there are any."""
    return "no finished point with output" + (f"; left out: {'; '.join(left_out)}" if left_out else "")


# ``ended_by`` of a point's summary when the sweep or the load generator stopped it before its plan
# was done (:func:`_run_point`).
STOPPED_ENDINGS = ("deployment_down", "target_unreachable")


def _partial_exclusions(runs: Iterable[BenchmarkRun]) -> list[str]:
    """Each run of ``runs`` that the analysis never sees (only done runs are points) because it
    was stopped partway or failed, with its reason, for the report's ``excluded``:
    ``c=4 (cancelled partway: a partial point; 3/20 completed, cancelled)`` for a run stored
    cancelled with a summary marked partial; ``c=4 (stopped partway, failed: deployment #4 is
    stopping during point c=4 64/256: ...)`` for a failed run whose deployment went down under it
    or whose target stopped answering (``ended_by`` in :data:`STOPPED_ENDINGS`), and ``c=4
    (failed: <reason>)`` for any other failed run (its worker lost, say). A run still running, or
    cancelled before it sent anything, is left out."""
    out = []
    for run in runs:
        summary = run.summary if isinstance(run.summary, Mapping) else {}
        label = SweepPoint(concurrency=run.concurrency, output_throughput_tok_s=0.0, ttft_ms=LatencyStats(),
                           tpot_ms=LatencyStats(), request_rate=run.request_rate).label
        if run.status == RunStatus.FAILED:
            what = "stopped partway, failed" if summary.get("ended_by") in STOPPED_ENDINGS else "failed"
            out.append(f"{label} ({what}: {run.reason or 'no reason recorded'})")
            continue
        if run.status == RunStatus.DONE:
            continue
        text = partial_text(summary)
        if text is not None:
            out.append(f"{label} (cancelled partway: a partial point; {text})")
    return out


def provisional_note(sweep: BenchmarkSweep) -> str | None:
    """What a provisional analysis covers, for a sweep that ended without its stored analysis
    (cancelled or failed partway); None for any other sweep."""
    if sweep.analysis or sweep.status not in (SweepStatus.CANCELLED, SweepStatus.FAILED):
        return None
    return (f"provisional: {sweep.ending_text}; these findings cover only the finished points, "
            "not the ones it never ran or stopped partway")


def sweep_stored_analysis(*, sweep: BenchmarkSweep) -> dict[str, Any]:
    """The ceiling report stored with ``sweep`` (``{}`` when none is: the sweep has not finished,
    or ended cancelled or failed), as the current analysis makes it: a report whose ``version`` is
    not :data:`benchmarks.analysis.ANALYSIS_VERSION`, or that has none (stored before versions
    were kept), was made by other analysis code (an older running-batch source, say) and is
    computed again from the sweep's runs (:func:`sweep_analyse`), stored in its place and
    returned; ``sweep.analysis`` is set to it. A report of the current version is returned as
    stored, never computed again. Should computing it again fail, the stored report is returned
    with a note saying so (and the failure is logged), so a page or an API read still answers."""
    stored = sweep.analysis
    if not stored or not isinstance(stored, Mapping):
        return {}
    if stored.get("version") == ANALYSIS_VERSION:
        return dict(stored)
    try:
        fresh = json_safe(sweep_analyse(sweep=sweep))
    except Exception as exc:  # the older report is still the sweep's; say why it was kept
        log.exception("sweep %s: computing its analysis again failed; the stored one is served", sweep.pk)
        kept = dict(stored)
        kept["notes"] = [*kept.get("notes", []),
                         f"made by an older analysis (version {stored.get('version', 'none')}); computing it "
                         f"again with version {ANALYSIS_VERSION} failed: {type(exc).__name__}: {exc}"]
        return kept
    retry_locked(lambda: BenchmarkSweep.objects.filter(pk=sweep.pk).update(analysis=fresh),
                 what=f"storing sweep #{sweep.pk}'s analysis computed again")
    log.info("sweep %s: its analysis (version %s) computed again with version %s", sweep.pk,
             stored.get("version", "none"), ANALYSIS_VERSION)
    sweep.analysis = fresh
    return dict(fresh)


def sweep_analysis(*, sweep: BenchmarkSweep) -> dict[str, Any]:
    """The ceiling report of ``sweep``: the stored one when the sweep finished (computed again
    first when an older analysis made it, :func:`sweep_stored_analysis`), else computed now
    from the runs stored so far (``"provisional": true``; a sweep that ended cancelled or failed
    gets a note first saying the findings cover only its finished points, the one its page shows
    too). Shape: :func:`sweep_analyse`. A point stopped partway or failed is listed, with its
    reason, in its length pair's ``excluded`` (:func:`_partial_exclusions`), or, when no point of
    the sweep finished, in ``errors`` under its length pair."""
    if stored := sweep_stored_analysis(sweep=sweep):
        return {**stored, "provisional": False}
    if not sweep.runs.filter(status=RunStatus.DONE).exists():
        # No report to list them in: a point stopped partway or failed is named under its lengths.
        by_len: dict[str, list[BenchmarkRun]] = {}
        for run in sweep.runs.exclude(status=RunStatus.DONE).order_by("ordinal"):
            by_len.setdefault(f"{run.input_len}/{run.output_len}", []).append(run)
        errors = {key: _no_output_error(left_out)
                  for key, group in by_len.items() if (left_out := _partial_exclusions(group))}
        return {"lengths": {}, "findings": [], "compared_with": None, "errors": errors,
                "notes": ["no run finished" if sweep.status in SWEEP_TERMINAL else "no finished run yet"],
                "provisional": True, "version": ANALYSIS_VERSION}
    out = {**sweep_analyse(sweep=sweep), "provisional": True}
    note = provisional_note(sweep)
    if note:
        out["notes"] = [note, *out["notes"]]
    return out


# ---------------------------------------------------------------------------------------- CLI helpers


#: Seconds between two progress lines of a followed sweep while nothing but its elapsed time (or
#: tok/s) changes: a point of one long request changes no count for a minute.
PROGRESS_HEARTBEAT_S = 10.0


def sweep_follow_line(*, sweep: BenchmarkSweep, elapsed_s: float) -> str:
    """One line of a followed sweep's progress, from its start: phase, points done/total, requests
    done (of the sweep, and of the running point, with its failed requests), elapsed seconds and
    the running point's output tok/s, e.g. ``sweep #7 12 s: running, sending c=1 256/256, points
    1/3 done, requests 37/225 done (point 12/25), 41.0 output tok/s (last 0.5 s window), 38.4
    output tok/s (mean since start)``.

    The phase is the sweep's status until it runs (with its queue note while pending or waiting);
    then ``starting`` (before its first point; ``starting <point>`` once the next point is named,
    before its run row runs and while that row's progress has neither a phase nor a measured
    report with ``done`` and ``total``), ``preparing prompts for <point>, N/M prompts built``,
    ``warming up for <point>, N/M warm-up requests`` (warm-up requests that ended, of those sent
    before the measured ones; never in the request counts) or ``sending <point>`` once the running
    point's progress is a measured report (``done`` and ``total``), and ``analysing the results``
    once every point is done. The sweep's request total is the one the API gives
    (:attr:`benchmarks.models.BenchmarkSweep.requests_total_known`): a sweep with points limited by
    time alone has none until it is done and says so (``requests 142 done, total not known:
    points limited by time``) rather than a total that falls behind its count. A time-limited
    closed-loop point's total is the requests sent so far, said as such (``point 42 done of 44
    sent so far, time-limited``). The running point's output tok/s is given twice, each named:
    over the last report window (:data:`TOK_S_WINDOW_S`; the sweep's ``current_tok_s``) and the
    mean since its first request (its progress ``tok_s_mean``, left out before any token),
    neither a stored result. An ended sweep whose requests a stop or the loss of its worker ended
    in flight says how many and what ended them (``requests 14/25 done, 11 aborted in flight when
    the worker was lost``), and one whose requests sent are unknown says so rather than give a
    total (:attr:`benchmarks.models.BenchmarkSweep.requests_sent_unknown`)."""
    from benchmarks.selectors import sweep_aborted_by, sweep_queue_note, sweep_requests_aborted_apart

    phase = str(sweep.status)
    point = ""
    prog: dict[str, Any] = {}
    if sweep.status in (SweepStatus.PENDING, SweepStatus.WAITING):
        note = sweep_queue_note(sweep=sweep)
        phase += f" ({note})" if note else ""
    elif sweep.status == SweepStatus.RUNNING:
        run = sweep.runs.filter(status=RunStatus.RUNNING).order_by("-ordinal").first()
        prog = (run.progress or {}) if run is not None else {}
        if run is None and sweep.current_point:
            phase = f"running, starting {sweep.current_point}"
        elif run is None and sweep.points_total and sweep.points_done >= sweep.points_total:
            phase = "running, analysing the results"
        elif run is None:
            phase = "running, starting"
        elif prog.get("phase") == WARMUP_PHASE:
            phase = (f"running, {WARMUP_PHASE} for {sweep.current_point}, "
                     f"{int(prog.get('warmup_done') or 0)}/{prog.get('warmup_total') or 0} warm-up requests")
        elif prog.get("phase"):
            phase = (f"running, {prog['phase']} for {sweep.current_point}, "
                     f"{int(prog.get('prepared') or 0)}/{prog.get('total') or 0} prompts built")
        elif "done" not in prog or "total" not in prog:
            # The run row exists but no report of its measured requests has come yet (no phase,
            # no counts: its prompts are not being built yet, or the row was just reset): only a
            # report with done/total says requests are being sent.
            phase = f"running, starting {sweep.current_point}" if sweep.current_point else "running, starting"
        else:
            phase = f"running, sending {sweep.current_point}"
            done = int(prog.get("done") or 0)
            total = prog.get("total") or run.num_requests
            if _total_sent_so_far(run):
                point = f"point {done} done of {prog.get('total') or 0} sent so far, time-limited"
            else:
                point = f"point {done}" + (f"/{total}" if total else " sent")
            failed, aborted = int(prog.get("failed") or 0), int(prog.get("aborted") or 0)
            point = (f" ({point}" + (f", {failed} failed" if failed else "")
                     + (f", {aborted} aborted in flight" if aborted else "") + ")")
    total = sweep.requests_total_known
    if sweep.requests_sent_unknown:
        requests = f"requests {sweep.requests_done} finished, how many were sent is unknown (the worker was lost)"
    elif total is not None:
        requests = f"requests {sweep.requests_done}/{total} done{point}"
    else:
        requests = f"requests {sweep.requests_done} done{point}, total not known: points limited by time"
    aborted = sweep_requests_aborted_apart(sweep=sweep) if sweep.status in SWEEP_TERMINAL else None
    if aborted:
        requests += f", {aborted} aborted in flight {sweep_aborted_by(sweep=sweep)}"
    line = (f"  sweep #{sweep.pk} {elapsed_s:.0f} s: {phase}, points {sweep.points_done}/{sweep.points_total} done, "
            f"{requests}")
    if sweep.status == SweepStatus.RUNNING:
        if sweep.current_tok_s is not None:
            line += f", {sweep.current_tok_s:.1f} output tok/s (last {TOK_S_WINDOW_S:g} s window)"
        if isinstance(prog.get("tok_s_mean"), (int, float)):
            line += f", {prog['tok_s_mean']:.1f} output tok/s (mean since start)"
    return line


def sweep_wait(*, sweep: BenchmarkSweep, timeout_s: float, progress=None, poll_s: float = 1.0,
               every_s: float | None = None) -> BenchmarkSweep:
    """Follow ``sweep`` until it ends or ``timeout_s`` passes; ``progress(text)`` gets
    :func:`sweep_follow_line` at once, whenever the phase or a count changes, and every
    ``every_s`` seconds meanwhile (default :data:`PROGRESS_HEARTBEAT_S`). A read the database kept locked past its busy timeout is said
    and skipped (the sweep is not ours to fail); the next poll tries again. Returns the refreshed
    row. ``manage.py sweep --wait`` and ``manage.py demo`` follow their sweeps with it."""
    every_s = PROGRESS_HEARTBEAT_S if every_s is None else every_s
    start = time.monotonic()
    last_key, last_said = None, 0.0
    while True:
        try:
            sweep.refresh_from_db()
        except OperationalError as exc:
            if not is_locked(exc):
                raise
            if progress:
                progress(f"sweep #{sweep.pk}: {busy_text(exc, what='reading its progress')}; still waiting")
            if time.monotonic() - start > timeout_s:
                return sweep
            time.sleep(poll_s)
            continue
        now = time.monotonic()
        if progress:
            line = sweep_follow_line(sweep=sweep, elapsed_s=now - start)
            # what changed, the elapsed seconds and the tok/s left aside
            key = [part for part in line.split(": ", 1)[1].split(", ") if " output tok/s " not in part]
            if key != last_key or now - last_said >= every_s:
                progress(line)
                last_key, last_said = key, now
        if sweep.status in SWEEP_TERMINAL or now - start > timeout_s:
            return sweep
        time.sleep(poll_s)


def _total_sent_so_far(run: BenchmarkRun) -> bool:
    """Whether the running point's progress ``total`` is the requests sent so far rather than a
    planned count: a closed loop limited by time (:class:`_PointProgress`)."""
    p = run.progress or {}
    if "total_sent_so_far" in p:
        return bool(p["total_sent_so_far"])
    return bool(p.get("duration_s") or run.duration_s) and run.request_rate is None


def sweep_report_text(*, sweep: BenchmarkSweep) -> str:
    """The sweep as plain text for a terminal: a heading (its reason wrapped below it), the results
    table (:func:`benchmarks.sweeps.results_table_lines`: narrow, its long cells' notes below it),
    an ended sweep's requests in its page's words (:func:`benchmarks.selectors.sweep_requests_text`:
    what was sent, finished and aborted, or that the sent count is unknown) and the ceiling findings
    as its page shows them: the stored analysis, or for a sweep that ended failed or cancelled the
    provisional one of its finished points (:func:`sweep_analysis`, its note first among the
    notes), or a line saying why there are none; then the analysis' errors and notes. Every line
    of text is wrapped to :data:`benchmarks.sweeps.REPORT_WIDTH` columns."""
    from benchmarks.selectors import sweep_requests_text
    from benchmarks.sweeps import REPORT_WIDTH, results_table_lines

    sweep.refresh_from_db()

    def wrapped(text: str, first: str, rest: str) -> list[str]:
        return textwrap.wrap(text, width=REPORT_WIDTH, initial_indent=first, subsequent_indent=rest,
                             break_on_hyphens=False) or [first.rstrip()]

    gpus = (f"{sweep.num_gpus} GPUs" + (" modelled" if sweep.gpus_modelled else "") if sweep.num_gpus
            else "no GPUs (CPU-only)" if sweep.num_gpus == 0 else "GPU count unknown")
    from deployments.services import controls_visible, free_text_shown

    lines = [f"Sweep #{sweep.pk} {controls_visible(free_text_shown(sweep.name_label))} — {sweep.status}"]  # stored before refused
    if sweep.reason:
        lines += wrapped(sweep.reason, "  reason: ", "    ")
    lines += wrapped(f"model {sweep.served_model_name}, {sweep.engine} {sweep.topology}, {gpus}; "
                     f"client host {(sweep.snapshot or {}).get('client_host', '-')}", "  ", "    ")
    runs = list(sweep.runs.order_by("ordinal"))
    if runs:
        lines += ["  " + row for row in results_table_lines(runs, num_gpus=sweep.num_gpus)]
    if sweep.status in SWEEP_TERMINAL:
        lines += wrapped(sweep_requests_text(sweep=sweep), "  requests: ", "    ")
    analysis = sweep_stored_analysis(sweep=sweep)
    if not analysis and sweep.status in (SweepStatus.CANCELLED, SweepStatus.FAILED):
        # The provisional analysis its page shows, led by its note on what it covers.
        analysis = sweep_analysis(sweep=sweep)
    if analysis.get("findings"):
        lines.append("  Ceiling findings (provisional: see the first note below):" if analysis.get("provisional")
                     else "  Ceiling findings:")
        for finding in analysis["findings"]:
            lines += wrapped(finding, "   - ", "     ")
    elif sweep.status in SWEEP_TERMINAL:
        why = ("see the analysis errors below" if analysis.get("errors")
               else f"{sweep.ending_text} before any point finished" if sweep.status != SweepStatus.DONE
               else "the analysis found none")
        lines += wrapped(f"none ({why})", "  Ceiling findings: ", "    ")
    else:
        lines.append(f"  Ceiling findings: none yet (the ceiling analysis is written when the sweep finishes; "
                     f"it is {sweep.status})")
    for key, err in (analysis.get("errors") or {}).items():
        lines += wrapped(f"{err}", f"  analysis {key}: ", "    ")
    for note in analysis.get("notes") or []:
        lines += wrapped(note, "  note: ", "    ")
    return "\n".join(lines)
