"""Deployment pages: the list; one deployment's header, processes, timeline and live log tail
(polled by htmx), its live telemetry panel (websocket) or, once it ended, its stored telemetry
and sweeps; stop/cancel; log download.

Views are thin: they authorise (:func:`deployments.views.common.role_page`), call one service or
selector and render.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.db.models import Count, Exists, OuterRef
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.urls import reverse

from controlplane.errors import Conflict, NotFound
from controlplane.paging import page_of
from controlplane.realtime import deployment_group
from controlplane.redaction import SecretsUnmaskable, redact_text
from deployments import selectors, services
from deployments.engine_limits import limits_view
from deployments.logfiles import log_file, log_parts
from deployments.choices import (
    DEPLOYMENT_TERMINAL,
    NOT_STARTED,
    PROCESS_TERMINAL,
    STOPPED_FOR_FAILURE,
    DeploymentStatus,
    ProcessStatus,
    Role,
)
from deployments.launch import port_kind_words
from deployments.models import Deployment, ProcessEvent, ServerProcess
from deployments.supervisor import signal_text
from deployments.telemetry.engine import NO_METRICS
from deployments.topology import parse_cpulist, same_cpulist
from deployments.views.common import (
    FORM_METHODS, _agent_view, _can_write, _duration_text, _heartbeat_clock, _status_class, _when, post_or_redirect,
    role_page,
)

# --- deployments ------------------------------------------------------------------------------

# How many log lines the page shows per process; the full file is one click away (download).
LOG_TAIL_LINES = 200
# Timeline rows shown on the page; a process that restarts in a loop can write thousands.
TIMELINE_MAX_EVENTS = 500
POLL_TRIGGER = "every 2s"
#: How often the deployments list and a deployment page's sweep list re-read themselves (htmx), s.
LIST_POLL_S = 5
LIST_POLL_TRIGGER = f"every {LIST_POLL_S}s"
# A running process's health is "stale" once its last probe is older than this many liveness
# periods: the agent probes every period, so missing two in a row means it is not probing.
STALE_PROBE_FACTOR = 3


def _log_file(process: ServerProcess) -> Path | None:
    """The process's log file if its recorded path lies inside ``settings.CEILING_LOG_DIR``
    (:func:`deployments.logfiles.log_file`), else None."""
    return log_file(process.log_path)


def _pinning_view(process: ServerProcess) -> dict[str, Any]:
    """Effective CPU list / memory NUMA nodes (as read back by :func:`deployments.pinning.pinning_read`:
    the CPUs from ``Cpus_allowed_list`` of ``/proc/<pid>/status``, the memory nodes from the
    policy in ``/proc/<pid>/numa_maps`` (bind, interleave), else ``Mems_allowed_list``; or the
    intended ones until then) and the verification verdict: ``state`` is ``verified``,
    ``failed`` (``reason`` says what differs) or ``unchecked``."""
    cpus = process.effective_cpus or process.cpus
    try:
        cpu_count: int | None = len(parse_cpulist(cpus)) if cpus else None
    except ValueError:
        cpu_count = None
    reason = ""
    if process.pinning_verified is True:
        state = "verified"
    elif process.pinning_verified is False:
        state = "failed"
        problems = []
        if process.cpus and process.effective_cpus and not same_cpulist(process.cpus, process.effective_cpus):
            problems.append(f"CPUs {process.effective_cpus} ≠ intended {process.cpus}")
        if process.mem_nodes and process.effective_mems and not same_cpulist(process.mem_nodes, process.effective_mems):
            problems.append(f"memory nodes {process.effective_mems} ≠ intended {process.mem_nodes}")
        reason = "; ".join(problems) or redact_text(process.reason) or "pinning could not be verified"
    elif not process.cpus:
        # Nothing to verify: a role without a CPU list (a router, usually) runs wherever the
        # scheduler puts it, and "not checked yet" would never change.
        state = "unpinned"
    else:
        state = "unchecked"
    return {
        "cpus": cpus,
        "cpu_count": cpu_count,
        "cpus_effective": bool(process.effective_cpus),
        "mems": process.effective_mems or process.mem_nodes,
        "mems_effective": bool(process.effective_mems),
        "numa_node": process.numa_node,
        "method": process.pin_method,
        "state": state,
        "reason": reason,
    }



def _never_started(process: ServerProcess) -> bool:
    """Whether ``process`` ended without ever being spawned (a port in use, a sibling that failed
    first, a stop before its start): no pid, no start, nothing ever answered at its health URL."""
    return process.status in PROCESS_TERMINAL and process.pid is None and process.started_at is None


def _being_stopped(deployment: Deployment) -> bool:
    """Whether a stop (or cancel) of ``deployment`` was asked for or is under way and it has not
    ended yet: nothing of it is starting any more, whatever its processes last reported."""
    return deployment.status not in DEPLOYMENT_TERMINAL and (
        deployment.stop_requested or deployment.status == DeploymentStatus.STOPPING)


def _stop_request(deployment: Deployment, now: datetime) -> dict[str, str] | None:
    """The latest stop or cancel request on the timeline of ``deployment`` being stopped
    (:func:`_being_stopped`): ``{"what": "stop" or "cancel", "ago": "2 s"}``, the age counted to
    ``now``; None when it is not being stopped or no request is on its timeline (a stop the agent
    began itself)."""
    if not _being_stopped(deployment):
        return None
    row = (ProcessEvent.objects.filter(deployment=deployment, process=None, kind__in=("stop-requested", "cancel-requested"))
           .order_by("-at", "-id").values_list("kind", "at").first())
    if row is None:
        return None
    kind, at = row
    return {"what": "cancel" if kind == "cancel-requested" else "stop",
            "ago": _duration_text(max(0.0, (now - at).total_seconds()))}


def _health_view(process: ServerProcess, now: datetime, as_of: datetime | None = None, *,
                 stopping: bool = False) -> dict[str, Any]:
    """What the supervisor's probes last concluded: a badge (``class``, ``text``) from the
    process status (a process is ``ready`` only after every readiness check of its launch plan
    passed), the last probe's outcome and time, consecutive liveness failures and, for a
    crashed process waiting to be restarted, when the restart is due. A running process whose
    last probe is older than :data:`STALE_PROBE_FACTOR` liveness periods
    (``CEILING_LIVENESS_PERIOD_S``) is shown as ``stale (agent offline?)``: only the node agent
    probes, so an old answer means nobody is watching. With ``as_of`` (the offline agent's last
    heartbeat, :func:`deployments.services.deployment_as_last_seen`) a running process reads
    ``last seen healthy at 01:49:30 (agent offline)``: nobody probes it, it may be gone. An ended
    process shows its terminal state alone, ``never started`` for one that was never spawned. With
    ``stopping`` (its deployment is being stopped, :func:`_being_stopped`) a process not yet healthy
    reads ``stopping: not healthy`` and one waiting to be restarted ``stopping: not restarted``:
    neither is starting any more."""
    status = process.status
    stale = False
    if status in (ProcessStatus.READY, ProcessStatus.SPAWNED) and process.last_probe_at is not None:
        stale = (now - process.last_probe_at).total_seconds() > STALE_PROBE_FACTOR * settings.CEILING_LIVENESS_PERIOD_S
    if as_of is not None and status in (ProcessStatus.READY, ProcessStatus.SPAWNED):
        stale = True
        seen = "healthy" if status == ProcessStatus.READY and not process.probe_failures else (
            "degraded" if status == ProcessStatus.READY else "starting")
        badge = ("warn", f"last seen {seen} at {as_of:%H:%M:%S} UTC (agent offline)")
    elif stale:
        badge = ("warn", "stale (agent offline?)")
    elif status == ProcessStatus.READY:
        badge = ("warn", "degraded") if process.probe_failures else ("ok", "healthy")
    elif status == ProcessStatus.SPAWNED and stopping:
        badge = ("warn", "stopping: not healthy")
    elif status == ProcessStatus.SPAWNED:
        badge = ("warn", "starting: not yet healthy")
    elif status == ProcessStatus.PENDING and stopping:
        badge = ("", "stopping: not restarted" if process.next_restart_at else "stopping: not started")
    elif status == ProcessStatus.PENDING:
        badge = ("warn", "restart pending") if process.next_restart_at else ("", "not started")
    elif process.end_reason == NOT_STARTED:
        # never spawned: the launch failed before it (its reason says why, "not started: ...")
        return {"class": "", "text": redact_text(process.reason) or NOT_STARTED, "detail": "", "probed": None,
                "failures": 0, "restart_at": None, "stale": False}
    elif _never_started(process):
        # ended without being spawned (its deployment failed or was stopped first): it was never
        # up, so it did not go "down"
        return {"class": "bad" if status == ProcessStatus.FAILED else "", "text": "never started", "detail": "",
                "probed": None, "failures": 0, "restart_at": None, "stale": False}
    else:
        # Stored codes follow subprocess: -N means signal N ended it, which is no exit code.
        code = process.exit_code
        if code is None:
            detail = status
        elif code < 0:
            detail = f"killed by {signal_text(-code)}"
        else:
            detail = f"exit code {code}"
        if process.end_reason in ("terminated", "killed after grace") and process.reason.startswith(STOPPED_FOR_FAILURE):
            # stopped because a sibling's failure failed the deployment: nobody asked (agent._deployment_fail)
            reason = redact_text(process.reason)
            detail = f"{reason}; this process: {detail}" if code is not None else reason
        elif process.end_reason in ("terminated", "killed after grace"):
            # the supervisor asked it to stop: its exit answers the request (agent._process_stop)
            detail = f"stopped on request, {detail}" if code is not None else "stopped on request"
        badge = ("" if status == ProcessStatus.EXITED else "bad", f"down ({detail})")
        # A process that ended shows only how it ended: its last probe answer ("answered 200,
        # probed 9 s ago") describes a process that no longer exists.
        return {"class": badge[0], "text": badge[1], "detail": "", "probed": None, "failures": 0,
                "restart_at": None, "stale": False}
    return {
        "class": badge[0],
        "text": badge[1],
        "detail": redact_text(process.probe_detail),
        "probed": _when(process.last_probe_at, now),
        "failures": process.probe_failures,
        "restart_at": _when(process.next_restart_at, now) if status == ProcessStatus.PENDING and not stopping else None,
        "stale": stale,
    }


def _server_process_view(process: ServerProcess, now: datetime, as_of: datetime | None = None, *,
                         stopping: bool = False) -> dict[str, Any]:
    """One row of the process table: role, status, pid, uptime (from ``started_at`` to now,
    to ``as_of`` while the agent is offline, or to ``ended_at`` once it ended), restarts,
    pinning, GPU ids, ports and health (``as_of``, ``stopping``: see :func:`_health_view`), and the health URL
    (``health_url``) where the last probe's detail does not already name it ("" for a process
    never started)."""
    uptime = None
    if process.started_at is not None:
        until = process.ended_at if process.status in PROCESS_TERMINAL and process.ended_at else (as_of or now)
        uptime = _duration_text((until - process.started_at).total_seconds())
    # a port's kind in words, as messages name it (``side channel 5600``, not ``side_channel``)
    ports = ([(port_kind_words(kind), port) for kind, port in sorted(process.ports.items())]
             if isinstance(process.ports, dict) else [])
    env = process.env_redacted if isinstance(process.env_redacted, dict) else {}
    health = _health_view(process, now, as_of, stopping=stopping)
    # The probe's own detail names the URL it probed ("http://…/health answered 200"): the URL
    # line under it is for a process whose detail does not say it.
    health_url = "" if _never_started(process) or process.health_url in (health["detail"] or "") else process.health_url
    return {
        "row": process,
        "label": f"{process.role} #{process.ordinal}",
        "status_class": _status_class(process.status),
        "uptime": uptime,
        "ended": process.status in PROCESS_TERMINAL,
        "never_started": _never_started(process),
        "started": _when(process.started_at, now),
        "ready": _when(process.ready_at, now),
        "pinning": _pinning_view(process),
        "gpu_ids": list(process.gpu_ids or []),
        "cuda_visible_devices": redact_text(str(env["CUDA_VISIBLE_DEVICES"])) if "CUDA_VISIBLE_DEVICES" in env else None,
        "ports": ports,
        "gpu_verified": process.gpu_verified,
        "health": health,
        "health_url": health_url,
        "as_of": _when(as_of, now) if as_of is not None and process.status not in PROCESS_TERMINAL else None,
        "has_log": _log_file(process) is not None,
    }


def _entry_url(deployment: Deployment, processes: list[ServerProcess]) -> str:
    """Where clients connect: the URL recorded at deploy time (the router for PD, the single
    server otherwise); for a row without one, the scheme and host:port of that process's
    health URL as this host reaches it (:func:`deployments.services.deployment_url_from_here`:
    another node's process there, not on this host's loopback); "" when neither is known."""
    if deployment.entry_url:
        return deployment.entry_url
    for role in (Role.ROUTER, Role.SINGLE):
        for p in processes:
            if p.role == role and p.health_url:
                parts = urlsplit(p.health_url)
                if parts.scheme and parts.netloc:
                    return services.deployment_url_from_here(deployment=deployment, role=p.role,
                                                              url=f"{parts.scheme}://{parts.netloc}")[0]
    return ""


def _deployment_context(deployment: Deployment, now: datetime) -> dict[str, Any]:
    """Everything the deployment page's live part shows: header facts, the process table and
    the timeline (oldest first, at most :data:`TIMELINE_MAX_EVENTS` of the newest). While the
    node agent is offline, status, health, pinning and uptimes are as it last saw them
    (``as_of``, ``state_note``) and the clocks stop at that time."""
    processes = list(selectors.deployment_processes(deployment=deployment))
    terminal = deployment.status in DEPLOYMENT_TERMINAL
    agent = _agent_view(deployment.node, now)
    events_qs = selectors.deployment_events(deployment=deployment)
    event_total = events_qs.count()
    events = list(events_qs.order_by("-at", "-id")[:TIMELINE_MAX_EVENTS])[::-1]
    as_of = services.deployment_as_last_seen(deployment=deployment)
    spawned = any(p.started_at or p.pid is not None for p in processes)
    duration = _deployment_duration(deployment, as_of or now, spawned=spawned,
                                    stop_request=_stop_request(deployment, now))
    if as_of is not None:
        duration["text"] += f" as of {as_of:%H:%M:%S} UTC (agent offline)"
    return {
        "deployment": deployment,
        "status_class": _status_class(deployment.status),
        "terminal": terminal,
        "live": not terminal,
        "poll_trigger": POLL_TRIGGER,
        "agent": agent,
        # what the page counts the heartbeat's age from and judges the agent's badge by, as the node page
        "heartbeat": _heartbeat_clock(deployment.node, now),
        "waiting_reason": redact_text(services.deployment_waiting_reason(deployment=deployment, readable=True)),
        "reason": redact_text(deployment.reason),
        "entry_url": _entry_url(deployment, processes),
        # why there is none from this host (another node that recorded no address), said in its place
        "entry_url_problem": services.deployment_entry_url_problem(deployment),
        # ended without ever being ready: nothing ever answered there, so the URL is only the plan's
        "entry_never_served": terminal and deployment.ready_at is None,
        "created": _when(deployment.created_at, now),
        "started": _when(deployment.started_at, now),
        # ended before any process was spawned: the agent took it (started_at) but started nothing
        "never_spawned": terminal and not spawned,
        "ready": _when(deployment.ready_at, now),
        "ended": _when(deployment.ended_at, now),
        "duration": duration,
        "processes": [_server_process_view(p, now, as_of, stopping=_being_stopped(deployment)) for p in processes],
        # a stop or cancel asked for or under way: the Stop button is shown disabled
        "being_stopped": _being_stopped(deployment),
        "as_of": _when(as_of, now),
        "state_note": services.deployment_state_note(deployment=deployment, readable=True),
        "process_ids": ",".join(str(p.pk) for p in processes),
        "events": [{"row": e, "at": _when(e.at, now), "message": redact_text(e.message)} for e in events],
        "events_hidden": max(0, event_total - len(events)),
        "limits": limits_view(deployment.engine_limits),
        "limits_missing": _limits_missing(deployment),
    }


def _limits_missing(deployment: Deployment) -> str:
    """What the page says where no engine-reported limits are stored: they are read once the
    deployment is ready, so "yet" only while it may still become ready."""
    if deployment.status not in DEPLOYMENT_TERMINAL:
        return "Not read yet: each server is asked about its capacity once the deployment is ready."
    ended = "failed" if deployment.status == DeploymentStatus.FAILED else "was stopped"
    if deployment.ready_at is None:
        return f"Not read: the deployment {ended} before it was ready."
    return f"Not read: no server reported its capacity before the deployment {ended}."


def _startup_text(seconds: float) -> str:
    """A startup time: tenths of a second under a minute (``13.2 s``), else :func:`_duration_text`."""
    seconds = max(0.0, seconds)
    return f"{seconds:.1f} s" if seconds < 60 else _duration_text(seconds)


def _deployment_duration(deployment: Deployment, now: datetime, *, spawned: bool,
                         stop_request: dict[str, str] | None = None) -> dict[str, Any]:
    """How long ``deployment`` served, by one rule for every page: time serving runs from Ready to
    Ended (or ``now`` while it runs), and the startup (Created to Ready) is told apart, so the
    number does not jump when it is stopped. ``{"label", "text", "startup", "serving"}``:

    * ready, running: ``("Serving for", "8 min 58 s")``, startup ``"13.2 s"``, ``serving`` True;
    * ended after it was ready: ``("Served for", "8 min 58 s")``, startup as above;
    * pending: ``("Serving", "not started yet; waiting 42 s since created")``;
    * started, not ready yet: ``("Serving", "not ready yet; starting for 1 min 03 s since created")``;
    * being stopped before it was ready (:func:`_being_stopped`): ``("Serving", "stopping: stop
      requested 2 s ago; not serving")`` with ``stop_request`` (:func:`_stop_request`; a cancel says
      ``cancel requested``), ``"stopping; not serving"`` without;
    * ended without being ready: ``("Serving", "never ready; ran 11 min 24 s from created")``, or,
      when no process of it was ever spawned (``spawned``; cancelled while pending, a port in use,
      a recipe that no longer renders), ``"never started; ended 5 s after created"``."""
    terminal = deployment.status in DEPLOYMENT_TERMINAL
    until = (deployment.ended_at or now) if terminal else now
    since_created = _duration_text((until - deployment.created_at).total_seconds())
    out: dict[str, Any] = {"label": "Serving", "startup": None, "serving": False}
    if deployment.ready_at is not None:
        out["startup"] = _startup_text((deployment.ready_at - deployment.created_at).total_seconds())
        out["text"] = _duration_text((until - deployment.ready_at).total_seconds())
        out["label"] = "Served for" if terminal else "Serving for"
        out["serving"] = not terminal
    elif _being_stopped(deployment):
        asked = f": {stop_request['what']} requested {stop_request['ago']} ago" if stop_request else ""
        out["text"] = f"stopping{asked}; not serving"
    elif deployment.status == DeploymentStatus.PENDING:
        out["text"] = f"not started yet; waiting {since_created} since created"
    elif not terminal:
        out["text"] = f"not ready yet; starting for {since_created} since created"
    elif deployment.started_at is None or not spawned:
        out["text"] = f"never started; ended {since_created} after created"
    else:
        out["text"] = f"never ready; ran {since_created} from created"
    return out


def _get_deployment(pk: int) -> Deployment:
    return get_object_or_404(Deployment.objects.select_related("recipe", "node", "created_by"), pk=pk)


def _get_process(deployment_pk: int, process_pk: int) -> ServerProcess:
    """Process ``process_pk`` of deployment ``deployment_pk``; :class:`Http404` naming what is
    missing: "No deployment #2.", "No server process #12345." or "Process #1 is not part of
    deployment #2." (it exists, under another deployment)."""
    process = ServerProcess.objects.select_related("deployment").filter(pk=process_pk).first()
    if process is not None and process.deployment_id == deployment_pk:
        return process
    if not Deployment.objects.filter(pk=deployment_pk).exists():
        raise Http404(f"No deployment #{deployment_pk}.")
    if process is None:
        raise Http404(f"No server process #{process_pk}.")
    raise Http404(f"Process #{process_pk} is not part of deployment #{deployment_pk}.")


def _deployment_list_context(request: HttpRequest) -> dict[str, Any]:
    """The rows of the deployments list for ``?page=N`` (:func:`controlplane.paging.page_of`'s
    refusals apply), each with its status badge, agent state, created/ready times (UTC and
    relative; the page counts the ages on) and time serving, when they were read (``as_of``) and
    how often the rows re-read themselves (``poll_s``, seconds)."""
    now = timezone.now()
    spawned = ServerProcess.objects.filter(deployment=OuterRef("pk"), started_at__isnull=False)
    page = page_of(selectors.deployment_list().annotate(process_count=Count("processes"), spawned=Exists(spawned)),
                   request.GET.getlist("page"), noun="deployment")
    rows = []
    for d in page.object_list:
        # The row is only rendered, never saved: a reason can quote engine log lines.
        d.reason = redact_text(d.reason)
        rows.append(
            {
                "d": d,
                "status_class": _status_class(d.status),
                "agent": _agent_view(d.node, now),
                "created": _when(d.created_at, now),
                "ready": _when(d.ready_at, now),
                # time serving (Ready to Ended or now), the startup apart: as the deployment page
                "duration": _deployment_duration(d, now, spawned=d.spawned, stop_request=_stop_request(d, now)),
            }
        )
    return {"deployments": rows, "page": page, "can_write": _can_write(request),
            "rows_url": reverse("deployments:deployment-list-rows") + (f"?page={page.number}" if page.number > 1 else ""),
            "poll_trigger": LIST_POLL_TRIGGER, "poll_s": LIST_POLL_S, "as_of": _when(now, now)}


@role_page()
def deployment_list(request: HttpRequest) -> HttpResponse:
    """Deployment rows, newest first, :data:`controlplane.paging.PER_PAGE` a page (``?page=N``,
    1-based; empty or absent: the first page): status badge, recipe and version, node with agent
    state, created/ready times (UTC and relative), time serving and startup. The rows re-read
    themselves every :data:`LIST_POLL_S` s (:func:`deployment_list_rows_partial`), so states and
    new deployments show without a reload; between reads the page counts the ages and a running
    deployment's time serving on. A page number that is not a whole number from 1 to the last
    page, or ``page`` given more than once, is a 404 saying why and how many pages there are
    (:func:`controlplane.paging.page_of`)."""
    return render(request, "deployments/deployment_list.html", _deployment_list_context(request))


@role_page()
def deployment_list_rows_partial(request: HttpRequest) -> HttpResponse:
    """htmx partial: the deployments list's rows and pager for ``?page=N`` (as
    :func:`deployment_list`), polled by that page every :data:`LIST_POLL_S` s."""
    return render(request, "deployments/_deployment_rows.html", _deployment_list_context(request))


@role_page()
def deployment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One deployment: header (status, reason, node and agent state, recipe version, entry
    URL), the process table, the timeline and a live log tail per process. The live parts
    poll every 2 s (htmx) until the deployment is stopped or failed."""
    deployment = _get_deployment(pk)
    context = _deployment_context(deployment, timezone.now())
    context["can_write"] = _can_write(request)
    context["logs"] = [_process_log_context(p["row"], deployment) for p in context["processes"]]
    context["logs_live"] = deployment.status not in DEPLOYMENT_TERMINAL
    context["ended_phrase"] = ended_phrase(deployment)
    context["telemetry"] = _telemetry_context(deployment, [p["row"] for p in context["processes"]])
    context.update(_sweeps_context(deployment))
    # The page opens the live socket while the deployment runs (its telemetry panel); what it
    # rendered beside it reads as last seen while the socket is down.
    context["page_has_socket"] = context["telemetry"]["live"]
    return render(request, "deployments/deployment_detail.html", context)


# Sweeps listed next to a deployment's telemetry (newest first).
SWEEPS_SHOWN = 20


def _telemetry_context(deployment: Deployment, processes: list[ServerProcess]) -> dict[str, Any]:
    """What the telemetry panel needs: the live group (``deployment-<id>``) while the
    deployment runs, or, once it ended, the window of its stored telemetry in unix seconds
    (``since``/``until``, from the REST history endpoint); plus one row
    per process (id, role, label) for the live table, and ``no_tok_s``: for an engine that exposes
    no ``/metrics`` (:data:`deployments.telemetry.engine.NO_METRICS`) what its output chart says
    instead of "no tok/s recorded yet" (none will ever be: only sweeps measure it), else ``""``."""
    began = deployment.started_at or deployment.created_at
    no_metrics = NO_METRICS.get(deployment.recipe.engine)
    return {
        "group": deployment_group(deployment.pk),
        "live": deployment.status not in DEPLOYMENT_TERMINAL,
        "since": int(began.timestamp()) if began else None,
        "until": int(deployment.ended_at.timestamp()) if deployment.ended_at else None,
        "processes": [
            {"id": p.pk, "role": p.role, "label": f"{p.role} #{p.ordinal}"}
            for p in processes if p.status not in PROCESS_TERMINAL or deployment.status in DEPLOYMENT_TERMINAL
        ],
        "no_tok_s": (f"{no_metrics}, so there is no live tok/s; sweeps measure it (see the benchmark sweeps below)"
                     if no_metrics else ""),
    }


def _sweeps_context(deployment: Deployment) -> dict[str, Any]:
    """The benchmark sweeps run against ``deployment`` (newest first, at most
    :data:`SWEEPS_SHOWN`), when they were read (``sweeps_as_of``, :func:`deployments.views.common._when`),
    and whether the list re-reads itself every :data:`LIST_POLL_S` s (``sweeps_live``): while the
    deployment may still get a sweep (not ended) or one of its sweeps is still active."""
    from benchmarks.choices import SWEEP_ACTIVE  # the benchmarks app builds on this one: import late
    from benchmarks.selectors import sweep_list

    now = timezone.now()
    sweeps = list(sweep_list(deployment_id=deployment.pk)[:SWEEPS_SHOWN])
    live = (deployment.status not in DEPLOYMENT_TERMINAL
            or sweep_list(deployment_id=deployment.pk).filter(status__in=SWEEP_ACTIVE).exists())
    return {
        "sweeps": [{"row": s, "created": _when(s.created_at, now)} for s in sweeps],
        "sweeps_live": live,
        "sweeps_as_of": _when(now, now),
        "sweeps_poll_trigger": LIST_POLL_TRIGGER,
        "sweeps_poll_s": LIST_POLL_S,
    }


@role_page()
def deployment_sweeps_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx partial: the list of benchmark sweeps on one deployment (:func:`_sweeps_context`),
    polled by its page every :data:`LIST_POLL_S` s while the list can still change; the answer
    without a trigger ends the polling."""
    deployment = _get_deployment(pk)
    context = {"deployment": deployment, **_sweeps_context(deployment)}
    return render(request, "deployments/_deployment_sweeps.html", context)


@role_page()
def deployment_live_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx partial: header, process table and timeline of one deployment. The request
    carries ``known`` (process ids the page already shows log panels for); when the set
    changed, the response fires the ``processes-changed`` event so the log section reloads."""
    deployment = _get_deployment(pk)
    context = _deployment_context(deployment, timezone.now())
    context["can_write"] = _can_write(request)
    # Only a page that was opened while the deployment ran polls this, and that page has the live
    # socket; the header's actions come along out of band, so "Run a sweep" goes once it ended.
    context["page_has_socket"] = True
    context["actions_oob"] = True
    response = render(request, "deployments/_deployment_live.html", context)
    if request.GET.get("known", "") != context["process_ids"]:
        response["HX-Trigger"] = "processes-changed"
    return response


@role_page()
def deployment_logs_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx partial: the log panel of every process of the deployment (re-fetched when the
    set of processes changes)."""
    deployment = _get_deployment(pk)
    processes = list(selectors.deployment_processes(deployment=deployment))
    context = {
        "deployment": deployment,
        "process_ids": ",".join(str(p.pk) for p in processes),
        "logs": [_process_log_context(p, deployment) for p in processes],
        "logs_live": deployment.status not in DEPLOYMENT_TERMINAL,
        "ended_phrase": ended_phrase(deployment),
    }
    return render(request, "deployments/_deployment_logs.html", context)


def ended_phrase(deployment: Deployment) -> str:
    """How an ended deployment ended, as the start of a sentence: "The deployment was stopped" or
    "The deployment ended failed"."""
    if deployment.status == DeploymentStatus.STOPPED:
        return "The deployment was stopped"
    return f"The deployment ended {deployment.status}"


def _process_log_context(process: ServerProcess, deployment: Deployment) -> dict[str, Any]:
    """The last :data:`LOG_TAIL_LINES` lines of one process's log with secret values
    redacted, plus whether the panel keeps polling (until the deployment is terminal)."""
    path = _log_file(process)
    text = ""
    note = ""
    ended = deployment.status in DEPLOYMENT_TERMINAL
    # Nothing more is written once the deployment ended: a missing log is missing for good.
    never = (f"{ended_phrase(deployment)} before this process wrote any log"
             + ("" if process.log_path else " (no log file was recorded for it)") + ".")
    if path is None:
        if process.log_path:
            note = "The log path lies outside the log directory; not shown."
        else:
            note = never if ended else "No log file recorded yet."
    elif not log_parts(path):
        note = never if ended else "The log file does not exist (yet)."
    else:
        # process_log_tail masks with the stored secret values, read from the database; a value
        # this server cannot decrypt could not be masked, so nothing is shown then.
        try:
            text = services.process_log_tail(process=process, lines=LOG_TAIL_LINES)
        except SecretsUnmaskable as exc:
            note = f"The log is {exc}."
    return {
        "process": process,
        "label": f"{process.role} #{process.ordinal}",
        "text": text,
        "note": note,
        "downloadable": path is not None and bool(log_parts(path)),
        "live": deployment.status not in DEPLOYMENT_TERMINAL,
        "poll_trigger": POLL_TRIGGER,
        "lines": LOG_TAIL_LINES,
    }


@role_page()
def process_log_partial(request: HttpRequest, pk: int, process_pk: int) -> HttpResponse:
    """htmx partial: one process's log tail in a ``<pre>``, polled every 2 s while the
    deployment is not terminal (the terminal response drops the trigger, ending the poll)."""
    process = _get_process(pk, process_pk)
    return render(
        request, "deployments/_process_log.html", {"log": _process_log_context(process, process.deployment)}
    )


@role_page()
def process_log_download(request: HttpRequest, pk: int, process_pk: int) -> HttpResponse:
    """The full log of one process (rotated part first) as a text attachment, streamed with
    secret values redacted: every stored secret value is read from the database before the
    first byte (:func:`controlplane.redaction.stored_secret_values_load`), so a server started
    after the engine masks it too. 404 unless the recorded path lies inside
    ``settings.CEILING_LOG_DIR`` and the file exists."""
    process = _get_process(pk, process_pk)
    try:
        filename, reader = services.process_log_download(process=process)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    except SecretsUnmaskable as exc:
        return HttpResponse(f"The log is {exc}.\n", status=503, content_type="text/plain; charset=utf-8")
    return FileResponse(
        reader,
        as_attachment=True,
        filename=filename,
        content_type="text/plain; charset=utf-8",
    )


@role_page(write="operator", methods=FORM_METHODS)
@post_or_redirect(lambda request, pk: reverse("deployments:deployment-detail", args=[pk]))
def deployment_stop(request: HttpRequest, pk: int) -> HttpResponse:
    """Stop (or, while it still waits for its node agent, cancel) a deployment through
    :func:`deployments.services.deployment_stop`, then back to its page. A deployment that
    already ended is reported, not an error page."""
    deployment = _get_deployment(pk)
    was_pending = deployment.status == DeploymentStatus.PENDING
    try:
        deployment = services.deployment_stop(deployment=deployment, user=request.user)
    except Conflict as exc:
        messages.error(request, f"Deployment #{pk} cannot be stopped: {exc}")
    except NotFound as exc:
        raise Http404(str(exc)) from None
    else:
        verb = "Cancelled" if was_pending else "Stop requested for"
        messages.success(request, f"{verb} deployment #{pk} ({deployment.status}).")
    return redirect("deployments:deployment-detail", pk=pk)
