"""The node agent: owns every engine process on one node.

``manage.py node_agent`` runs :class:`NodeAgent`: it registers the node (discovery), reconciles
the node's process rows with ``/proc`` (adopting what still runs), starts the monitor thread and
the telemetry sampler (:mod:`deployments.telemetry.sampler`), then runs a Celery worker
consuming ``node.<name>`` in the same process. Deploy and stop tasks call
:func:`deployment_launch` and :func:`deployment_teardown`; both only spawn or stop and
return. The monitor thread (:func:`agent_tick`, every ``CEILING_AGENT_TICK_S``) does the rest:

* heartbeat (``Node.agent_heartbeat_at``) every ``CEILING_AGENT_HEARTBEAT_S``;
* per non-terminal process: identity check (pid + start ticks), crash detection from the
  shim's exit record, restart per the recipe's policy with capped exponential back-off
  (:class:`deployments.supervisor.RestartPolicy`), readiness probing until the recipe's startup
  timeout, liveness of ready processes every ``CEILING_LIVENESS_PERIOD_S`` (a health URL that
  times out while the process computes is "busy", not a failure: :func:`liveness_timeout_verdict`);
* per running process, every tick and on adoption (:func:`_supervision_check`): the CPU and
  memory binding re-read from ``/proc``, every thread's included (a ``taskset -p`` of the
  process or of one of its threads after launch is recorded as drift,
  not left behind a stale "verified"), and the log shim's liveness (a killed shim is recorded:
  the engine's output is no longer captured);
* per deployment: ready once every process is ready (for PD that includes the router's
  worker list and a streamed request through it), back to starting while a crashed process is
  restarted, failed when the policy gives up;
* rows the queue never delivered: a pending deployment older than
  ``CEILING_AGENT_PENDING_GRACE_S`` is launched from the row, a stop-requested one stopped.

One agent per node name: :func:`agent_lock_acquire` (a ``flock`` on this host) and
:func:`agent_other_running` (the node row's heartbeat, for another host) make a second one
refuse to start before it registers, adopts or consumes anything.

Concurrency: every action on one deployment holds that deployment's lock in this process.
Tasks wait for it; the monitor never waits (it skips a busy deployment until the next tick) and
probes over HTTP without holding it, re-checking the row before writing what it saw. Engines run
under the supervisor's shim in their own session, so they outlive this process; a restarted
agent adopts them by identity or by their ``CEILING_PROC_ID`` tag (:func:`node_reconcile`).
"""
from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_spelled
from controlplane.redaction import redact_text, register_secret_value
from deployments.choices import (
    DEPLOYMENT_TERMINAL,
    NOT_STARTED,
    PROCESS_TERMINAL,
    STOPPED_FOR_FAILURE,
    DeploymentStatus,
    ProcessStatus,
)
from deployments.engine_limits import deployment_limits_read as engine_limits_read
from deployments.launch import (
    LaunchPlan,
    ProcessSpec,
    agent_executable_allowlist,
    agent_executables,
    launch_plan_render,
    paths_escaping_roots,
    port_reason_named,
)
from deployments.models import Deployment, Node, ProcessEvent, Secret, ServerProcess
from deployments.pinning import (
    gpu_verify,
    pinning_read,
    pinning_status_read,
    pinning_verify,
    thread_bindings,
    thread_drift,
)
from deployments.readiness import ProbeResult, process_liveness, process_readiness
from deployments.services import deployment_event_add
from deployments.supervisor import (
    LOG_DIR_MODE,
    ProcessHandle,
    RestartPolicy,
    SpawnError,
    exit_info_text,
    log_tail,
    new_tag,
    process_exit_info,
    process_find_by_tag,
    process_identity,
    process_spawn,
    process_stop,
    shim_gone,
    shim_running,
)
from deployments.supervisor.procfs import (
    port_busy_reason,
    port_listener_text,
    port_socket_text,
    port_listeners,
    proc_scan,
    proc_socket_inodes,
    proc_stat,
    proc_subtree,
    proc_tree_cpu_s,
)
from deployments.telemetry.events import deployment_status_broadcast, health_change_broadcast, row_health
from deployments.topology import format_cpulist, node_facts_from_row, parse_cpulist, same_cpulist

log = logging.getLogger("ceiling.agent")

WANTED = (DeploymentStatus.STARTING, DeploymentStatus.READY)
# Stop order: the router first (clients stop arriving), then decode, then prefill (decode may
# still pull KV cache from prefill while it drains).
STOP_ORDER = {"router": 0, "decode": 1, "single": 2, "prefill": 3}
FAILED_LOG_LINES = 20
# The shim writes an engine's exit record right after reaping it, and it wakes at least every
# 0.25 s to do so (deployments/supervisor/shim.py); one second covers a loaded host.
EXIT_RECORD_WAIT_S = 1.0
# Log lines that say why an engine died; the last one in the tail is usually the final
# exception (Python) or fatal message (Rust, C++) and names the cause better than an exit code.
_LOG_CAUSE = re.compile(r"(?i)(address already in use|errno|error|exception|fatal|panicked|killed)")
_LOG_NOISE = re.compile(r"(?i)^\s*(traceback \(most recent call last\)|file \"|during handling)")

_locks_guard = threading.Lock()
_locks: dict[int, threading.Lock] = {}


@contextmanager
def _deployment_lock(deployment_id: int, *, blocking: bool = True) -> Iterator[bool]:
    """Hold the per-deployment lock of this process; yields False when ``blocking`` is off
    and another thread holds it."""
    with _locks_guard:
        lock = _locks.setdefault(deployment_id, threading.Lock())
    got = lock.acquire(blocking=blocking)
    try:
        yield got
    finally:
        if got:
            lock.release()


# --- rows and plans ------------------------------------------------------------------------


def _handle(row: ServerProcess) -> ProcessHandle | None:
    if row.pid is None or row.start_ticks is None:
        return None
    return ProcessHandle(pid=row.pid, start_ticks=row.start_ticks, pgid=row.pgid or row.pid,
                         sid=row.pgid or row.pid, tag=row.tag)


def _plan_for(deployment: Deployment, *, with_secrets: bool) -> LaunchPlan:
    """Render the deployment's snapshot on its node with this host's own executables
    (:func:`deployments.launch.agent_executables`; the node row's ``tools`` are what the agent
    reported, never what it runs). Secret values are read from ``Secret`` rows only here, at
    spawn time, and registered with the redactor at once."""
    secret_values = None
    if with_secrets:
        names = set((deployment.spec_snapshot.get("secrets") or {}).values())
        secret_values = {secret.name: secret.plaintext() for secret in Secret.objects.filter(name__in=names)}
        for value in secret_values.values():
            register_secret_value(value)
    return launch_plan_render(
        engine=deployment.recipe.engine,
        topology=deployment.recipe.topology,
        spec=deployment.spec_snapshot,
        node=node_facts_from_row(deployment.node),
        secret_values=secret_values,
        executables=agent_executables(),
    )


def _log_path(deployment: Deployment, spec: ProcessSpec) -> Path:
    return Path(settings.CEILING_LOG_DIR) / f"deployment-{deployment.pk}" / f"{spec.role}{spec.ordinal}.log"


def _private_log_dir(log_path: Path) -> None:
    """Make the deployment's log directory owner-only (0700), also one left wider by an earlier
    version: the engine log files in it hold the engine's output unmasked. Only a directory
    inside ``settings.CEILING_LOG_DIR`` is touched; a failure to change it is left to the spawn."""
    directory = log_path.parent
    root = Path(settings.CEILING_LOG_DIR)
    if directory.resolve().parent != root.resolve():
        return
    try:
        directory.mkdir(mode=LOG_DIR_MODE, parents=True, exist_ok=True)
        if directory.stat().st_mode & 0o777 != LOG_DIR_MODE:
            directory.chmod(LOG_DIR_MODE)
    except OSError:
        pass


def _process_row(deployment: Deployment, spec: ProcessSpec) -> ServerProcess:
    """The row of ``spec`` (created with a fresh tag when missing): the row and its tag exist
    before anything is spawned, which is what lets a restarted agent adopt instead of respawn."""
    row, _ = ServerProcess.objects.get_or_create(
        deployment=deployment,
        role=spec.role,
        ordinal=spec.ordinal,
        defaults={
            "argv": list(spec.argv),
            "env_redacted": dict(spec.env_redacted),
            "cpus": spec.cpus,
            "numa_node": spec.numa_node,
            "mem_nodes": spec.mem_nodes,
            "gpu_ids": list(spec.gpu_ids),
            "ports": dict(spec.ports),
            "pin_method": spec.pin_method,
            "health_url": spec.health_url,
            "generate_url": spec.generate_url,
            "readiness": [dict(c) for c in spec.readiness],
            "startup_timeout_s": spec.startup_timeout_s,
            "stop_grace_s": spec.stop_grace_s,
            "log_path": str(_log_path(deployment, spec)),
            "tag": new_tag(),
        },
    )
    _health_seed(row)
    return row


def _engine_by_tag(tag: str) -> ProcessHandle | None:
    """The engine process of a tree from its tag: the child of the tree's shim (the tagged
    session and group leader). The shim is found by the tag rather than the engine itself
    because an engine may overwrite its environment (see :func:`_identity`). None when
    nothing of the tree runs."""
    if not tag:
        return None
    leaders = [h for h in process_find_by_tag(tag) if h.pid == h.pgid == h.sid]
    if not leaders:
        return None
    table = proc_scan()
    for leader in leaders:
        children = sorted(p for p, info in table.items() if info.ppid == leader.pid and info.running)
        if children:
            info = table[children[0]]
            return ProcessHandle(pid=info.pid, start_ticks=info.start_ticks, pgid=leader.pid, sid=leader.pid, tag=tag)
    return None


def _identity(handle: ProcessHandle) -> str:
    """:func:`process_identity` on the identity the rows store, (pid, start ticks): ``running``,
    ``zombie``, ``gone`` or ``mismatch`` (the pid is another process now).

    The supervisor also asks for the ``CEILING_PROC_ID`` tag in ``/proc/<pid>/environ``; some
    engines overwrite that memory to retitle themselves (sglang-router shows up as
    ``sglang::router`` with an empty environment), and a process releases it while exiting. Pid
    and start ticks together already name one process for the life of the boot, so a running
    process that matches both is ours with or without a readable tag.
    """
    state = process_identity(handle)
    if state != "mismatch":
        return state
    info = proc_stat(handle.pid)
    if info is None:
        return "gone"
    if info.start_ticks != handle.start_ticks:
        return "mismatch"
    return "running" if info.running else "zombie"


def _event(row: ServerProcess, kind: str, message: str, *, at=None) -> None:
    """Add a process event (``at``: its time, now unless given) and note the health it implies."""
    message = redact_text(message)
    deployment_event_add(deployment=row.deployment, process=row, kind=kind, message=f"{row.role}: {message}", at=at)
    _health_note(row, message)


# Last health this agent saw or broadcast per process id, so a ``health.change`` carries where
# it came from (see :mod:`deployments.telemetry.events` for the health words).
_health_seen: dict[int, str] = {}
_health_guard = threading.Lock()


def _health_seed(row: ServerProcess) -> None:
    """Remember ``row``'s current health unless one is known already (rows the monitor reads)."""
    with _health_guard:
        _health_seen.setdefault(row.pk, row_health(row))


def _health_note(row: ServerProcess, detail: str) -> None:
    """Broadcast ``health.change`` (forced) when ``row``'s health differs from the last one seen."""
    now = row_health(row)
    with _health_guard:
        before = _health_seen.get(row.pk)
        if before == now:
            return
        if now in ("stopped", "failed"):
            # A terminal row changes no more (a restart goes through "restarting"); forgetting it
            # keeps the map bounded and a later row that reuses the id starts clean.
            _health_seen.pop(row.pk, None)
            _binding_seen.pop(row.pk, None)
            _threads_seen.pop(row.pk, None)
        else:
            _health_seen[row.pk] = now
    health_change_broadcast(deployment_id=row.deployment_id, process_id=row.pk, role=row.role,
                            before=before, after=now, detail=detail)


#: Timeline kinds that record a deployment status change, and the status each one means.
_STATUS_OF_KIND = {"starting": "starting", "ready": "ready", "degraded": "starting",
                   "stopping": "stopping", "stopped": "stopped", "failed": "failed"}


def _deployment_event(deployment: Deployment, kind: str, message: str) -> None:
    """Add a deployment-level event to the timeline and, for a status change, broadcast
    ``deployment.status`` (forced) with the message (secrets masked) as the reason."""
    message = redact_text(message)
    deployment_event_add(deployment=deployment, kind=kind, message=message)
    status = _STATUS_OF_KIND.get(kind)
    if status is not None:
        deployment_status_broadcast(deployment_id=deployment.pk, status=status, reason=message)


# --- ports ---------------------------------------------------------------------------------


def _ports_busy(spec: ProcessSpec) -> str:
    """The first of ``spec``'s ports (http, bootstrap, side channel, metrics) that cannot be
    bound on its host, as :func:`port_busy_reason` words it, with the port's kind and the flag
    that sets it (:func:`deployments.launch.port_reason_named`: ``metrics port 31081
    (--prometheus-port) on 127.0.0.1 is already in use by ...``); ``""`` when all are free."""
    for name, port in sorted(spec.ports.items(), key=lambda item: (item[0] != "http", item[0])):
        reason = port_busy_reason(host=spec.host, port=int(port))
        if reason:
            return port_reason_named(name, int(port), reason)
    return ""


def _port_owner_problem(row: ServerProcess) -> str:
    """``""`` when the LISTEN socket of ``row``'s http port belongs to the process, its shim
    or a descendant of either (socket inodes from ``/proc/net/tcp{,6}`` matched against
    ``/proc/<pid>/fd``), else why not, e.g. ``"port 31080 is served by pid 812 (python3), not by
    this process"``. No LISTEN socket visible at all (another network namespace) is not held
    against the process: the HTTP probe that passed is all that can be known then."""
    port = (row.ports or {}).get("http") if isinstance(row.ports, dict) else None
    if not port or row.pid is None:
        return ""
    inodes, _ = port_listeners(int(port), table={})
    if not inodes:
        return ""
    table = proc_scan()
    tree = {row.pid, *proc_subtree(row.pid, table)}
    if row.pgid:
        tree |= {row.pgid, *proc_subtree(row.pgid, table)}
    if any(proc_socket_inodes(pid) & inodes for pid in tree):
        return ""
    holder = port_listener_text(int(port))
    return f"port {port} is served by {holder or 'another process'}, not by this process"


def _log_cause(row: ServerProcess) -> str:
    """The last line of the process's log tail that says why it ended (an error, exception or
    fatal message, secrets masked), or ``""``. Lines of an ``Exception ignored in: ...`` block
    (:func:`_ignored_lines`) count only when no other line names a cause: Python prints those
    during interpreter shutdown, after the fatal traceback (a destructor failing on a half-built
    object), so the last traceback outside them is the real error."""
    if not row.log_path:
        return ""
    lines = log_tail(row.log_path, lines=FAILED_LOG_LINES).splitlines()
    ignored = _ignored_lines(lines)
    fallback = ""
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index].strip()
        if line and _LOG_CAUSE.search(line) and not _LOG_NOISE.match(line):
            if index not in ignored:
                return redact_text(line[:300])
            fallback = fallback or redact_text(line[:300])
    return fallback


def _ignored_lines(lines: list[str]) -> set[int]:
    """Indexes of ``lines`` inside blocks Python's ``sys.unraisablehook`` prints: ``Exception
    ignored in: <function X.__del__ ...>``, then a traceback (``Traceback (most recent call
    last):``, indented frame lines, chained ``During handling ...`` / ``The above exception ...``
    parts) ending at its unindented exception line, or that exception line alone."""
    ignored: set[int] = set()
    index = 0
    while index < len(lines):
        if not lines[index].startswith("Exception ignored in"):
            index += 1
            continue
        ignored.add(index)
        index += 1
        while index < len(lines):
            line = lines[index]
            ignored.add(index)
            index += 1
            if (not line.strip() or line[:1].isspace() or line.startswith("Traceback (most recent call last)")
                    or line.startswith(("During handling of the above exception", "The above exception"))):
                continue
            # The exception line: the block ends unless a chained traceback follows.
            following = next((i for i in range(index, len(lines)) if lines[i].strip()), None)
            if following is None or not lines[following].startswith(
                    ("During handling of the above exception", "The above exception")):
                break
    return ignored


# --- launch --------------------------------------------------------------------------------


def deployment_launch(*, deployment_id: int) -> str:
    """Start a deployment on this node; safe to run twice and after a crash of the agent.

    Claims the row with one conditional UPDATE (pending → starting, only when no stop was
    requested); a row already starting is resumed. For each process of the launch plan in start
    order (prefill, decode, router, or the single server), once every port of the processes still
    to spawn was found free (:func:`_ports_busy_before_spawning`): the row is created with its tag
    first; a row with a pid is left alone; an engine found carrying the row's tag (spawned by an
    agent that died before recording it) is adopted; otherwise the process is spawned, its pid,
    start ticks and group recorded and its CPU/memory binding verified from ``/proc``. Returns
    what happened: ``launched``, ``skipped (<status>)``, ``cancelled`` or ``failed``.
    """
    with _deployment_lock(deployment_id):
        now = timezone.now()
        claimed = Deployment.objects.filter(
            pk=deployment_id, status=DeploymentStatus.PENDING, stop_requested=False
        ).update(status=DeploymentStatus.STARTING, started_at=now, updated_at=now)
        deployment = Deployment.objects.select_related("recipe", "node").filter(pk=deployment_id).first()
        if deployment is None or (not claimed and deployment.status != DeploymentStatus.STARTING):
            return f"skipped ({deployment.status if deployment else 'missing'})"
        if claimed:
            _deployment_event(deployment, "starting", f"node agent {deployment.node.name} took the deployment")
        try:
            plan = _plan_for(deployment, with_secrets=True)
        except InvalidInput as exc:
            _deployment_fail(deployment, f"the recipe no longer renders on this node: {exc}")
            return "failed"
        escaping = paths_escaping_roots(plan, settings.CEILING_MODEL_ROOTS)
        if escaping:
            _deployment_fail(deployment, "; ".join(escaping))
            return "failed"
        if _ports_busy_before_spawning(deployment, plan):
            return "failed"
        started: list[ServerProcess] = []
        for spec in plan.processes:
            if Deployment.objects.filter(pk=deployment_id, stop_requested=True).exists():
                return "cancelled"
            row = _process_row(deployment, spec)
            if row.status in PROCESS_TERMINAL or row.pid is not None:
                continue
            if row.next_restart_at is not None:
                continue  # a restart waiting for its back-off; the monitor spawns it when due
            if not _process_start(row, spec, verify=False):
                return "failed"
            started.append(row)
        # Bindings are verified once everything is spawned, so the last process does not wait
        # for the first one's numactl to exec.
        for row in started:
            handle = _handle(row)
            if handle is not None and not _verify_binding(row, handle):
                return "failed"
        return "launched"


def _ports_busy_before_spawning(deployment: Deployment, plan: LaunchPlan) -> bool:
    """Check the ports of every process of ``plan`` that is still to be spawned before any is:
    a port another program holds (:func:`_ports_busy`) fails that process's row with the reason
    (``port 31000 on 127.0.0.1 is already in use by pid 4121 (python3)``) and the deployment
    with it, so a PD deployment whose router port is taken starts no prefill or decode server
    only to stop it again. A process that has a row with a pid, has ended, waits for a restart,
    or whose engine carrying the row's tag runs (an agent died before recording it; it is
    adopted and holds its own ports) is left to the launch loop. Every other process of the
    plan that was never started gets its row too, ended as not started
    (:func:`_not_started_mark`), so the deployment lists each process of its recipe. Returns
    True when the deployment failed."""
    for spec in plan.processes:
        row = ServerProcess.objects.filter(deployment=deployment, role=spec.role, ordinal=spec.ordinal).first()
        if row is not None and (row.status in PROCESS_TERMINAL or row.pid is not None
                                or row.next_restart_at is not None or _engine_by_tag(row.tag) is not None):
            continue
        busy = _ports_busy(spec)
        if busy:
            row = row or _process_row(deployment, spec)
            _not_started_mark(deployment, plan, besides=row, reason=f"{NOT_STARTED}: {spec.role} {busy}")
            _process_give_up(row, busy)
            return True
    return False


def _not_started_mark(deployment: Deployment, plan: LaunchPlan, *, besides: ServerProcess, reason: str) -> None:
    """End, as never started, the row of every process of ``plan`` but ``besides`` that was not
    started (created here when missing): status ``exited`` with no pid, ``end_reason`` ``not
    started`` and ``reason`` (``not started: router metrics port 31481 (--prometheus-port) on
    127.0.0.1 is already in use by pid 4121 (python3)``), and a ``not-started`` event saying so. A row with a pid, a
    restart pending, or an engine carrying its tag is left for the stop that follows."""
    for spec in plan.processes:
        if (spec.role, spec.ordinal) == (besides.role, besides.ordinal):
            continue
        row = _process_row(deployment, spec)
        if (row.status != ProcessStatus.PENDING or row.pid is not None or row.next_restart_at is not None
                or row.restart_count or _engine_by_tag(row.tag) is not None):
            continue
        row.status = ProcessStatus.EXITED
        row.end_reason = NOT_STARTED
        row.reason = redact_text(reason)
        row.save()
        _event(row, "not-started", reason)


def _process_start(row: ServerProcess, spec: ProcessSpec, *, verify: bool = True) -> bool:
    """Adopt the engine carrying ``row.tag`` or spawn ``spec``; record identity and (unless
    ``verify`` is off, for a caller that verifies later) the binding. Returns False when the
    process (and with it the deployment) failed."""
    adopted = _engine_by_tag(row.tag)
    if adopted is not None:
        handle = adopted
        _event(row, "adopted", f"found pid {handle.pid} carrying its tag; adopted instead of spawning again")
    else:
        busy = _ports_busy(spec)
        if busy:
            _process_give_up(row, busy)
            return False
        try:
            _private_log_dir(Path(row.log_path))
            handle = process_spawn(spec=spec, log_path=Path(row.log_path),
                                   log_max_bytes=settings.CEILING_PROCESS_LOG_MAX_BYTES, tag=row.tag,
                                   allowed_executables=agent_executable_allowlist())
        except SpawnError as exc:
            _process_give_up(row, f"could not start: {exc}")
            return False
        if settings.CEILING_FAULT_PAUSE_AFTER_SPAWN_S > 0:
            time.sleep(settings.CEILING_FAULT_PAUSE_AFTER_SPAWN_S)
    now = timezone.now()
    row.pid, row.start_ticks, row.pgid = handle.pid, handle.start_ticks, handle.pgid
    row.status = ProcessStatus.SPAWNED
    row.started_at = row.started_at if adopted is not None and row.started_at else now
    row.ready_at = None
    row.next_restart_at = None
    row.exit_code = None
    row.end_reason = ""
    row.probe_failures = 0
    row.probe_detail = ""
    row.health_answered_at = None
    row.save()
    if adopted is None:
        _event(row, "spawned", f"pid {handle.pid} (group {handle.pgid}), log {row.log_path}")
    return _verify_binding(row, handle) if verify else True


def _verify_binding(row: ServerProcess, handle: ProcessHandle) -> bool:
    """Store the effective CPU and memory binding; a mismatch with the recipe fails the
    process with both values in the reason (no restart: the same launch would misplace it
    again)."""
    if row.cpus:
        # sched_setaffinity cannot set a memory policy, so only numactl's is checked.
        expected_mems = row.mem_nodes if (row.pin_method == "numactl" and row.mem_nodes) else None
        result = pinning_verify(handle, expected_cpus=row.cpus, expected_mems=expected_mems)
        if result.effective is not None:
            row.effective_cpus, row.effective_mems = result.effective.cpus, result.effective.mems
        row.pinning_verified = result.ok
        row.save(update_fields=["effective_cpus", "effective_mems", "pinning_verified", "updated_at"])
        if not result.ok:
            if "not running" in result.reason or "exited during" in result.reason:
                return True  # it died at once; crash detection and the restart policy handle it
            _process_give_up(row, f"pinning mismatch: {result.reason}")
            return False
        _event(row, "pinned", f"CPUs {row.effective_cpus}, memory nodes {row.effective_mems or '-'}")
        return True
    try:
        binding = pinning_read(handle.pid)
    except ProcessLookupError:
        return True
    row.effective_cpus, row.effective_mems = binding.cpus, binding.mems
    row.save(update_fields=["effective_cpus", "effective_mems", "updated_at"])
    return True


# --- stop ----------------------------------------------------------------------------------


# The reason of a deployment stopped while it was starting, never ready, when nobody asked
# (a teardown run directly: the undeploy command, the agent's own clean-up).
STOPPED_BEFORE_READY = "stopped before it became ready"


def stopped_before_ready_reason(deployment: Deployment) -> str:
    """Why ``deployment``, never ready, ended: ``cancelled by alice before it became ready`` for
    a cancel, ``stopped by alice before it became ready`` for a stop, who taken from the
    request's timeline event (:func:`deployments.services.stop_requester`); plain
    :data:`STOPPED_BEFORE_READY` when nobody asked."""
    from deployments.services import stop_requester

    who = stop_requester(deployment=deployment, cancel=deployment.cancel_requested)
    if who is None:
        return STOPPED_BEFORE_READY
    return f"{'cancelled' if deployment.cancel_requested else 'stopped'} by {who} before it became ready"


def stopped_reason(deployment: Deployment) -> str:
    """The reason a stopped ``deployment`` ends with: :func:`stopped_before_ready_reason` for one
    never ready; ``stopped by alice`` for one that had been ready, who taken from its stop
    request's timeline event; empty when nobody asked."""
    if deployment.ready_at is None:
        return stopped_before_ready_reason(deployment)
    from deployments.services import stop_requester

    who = stop_requester(deployment=deployment, cancel=False)
    return f"stopped by {who}" if who is not None else ""


def deployment_teardown(*, deployment_id: int) -> str:
    """Stop a deployment on this node; safe to run twice.

    Claims starting/ready → stopping with one conditional UPDATE (a row already stopping is
    resumed), stops the processes router first, then decode, then prefill (each: SIGTERM to
    its group and escaped descendants, the recipe's grace period, then SIGKILL; see
    :func:`deployments.supervisor.process_stop`), records how each ended, and sets stopped.
    Returns ``stopped`` or ``skipped (<status>)``.
    """
    with _deployment_lock(deployment_id):
        now = timezone.now()
        claimed = Deployment.objects.filter(pk=deployment_id, status__in=WANTED).update(
            status=DeploymentStatus.STOPPING, stop_requested=True, updated_at=now
        )
        deployment = Deployment.objects.select_related("recipe", "node").filter(pk=deployment_id).first()
        if deployment is None or deployment.status != DeploymentStatus.STOPPING:
            return f"skipped ({deployment.status if deployment else 'missing'})"
        if claimed:
            _deployment_event(deployment, "stopping", "stopping processes")
        started = time.monotonic()
        _stop_all(deployment)
        now = timezone.now()
        # A deployment stopped (or cancelled) before it ever became ready says so and who asked;
        # one that served names who stopped it (no reason when nobody asked, as for undeploy).
        why = stopped_reason(deployment) if not deployment.reason else ""
        Deployment.objects.filter(pk=deployment_id, status=DeploymentStatus.STOPPING).update(
            status=DeploymentStatus.STOPPED, ended_at=now, updated_at=now,
            **({"reason": why} if why else {}),
        )
        _deployment_event(deployment, "stopped", f"all processes stopped in {time.monotonic() - started:.2f}s"
                          + (f" ({why})" if why and deployment.ready_at is None else ""))
        return "stopped"


def _stop_all(deployment: Deployment, *, note: str = "", asked: bool = True) -> None:
    rows = sorted(
        ServerProcess.objects.filter(deployment=deployment).exclude(status__in=PROCESS_TERMINAL),
        key=lambda r: (STOP_ORDER.get(r.role, 9), r.ordinal),
    )
    for row in rows:
        _process_stop(row, note=note, asked=asked)


def _tree_by_tag(row: ServerProcess) -> ProcessHandle | None:
    """A handle for :func:`deployments.supervisor.process_stop` that reaches what still runs of
    ``row``'s process tree when the row has no identity (pid, start ticks) to give: the engine
    found by the row's tag (:func:`_engine_by_tag`), else any live process carrying the tag;
    None when nothing carries it.

    The rule: every stop of a row goes through its tag as well as its pid, because a descendant
    may have left the engine's process group and session (a double fork and ``setsid()``) and
    outlived the engine, and a row without a pid (never recorded, or forgotten when the pid was
    seen reused) would otherwise end, or take a new tag for a restart, with that descendant
    still running and nothing left that names it."""
    if not row.tag:
        return None
    handle = _engine_by_tag(row.tag)
    if handle is None:
        leftovers = process_find_by_tag(row.tag)
        handle = leftovers[0] if leftovers else None
    return handle


def _process_stop(row: ServerProcess, *, note: str = "", asked: bool = True) -> None:
    """Stop one process tree and record the outcome on its row (``end_reason``:
    ``terminated``, ``killed after grace``, ``exited``, ``not running`` or ``pid reused``) and
    ``note`` as its ``reason``. ``asked=False`` (a stop no one asked for: the deployment failed)
    makes the ``stopped`` event say ``note`` where the supervisor's words say "stopped on
    request" (``terminated in 0.43s (grace 5s): stopped because the deployment failed: ...;
    sent SIGTERM, ended 0.42 s after it (exit code 0)``)."""
    handle = _handle(row) or _tree_by_tag(row)
    if handle is None:
        outcome, reason, duration = "not_running", _not_running_text(row), 0.0
        result = None
    else:
        result = process_stop(handle, grace_s=float(row.stop_grace_s), log_path=row.log_path or None)
        outcome, reason, duration = result.outcome, result.reason, result.duration_s
    status, end_reason = {
        "terminated": (ProcessStatus.EXITED, "terminated"),
        "killed": (ProcessStatus.KILLED, "killed after grace"),
        "exited": (ProcessStatus.EXITED, "exited"),
        "not_running": (ProcessStatus.EXITED, "not running"),
        "identity_mismatch": (ProcessStatus.EXITED, "pid reused"),
    }[outcome]
    row.status = status
    row.end_reason = end_reason
    if result is not None and result.exit_code is not None:
        row.exit_code = result.exit_code
    elif result is not None and result.signal is not None:
        row.exit_code = -int(result.signal)  # stored the way subprocess reports a signal
    row.ended_at = timezone.now()
    row.next_restart_at = None
    if note:
        row.reason = note
    row.save()
    if not asked and note:
        requested = "stopped on request: "
        reason = f"{note}; " + (f"sent {reason[len(requested):]}" if reason.startswith(requested) else reason)
    if result is None:
        text = f"not running ({reason})"
    else:
        text = f"{end_reason} in {duration:.2f}s (grace {row.stop_grace_s}s): {reason}"
    _event(row, "killed" if status == ProcessStatus.KILLED else "stopped", text)


def _not_running_text(row: ServerProcess) -> str:
    """Why a row being stopped has no process: ``never started`` for one that was never
    spawned, or, for one waiting out a restart back-off (:func:`_process_failed` cleared its pid
    and set ``next_restart_at``), ``crashed at 13:27:58, restart 2 was pending (due
    13:28:06)``, the crash time from its latest ``crashed`` event (else ``ended_at``), local
    time of the control plane."""
    if row.next_restart_at is None and not row.restart_count:
        return "never started"
    crash = ProcessEvent.objects.filter(process=row, kind="crashed").order_by("-at", "-id").first()
    crashed_at = crash.at if crash is not None else row.ended_at
    when = f" at {timezone.localtime(crashed_at):%H:%M:%S}" if crashed_at else ""
    if row.next_restart_at is None:
        return f"crashed{when}; no restart was pending"
    return (f"crashed{when}, restart {row.restart_count} was pending "
            f"(due {timezone.localtime(row.next_restart_at):%H:%M:%S})")


def _deployment_fail(deployment: Deployment, reason: str) -> None:
    """Stop what still runs of ``deployment`` and mark it failed with ``reason`` (secrets masked)."""
    reason = redact_text(reason)
    _stop_all(deployment, note=f"{STOPPED_FOR_FAILURE}: {reason}", asked=False)
    now = timezone.now()
    Deployment.objects.filter(pk=deployment.pk).exclude(status__in=DEPLOYMENT_TERMINAL).update(
        status=DeploymentStatus.FAILED, reason=reason, ended_at=now, updated_at=now
    )
    _deployment_event(deployment, "failed", reason)


# --- failures and restarts -----------------------------------------------------------------


def _exit_text(row: ServerProcess, handle: ProcessHandle | None) -> tuple[str, int | None, datetime | None]:
    """How and when the engine of ``handle`` ended, from its shim's exit record: ``("killed by
    signal 9 (SIGKILL)", -9, <end time>)``, ``("exited with code 1: <the log line naming the
    cause>", 1, <end time>)``, or ``("ended (no exit record)", None, None)``. The code is stored
    the way :mod:`subprocess` reports it (``-N`` for signal N); the end time (aware, UTC) is the
    shim's, which may be long before anyone noticed (no agent ran meanwhile).

    The engine can be seen gone (or a zombie) a moment before its shim has reaped it and
    written the record; while the shim still runs this waits up to :data:`EXIT_RECORD_WAIT_S`
    for the record instead of reporting a status it does not have."""
    info = None
    if handle is not None and row.log_path:
        deadline = time.monotonic() + EXIT_RECORD_WAIT_S
        while (info := process_exit_info(handle, log_path=row.log_path)) is None:
            if not shim_running(handle):
                info = process_exit_info(handle, log_path=row.log_path)  # written as it exited
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    if info is None:
        return "ended (no exit record)", None, None
    ended = datetime.fromtimestamp(info.ended_at, tz=dt_timezone.utc)
    if info.signal is not None:
        return exit_info_text(info), -int(info.signal), ended
    cause = _log_cause(row) if info.returncode else ""
    text = exit_info_text(info)
    return text + (f": {_cause_text(cause, row)}" if cause else ""), info.returncode, ended


# An engine's own words for a port clash: Python's "[Errno 98] error while attempting to bind on
# address ('127.0.0.1', 31000): address already in use", or "127.0.0.1:31000 ... in use".
_BIND_TUPLE = re.compile(r"\('\[?([0-9A-Za-z.:_-]+?)\]?',\s*(\d+)")
_BIND_HOSTPORT = re.compile(r"\b([0-9]{1,3}(?:\.[0-9]{1,3}){3}|localhost|\[[0-9a-fA-F:]+\]):(\d{2,5})\b")


def _cause_text(line: str, row: ServerProcess | None = None) -> str:
    """A log line as a reason: a bind failure becomes ``port P on H already in use``; when the
    line names no port (sglang-router: "Address already in use (os error 98)"), the first of
    the row's ports that still cannot be bound now that the process is gone, as
    :func:`port_busy_reason` words it (with the holder when ``/proc`` tells); any other line
    is kept as written."""
    if "address already in use" in line.lower():
        match = _BIND_TUPLE.search(line) or _BIND_HOSTPORT.search(line)
        if match:
            said = f"port {match.group(2)} on {match.group(1)} already in use"
            ports = row.ports if row is not None and isinstance(row.ports, dict) else {}
            kind = next((k for k, p in sorted(ports.items()) if str(p) == match.group(2)), None)
            return port_reason_named(kind, int(match.group(2)), said) if kind else said
        if row is not None and isinstance(row.ports, dict):
            host = urlsplit(row.health_url or "").hostname or "127.0.0.1"
            for name, port in sorted(row.ports.items(), key=lambda item: (item[0] != "http", item[0])):
                try:
                    reason = port_busy_reason(host=host, port=int(port))
                except (TypeError, ValueError):
                    continue
                if reason:
                    return f"address already in use: {port_reason_named(name, int(port), reason)}"
        return "address already in use"
    return line


def _process_failed(row: ServerProcess, reason: str, *, exit_code: int | None = None,
                    ended_at: datetime | None = None) -> None:
    """A process of a wanted deployment died or stopped answering: clean up its tree, then
    restart it per the recipe's policy or give up (failing the deployment). ``ended_at``: when
    it ended per its shim's exit record, which dates the ``crashed`` event; when that was over
    :data:`NOTICED_LATE_S` before now the reason adds ``(noticed at 01:49:30, 37.85s later)``."""
    # Leftovers of the tree (helpers, an escaped child) would hold ports; identity-checked. An
    # engine still running (failed liveness) is ended here: its signal becomes the exit code.
    ended, how = _stop_for_failure(row)
    row.exit_code = exit_code if exit_code is not None else ended
    reason += how
    noticed = timezone.now()
    if ended_at is not None and (noticed - ended_at).total_seconds() > NOTICED_LATE_S:
        reason += (f" (noticed at {timezone.localtime(noticed):%H:%M:%S}, "
                   f"{(noticed - ended_at).total_seconds():.2f}s later)")
    row.failure_times = [*row.failure_times, (ended_at or noticed).timestamp()]
    _event(row, "crashed", reason, at=ended_at)
    deployment = row.deployment
    policy = RestartPolicy.from_dict(deployment.spec_snapshot.get("restart") or {})
    action, value = policy.next_action(row.failure_times, time.time())
    if action == "give_up":
        _process_give_up(row, f"{reason}; {value}", ended_at=ended_at)
        return
    delay = float(value)
    row.status = ProcessStatus.PENDING
    row.reason = reason
    row.restart_count += 1
    row.next_restart_at = timezone.now() + timedelta(seconds=delay)
    row.pid = row.start_ticks = row.pgid = None
    row.ready_at = None
    row.tag = new_tag()
    row.save()
    _event(row, "restarting", f"restart {row.restart_count} in {delay:g}s ({reason})")
    if Deployment.objects.filter(pk=deployment.pk, status=DeploymentStatus.READY).update(
        status=DeploymentStatus.STARTING, updated_at=timezone.now()
    ):
        _deployment_event(deployment, "degraded", f"{row.role} is being restarted; not ready until it is back")


def _process_give_up(row: ServerProcess, reason: str, *, ended_at: datetime | None = None) -> None:
    """End the process if it still runs (its signal stored as ``exit_code``, ``-15``, or ``-9``
    with ``; SIGKILL needed after SIGTERM was ignored for Ns`` added to ``reason``), fail it with
    ``reason`` and its last log lines, then fail the deployment. ``ended_at``: when it ended per
    its shim's exit record (now unless given)."""
    ended, how = _stop_for_failure(row)
    if ended is not None:
        row.exit_code = ended
    reason += how
    tail = log_tail(row.log_path, lines=FAILED_LOG_LINES) if row.log_path else ""
    row.status = ProcessStatus.FAILED
    row.reason = redact_text(reason + (f"\nlast log lines:\n{tail}" if tail else ""))
    row.ended_at = ended_at or timezone.now()
    row.next_restart_at = None
    row.save()
    _event(row, "failed", reason)
    _deployment_fail(row.deployment, f"{row.role} failed: {_first_reason(row, reason)}")


#: Seconds between a process's end (its exit record) and its detection beyond which the
#: crash says when it was noticed (a tick is 0.2 s; more means no agent watched).
NOTICED_LATE_S = 1.0


def _stop_for_failure(row: ServerProcess) -> tuple[int | None, str]:
    """Stop what runs of ``row``'s tree (identity-checked) because it failed. Returns how a
    still running engine ended, from its shim's exit record: ``(-N, note)`` for signal N (the
    way :mod:`subprocess` reports it) or ``(code, note)``, where ``note`` is ``"; SIGKILL
    needed after SIGTERM was ignored for 5s"`` when the grace period ran out, else ``""``;
    ``(None, "")`` when nothing of the engine ran any more (leftovers are still stopped).

    A row without a recorded identity (its pid was seen reused and forgotten) is stopped through
    its tag (:func:`_tree_by_tag`): the engine is gone then, but a descendant that escaped its
    group and session may still run, and must end before the row fails or is restarted under a
    new tag. What such a stop ends says nothing of how the engine ended, so it returns
    ``(None, "")``."""
    handle = _handle(row)
    if handle is None:
        leftover = _tree_by_tag(row)
        if leftover is not None:
            process_stop(leftover, grace_s=float(row.stop_grace_s), log_path=None)
        return None, ""
    result = process_stop(handle, grace_s=float(row.stop_grace_s), log_path=row.log_path or None)
    if not result.requested:
        return None, ""
    note = f"; SIGKILL needed after SIGTERM was ignored for {row.stop_grace_s}s" if result.killed else ""
    if result.signal is not None:
        return -int(result.signal), note
    return result.exit_code, note


def _first_reason(row: ServerProcess, reason: str) -> str:
    """What the deployment's ``reason`` says of a process that failed with ``reason``: the
    first crash of this process that named a cause (a port clash, an engine error) leads,
    followed by the final verdict, so "exited with code 1; restart policy ..." after a few
    restarts still says why it kept dying. Crash causes come from the ``crashed`` events the
    timeline keeps."""
    crashes = ProcessEvent.objects.filter(process=row, kind="crashed").order_by("at", "id")
    prefix = f"{row.role}: "
    for message in crashes.values_list("message", flat=True):
        text = message[len(prefix):] if message.startswith(prefix) else message
        head, _, cause = text.partition(": ")
        if cause and head.startswith("exited with code") and cause not in reason:
            return f"{cause} ({reason})"
    return reason


# --- monitoring ----------------------------------------------------------------------------


def _observe(row: ServerProcess) -> tuple[str, str, int | None, datetime | None]:
    """Probe one row without holding any lock. Returns ``(verdict, detail, exit_code, ended_at)``
    (the last two from the shim's exit record of a ``dead`` process, else None) with
    verdict ``ok`` (nothing to record), ``ready``, ``not_ready``, ``timeout``, ``dead``,
    ``reused``, ``unhealthy``, ``busy`` (a ready process's health URL timed out while it
    computed: :func:`liveness_timeout_verdict`), ``restart_due``."""
    now = timezone.now()
    if row.status == ProcessStatus.PENDING:
        due = row.next_restart_at is not None and row.next_restart_at <= now
        return ("restart_due" if due else "ok"), "", None, None
    handle = _handle(row)
    if handle is None:
        return "ok", "", None, None
    identity = _identity(handle)
    if identity == "mismatch":
        return "reused", f"pid {row.pid} now belongs to another process (not signalled)", None, None
    if identity != "running":
        return ("dead", *_exit_text(row, handle))
    if row.status == ProcessStatus.SPAWNED:
        result = process_readiness(checks=row.readiness, alive=True, role=row.role)
        if result.ok:
            # Only an answer from the process itself counts: another server on the same port
            # (a clash the engine is about to die of) must not make this one ready.
            problem = _port_owner_problem(row)
            if not problem:
                return "ready", result.detail, None, None
            result = ProbeResult(False, "port_owner", problem)
        age = (now - row.started_at).total_seconds() if row.started_at else 0.0
        if age > row.startup_timeout_s:
            return "timeout", f"not ready after {row.startup_timeout_s}s: {result.detail}", None, None
        return "not_ready", result.detail, None, None
    if row.status == ProcessStatus.READY:
        last = row.last_probe_at
        if last is not None and (now - last).total_seconds() < settings.CEILING_LIVENESS_PERIOD_S:
            return "ok", "", None, None
        verdict, detail = _liveness(row, handle)
        return verdict, detail, None, None
    return "ok", "", None, None


#: CPU seconds the process tree must use during a liveness probe whose health URL timed out for
#: the process to count as busy (computing) rather than hung. An idle engine's event loop uses
#: well under a millisecond in 2 s; one busy serving requests uses about a second or more.
LIVENESS_BUSY_CPU_S = 0.05


def _liveness(row: ServerProcess, handle: ProcessHandle) -> tuple[str, str]:
    """One liveness probe of the ready process ``row`` (identity ``handle``, checked running):
    ``("ready", detail)`` when it answered, ``("unhealthy", detail)`` for a failure that counts,
    ``("busy", detail)`` for a timeout of a computing process that does not.

    The CPU time of the process and its descendants (:func:`proc_tree_cpu_s`, read from
    ``/proc`` by pid and start ticks, so a reused pid is never read) is taken right before the
    probe and, when the probe timed out, again after it; their difference is the CPU the tree
    used while its health URL did not answer, which :func:`liveness_timeout_verdict` judges.
    The window is the probe itself rather than the time since the previous probe: it is
    evidence about the very seconds the server did not answer (a process that computed until
    just after the last probe and then hung is not taken for busy), and it needs no state that
    an agent restart or a fresh ready would lose. The probe keeps its 2 s timeout
    (``HTTP_TIMEOUT_S``), so a slow server never stalls the monitor for the other processes.
    """
    started = time.monotonic()
    before = proc_tree_cpu_s(handle.pid, handle.start_ticks)
    result = process_liveness(checks=row.readiness, alive=True)
    if result.ok:
        return "ready", result.detail
    if not result.timed_out:
        return "unhealthy", result.detail
    after = proc_tree_cpu_s(handle.pid, handle.start_ticks)
    waited = time.monotonic() - started
    cpu = None if before is None or after is None else max(0.0, after - before)
    answered = row.health_answered_at or row.ready_at
    unanswered = (timezone.now() - answered).total_seconds() if answered else waited
    return liveness_timeout_verdict(detail=result.detail, cpu_s=cpu, waited_s=waited, unanswered_s=unanswered,
                                    grace_s=settings.CEILING_LIVENESS_BUSY_GRACE_S)


def liveness_timeout_verdict(*, detail: str, cpu_s: float | None, waited_s: float, unanswered_s: float,
                             grace_s: float) -> tuple[str, str]:
    """Judge a liveness probe whose health URL timed out (``detail``: what the probe saw).

    ``cpu_s``: CPU seconds the process and its descendants used during the probe (None when the
    process was gone by its end); ``waited_s``: the probe's length in seconds; ``unanswered_s``:
    seconds since the health URL last answered (``ServerProcess.health_answered_at``, else
    since the process became ready); ``grace_s``: ``CEILING_LIVENESS_BUSY_GRACE_S``.

    Returns ``("busy", text)`` when the process used more than :data:`LIVENESS_BUSY_CPU_S` of
    CPU and the health URL has not been silent for more than ``grace_s``: a server that serves
    one request at a time (llama-cpp-python's) answers its health check only between requests,
    and a benchmark must not get it killed. Otherwise ``("unhealthy", text)``, a failure that
    counts towards ``CEILING_LIVENESS_FAILURES``: a process that made no CPU progress is hung
    (a stopped or deadlocked one), and a process busy for longer than the grace may be spinning
    forever. Every text gives its numbers in seconds, e.g. ``http://127.0.0.1:31000/health did
    not answer within 2.0 s (ReadTimeout) while the process used 1.93 s of CPU in the 2.0 s
    probe: busy, not counted as a failure (no answer for 34.1 s; a busy process is given 600 s)``.
    """
    if cpu_s is None:
        return "unhealthy", f"{detail}, and the process ended meanwhile"
    used = f"{cpu_s:.2f} s of CPU in the {waited_s:.1f} s probe"
    if cpu_s <= LIVENESS_BUSY_CPU_S:
        return "unhealthy", f"{detail} and the process used {used}: no progress (hung?), counted as a failure"
    if unanswered_s > grace_s:
        return "unhealthy", (f"{detail}; the process is busy ({used}) but has not answered for {unanswered_s:.1f} s, "
                             f"longer than the {grace_s:g} s a busy process is given "
                             "(CEILING_LIVENESS_BUSY_GRACE_S): counted as a failure")
    return "busy", (f"{detail} while the process used {used}: busy, not counted as a failure "
                    f"(no answer for {unanswered_s:.1f} s; a busy process is given {grace_s:g} s)")


def deployment_check(*, deployment_id: int) -> None:
    """One monitor pass over a starting or ready deployment: probe each process, apply what
    was seen (ready, crash → restart or give up, startup timeout, liveness failures, due
    restarts), then set the deployment ready when every process is. Skips the deployment when
    a task holds it; a row that changed while it was probed is left for the next pass."""
    rows = list(ServerProcess.objects.filter(deployment_id=deployment_id).exclude(status__in=PROCESS_TERMINAL))
    for row in rows:
        _health_seed(row)
    seen = [(row, *_observe(row)) for row in rows]
    gate = _router_gate(deployment_id, seen)
    with _deployment_lock(deployment_id, blocking=False) as got:
        if not got:
            return
        deployment = Deployment.objects.select_related("recipe", "node").filter(pk=deployment_id).first()
        if deployment is None or deployment.status not in WANTED or deployment.stop_requested:
            return
        _router_gate_reason_first(deployment, seen, gate)
        for row, verdict, detail, exit_code, ended in seen:
            fresh = ServerProcess.objects.filter(pk=row.pk).first()
            if fresh is None or (fresh.status, fresh.pid, fresh.tag) != (row.status, row.pid, row.tag):
                continue
            fresh.deployment = deployment
            _apply(fresh, verdict, detail, exit_code, ended)
            if verdict in _RUNNING_VERDICTS:
                _supervision_check(fresh)
            deployment.refresh_from_db(fields=["status"])
            if deployment.status not in WANTED:
                return
        _deployment_maybe_ready(deployment, gate)


#: What a deployment's ``reason`` starts with while a restarted worker waits for the router.
ROUTER_GATE_WAITING = "waiting for a streamed request through the router to yield a token"
#: Seconds between two such requests: each refused one may keep the router's circuit open.
ROUTER_GATE_EVERY_S = 1.0
# Per deployment id: (monotonic time, result) of the last request through the router.
_router_gate_at: dict[int, tuple[float, ProbeResult]] = {}


def _router_gate(deployment_id: int, seen: list[tuple]) -> ProbeResult | None:
    """The router's whole readiness (``/health``, its worker list, a streamed request through
    it yielding a token), run without a lock for a starting deployment whose router was already
    ready before this pass and whose other processes are all ready (or were just seen ready): a
    worker back from a restart answers its own ``/health`` while the router may still refuse
    requests (sglang-router keeps a failed worker's circuit open for tens of seconds). None when
    no such check is due: no router, the router not ready before this pass (its own readiness,
    run by :func:`_observe`, covers it), a process not ready, or the deployment not starting."""
    router = next((row for row, *_ in seen if row.role == "router"), None)
    if router is None or router.status != ProcessStatus.READY:
        return None
    if any(row.role != "router" and row.status != ProcessStatus.READY and verdict != "ready"
           for row, verdict, *_ in seen):
        return None
    if not Deployment.objects.filter(pk=deployment_id, status=DeploymentStatus.STARTING).exists():
        return None
    last = _router_gate_at.get(deployment_id)
    if last is not None and time.monotonic() - last[0] < ROUTER_GATE_EVERY_S:
        return last[1]
    result = process_readiness(checks=router.readiness, alive=True, role="router")
    _router_gate_at[deployment_id] = (time.monotonic(), result)
    return result


def _router_gate_reason(router: ServerProcess, workers_ready: datetime, gate: ProbeResult, now: datetime) -> str:
    """``waiting for a streamed request through the router to yield a token (workers ready 12.3s
    ago[, beyond the startup timeout of 60s]): <what the router answered>``."""
    waited = (now - workers_ready).total_seconds()
    late = f", beyond the startup timeout of {router.startup_timeout_s}s" if waited > router.startup_timeout_s else ""
    return redact_text(f"{ROUTER_GATE_WAITING} (workers ready {waited:.1f}s ago{late}): {gate.detail}")


def _router_gate_reason_first(deployment: Deployment, seen: list[tuple], gate: ProbeResult | None) -> None:
    """Store the router gate's waiting reason before a worker seen ready in this pass is saved
    as ready: :func:`_deployment_maybe_ready` writes it only after every row is applied, and in
    between whoever reads the deployment would find every process ready, the deployment starting
    and no word of the router refusing. Only when every process was seen running fine (so the
    pass ends in that same reason) and a worker turns ready now; the ``probe`` event and the
    exact wait stay with :func:`_deployment_maybe_ready`."""
    if gate is None or gate.ok or any(verdict not in ("ok", "ready") for _, verdict, *_ in seen):
        return
    router = next((row for row, *_ in seen if row.role == "router"), None)
    if router is None or router.ready_at is None:
        return
    now = timezone.now()
    turning = [row for row, verdict, *_ in seen
               if row.role != "router" and verdict == "ready" and row.status != ProcessStatus.READY]
    if not turning:
        return
    Deployment.objects.filter(pk=deployment.pk, status=DeploymentStatus.STARTING, stop_requested=False).update(
        reason=_router_gate_reason(router, now, gate, now), updated_at=now)


def _apply(row: ServerProcess, verdict: str, detail: str, exit_code: int | None,
           ended: datetime | None = None) -> None:
    now = timezone.now()
    if verdict == "ready":
        was_spawned = row.status == ProcessStatus.SPAWNED
        # The previous liveness probe got no answer (busy or failed): say when it answers again.
        silent_since = (row.health_answered_at if not was_spawned and row.health_answered_at and row.last_probe_at
                        and row.last_probe_at > row.health_answered_at else None)
        row.status = ProcessStatus.READY
        row.last_probe_at, row.probe_detail, row.probe_failures = now, detail, 0
        row.health_answered_at = now
        if was_spawned:
            row.ready_at = now
            # The crash that led to this (re)start stays in the timeline; a ready process
            # showing "killed by signal 9" as its reason reads as if it were still down.
            row.reason = ""
        row.save()
        if was_spawned:
            _event(row, "ready", f"{_ready_text(row, now)} ({detail})")
            _check_gpus(row)
        else:
            if silent_since is not None:
                _event(row, "liveness", f"answered again, {(now - silent_since).total_seconds():.1f} s after its "
                                        f"last answer ({detail})")
            _health_note(row, detail)  # back to healthy after failed liveness checks
    elif verdict == "not_ready":
        if detail != row.probe_detail:
            _event(row, "probe", detail)
        row.last_probe_at, row.probe_detail = now, detail
        row.save(update_fields=["last_probe_at", "probe_detail", "updated_at"])
    elif verdict == "timeout":
        row.probe_detail = detail
        _process_give_up(row, detail)
    elif verdict == "dead":
        row.ended_at = ended or now
        _process_failed(row, detail, exit_code=exit_code, ended_at=ended)
    elif verdict == "reused":
        # The engine is gone and its pid names an unrelated process: forget the pid so
        # nothing can ever signal it, then treat the engine as crashed.
        row.pid = row.start_ticks = None
        row.end_reason = "pid reused"
        _process_failed(row, detail)
    elif verdict == "unhealthy":
        row.probe_failures += 1
        row.last_probe_at, row.probe_detail = now, detail
        row.save(update_fields=["probe_failures", "last_probe_at", "probe_detail", "updated_at"])
        _event(row, "liveness", f"failed ({row.probe_failures}/{settings.CEILING_LIVENESS_FAILURES}): {detail}")
        if row.probe_failures >= settings.CEILING_LIVENESS_FAILURES:
            _process_failed(row, f"liveness failed {row.probe_failures} times: {detail}")
    elif verdict == "busy":
        # Not a failure: probe_failures stays as it is and the process stays ready. The timeline
        # gets the first busy probe after an answer; the later ones update probe_detail only.
        first = (row.health_answered_at is None or row.last_probe_at is None
                 or row.last_probe_at <= row.health_answered_at)
        row.last_probe_at, row.probe_detail = now, detail
        row.save(update_fields=["last_probe_at", "probe_detail", "updated_at"])
        if first:
            _event(row, "liveness", detail)
    elif verdict == "restart_due":
        plan = _plan_for(row.deployment, with_secrets=True)
        spec = next((p for p in plan.processes if (p.role, p.ordinal) == (row.role, row.ordinal)), None)
        if spec is None:
            _process_give_up(row, "the recipe no longer has this process")
            return
        _process_start(row, spec)


def _ready_text(row: ServerProcess, now) -> str:
    """How long ``row`` took to become ready, saying from what: ``ready 2.31s after spawn``;
    for a process adopted by a restarted agent before it was seen ready (an ``adopted`` event
    after ``started_at``), ``ready 3.10s after adoption by the restarted agent (43.96s after
    spawn, a time that includes 40.2s with no agent watching: it may have been ready earlier)``:
    readiness is only seen when probed, and no one probed while no agent ran."""
    took = (now - row.started_at).total_seconds() if row.started_at else 0.0
    adopted = None
    if row.started_at:
        adopted = (ProcessEvent.objects.filter(process=row, kind="adopted", at__gte=row.started_at)
                   .order_by("-at", "-id").first())
    if adopted is None:
        return f"ready {took:.2f}s after spawn"
    since = (now - adopted.at).total_seconds()
    unwatched = max(0.0, took - since)
    return (f"ready {since:.2f}s after adoption by the restarted agent ({took:.2f}s after spawn, a time that "
            f"includes up to {unwatched:.2f}s with no agent watching: it may have been ready earlier)")


def _check_gpus(row: ServerProcess) -> None:
    """NVML placement check once a GPU process is ready; a mismatch fails the process."""
    handle = _handle(row)
    if not row.gpu_ids or handle is None:
        return
    result = gpu_verify(handle, gpu_ids=row.gpu_ids)
    row.gpu_verified = result.ok
    row.save(update_fields=["gpu_verified", "updated_at"])
    if result.ok is None:
        _event(row, "gpu-check", result.reason)
    elif not result.ok:
        _process_give_up(row, f"GPU placement mismatch: {result.reason}")
    else:
        _event(row, "gpu-check", f"NVML shows the process on GPUs {sorted(g for g, p in result.per_gpu.items() if p)}")


def _deployment_maybe_ready(deployment: Deployment, gate: ProbeResult | None = None) -> None:
    """Mark a starting deployment ready once every process of its plan is ready. With a router
    that was ready before this pass (a worker came back from a restart), ``gate``, the
    router's readiness run by :func:`_router_gate`, must have passed too; while it fails the
    deployment stays starting and its ``reason`` says ``waiting for a streamed request through
    the router to yield a token (workers ready 12.3s ago[, beyond the startup timeout of 60s]):
    <what the router answered>``. The ``ready`` event says how long after the crash it is ready
    again (and after its detection, when that came late), and what the router answered."""
    if deployment.status != DeploymentStatus.STARTING:
        return
    expected = len(_plan_for(deployment, with_secrets=False).processes)
    rows = list(ServerProcess.objects.filter(deployment=deployment))
    if len(rows) != expected or any(row.status != ProcessStatus.READY for row in rows):
        return
    now = timezone.now()
    router = next((row for row in rows if row.role == "router"), None)
    router_answer = ""
    if router is not None and router.ready_at is not None:
        workers_ready = max((row.ready_at for row in rows if row.role != "router" and row.ready_at), default=None)
        if workers_ready is not None and workers_ready > router.ready_at:
            # A worker is back from a restart the router did not go through.
            if gate is None:
                return  # the gate runs in the next pass, now that every process is ready
            if not gate.ok:
                reason = _router_gate_reason(router, workers_ready, gate, now)
                late = (now - workers_ready).total_seconds() > router.startup_timeout_s
                Deployment.objects.filter(pk=deployment.pk, status=DeploymentStatus.STARTING).update(
                    reason=reason, updated_at=now)
                if gate.detail not in deployment.reason or (late and "beyond" not in deployment.reason):
                    _deployment_event(deployment, "probe", reason)
                deployment.reason = reason
                return
            router_answer = gate.detail
    # What the servers report about their capacity (KV pool, context, ...), read now that they all
    # answer and stored with the status, so a sweep asked for as soon as it is ready is judged
    # against it. Never a reason not to be ready: a failed read is kept as null with why.
    limits = engine_limits_read(deployment)
    now = timezone.now()
    # The status and its timeline entry are written together, so whoever reads the deployment as
    # ready also finds the event that says how it got there; the broadcast follows the commit.
    with transaction.atomic():
        if not Deployment.objects.filter(pk=deployment.pk, status=DeploymentStatus.STARTING,
                                         stop_requested=False).update(
                status=DeploymentStatus.READY, ready_at=now, updated_at=now, reason="", engine_limits=limits):
            return
        crash = (ProcessEvent.objects.filter(deployment=deployment, kind="crashed", at__gte=deployment.ready_at)
                 .order_by("-at", "-id").first() if deployment.ready_at else None)
        if crash is not None:
            # Back from a restart: the time since the deploy request would count the hours it
            # served before the crash.
            took = (now - crash.at).total_seconds()
            notes = [router_answer] if router_answer else []
            noticed = (ProcessEvent.objects.filter(process=crash.process_id, kind="restarting", at__gte=crash.at)
                       .order_by("at", "id").first() if crash.process_id else None)
            if noticed is not None and (noticed.at - crash.at).total_seconds() > NOTICED_LATE_S:
                notes.insert(0, f"{(now - noticed.at).total_seconds():.2f}s after it was noticed")
            message = f"ready again after restart, {took:.2f}s after the crash" + (f" ({'; '.join(notes)})" if notes else "")
        else:
            took = (now - deployment.created_at).total_seconds()
            message = (f"all {expected} processes ready" if expected != 1 else "the 1 process is ready") + f", {took:.2f}s after the deploy request"
        message = redact_text(message)
        deployment_event_add(deployment=deployment, kind="ready", message=message)
    deployment_status_broadcast(deployment_id=deployment.pk, status=_STATUS_OF_KIND["ready"], reason=message)


# --- supervision of running processes ------------------------------------------------------

#: :func:`_observe` verdicts after which the process is known to be running.
_RUNNING_VERDICTS = ("ok", "ready", "not_ready", "unhealthy", "busy")

# Per process row: (pid, start ticks, Cpus_allowed_list, Mems_allowed_list, strayed threads) as
# last read, so a tick re-reads the whole binding (numa_maps included) only when one changed.
_binding_seen: dict[int, tuple] = {}


def _supervision_check(row: ServerProcess) -> None:
    """Checks of a spawned or ready process that need no HTTP: its CPU and memory binding
    (:func:`_binding_refresh`) and its log shim (:func:`_shim_check`). Called with the
    deployment's lock held, by the monitor on every tick and by :func:`node_reconcile`
    (adoption after an agent restart included)."""
    if row.status not in (ProcessStatus.SPAWNED, ProcessStatus.READY):
        return
    handle = _handle(row)
    if handle is None:
        return
    _binding_refresh(row, handle)
    _shim_check(row, handle)



def _binding_refresh(row: ServerProcess, handle: ProcessHandle) -> None:
    """Re-read where the running process may run and record a change on its row.

    Spawn verifies the binding once (:func:`_verify_binding`); anyone may move the process
    later (``taskset -p``, ``sched_setaffinity``, a cpuset change), and affinity is per thread:
    ``taskset -pc 1 <tid>`` moves one thread and leaves the main thread's status as it was.
    Each call reads ``/proc/<pid>/status`` once (:func:`deployments.pinning.pinning_status_read`)
    and, for a row the recipe pins, the status of each thread
    (:func:`deployments.pinning.thread_bindings`: at most
    :data:`deployments.pinning.THREADS_PER_CHECK` threads per call, later calls covering the
    rest; 9-15 µs per thread, 300 threads 2.7-4.4 ms per call as measured on the 2-core test host).
    Threads placed outside the recipe's CPUs (:func:`deployments.pinning.thread_drift`) are
    remembered per row until they are back or gone. Only when the main thread's
    ``Cpus_allowed_list`` / ``Mems_allowed_list`` or the set of strayed threads differ from the
    previous call's (or on this agent's first look) is the full binding read
    (:func:`deployments.pinning.pinning_read`, which adds the memory policy from ``numa_maps``)
    and compared with the row. ``effective_cpus`` is the main thread's CPU list joined with
    those of strayed threads (every CPU the process may run on), ``effective_mems`` the main
    thread's memory nodes. A difference updates both, sets ``pinning_verified`` to whether the
    process still matches the recipe (the spawn rule: the main thread exactly its ``cpus``, and
    its memory nodes when numactl bound them, every other thread within them; roles without
    ``cpus`` stay unchecked) and adds an event: ``pinning drifted: CPUs 0-3 → 0-7, intended
    0-3`` or ``pinning drifted: thread 4312 (worker) on CPUs 5, intended 0-3``, ``pinning
    restored: ...`` once it matches again, ``binding changed: ...`` otherwise. The process keeps
    running: it was placed right at spawn, and the row (which pages and sweep snapshots read)
    now says where it really runs. Descendant processes are not re-read here; spawn checked
    them (threads included).
    """
    try:
        raw = pinning_status_read(handle.pid)
    except ProcessLookupError:
        return
    strays = _thread_strays(row, handle, mems_allowed=raw[1]) if row.cpus else {}
    seen = (handle.pid, handle.start_ticks, *raw, tuple(sorted(strays.items())))
    before_seen = _binding_seen.get(row.pk)
    if before_seen == seen:
        return
    try:
        binding = pinning_read(handle.pid)
    except ProcessLookupError:
        return
    _binding_seen[row.pk] = seen
    before_strays = dict(before_seen[4]) if before_seen is not None else {}
    cpus = binding.cpus
    if strays:
        cpus = format_cpulist(set(parse_cpulist(binding.cpus)).union(*(parse_cpulist(c) for _, c in strays.values())))
    before_cpus, before_mems = row.effective_cpus, row.effective_mems
    cpus_moved = not same_cpulist(cpus, before_cpus)
    mems_moved = not same_cpulist(binding.mems, before_mems)
    threads_moved = {t: v[0] for t, v in strays.items()} != {t: v[0] for t, v in before_strays.items()}
    if not cpus_moved and not mems_moved and not threads_moved:
        return
    # The rule of _verify_binding: sched_setaffinity cannot set a memory policy, so memory
    # nodes are intended only where numactl bound them.
    intended_mems = row.mem_nodes if (row.pin_method == "numactl" and row.mem_nodes) else ""
    changes = []
    if cpus_moved:
        changes.append(f"CPUs {before_cpus or '-'} → {cpus or '-'}"
                       + (f", intended {row.cpus}" if row.cpus else ""))
    if mems_moved:
        changes.append(f"memory nodes {before_mems or '-'} → {binding.mems or '-'}"
                       + (f", intended {intended_mems}" if intended_mems else ""))
    if threads_moved:
        if strays:
            changes.append(", ".join(text for _, (text, _c) in sorted(strays.items()))
                           + f", intended {row.cpus}")
        else:
            back = ", ".join(f"thread {tid}" for tid in sorted(before_strays))
            changes.append(f"{back} back within CPUs {row.cpus} (or ended)")
    was_verified = row.pinning_verified
    row.effective_cpus, row.effective_mems = cpus, binding.mems
    fields = ["effective_cpus", "effective_mems", "updated_at"]
    if row.cpus:
        row.pinning_verified = same_cpulist(binding.cpus, row.cpus) and not strays and (
            not intended_mems or same_cpulist(binding.mems, intended_mems))
        fields.append("pinning_verified")
    row.save(update_fields=fields)
    if not row.cpus:
        kind, head = "binding", "binding changed (the recipe does not pin this process)"
    elif not row.pinning_verified:
        kind, head = "pin-drift", "pinning drifted"
        log.warning("%s/%s pid %s: pinning drifted: %s", row.deployment_id, row.role, handle.pid, "; ".join(changes))
    elif was_verified is False:
        kind, head = "pinned", "pinning restored"
    else:
        kind, head = "binding", "binding changed, still as intended"
    _event(row, kind, f"{head}: " + "; ".join(changes))


# Per process row: (start index of the next thread window, {tid: (text, cpus)} of threads seen
# outside the recipe's CPUs and not yet seen back or gone).
_threads_seen: dict[int, tuple[int, dict[int, tuple[str, str]]]] = {}


def _thread_strays(row: ServerProcess, handle: ProcessHandle, *, mems_allowed: str) -> dict[int, tuple[str, str]]:
    """Threads of the running process outside ``row.cpus``, as ``{tid: (description, CPU
    list)}``, merged over the bounded windows :func:`deployments.pinning.thread_bindings` reads
    (a thread not in this call's window keeps its last verdict while it exists)."""
    start, known = _threads_seen.get(row.pk, (0, {}))
    try:
        threads = thread_bindings(handle.pid, start=start)
    except ProcessLookupError:
        return {}
    listed = set(threads.tids)
    strays = {tid: v for tid, v in known.items() if tid in listed and tid not in threads.per_tid}
    texts = thread_drift(handle.pid, threads.per_tid, expected_cpus=row.cpus, main_mems_allowed=mems_allowed)
    for text in texts:
        tid = int(text.split()[1])
        strays[tid] = (text, threads.per_tid[tid][0])
    _threads_seen[row.pk] = (threads.next_start, strays)
    return strays


def _shim_check(row: ServerProcess, handle: ProcessHandle) -> None:
    """Record, once per shim, that the log shim of a running engine is gone: event
    ``log-lost`` ``log capture stopped: shim pid N was killed by signal 9 (SIGKILL); ...``
    (:func:`deployments.supervisor.shim_gone` says how it ended when this agent started it).

    The engine is left running: it still serves, and stopping it would turn a lost log into an
    outage. Nothing can reattach the pipe it writes to, so its output is lost until it is
    restarted and its exit status goes unrecorded ("ended (no exit record)"); an engine that
    keeps the default ``SIGPIPE`` disposition dies at its next write instead, a crash the
    monitor then handles like any other (Python and Rust programs ignore ``SIGPIPE``)."""
    how = shim_gone(handle)
    if how is None:
        return
    marker = f"shim pid {handle.pgid} "
    if ProcessEvent.objects.filter(process=row, kind="log-lost", message__contains=marker).exists():
        return
    ended = ("was " + how) if how.startswith("killed") else (how or "exited")
    message = (f"log capture stopped: {marker}{ended}; the engine (pid {handle.pid}) still runs, but its "
               f"output is no longer written to {row.log_path or 'its log'}")
    log.warning("%s/%s: %s", row.deployment_id, row.role, message)
    _event(row, "log-lost", message)


# --- reconcile -----------------------------------------------------------------------------


def node_reconcile(*, node_name: str, at_startup: bool = False) -> dict[str, int]:
    """Compare the node's process rows with ``/proc`` and act on the difference.

    Per non-terminal row: identity (pid, start ticks, tag) still running → kept (recorded as
    ``adopted`` when ``at_startup``), unless its deployment is over, then stopped; a row
    without pid whose tag is found → adopted; gone or reused → treated as a crash of a wanted
    deployment (restart policy) or marked exited otherwise. A reused pid is never signalled.
    Then deployments of the node are driven forward: starting ones resumed (missing
    processes spawned), stopping or stop-requested ones stopped, and pending ones launched
    (at start-up, or once older than ``CEILING_AGENT_PENDING_GRACE_S``: their task message
    may be lost). Returns counts ``{"adopted", "exited", "stopped", "launched"}``.
    """
    counts = {"adopted": 0, "exited": 0, "stopped": 0, "launched": 0}
    rows = ServerProcess.objects.filter(deployment__node__name=node_name).exclude(
        status__in=PROCESS_TERMINAL
    ).select_related("deployment", "deployment__recipe", "deployment__node")
    for row in rows:
        with _deployment_lock(row.deployment_id, blocking=False) as got:
            if not got:
                continue
            row.refresh_from_db()
            if row.status in PROCESS_TERMINAL:
                continue
            _health_seed(row)
            deployment = Deployment.objects.select_related("recipe", "node").get(pk=row.deployment_id)
            row.deployment = deployment
            wanted = deployment.status in WANTED and not deployment.stop_requested
            handle = _handle(row)
            if handle is None:
                found = _engine_by_tag(row.tag) if row.status == ProcessStatus.PENDING else None
                if found is not None and wanted:
                    row.pid, row.start_ticks, row.pgid = found.pid, found.start_ticks, found.pgid
                    row.status = ProcessStatus.SPAWNED
                    row.started_at = row.started_at or timezone.now()
                    row.save()
                    _event(row, "adopted", f"pid {found.pid} found by its tag after an agent restart")
                    _verify_binding(row, found)
                    counts["adopted"] += 1
                elif deployment.status in DEPLOYMENT_TERMINAL:
                    _process_stop(row, note=f"deployment is {deployment.status}")
                    counts["exited"] += 1
                continue
            identity = _identity(handle)
            if identity == "running":
                if deployment.status in DEPLOYMENT_TERMINAL:
                    _process_stop(row, note=f"stopped by reconcile: deployment is {deployment.status}")
                    counts["stopped"] += 1
                    continue
                if at_startup:
                    _event(row, "adopted", f"pid {row.pid} still running; adopted by the restarted agent")
                    counts["adopted"] += 1
                # What changed while no agent watched: the binding (a taskset in between) and
                # the log shim.
                _supervision_check(row)
                continue
            counts["exited"] += 1
            if identity == "mismatch":
                row.pid = row.start_ticks = None
                row.end_reason = "pid reused"
                detail, code, ended = f"pid {handle.pid} now belongs to another process (not signalled)", None, None
            else:
                detail, code, ended = _exit_text(row, handle)
            if wanted:
                row.ended_at = ended or timezone.now()
                _process_failed(row, f"{detail} while the agent was away" if at_startup else detail,
                                exit_code=code, ended_at=ended)
            else:
                row.status = ProcessStatus.EXITED
                row.end_reason = row.end_reason or "exited"
                row.exit_code = code
                row.ended_at = ended or timezone.now()
                row.save()
                _event(row, "exited", detail, at=ended)

    grace = timedelta(seconds=settings.CEILING_AGENT_PENDING_GRACE_S)
    now = timezone.now()
    for deployment in Deployment.objects.filter(node__name=node_name).exclude(status__in=DEPLOYMENT_TERMINAL):
        if deployment.status == DeploymentStatus.STOPPING or (
            deployment.stop_requested and deployment.status in WANTED
        ):
            if _try_locked(deployment.pk):
                deployment_teardown(deployment_id=deployment.pk)
                counts["stopped"] += 1
        elif deployment.status == DeploymentStatus.STARTING or (
            deployment.status == DeploymentStatus.PENDING and (at_startup or now - deployment.created_at > grace)
        ):
            if _try_locked(deployment.pk) and deployment_launch(deployment_id=deployment.pk) == "launched":
                counts["launched"] += deployment.status == DeploymentStatus.PENDING
    return counts


def _try_locked(deployment_id: int) -> bool:
    """True when no other thread works on the deployment right now (the check is advisory;
    the called function takes the lock itself and is idempotent)."""
    with _deployment_lock(deployment_id, blocking=False) as got:
        return got


def agent_tick(*, node_name: str) -> None:
    """One monitor pass of the node's agent: every starting or ready deployment checked
    (:func:`deployment_check`); rows the queue did not deliver handled by
    :func:`node_reconcile` (stop-requested, stopping, pending past the grace period)."""
    ids = list(Deployment.objects.filter(node__name=node_name, status__in=WANTED, stop_requested=False)
               .values_list("pk", flat=True))
    for deployment_id in ids:
        deployment_check(deployment_id=deployment_id)
    grace = timezone.now() - timedelta(seconds=settings.CEILING_AGENT_PENDING_GRACE_S)
    here = Deployment.objects.filter(node__name=node_name)
    stale = (
        here.filter(status=DeploymentStatus.STOPPING)
        | here.filter(status__in=WANTED, stop_requested=True, updated_at__lt=grace)
        | here.filter(status=DeploymentStatus.PENDING, created_at__lt=grace)
    )
    for deployment_id in stale.values_list("pk", flat=True):
        if not _try_locked(deployment_id):
            continue
        deployment = Deployment.objects.get(pk=deployment_id)
        if deployment.status == DeploymentStatus.PENDING:
            deployment_launch(deployment_id=deployment_id)
        elif deployment.status in (DeploymentStatus.STOPPING, *WANTED):
            deployment_teardown(deployment_id=deployment_id)


# --- the agent process ---------------------------------------------------------------------


class AgentAlreadyRunning(RuntimeError):
    """Another node agent with the same node name runs (this host or another); the message
    names it (pid, host, last heartbeat)."""


def agent_lock_path(name: str) -> Path:
    """The per-node lock file of node ``name``'s agent: ``<CEILING_VAR_DIR>/run/node-agent-<name>.lock``."""
    return Path(settings.VAR_DIR) / "run" / f"node-agent-{name}.lock"


def agent_lock_acquire(name: str) -> int:
    """Take the exclusive lock of node ``name``'s agent on this host and return its open fd,
    which the caller keeps open for as long as it runs (closing it, or exiting, releases it).

    ``flock(2)`` on :func:`agent_lock_path`: the kernel drops the lock when its holder dies,
    however it dies, so a lock file left behind by a killed agent never blocks a restart. The
    fd is close-on-exec (PEP 446), so spawned engines do not inherit it and cannot keep the
    lock after the agent is gone. The holder writes ``<pid> <host> <start time>`` into the file
    for the refusal message.

    Raises:
        AgentAlreadyRunning: another process on this host holds the lock.
    """
    import fcntl

    path = agent_lock_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 512, 0).decode("utf-8", "replace").split()
        os.close(fd)
        node = Node.objects.filter(name=name).only("agent_heartbeat_at", "agent_pid").first()
        who = f"pid {holder[0]} on {holder[1]}" if len(holder) >= 2 else "another process on this host"
        raise AgentAlreadyRunning(
            f"node agent {json_spelled(name)} is already running: {who} holds {path}"
            f"{_heartbeat_text(node)}; stop it first (a second agent would consume the same queue"
            f" and adopt its engines)"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()} {timezone.now().isoformat()}\n".encode(), 0)
    return fd


def _heartbeat_text(node: Node | None) -> str:
    """``, last heartbeat 2.1 s ago (agent pid 812)`` from the node row, or ``""``."""
    if node is None or node.agent_heartbeat_at is None:
        return ""
    age = (timezone.now() - node.agent_heartbeat_at).total_seconds()
    pid = f" (agent pid {node.agent_pid})" if node.agent_pid else ""
    return f", last heartbeat {age:.1f} s ago{pid}"


def agent_other_running(name: str) -> str:
    """Why node ``name`` looks served by another live agent, from its row; ``""`` when not.

    The lock of :func:`agent_lock_acquire` covers this host and this ``CEILING_VAR_DIR``; the
    row covers the rest. An agent heartbeats every ``CEILING_AGENT_HEARTBEAT_S`` and records
    its pid (:func:`deployments.nodes.node_heartbeat`); registration records its host name. A
    heartbeat younger than ``CEILING_HEARTBEAT_TIMEOUT_S`` (the rule of ``Node.agent_online``)
    means another agent runs when the row names another host, or names this host and a live
    ``node_agent`` process other than this one holds the recorded pid (an agent started with
    another var directory). A stale heartbeat or a dead pid does not block.
    """
    node = Node.objects.filter(name=name).first()
    if node is None or not node.agent_online:
        return ""
    here = socket.gethostname()
    if node.hostname and node.hostname != here:
        return (f"node {json_spelled(name)} is served by an agent on host {json_spelled(node.hostname)}{_heartbeat_text(node)};"
                f" this is {json_spelled(here)}. Stop that agent, or wait {settings.CEILING_HEARTBEAT_TIMEOUT_S:g} s"
                f" after its last heartbeat")
    pid = node.agent_pid
    if not pid or pid == os.getpid():
        return ""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""  # that agent is gone; its heartbeat is simply recent
    if b"node_agent" not in cmdline:
        return ""  # the pid now belongs to something else
    return (f"node agent {json_spelled(name)} is already running on this host as pid {pid}{_heartbeat_text(node)}"
            f" (another CEILING_VAR_DIR, so its lock file is elsewhere); stop it first")


class NodeAgent:
    """The node agent of node ``name``: registration, start-up reconcile, the monitor thread,
    the telemetry sampler thread (:mod:`deployments.telemetry.sampler`, unless
    ``CEILING_SAMPLER_ENABLED`` is off) and a Celery worker on ``node.<name>`` (thread pool of
    ``concurrency`` threads, so a deploy never waits behind a long stop and vice versa)."""

    def __init__(self, *, name: str, concurrency: int | None = None) -> None:
        self.name = name
        self.concurrency = concurrency or settings.CEILING_AGENT_CONCURRENCY
        self.stopping = threading.Event()
        self.monitor: threading.Thread | None = None
        self.sampler: threading.Thread | None = None
        self.lock_fd: int | None = None

    @property
    def queue(self) -> str:
        """The Celery queue this agent consumes."""
        return f"node.{self.name}"

    def register(self) -> Node:
        """Discover this host and register it as node ``name``; heartbeat once."""
        from deployments.discovery import discover_node
        from deployments.nodes import node_heartbeat, node_register, with_engine_python

        node = node_register(facts=with_engine_python(discover_node(name=self.name)))
        node_heartbeat(name=self.name, pid=os.getpid())
        return node

    def monitor_loop(self) -> None:
        """Run :func:`agent_tick` every ``CEILING_AGENT_TICK_S`` and heartbeat every
        ``CEILING_AGENT_HEARTBEAT_S`` until :attr:`stopping` is set; errors are logged and
        the loop goes on (one bad row must not stop supervision of the others)."""
        from deployments.nodes import node_heartbeat

        last_beat = 0.0
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                close_old_connections()
                if started - last_beat >= settings.CEILING_AGENT_HEARTBEAT_S:
                    node_heartbeat(name=self.name, pid=os.getpid())
                    last_beat = started
                agent_tick(node_name=self.name)
            except Exception:  # noqa: BLE001 - logged; the next tick retries
                log.exception("monitor tick failed")
            self.stopping.wait(max(0.05, settings.CEILING_AGENT_TICK_S - (time.monotonic() - started)))

    def run(self) -> int:
        """Take the node's agent lock, register, reconcile, start monitoring, then run the
        worker in this thread until it is told to stop (SIGTERM/SIGINT). Returns the worker's
        exit code.

        Raises:
            AgentAlreadyRunning: another agent of this node runs (:func:`agent_lock_acquire`,
                :func:`agent_other_running`); nothing was registered, adopted or consumed.
        """
        from controlplane.celery import app

        self.lock_fd = agent_lock_acquire(self.name)
        other = agent_other_running(self.name)
        if other:
            os.close(self.lock_fd)
            self.lock_fd = None
            raise AgentAlreadyRunning(other)
        self.register()
        counts = node_reconcile(node_name=self.name, at_startup=True)
        log.info("node agent %s (pid %s) reconciled: %s", self.name, os.getpid(), counts)
        self.monitor = threading.Thread(target=self.monitor_loop, name=f"monitor-{self.name}", daemon=True)
        self.monitor.start()
        if settings.CEILING_SAMPLER_ENABLED:
            from deployments.telemetry.sampler import sampler_thread_start

            self.sampler = sampler_thread_start(node_name=self.name, stop=self.stopping)
        worker = app.Worker(
            queues=[self.queue],
            pool_cls="threads",
            concurrency=self.concurrency,
            hostname=f"agent-{self.name}@{socket.gethostname()}",
            loglevel=settings.LOGGING.get("root", {}).get("level", "INFO"),
            without_gossip=True,
            without_mingle=True,
            optimization="fair",
        )
        try:
            worker.start()
        finally:
            self.stopping.set()
            self.monitor.join(timeout=10)
            if self.sampler is not None:
                self.sampler.join(timeout=10)
            # After the last heartbeat (the monitor has ended): offline now, not after the timeout.
            from deployments.nodes import node_agent_stopped

            try:
                close_old_connections()
                node_agent_stopped(name=self.name, pid=os.getpid())
            except Exception:  # noqa: BLE001 - the heartbeat timeout still takes the node offline
                log.exception("could not record the agent's shutdown")
        return int(worker.exitcode or 0)
