"""The node sampler: one thread in the node agent that samples GPUs, host and engines at
``CEILING_SAMPLER_HZ`` (2 Hz by default, 0.1-20), broadcasts the result and feeds the history.

Per sample:

1. GPUs through NVML (:mod:`.gpu`; ``nvidia-smi`` as the fallback reader, at most once a
   second), each GPU process mapped to the :class:`~deployments.models.ServerProcess` whose pid
   is the process or one of its ancestors (``owner: "ceiling"``), else ``owner: "other"``;
2. the host (:mod:`.host`): CPU per NUMA node (from the node's ``NumaNode`` rows), per pinned
   CPU set of each process (its effective CPU list, else the intended one), memory, load;
   CPU and RSS of each engine's process tree;
3. engines (:mod:`.engine`): ``/metrics`` of every live prefill, decode and single process,
   scraped concurrently in the background (at most every 0.5 s per process, less 10 % for
   scheduling jitter, so a 2 Hz sampler scrapes in every sample; 0.5 s timeout), so
   a slow engine never stalls the sampler; the sample carries the latest finished scrape;
4. ``node.sample`` to ``node-<name>`` and ``deployment.sample`` to ``deployment-<id>`` for each
   deployment of this node that has processes and is not stopped or failed (shapes: the
   module docs of :mod:`controlplane.realtime` and the live-telemetry contract), sent with
   :func:`controlplane.realtime.abroadcast` on the sampler's own long-lived event loop
   (:mod:`.loop` says why: about a third of the CPU of the sync path);
5. the history writer (:mod:`.history`): 1 s rollups, written every few seconds.

Process rows are read from the database at most every :data:`ROWS_REFRESH_S` seconds, and a
row's pid counts only while its start time in ``/proc`` still matches the row (a reused pid is
never measured as the engine). Numbers that cannot be known are None, never 0.
"""
from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import close_old_connections, connection

from controlplane.realtime import abroadcast, deployment_group, node_group
from deployments.choices import DEPLOYMENT_TERMINAL, ProcessStatus
from deployments.engines.base import url_host
from deployments.models import Node, ServerProcess
from deployments.supervisor.procfs import proc_start_ticks
from deployments.telemetry.engine import NO_METRICS, EngineReading, MetricsScraper, ScrapeTarget
from deployments.telemetry.events import process_health
from deployments.telemetry.gpu import REAL_NVML, gpu_reader_open
from deployments.telemetry.history import TOK_S_ROLES, HistoryWriter
from deployments.telemetry.host import HostSampler, ProcessTreeSampler
from deployments.telemetry.loop import LoopThread
from deployments.topology import parse_cpulist

log = logging.getLogger("ceiling.sampler")

#: Seconds between two reads of the process rows (statuses, pids) from the database; state
#: changes themselves reach clients at once as forced ``health.change`` / ``deployment.status``.
ROWS_REFRESH_S = 1.0
_LIVE = (ProcessStatus.SPAWNED, ProcessStatus.READY)
_ROUTER_NOTE = ("router: no prometheus-port in the recipe's router flags, so it is not scraped; token counts "
                "come from its prefill and decode workers")
_USE_SETTINGS: Any = object()


@dataclass
class _Proc:
    """What the sampler needs of one ServerProcess row."""

    id: int
    deployment_id: int
    role: str
    status: str
    health: str
    pid: int | None
    alive: bool
    cpus: tuple[int, ...]
    engine: str
    metrics_url: str
    identity: tuple


def _json(value: Any) -> Any:
    # A raw cursor returns a JSON column as text on SQLite and as a decoded value on PostgreSQL.
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def metrics_url(*, health_url: str, ports: dict | None, role: str = "") -> str:
    """``/metrics`` of a process: the scheme and host:port of its health URL, else
    ``http://127.0.0.1:<http port>``; "" when neither is known. A ``router`` serves its metrics on
    its own port (``ports["metrics"]``, from the router's ``prometheus-port`` flag) on the host of
    its health URL; "" without that port."""
    if role == "router":
        port = (ports or {}).get("metrics") if isinstance(ports, dict) else None
        if not port:
            return ""
        host = (urlsplit(health_url).hostname if health_url else None) or "127.0.0.1"
        return f"http://{url_host(host)}:{int(port)}/metrics"
    if health_url:
        parts = urlsplit(health_url)
        if parts.scheme and parts.netloc:
            return f"{parts.scheme}://{parts.netloc}/metrics"
    port = (ports or {}).get("http") if isinstance(ports, dict) else None
    return f"http://127.0.0.1:{int(port)}/metrics" if port else ""


class NodeSampler:
    """Samples node ``node_name`` (see the module doc). ``hz`` defaults to
    ``CEILING_SAMPLER_HZ``; ``nvml`` may inject an NVML stand-in; ``nvidia_smi`` is the fallback
    tool's path (default: ``CEILING_EXECUTABLES["nvidia-smi"]`` looked up on ``PATH``; None = no
    fallback). ``publish`` and ``history`` switch broadcasting and the history writer.

    Raises:
        Node.DoesNotExist: the node is not registered.
        ValueError: ``hz`` outside 0.1-20.
    """

    def __init__(self, *, node_name: str, hz: float | None = None, nvml: Any = REAL_NVML,
                 nvidia_smi: Any = _USE_SETTINGS, publish: bool = True, history: bool = True) -> None:
        hz = float(settings.CEILING_SAMPLER_HZ if hz is None else hz)
        if not 0.1 <= hz <= 20.0:
            raise ValueError(f"sampler rate {hz} Hz is outside 0.1-20 Hz")
        self.node = Node.objects.prefetch_related("numa_nodes").get(name=node_name)
        self.name = node_name
        self.interval_s = 1.0 / hz
        self.publish = publish
        if nvidia_smi is _USE_SETTINGS:
            nvidia_smi = shutil.which(settings.CEILING_EXECUTABLES.get("nvidia-smi", "nvidia-smi"))
        self.gpu_reader, self.nvml_status = gpu_reader_open(nvml=nvml, nvidia_smi=nvidia_smi)
        numa = {str(n.index): parse_cpulist(n.cpus) for n in self.node.numa_nodes.all()}
        self.host = HostSampler(numa_cpus=numa)
        self.trees = ProcessTreeSampler()
        self._loop = LoopThread(name=f"telemetry-{node_name}")
        self.scraper = MetricsScraper(loop=self._loop)
        self.history = HistoryWriter(node_id=self.node.pk) if history else None
        self._procs: list[_Proc] = []
        self._deployments: dict[int, dict[str, Any]] = {}
        self._rows_at = float("-inf")
        self._rows_sql: tuple[str, tuple] | None = None
        self._last_error_log = float("-inf")
        self.samples = 0

    # -- rows ----------------------------------------------------------------------------------

    def refresh_rows(self) -> None:
        """Read the process rows of this node's deployments that are not stopped or failed: one
        query for the few columns needed, compiled once (at 1 Hz the ORM's per-call compile
        and model building would cost more than the rest of a sample)."""
        if self._rows_sql is None:
            qs = (ServerProcess.objects.filter(deployment__node_id=self.node.pk)
                  .exclude(deployment__status__in=DEPLOYMENT_TERMINAL)
                  .order_by("deployment_id", "role", "ordinal")
                  .values_list("pk", "deployment_id", "deployment__status", "deployment__recipe__engine", "role",
                               "status", "probe_failures", "next_restart_at", "pid", "start_ticks",
                               "effective_cpus", "cpus", "health_url", "ports"))
            self._rows_sql = qs.query.sql_with_params()
        sql, params = self._rows_sql
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        procs: list[_Proc] = []
        deployments: dict[int, dict[str, Any]] = {}
        for (pk, dep_id, dep_status, engine, role, status, failures, restart_at, pid, start_ticks, effective_cpus,
             cpus_text, health_url, ports) in rows:
            deployments.setdefault(dep_id, {"status": dep_status, "engine": engine})
            alive = (status in _LIVE and pid is not None
                     and (start_ticks is None or proc_start_ticks(pid) == start_ticks))
            cpu_text = effective_cpus or cpus_text
            try:
                cpus = tuple(parse_cpulist(cpu_text)) if cpu_text else ()
            except ValueError:
                cpus = ()
            procs.append(_Proc(
                id=pk, deployment_id=dep_id, role=role, status=status,
                health=process_health(status=status, probe_failures=failures or 0, next_restart_at=restart_at),
                pid=pid, alive=alive, cpus=cpus, engine=engine,
                metrics_url=metrics_url(health_url=health_url, ports=_json(ports), role=role),
                identity=(pid, start_ticks),
            ))
        self._procs, self._deployments = procs, deployments
        self._rows_at = time.monotonic()

    # -- one sample ----------------------------------------------------------------------------

    def _engine(self, proc: _Proc) -> EngineReading:
        if proc.role == "router" and not proc.metrics_url:
            return EngineReading.unavailable(_ROUTER_NOTE)
        if proc.engine in NO_METRICS and proc.role != "router":
            return EngineReading.unavailable(NO_METRICS[proc.engine])
        if not proc.alive:
            return EngineReading.unavailable(f"process is {proc.status}")
        if not proc.metrics_url:
            return EngineReading.unavailable("no HTTP port recorded for this process")
        return self.scraper.latest(proc.id) or EngineReading.unavailable("not scraped yet")

    def sample_once(self) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
        """Take one sample, broadcast it (when ``publish``) and buffer it for history.

        Returns ``(node_data, {deployment id: deployment_data})``, the ``data`` objects of the
        ``node.sample`` and ``deployment.sample`` messages.
        """
        ended: list[dict[str, Any]] = []
        if time.monotonic() - self._rows_at >= ROWS_REFRESH_S:
            before = set(self._deployments)
            self.refresh_rows()
            gone = sorted(before - set(self._deployments))
            ended = self._final_samples(gone) if gone else []
        t = time.time()
        live = {p.id: p for p in self._procs if p.alive}

        # Engines first: the scrapes run while the GPUs and the host are read.
        targets = [ScrapeTarget(key=p.id, url=p.metrics_url, engine="router" if p.role == "router" else p.engine,
                                identity=p.identity)
                   for p in live.values()
                   if p.metrics_url and (p.role == "router" or p.engine not in NO_METRICS)]
        if targets:
            self.scraper.request(targets)

        gpus = self.gpu_reader.read()
        nvml = self.nvml_status if getattr(self.gpu_reader, "status", "ok") == "ok" else self.gpu_reader.status
        trees = self.trees.sample({p.id: p.pid for p in live.values()})
        gpu_known = bool(gpus)
        gpu_memory: dict[int, int | None] = {}
        for gpu in gpus:
            for gp in gpu["processes"]:
                owner = self.trees.owner_of(gp["pid"]) if live else None
                proc = live.get(owner) if owner is not None else None
                if proc is None:
                    gp.update(process_id=None, deployment_id=None, role=None, owner="other")
                    continue
                gp.update(process_id=proc.id, deployment_id=proc.deployment_id, role=proc.role, owner="ceiling")
                if gp["used_bytes"] is None or (proc.id in gpu_memory and gpu_memory[proc.id] is None):
                    gpu_memory[proc.id] = None
                else:
                    gpu_memory[proc.id] = gpu_memory.get(proc.id, 0) + gp["used_bytes"]
        host, pinned = self.host.sample(pinned_sets={p.id: p.cpus for p in live.values()})

        if targets:
            # This round's scrapes get a short chance to land (a quarter of the interval at
            # most); a slower one shows up in the next sample.
            self.scraper.wait_inflight(min(0.25 * self.interval_s, self.scraper.timeout_s))
        self.scraper.forget(live.keys())

        node_data = {"node": self.name, "t": t, "interval_s": self.interval_s, "gpus": gpus, "host": host,
                     "nvml": nvml}
        deployments: dict[int, dict[str, Any]] = {}
        for dep_id, dep in self._deployments.items():
            processes = []
            for proc in (p for p in self._procs if p.deployment_id == dep_id):
                measured = trees.get(proc.id, {}) if proc.alive else {}
                engine = self._engine(proc)
                processes.append({
                    "id": proc.id, "role": proc.role, "status": proc.status, "health": proc.health,
                    "pid": proc.pid if proc.alive else None,
                    "cpu_pct": measured.get("cpu_pct"),
                    "cpu_pct_pinned_set": pinned.get(proc.id) if proc.alive else None,
                    "rss_bytes": measured.get("rss_bytes"),
                    "gpu_memory_bytes": (gpu_memory.get(proc.id, 0) if gpu_known and proc.alive else None),
                    "engine": engine.as_dict(),
                })
            rates = [p["engine"]["gen_tok_s"] for p in processes if p["role"] in TOK_S_ROLES]
            tok_s = round(sum(rates), 3) if rates and all(r is not None for r in rates) else None
            deployments[dep_id] = {"deployment_id": dep_id, "t": t, "status": dep["status"], "tok_s": tok_s,
                                   "processes": processes}

        if self.publish:
            messages = [(node_group(self.name), "node.sample", node_data)]
            messages += [(deployment_group(dep_id), "deployment.sample", data) for dep_id, data in deployments.items()]
            messages += [(deployment_group(data["deployment_id"]), "deployment.sample", data) for data in ended]
            try:
                # Waiting costs no CPU and keeps each group's messages in sample order.
                self._loop.run(self._publish(messages), timeout_s=max(1.0, self.interval_s))
            except Exception:  # noqa: BLE001 - a lost sample must not stop sampling
                log.warning("telemetry broadcast of node %s failed", self.name, exc_info=True)
        if self.history is not None:
            self.history.add_node(t, node_data)
            for dep_id, data in deployments.items():
                self.history.add_deployment(dep_id, t, data)
            self.history.flush_if_due()
        self.samples += 1
        return node_data, deployments

    def _final_samples(self, deployment_ids: list[int]) -> list[dict[str, Any]]:
        """The last ``deployment.sample`` of each deployment that stopped being sampled (it became
        stopped, failed, ...): its status and its processes' status and health as the database
        has them now, every measurement null (nothing runs any more). Without it a page would
        keep showing the last sample taken while the deployment was still up. One query."""
        from deployments.models import Deployment

        t = time.time()
        statuses = dict(Deployment.objects.filter(pk__in=deployment_ids).values_list("pk", "status"))
        out: dict[int, dict[str, Any]] = {
            dep_id: {"deployment_id": dep_id, "t": t, "status": status, "tok_s": None, "processes": [], "final": True}
            for dep_id, status in statuses.items()}
        rows = (ServerProcess.objects.filter(deployment_id__in=list(out))
                .order_by("deployment_id", "role", "ordinal")
                .values_list("pk", "deployment_id", "role", "status", "probe_failures", "next_restart_at"))
        for pk, dep_id, role, status, failures, restart_at in rows:
            out[dep_id]["processes"].append({
                "id": pk, "role": role, "status": status,
                "health": process_health(status=status, probe_failures=failures or 0, next_restart_at=restart_at),
                "pid": None, "cpu_pct": None, "cpu_pct_pinned_set": None, "rss_bytes": None,
                "gpu_memory_bytes": None,
                "engine": EngineReading.unavailable(f"process is {status}").as_dict(),
            })
        return list(out.values())

    @staticmethod
    async def _publish(messages: list[tuple[str, str, dict[str, Any]]]) -> None:
        for group, type_, data in messages:
            # The final sample of an ended deployment must not be dropped by the rate bound.
            await abroadcast(group, type_, data, force=bool(data.get("final")))

    # -- the thread ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Sample every ``interval_s`` until ``stop`` is set, then :meth:`close` and close the
        calling thread's database connection. A sample that runs late is not made up for (no
        bursts); errors are logged at most once a minute and the loop goes on."""
        next_at = time.monotonic()
        try:
            while not stop.is_set():
                try:
                    if time.monotonic() - self._rows_at >= ROWS_REFRESH_S:
                        close_old_connections()
                    self.sample_once()
                except Exception:  # noqa: BLE001 - telemetry must not stop; logged
                    now = time.monotonic()
                    if now - self._last_error_log >= 60.0:
                        self._last_error_log = now
                        log.exception("telemetry sample failed on node %s", self.name)
                next_at += self.interval_s
                now = time.monotonic()
                if next_at < now:
                    next_at = now
                stop.wait(next_at - now)
        finally:
            try:
                self.close()
            finally:
                connection.close()  # this thread's connection

    def close(self) -> None:
        """Write the buffered history, stop the scraper and release NVML."""
        try:
            if self.history is not None:
                self.history.flush(everything=True)
        finally:
            self.scraper.close()
            self._loop.close()
            self.gpu_reader.close()


def sampler_thread_start(*, node_name: str, stop: threading.Event, **kwargs: Any) -> threading.Thread:
    """Start :meth:`NodeSampler.run` for ``node_name`` in a daemon thread named
    ``sampler-<name>`` and return it (the sampler is built inside the thread, so its database
    connection belongs to that thread)."""

    def target() -> None:
        try:
            sampler = NodeSampler(node_name=node_name, **kwargs)
        except Exception:  # noqa: BLE001
            log.exception("telemetry sampler for node %s could not start", node_name)
            connection.close()
            return
        log.info("telemetry sampler for node %s: %.3g Hz, GPUs: %s", node_name, 1 / sampler.interval_s,
                 sampler.nvml_status)
        sampler.run(stop)

    thread = threading.Thread(target=target, name=f"sampler-{node_name}", daemon=True)
    thread.start()
    return thread
