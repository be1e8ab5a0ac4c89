"""Telemetry history: 1 s rollups of the live samples, written in batches, pruned by age.

:class:`HistoryWriter` (inside the node agent's sampler) keeps the samples of each second in
memory; once a later second has begun, the second is closed into one row per node
(:class:`~deployments.models.NodeTelemetry`) and one per deployment
(:class:`~deployments.models.DeploymentTelemetry`). Closed rows are written every
``CEILING_TELEMETRY_FLUSH_S`` seconds (5 by default) with ``bulk_create`` in one transaction, so
a 10 Hz sampler costs the database one short write every few seconds. A second written twice
(an agent restarted within it) keeps the first row (``ignore_conflicts``).

Rollup rule per leaf value: utilisations, temperatures, clocks, CPU percentages and request
counts are the **mean** over the samples of the second that had a value (None values are
skipped, never counted as 0); memory figures, states, pids and cumulative counters are the
**last** known value.

Token rates are **exact** instead: a process's ``gen_tok_s`` / ``prompt_tok_s`` of a second is
the number of tokens attributed to that second over its 1 s (tokens/s): its last
``generation_tokens_total`` / ``prompt_tokens_total`` reading of the second minus the last
reading the writer saw of the same process (same process id and pid) in an earlier second. A
second without a fresh scrape stores 0 and the next one carries its tokens, so over any run of
seconds the stored values add up to the engine's own counter delta, and a chart entry thinned
to the mean of k seconds is their tokens over k s. (A mean of the second's
rates is only close: it weighs every sample's rate alike, whatever interval the rate was
measured over, and those intervals do not line up with the seconds; a 4-request PD burst of 65
decode tokens summed to 69.6.) The mean of the rates stays as the fallback where no exact count
exists: the first second of a process identity (its first scrape, a new pid, the agent
restarted), a counter not read in this second or never read before for that pid, or one that
went down (the engine restarted on the same pid and port). The deployment's ``tok_s`` is the
sum of its :data:`TOK_S_ROLES` processes' ``gen_tok_s`` of the second (None when it has none
or one of them is None). The last readings live as long as the writer (the sampler's lifetime),
across flushes; those of a process not seen for :data:`COUNTERS_KEPT_S` seconds are dropped.

:func:`telemetry_prune` deletes rows older than the retention
(``CEILING_TELEMETRY_RETENTION_DAYS``, 7 by default); beat runs it hourly.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone as dt_timezone
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from deployments.models import DeploymentTelemetry, NodeTelemetry

log = logging.getLogger(__name__)

#: Roles whose generated tokens make a deployment's tok/s (the router forwards the same
#: tokens, and prefill produces only the first token of each request in PD).
TOK_S_ROLES = ("decode", "single")
#: Each token counter of a process and the per-second value the writer makes of it.
COUNTER_RATES = (("generation_tokens_total", "gen_tok_s"), ("prompt_tokens_total", "prompt_tok_s"))
#: Seconds a process's last counter readings are kept after the last second it was seen in
#: (a process gone from the samples is forgotten, so memory stays bounded).
COUNTERS_KEPT_S = 60

#: Leaf keys rolled up as the mean of the second (the token rates only where no exact count
#: exists: see the module doc); every other leaf keeps its last value.
MEAN_KEYS = frozenset({
    "utilization_pct", "memory_utilization_pct", "power_w", "temperature_c", "sm_clock_mhz",
    "host_cpu_pct", "cpu_pct", "tok_s", "gen_tok_s", "prompt_tok_s", "running", "queued", "kv_usage",
    "cpu_pct_per_numa",  # its leaves are NUMA indices: the whole branch is averaged
})


def node_record(data: dict[str, Any]) -> dict[str, Any]:
    """The values of one ``node.sample`` ``data`` that history keeps (see
    :class:`~deployments.models.NodeTelemetry`)."""
    host = data.get("host") or {}
    return {
        "gpus": {
            str(g["index"]): {
                "memory_used_bytes": g["memory"]["used_bytes"],
                "memory_total_bytes": g["memory"]["total_bytes"],
                "utilization_pct": g["utilization_pct"],
                "memory_utilization_pct": g["memory_utilization_pct"],
                "power_w": g["power_w"],
                "temperature_c": g["temperature_c"],
                "sm_clock_mhz": g["sm_clock_mhz"],
            }
            for g in data.get("gpus", [])
        },
        "host_cpu_pct": host.get("cpu_pct"),
        "host_memory_used_bytes": (host.get("memory") or {}).get("used_bytes"),
        "cpu_pct_per_numa": dict(host.get("cpu_pct_per_numa") or {}),
    }


def deployment_record(data: dict[str, Any]) -> dict[str, Any]:
    """The values of one ``deployment.sample`` ``data`` that history keeps (see
    :class:`~deployments.models.DeploymentTelemetry`)."""
    return {
        "status": data.get("status"),
        "tok_s": data.get("tok_s"),
        "processes": {
            str(p["id"]): {
                "role": p["role"],
                "pid": p["pid"],
                "gen_tok_s": p["engine"]["gen_tok_s"],
                "prompt_tok_s": p["engine"]["prompt_tok_s"],
                "generation_tokens_total": p["engine"]["generation_tokens_total"],
                "prompt_tokens_total": p["engine"]["prompt_tokens_total"],
                "running": p["engine"]["running"],
                "queued": p["engine"]["queued"],
                "kv_usage": p["engine"]["kv_usage"],
                "gpu_memory_bytes": p["gpu_memory_bytes"],
                "cpu_pct": p["cpu_pct"],
                "rss_bytes": p["rss_bytes"],
                "health": p["health"],
            }
            for p in data.get("processes", [])
        },
    }


def _flatten(record: dict[str, Any], prefix: tuple = ()) -> dict[tuple, Any]:
    out: dict[tuple, Any] = {}
    for key, value in record.items():
        path = (*prefix, key)
        if isinstance(value, dict):
            out.update(_flatten(value, path))
        else:
            out[path] = value
    return out


def _unflatten(flat: dict[tuple, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def rollup(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine the records of one second by the module's rule (the mean over the records that
    had a number for leaves under a :data:`MEAN_KEYS` key, the last non-null value otherwise). A leaf absent from some
    records (a GPU or process that appeared mid-second) is combined over those that have it."""
    values: dict[tuple, list[Any]] = {}
    for record in records:
        for path, value in _flatten(record).items():
            values.setdefault(path, []).append(value)
    flat: dict[tuple, Any] = {}
    for path, seen in values.items():
        if any(key in MEAN_KEYS for key in path):
            numbers = [v for v in seen if isinstance(v, (int, float)) and not isinstance(v, bool)]
            flat[path] = round(sum(numbers) / len(numbers), 4) if numbers else None
        else:
            flat[path] = next((v for v in reversed(seen) if v is not None), None)
    return _unflatten(flat)


class _LastReading:
    """A process's last counter readings the writer saw (``counters``: counter name → value,
    None when never known for this pid), its ``pid`` and the last ``second`` it was seen in."""

    __slots__ = ("pid", "counters", "second")

    def __init__(self, pid: int | None, counters: dict[str, float | None], second: int) -> None:
        self.pid, self.counters, self.second = pid, counters, second


def _second_reading(entries: list[dict[str, Any]]) -> tuple[int | None, dict[str, float | None]]:
    """``(pid, {counter: value})`` of one process over the records of a second (oldest first):
    its last known pid, and per counter the last non-null value among the records of that pid."""
    pid = next((e.get("pid") for e in reversed(entries) if e.get("pid") is not None), None)
    same = [e for e in entries if e.get("pid") == pid]
    return pid, {counter: next((e.get(counter) for e in reversed(same) if e.get(counter) is not None), None)
                 for counter, _ in COUNTER_RATES}


class HistoryWriter:
    """Buffers samples per second and writes closed seconds in batches (see the module doc).

    ``node_id`` is the :class:`~deployments.models.Node` primary key; ``t`` arguments are unix
    seconds. Keeps each process's last token counter readings across flushes, for the exact
    per-second token rates. Not thread-safe: one sampler thread owns it.
    """

    def __init__(self, *, node_id: int, flush_every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node_id = node_id
        self.flush_every_s = settings.CEILING_TELEMETRY_FLUSH_S if flush_every_s is None else flush_every_s
        self._clock = clock
        self._last_flush = clock()
        # second → list of records; deployment buckets keyed by (deployment id, second)
        self._node: dict[int, list[dict]] = {}
        self._deployments: dict[tuple[int, int], list[dict]] = {}
        self._closed_node: list[NodeTelemetry] = []
        self._closed_deployments: list[DeploymentTelemetry] = []
        self._last: dict[str, _LastReading] = {}  # process id → its last counter readings
        self.rows_written = 0

    def add_node(self, t: float, data: dict[str, Any]) -> None:
        """Buffer one ``node.sample`` ``data`` taken at unix time ``t``."""
        self._node.setdefault(int(t), []).append(node_record(data))
        self._close(int(t))

    def add_deployment(self, deployment_id: int, t: float, data: dict[str, Any]) -> None:
        """Buffer one ``deployment.sample`` ``data`` of ``deployment_id`` taken at unix time ``t``."""
        self._deployments.setdefault((int(deployment_id), int(t)), []).append(deployment_record(data))
        self._close(int(t))

    @staticmethod
    def _at(second: int) -> datetime:
        return datetime.fromtimestamp(second, tz=dt_timezone.utc)

    def _close(self, current: int | None) -> None:
        """Move every second before ``current`` (all of them when None) to the closed lists."""
        for second in sorted(s for s in self._node if current is None or s < current):
            records = self._node.pop(second)
            self._closed_node.append(NodeTelemetry(node_id=self.node_id, at=self._at(second),
                                                   samples=min(len(records), 32767), data=rollup(records)))
        newest = None
        # Seconds in order per deployment, so each process's counters are compared with its
        # reading of the second before.
        for key in sorted(k for k in self._deployments if current is None or k[1] < current):
            records = self._deployments.pop(key)
            self._closed_deployments.append(DeploymentTelemetry(deployment_id=key[0], at=self._at(key[1]),
                                                                samples=min(len(records), 32767),
                                                                data=self._deployment_rollup(key[1], records)))
            newest = key[1] if newest is None else max(newest, key[1])
        if newest is not None:
            for process_id in [k for k, v in self._last.items() if v.second < newest - COUNTERS_KEPT_S]:
                del self._last[process_id]

    def _deployment_rollup(self, second: int, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The rollup of one deployment's ``records`` of ``second`` with the exact token rates of
        the module doc: each process's ``gen_tok_s`` / ``prompt_tok_s`` from its counters where the
        writer has an earlier reading of the same pid (else the rollup's mean), its ``pid`` and
        counters those of the second's last reading, and ``tok_s`` their sum over
        :data:`TOK_S_ROLES`. Remembers the readings for the next second."""
        row = rollup(records)
        for process_id, proc in (row.get("processes") or {}).items():
            pid, counters = _second_reading([r["processes"][process_id] for r in records
                                             if process_id in (r.get("processes") or {})])
            last = self._last.get(process_id)
            if pid is None:
                # Not running (or not known to be) this second: nothing to compare; a later
                # second of the same pid still compares with the reading before.
                if last is not None:
                    last.second = second
                proc.update(pid=None, **counters)
                continue
            same = last is not None and last.pid == pid
            kept = dict(counters)
            for counter, rate in COUNTER_RATES:
                before, now = (last.counters.get(counter) if same else None), counters[counter]
                if before is not None and now is not None and now >= before:
                    proc[rate] = round(now - before, 4)  # the second's tokens, per 1 s
                elif now is None:
                    kept[counter] = before  # unread this second: the next one counts from the last reading
            proc.update(pid=pid, **counters)
            self._last[process_id] = _LastReading(pid, kept, second)
        rates = [p.get("gen_tok_s") for p in (row.get("processes") or {}).values() if p.get("role") in TOK_S_ROLES]
        row["tok_s"] = round(sum(rates), 4) if rates and all(r is not None for r in rates) else None
        return row

    @property
    def pending_rows(self) -> int:
        """Closed rows waiting for the next flush."""
        return len(self._closed_node) + len(self._closed_deployments)

    def flush_if_due(self) -> int:
        """:meth:`flush` when ``flush_every_s`` passed since the last one; else 0."""
        if self._clock() - self._last_flush < self.flush_every_s:
            return 0
        return self.flush()

    def flush(self, *, everything: bool = False) -> int:
        """Write the closed seconds (and, with ``everything``, the open ones too: at shutdown)
        in one transaction; returns the rows written. A database error is logged and the rows
        are dropped (telemetry must not take the sampler down, and retrying forever would grow
        memory without bound)."""
        if everything:
            self._close(None)
        self._last_flush = self._clock()
        nodes, deployments = self._closed_node, self._closed_deployments
        self._closed_node, self._closed_deployments = [], []
        if not nodes and not deployments:
            return 0
        try:
            with transaction.atomic():
                NodeTelemetry.objects.bulk_create(nodes, ignore_conflicts=True)
                if deployments:
                    # A deployment deleted meanwhile would fail the whole batch on its foreign key.
                    from deployments.models import Deployment

                    alive = set(Deployment.objects.filter(pk__in={r.deployment_id for r in deployments})
                                .values_list("pk", flat=True))
                    deployments = [r for r in deployments if r.deployment_id in alive]
                    DeploymentTelemetry.objects.bulk_create(deployments, ignore_conflicts=True)
        except Exception:  # noqa: BLE001 - see docstring
            log.exception("telemetry: could not write %d rollup rows", len(nodes) + len(deployments))
            return 0
        written = len(nodes) + len(deployments)
        self.rows_written += written
        return written


def telemetry_prune(*, older_than_days: float | None = None) -> dict[str, int]:
    """Delete node and deployment rollups older than ``older_than_days`` (default
    ``CEILING_TELEMETRY_RETENTION_DAYS``). Returns ``{"node_rows": n, "deployment_rows": m}``.

    Raises:
        ValueError: a negative age.
    """
    days = settings.CEILING_TELEMETRY_RETENTION_DAYS if older_than_days is None else older_than_days
    if days < 0:
        raise ValueError(f"older_than_days must be >= 0, got {days}")
    cutoff = timezone.now() - timedelta(days=days)
    node_rows, _ = NodeTelemetry.objects.filter(at__lt=cutoff).delete()
    deployment_rows, _ = DeploymentTelemetry.objects.filter(at__lt=cutoff).delete()
    return {"node_rows": node_rows, "deployment_rows": deployment_rows}
