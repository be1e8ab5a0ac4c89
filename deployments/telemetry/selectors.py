"""Reads of the telemetry history as chart series (for the REST re-sync endpoints and for pages
that show a past deployment's or sweep's telemetry next to its results).

A series is a list aligned with ``t`` (unix seconds, one entry per stored second), with None
where that second had no value (a GPU not sampled, a process not running yet): charts draw a
gap, never a drop to 0. Long windows are thinned to at most ``max_points`` entries by averaging
consecutive rows (``resolution_s`` in the result says how many seconds one entry covers).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from datetime import datetime, timezone as dt_timezone
from typing import Any

from deployments.models import DeploymentTelemetry, NodeTelemetry

#: Per-GPU series a node history can return (the ``fields`` query parameter picks among them).
NODE_GPU_FIELDS = ("memory_used_bytes", "utilization_pct", "power_w", "temperature_c",
                   "memory_utilization_pct", "sm_clock_mhz", "memory_total_bytes")
#: The GPU series returned when ``fields`` is not given (the contract's default set).
NODE_GPU_DEFAULT = ("memory_used_bytes", "utilization_pct", "power_w", "temperature_c")
#: Host-level series a node history can return.
NODE_HOST_FIELDS = ("host_cpu_pct", "host_memory_used_bytes")
NODE_HOST_DEFAULT = ("host_cpu_pct",)
#: Per-process series of a deployment history.
PROCESS_FIELDS = ("gen_tok_s", "running", "queued", "kv_usage", "gpu_memory_bytes", "cpu_pct")
#: Default largest number of points of one series.
MAX_POINTS = 3600
#: Longest window one API request may ask for, in seconds (24 h: 86,400 one-second rows of an
#: 8-GPU node take seconds of CPU to read; a longer history is read in consecutive windows).
MAX_WINDOW_S = 86_400.0


def _dt(unix_s: float | None) -> datetime | None:
    return None if unix_s is None else datetime.fromtimestamp(unix_s, tz=dt_timezone.utc)


def _mean(values: list[Any]) -> Any:
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if numbers:
        return round(sum(numbers) / len(numbers), 4)
    return next((v for v in reversed(values) if v is not None), None)


def _binned(qs, max_points: int, extract) -> tuple[list[float], dict[Any, list[Any]], int]:
    """Read the ``(at, data)`` rows of ``qs`` (ordered by ``at``) in chunks and average runs of
    ``step`` consecutive rows, ``step`` the smallest that keeps at most ``max_points`` entries;
    memory stays at the output's size however many rows the window holds. ``extract(data)``
    gives ``{series key: value}`` of one row. Returns ``(t, {key: series}, step)``: ``t`` the
    first second of each run; with ``step`` 1 the values are the rows' own, unrounded; a key a
    run does not have is None there."""
    total = qs.count()
    step = max(1, math.ceil(total / max_points)) if total else 1
    t: list[float] = []
    bins: list[dict[Any, Any]] = []
    current: dict[Any, list[Any]] = {}
    in_run = 0
    for read, (at, data) in enumerate(qs.values_list("at", "data").iterator(chunk_size=2000)):
        if read >= total:
            break  # rows stored after the count: the next request shows them
        if in_run == 0:
            t.append(at.timestamp())
        for key, value in extract(data or {}).items():
            current.setdefault(key, []).append(value)
        in_run += 1
        if in_run == step:
            bins.append({k: (v[0] if step == 1 else _mean(v)) for k, v in current.items()})
            current, in_run = {}, 0
    if in_run:
        bins.append({k: _mean(v) for k, v in current.items()})
    keys = {k for b in bins for k in b}
    return t, {k: [b.get(k) for b in bins] for k in keys}, step


def _flatten(data: dict, *, top: Iterable[str], group: str,
             member_fields: Iterable[str]) -> dict[tuple[str | None, str], Any]:
    """One stored sample as ``{(None, field): value}`` for the ``top`` fields plus
    ``{(member, field): value}`` for each member of ``data[group]`` (GPU index or process id)."""
    row: dict[tuple[str | None, str], Any] = {(None, f): data.get(f) for f in top}
    for member, values in (data.get(group) or {}).items():
        values = values or {}
        for f in member_fields:
            row[(str(member), f)] = values.get(f)
    return row


def _window(qs, since: float | None, until: float | None):
    if since is not None:
        qs = qs.filter(at__gte=_dt(since))
    if until is not None:
        qs = qs.filter(at__lte=_dt(until))
    return qs


def telemetry_for_node(*, node_id: int, since: float | None = None, until: float | None = None,
                       fields: Iterable[str] | None = None, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """A node's stored history between ``since`` and ``until`` (unix seconds, inclusive; None =
    unbounded) as ``{"t": [...], "gpus": {"<index>": {field: [...]}}, "<host field>": [...],
    "resolution_s": int}``.

    ``fields`` picks series among :data:`NODE_GPU_FIELDS` and :data:`NODE_HOST_FIELDS` (default
    :data:`NODE_GPU_DEFAULT` + :data:`NODE_HOST_DEFAULT`). Units: bytes, percent (0-100), watts,
    °C, MHz.

    Raises:
        ValueError: an unknown field name (the message lists the known ones).
    """
    wanted = list(fields) if fields else [*NODE_GPU_DEFAULT, *NODE_HOST_DEFAULT]
    unknown = [f for f in wanted if f not in NODE_GPU_FIELDS and f not in NODE_HOST_FIELDS]
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: "
                         f"{', '.join((*NODE_GPU_FIELDS, *NODE_HOST_FIELDS))}")
    gpu_fields = [f for f in wanted if f in NODE_GPU_FIELDS]
    host_fields = [f for f in wanted if f in NODE_HOST_FIELDS]

    extract = functools.partial(_flatten, top=host_fields, group="gpus", member_fields=gpu_fields)
    qs = _window(NodeTelemetry.objects.filter(node_id=node_id), since, until).order_by("at")
    t, found, step = _binned(qs, max_points, extract)
    indices = sorted({int(gpu) for gpu, _ in found if gpu is not None})
    keys: list[tuple[str | None, str]] = [(str(i), f) for i in indices for f in gpu_fields]
    keys += [(None, f) for f in host_fields]
    series = [found.get(k, [None] * len(t)) for k in keys]
    out: dict[str, Any] = {"t": t, "gpus": {}, "resolution_s": step}
    for (gpu, name), values in zip(keys, series):
        if gpu is None:
            out[name] = values
        else:
            out["gpus"].setdefault(gpu, {})[name] = values
    for name in host_fields:
        out.setdefault(name, [])
    return out


def telemetry_for_deployment(*, deployment_id: int, since: float | None = None, until: float | None = None,
                             max_points: int = MAX_POINTS) -> dict[str, Any]:
    """A deployment's stored history between ``since`` and ``until`` (unix seconds, inclusive)
    as ``{"t": [...], "tok_s": [...], "processes": {"<process id>": {"gen_tok_s", "running",
    "queued", "kv_usage", "gpu_memory_bytes", "cpu_pct"}}, "resolution_s": int}``. tok/s is
    generated tokens per second; ``kv_usage`` a fraction 0..1; ``cpu_pct`` percent of one core;
    memory in bytes."""

    extract = functools.partial(_flatten, top=("tok_s",), group="processes", member_fields=PROCESS_FIELDS)
    qs = _window(DeploymentTelemetry.objects.filter(deployment_id=deployment_id), since, until).order_by("at")
    t, found, step = _binned(qs, max_points, extract)
    pids = sorted({int(pid) for pid, _ in found if pid is not None})
    keys = [(str(p), f) for p in pids for f in PROCESS_FIELDS]
    series = [found.get(k, [None] * len(t)) for k in [(None, "tok_s"), *keys]]
    out: dict[str, Any] = {"t": t, "tok_s": series[0], "processes": {}, "resolution_s": step}
    for (pid, name), values in zip(keys, series[1:]):
        out["processes"].setdefault(pid, {})[name] = values
    return out
