"""Non-trivial reads of the benchmarks app (lists with filters, related rows prefetched)."""
from __future__ import annotations

from django.db.models import Case, IntegerField, QuerySet, Value, When

from benchmarks.choices import RunStatus
from benchmarks.models import RUN_LIST_DEFERRED, BenchmarkRun, BenchmarkSweep
from benchmarks.sweeps import counted
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import query_text

# The largest primary key a row can have (``BigAutoField``: a signed 64-bit integer). A larger
# id names no row, and the database cannot even compare with it (SQLite raises OverflowError).
PK_MAX = 2**63 - 1


def sweep_list(*, deployment_id: int | None = None, status: str | None = None,
               served_model_name: str | None = None) -> QuerySet[BenchmarkSweep]:
    """Sweeps, newest first, optionally filtered by deployment, status or served model name."""
    qs = BenchmarkSweep.objects.select_related("deployment__recipe", "created_by")
    if deployment_id is not None:
        qs = qs.filter(deployment_id=deployment_id)
    if status:
        qs = qs.filter(status=status)
    if served_model_name:
        qs = qs.filter(served_model_name=served_model_name)
    return qs


def sweep_runs(*, sweep: BenchmarkSweep) -> QuerySet[BenchmarkRun]:
    """The runs of ``sweep`` in grid order (``original_text`` deferred: :data:`RUN_LIST_DEFERRED`)."""
    return sweep.runs.defer(*RUN_LIST_DEFERRED).order_by("ordinal", "id")


#: The order of ``GET /api/runs/`` without ``?order=``: newest first (ties by id descending), the
#: order of the runs page.
RUN_LIST_DEFAULT_ORDER = "-created_at"

#: The orders of ``GET /api/runs/`` that rank runs by a metric: done runs come first.
RUN_LIST_METRIC_ORDERS = ("output_tok_s", "ttft_p99_ms")

#: Every order ``GET /api/runs/`` takes, ``-`` first for descending.
RUN_LIST_ORDERS = tuple(sorted(f"{sign}{key}" for key in ("created_at", *RUN_LIST_METRIC_ORDERS) for sign in ("", "-")))


def run_order_problem(order: str) -> str | None:
    """The refusal of ``order``, the runs' ``?order=`` (``must be one of -created_at, ...; got
    'zzz'``), None for one of :data:`RUN_LIST_ORDERS`."""
    if order in RUN_LIST_ORDERS:
        return None
    return f"must be one of {', '.join(RUN_LIST_ORDERS)}; got {query_text(order)}"


def run_list(*, sweep_id: int | None = None, source: str | None = None, status: str | None = None,
             order: str | None = None) -> QuerySet[BenchmarkRun]:
    """Runs, filtered by sweep, source (measured, imported) or status; ``order`` one of
    ``output_tok_s``, ``-output_tok_s``, ``ttft_p99_ms``, ``-ttft_p99_ms``, ``created_at``,
    ``-created_at`` (default :data:`RUN_LIST_DEFAULT_ORDER`: newest first, as the runs page lists
    them, measured and imported runs together); a sort by a metric (:data:`RUN_LIST_METRIC_ORDERS`)
    lists the done runs first and every other (failed, cancelled, running: no measurement to rank,
    e.g. a point a stop cut short) after them, each group in that order; ties are broken by id in the order's direction, so
    the default's by id descending. Raises :class:`InvalidInput` for another order. The imported
    text is deferred (:data:`RUN_LIST_DEFERRED`): one access reads it for one row."""
    qs = BenchmarkRun.objects.select_related("sweep").defer(*RUN_LIST_DEFERRED)
    if sweep_id is not None:
        qs = qs.filter(sweep_id=sweep_id)
    if source:
        qs = qs.filter(source=source)
    if status:
        qs = qs.filter(status=status)
    if order and (problem := run_order_problem(order)):
        raise InvalidInput({"order": [problem]})
    order = order or RUN_LIST_DEFAULT_ORDER
    tiebreak = "-id" if order.startswith("-") else "id"
    if order.lstrip("-") in RUN_LIST_METRIC_ORDERS:
        # A run that is not done (failed, cancelled, still running) is no measurement to rank: its
        # figure is kept for the record, but a sort by a metric lists it after every done run.
        qs = qs.annotate(not_measured_rank=Case(When(status=RunStatus.DONE, then=Value(0)), default=Value(1),
                                            output_field=IntegerField()))
        return qs.order_by("not_measured_rank", order, tiebreak)
    return qs.order_by(order, tiebreak)


def runs_by_ids(*, ids: list[int], field: str = "ids") -> list[BenchmarkRun]:
    """The runs with ``ids``, in the order given. Raises :class:`InvalidInput` under ``field``
    naming every missing id at once (``no run with id 999``, ``no runs with ids 998, 999``; an id
    outside 1..:data:`PK_MAX` among them, never sent to the database): a bad value of the query,
    as a malformed one is."""
    possible = [i for i in ids if 1 <= i <= PK_MAX]
    found = {r.pk: r for r in BenchmarkRun.objects.filter(pk__in=possible).select_related("sweep")
             .defer(*RUN_LIST_DEFERRED)}
    missing = list(dict.fromkeys(i for i in ids if i not in found))
    if missing:
        raise InvalidInput({field: [missing_ids_text("run", missing)]})
    return [found[i] for i in ids]


def missing_ids_text(noun: str, missing: list[int]) -> str:
    """``no run with id 999`` or ``no runs with ids 998, 999``: the ids of a query that name no row."""
    if len(missing) == 1:
        return f"no {noun} with id {missing[0]}"
    return f"no {noun}s with ids {', '.join(map(str, missing))}"


def sweep_latest_for_recipe(*, recipe_name: str) -> BenchmarkSweep | None:
    """The newest sweep of any deployment of the recipe named ``recipe_name``, or None."""
    return sweep_list().filter(deployment__recipe__name=recipe_name).first()


# A pending sweep nobody picked up for this long while a worker slot is free points at a missing
# control worker rather than a queue (a free worker takes a task within a second or two).
QUEUE_STALL_S = 15.0


def sweep_requests_cancelled(*, sweep: BenchmarkSweep) -> int:
    """Requests of ``sweep`` that a cancel ended in flight (the ``aborted`` count of each point
    stored cancelled partway, :func:`benchmarks.sweeps.summary_mark_partial`); not among its
    ``requests_done``. 0 when no point was cut by a cancel."""
    total = 0
    for summary in sweep.runs.filter(status="cancelled").values_list("summary", flat=True):
        part = summary.get("partial") if isinstance(summary, dict) else None
        aborted = part.get("aborted") if isinstance(part, dict) else None
        if isinstance(aborted, int) and not isinstance(aborted, bool):
            total += aborted
    return total


def sweep_requests_aborted(*, sweep: BenchmarkSweep) -> int:
    """Requests of ``sweep`` that a stop ended in flight: a cancel (as
    :func:`sweep_requests_cancelled` counts them), its deployment going down under a point (the
    ``aborted`` count of each point stored failed) or the loss of the worker running it (those a
    point had in flight when its process was lost, as its last progress report counted them,
    :func:`sweep_requests_lost`); never among its ``requests_done``. 0 when no point had any."""
    from benchmarks.sweeps import lost_point

    total = 0
    for status, summary, progress in sweep.runs.filter(status__in=("cancelled", "failed")).values_list(
            "status", "summary", "progress"):
        if not isinstance(summary, dict) or not summary:
            aborted = progress.get("aborted") if lost_point(progress) else None
        else:
            part = summary.get("partial") if status == "cancelled" else None
            aborted = part.get("aborted") if isinstance(part, dict) else summary.get("aborted")
        if isinstance(aborted, int) and not isinstance(aborted, bool):
            total += aborted
    return total


def sweep_requests_lost(*, sweep: BenchmarkSweep) -> int | None:
    """Requests of ``sweep`` that a point had in flight when the worker running the sweep was lost
    (its progress's ``lost_in_flight``, :func:`benchmarks.services.sweeps.lost_point_progress`),
    also in :func:`sweep_requests_aborted`; 0 when no point's worker was lost, None when a lost
    point's last report did not count the requests it had sent (unknown)."""
    from benchmarks.sweeps import WORKER_LOST

    if "worker lost" not in (sweep.reason or ""):
        return 0
    total = 0
    for lost in sweep.runs.filter(progress__ended_by=WORKER_LOST).values_list("progress__lost_in_flight", flat=True):
        if not isinstance(lost, int) or isinstance(lost, bool):
            return None
        total += lost
    return total


#: Said beside the requests of a sweep whose worker was lost mid-point (the sweep page, the
#: terminal report): the point's counts are its last progress report's, whose time the reason gives
#: (:func:`benchmarks.sweeps.lost_point_text`).
LOST_COUNTS_NOTE = ("the point the worker was running is counted as its last progress report counted it: the "
                    "process took its per-request records with it")


def sweep_requests_aborted_apart(*, sweep: BenchmarkSweep) -> int | None:
    """The requests aborted in flight that the sweep page and the terminal report name apart from
    a cancel's: under a failed sweep every request a stop ended in flight
    (:func:`sweep_requests_aborted`); under a cancelled one those its lost worker had in flight
    (the cancel found no process to abort them; :func:`sweep_requests_cancelled` counts the
    cancel's own); None for any other sweep, or none."""
    if sweep.status == "failed":
        return sweep_requests_aborted(sweep=sweep)
    if sweep.status == "cancelled":
        return (sweep_requests_aborted(sweep=sweep) - sweep_requests_cancelled(sweep=sweep)) or None
    return None


def sweep_requests_text(*, sweep: BenchmarkSweep) -> str:
    """The requests of an ended ``sweep`` in the words of its page's Requests line, for a terminal:
    ``24 / 24 requests``, ``61 finished of 63 sent, 2 aborted in flight when the deployment went
    down (not counted as done)``, ``14 finished of 25 sent, 11 aborted in flight when the worker was
    lost (not counted as done; <LOST_COUNTS_NOTE>)``, ``14 finished; how many were sent is unknown
    (...)`` (:attr:`BenchmarkSweep.requests_sent_unknown`) or ``none sent``."""
    done, total = sweep.requests_done, sweep.requests_total_known
    ended_short = sweep.status in ("failed", "cancelled")
    if sweep.requests_sent_unknown:
        text = (f"{done:,} finished; how many were sent is unknown (the worker running the sweep was lost before "
                "the point it ran counted the requests it had sent)")
    elif total is None:
        text = f"{counted(done, 'request')} done, total not known: points limited by time"
    elif ended_short and not total and not done:
        text = "none sent"
    elif ended_short and done < total:
        text = f"{done:,} finished of {total:,} sent"
    else:
        text = f"{done:,} / {counted(total, 'request')}"
    cancelled = sweep_requests_cancelled(sweep=sweep) if sweep.status == "cancelled" else 0
    if cancelled:
        text += f", {cancelled:,} aborted in flight by the cancel (not counted as done)"
    apart = sweep_requests_aborted_apart(sweep=sweep)
    if apart:
        text += f", {apart:,} aborted in flight {sweep_aborted_by(sweep=sweep)} (not counted as done)"
    if sweep_requests_lost(sweep=sweep) != 0:
        text += f"; {LOST_COUNTS_NOTE}"
    return text


#: What an aborted request's error says after ``aborted: `` when a stop someone asked for ended it
#: (:func:`benchmarks.services.sweeps.stop_request`: ``oscar requested a stop of deployment #7 at ...``).
STOP_ABORT_MARK = " requested a stop of deployment #"


def aborted_by_stop(errors) -> bool:
    """Whether any request of ``errors`` (a summary's reason → count) was aborted in flight by a stop
    someone asked for, rather than by the sweep once its watch saw the deployment go down."""
    return isinstance(errors, dict) and any(
        str(k).startswith("aborted: ") and STOP_ABORT_MARK in str(k) for k in errors)


def sweep_aborted_by(*, sweep: BenchmarkSweep) -> str:
    """What ended ``sweep``'s aborted requests in flight, in the words its page uses for both its
    outcome and its requests: ``by the cancel`` (a cancelled sweep), ``by a stop`` (a stop someone
    asked for of its deployment: a point's aborted requests name it) or ``when the deployment went
    down`` (a crash, or the deployment leaving ready: the sweep aborted them once it saw it) or
    ``when the worker was lost`` (the process running the sweep ended with requests in flight,
    :func:`sweep_requests_lost`; a cancel of such a sweep found no process left to abort them)."""
    if sweep_requests_lost(sweep=sweep) != 0:
        return "when the worker was lost"
    if sweep.status == "cancelled":
        return "by the cancel"
    for summary in sweep.runs.filter(status="failed").values_list("summary", flat=True):
        if isinstance(summary, dict) and aborted_by_stop(summary.get("errors")):
            return "by a stop"
    return "when the deployment went down"


def deployment_bindings(*, deployment) -> tuple[set[int], set[int]]:
    """The CPUs and GPUs (NVML indices) ``deployment``'s processes hold on its node, as ``(cpus,
    gpus)``. A process counts with what it was pinned to (``effective_cpus`` read back from
    ``/proc``, else its intended ``cpus``) and its ``gpu_ids``; a deployment with no process rows
    yet, with the ``cpus`` and ``gpus`` of its ``spec_snapshot`` roles. An unpinned process (a
    router without ``cpus``) holds no CPU, as in
    :func:`deployments.services.deployment_cpus_in_use`; a CPU list that does not parse holds none."""
    from deployments.models import ServerProcess
    from deployments.topology import parse_cpulist

    rows = list(ServerProcess.objects.filter(deployment=deployment).values_list("effective_cpus", "cpus", "gpu_ids"))
    if not rows:
        roles = (deployment.spec_snapshot or {}).get("roles") or {}
        rows = [("", r.get("cpus") or "", r.get("gpus") or []) for r in roles.values() if isinstance(r, dict)]
    cpus: set[int] = set()
    gpus: set[int] = set()
    for effective, intended, gpu_ids in rows:
        if intended and isinstance(intended, str):
            try:
                cpus.update(parse_cpulist(effective or intended))
            except ValueError:
                pass
        gpus.update(int(g) for g in gpu_ids or [] if isinstance(g, int) and not isinstance(g, bool))
    return cpus, gpus


def shared_text(cpus: set[int], gpus: set[int]) -> str:
    """``CPU 1``, ``CPUs 0-1 and GPU 3``: what two deployments share, in words."""
    from deployments.topology import format_cpulist

    parts = [f"{kind}{'s' if len(ids) > 1 else ''} {format_cpulist(ids)}"
             for kind, ids in (("CPU", cpus), ("GPU", gpus)) if ids]
    return " and ".join(parts)


# A sweep held back for sharing a CPU or GPU (``held_at``) keeps newer sweeps sharing with it
# behind it only while its task has looked within this many seconds: it looks every
# ``SHARED_RECHECK_S`` (5 s), so a held sweep whose task was lost (a worker restart) stops holding
# the queue after about 12 missed looks instead of holding it for good.
HELD_STALE_S = 60.0


def sweep_sharing_blocker(*, sweep: BenchmarkSweep, now=None) -> tuple[BenchmarkSweep, str] | None:
    """The sweep that ``sweep`` must wait for, with why in one sentence, or None.

    Sweeps of two deployments whose processes share a CPU or a GPU on one node run one at a
    time: each would measure the other's load. They start in the order they were created
    (``created_at``, then id), whichever task happens to look first, so a sweep also queues behind
    an older one that shares a CPU or GPU with it and is itself held back for sharing:

    * an older sweep of such a deployment that is held (pending, not cancel-requested, its task
      found it held within :data:`HELD_STALE_S` seconds: ``held_at``) comes first; of several,
      the one just ahead of it in line (the newest of them) is named: ``waiting for sweep #16 on
      deployment #2, which shares CPU 0 on node local and is ahead of it in line; ...``. Only a
      held sweep counts: one queued for a worker slot, or waiting for its deployment to become
      ready (it holds no mark while it waits, so a deployment that never comes up holds nobody),
      or whose deployment is gone, holds no newer one; and only an older one, so two sweeps never
      hold each other and the oldest held sweep waits only for running ones.
    * otherwise the oldest running sweep (other than itself) of such a deployment: ``waiting for
      sweep #12 on deployment #4, which shares CPU 1 on node local; sweeps of deployments that
      share a CPU or GPU run one at a time, and this one starts when that one ends``.

    Such a deployment is one on ``sweep``'s deployment's node sharing a CPU or GPU with it
    (:func:`deployment_bindings`). A sweep without a deployment, or whose deployment holds no
    pinned CPU and no GPU, waits for none."""
    from datetime import timedelta

    from django.db.models import Q
    from django.utils import timezone

    from benchmarks.choices import SweepStatus

    deployment = sweep.deployment
    if deployment is None:
        return None
    my_cpus, my_gpus = deployment_bindings(deployment=deployment)
    if not my_cpus and not my_gpus:
        return None
    now = now or timezone.now()
    on_node = (BenchmarkSweep.objects.filter(deployment__node_id=deployment.node_id)
               .exclude(pk=sweep.pk).exclude(deployment__isnull=True).select_related("deployment__node"))
    ahead = (on_node.filter(status=SweepStatus.PENDING, cancel_requested=False,
                            held_at__gte=now - timedelta(seconds=HELD_STALE_S))
             .filter(Q(created_at__lt=sweep.created_at) | Q(created_at=sweep.created_at, pk__lt=sweep.pk))
             .order_by("-created_at", "-pk"))
    for other in ahead:
        cpus, gpus = deployment_bindings(deployment=other.deployment)
        cpus, gpus = cpus & my_cpus, gpus & my_gpus
        if cpus or gpus:
            return other, (f"waiting for sweep #{other.pk} on deployment #{other.deployment_id}, which shares "
                           f"{shared_text(cpus, gpus)} on node {other.deployment.node.name} and is ahead of it in "
                           "line; sweeps of deployments that share a CPU or GPU run one at a time, in the order "
                           "they were created, and this one starts after that one")
    for other in on_node.filter(status=SweepStatus.RUNNING).order_by("pk"):
        cpus, gpus = deployment_bindings(deployment=other.deployment)
        cpus, gpus = cpus & my_cpus, gpus & my_gpus
        if cpus or gpus:
            return other, (f"waiting for sweep #{other.pk} on deployment #{other.deployment_id}, which shares "
                           f"{shared_text(cpus, gpus)} on node {other.deployment.node.name}; sweeps of deployments "
                           "that share a CPU or GPU run one at a time, and this one starts when that one ends")
    return None


def sweep_queue_note(*, sweep: BenchmarkSweep, now=None) -> str:
    """Why an active sweep is not measuring yet, in one sentence; ``""`` when it is running or over.

    * ``pending``: queued for a benchmark (``control``) worker, which runs
      ``settings.CEILING_CONTROL_CONCURRENCY`` sweeps at once. When that many are waiting or
      running, it names them (it starts when one ends); otherwise it names the pending sweeps
      created before it, if any. A sweep nobody took for more than :data:`QUEUE_STALL_S` seconds
      while a slot is free says the control worker may be down (``make status``); those seconds
      count from its creation or, for a sweep that was held back for sharing a CPU or GPU, from the
      last look that found it held (``held_at``), never the time it was held.
    * ``waiting``: names the deployment, its status and how long the sweep waits for it
      (``grid.wait_ready_s``, seconds) before failing with the reason.
    * either, while a sweep runs on a deployment sharing a CPU or GPU with this one's on the same
      node, or an older such sweep is held in line before it: that sweep and what they share
      (:func:`sweep_sharing_blocker`); this one starts when it ends, or after it in line.
    """
    from django.conf import settings
    from django.utils import timezone

    from benchmarks.choices import SweepStatus

    if sweep.status in (SweepStatus.PENDING, SweepStatus.WAITING):
        held = sweep_sharing_blocker(sweep=sweep)
        if held is not None:
            return held[1]
    if sweep.status == SweepStatus.WAITING:
        from deployments.choices import DeploymentStatus

        dep = sweep.deployment
        if dep is not None and dep.status == DeploymentStatus.READY:
            # Its wait loop looks every WAIT_POLL_S (0.5 s), so it runs within a second.
            return f"deployment #{dep.pk} is ready; the sweep starts within a second"
        limit = (sweep.grid or {}).get("wait_ready_s")
        state = f"deployment #{dep.pk} is {dep.status}" if dep is not None else "its deployment is gone"
        return (f"waiting for the deployment to be ready: {state}"
                + (f"; the sweep fails after {float(limit):.0f} s of waiting" if limit else ""))
    if sweep.status != SweepStatus.PENDING:
        return ""
    slots = settings.CEILING_CONTROL_CONCURRENCY
    busy = list(BenchmarkSweep.objects.filter(status__in=(SweepStatus.WAITING, SweepStatus.RUNNING))
                .exclude(pk=sweep.pk).order_by("pk").values_list("pk", "status")[:slots + 1])
    ahead = list(BenchmarkSweep.objects.filter(status=SweepStatus.PENDING, pk__lt=sweep.pk)
                 .order_by("pk").values_list("pk", flat=True)[:6])

    def named(items: list[str]) -> str:
        return ", ".join(items[:5]) + (", ..." if len(items) > 5 else "")

    queue = (f"; {len(ahead) if len(ahead) <= 5 else 'more than 5'} pending sweep{'s' if len(ahead) != 1 else ''} "
             f"before it ({named([f'#{pk}' for pk in ahead])})") if ahead else ""
    if len(busy) >= slots:
        return (f"queued for a benchmark worker: its {slots} slot{'s' if slots != 1 else ''} "
                f"{'are' if slots != 1 else 'is'} busy ({named([f'#{pk} {st}' for pk, st in busy])}){queue}; "
                "it starts when one ends")
    # Time held back for a sweep sharing a CPU or GPU is no time waiting for a worker: a held sweep's
    # task looks again every SHARED_RECHECK_S and marks held_at, so its wait for a worker starts at
    # the last mark (the look before the one that finds it free), not at its creation.
    queued_since = max((t for t in (sweep.created_at, sweep.held_at) if t is not None), default=None)
    age = ((now or timezone.now()) - queued_since).total_seconds() if queued_since else 0.0
    if age > QUEUE_STALL_S:
        since = " since it was last held back" if sweep.held_at is not None and queued_since == sweep.held_at else ""
        return (f"queued for a benchmark worker for {age:.0f} s{since} while a worker slot is free{queue}: the "
                "control worker may not be running (see `make status`)")
    return "queued for a benchmark worker" + queue


def sweep_load_notes(*, sweep: BenchmarkSweep) -> list[str]:
    """What the sweep's closed-loop loads ask of its engine beyond what it runs at once, one
    sentence per length pair (:func:`benchmarks.sweeps.grid_engine_queue_notes`): from the
    deployment's recipe snapshot and what its servers reported once ready. Such points are
    measured (the engine queues the rest), but their TTFT includes that wait. Empty for a sweep
    without a grid or deployment, or when every point fits or nothing is known."""
    from benchmarks.sweeps import grid_engine_queue_notes

    deployment = sweep.deployment
    if not sweep.grid or deployment is None:
        return []
    try:
        return grid_engine_queue_notes(sweep.grid, spec=deployment.spec_snapshot or {},
                                       engine=sweep.engine or deployment.recipe.engine,
                                       reported=deployment.engine_limits)
    except (KeyError, TypeError, ValueError):  # a grid stored before a key was kept: nothing to say
        return []
