"""What a deployment's engine servers report about their own capacity, read once the deployment
is ready and kept on :attr:`deployments.models.Deployment.engine_limits`.

Each worker server (prefill, decode or single; never the router, which holds no KV cache) is
asked at its origin:

* ``/get_server_info``, else ``/server_info`` (SGLang, and the ``sim`` engine, which answers the
  same shape): ``max_total_num_tokens`` (the KV pool, in tokens), ``context_length``,
  ``max_running_requests`` (sequences), ``chunked_prefill_size`` (tokens); the ``sim`` engine's
  ``sim.profile.decode.admission_reserve_tokens`` too. A value SGLang keeps under
  ``internal_states[0]`` rather than at the top is read there;
* ``/v1/models`` when no context length was found above: vLLM answers no server-info route, and
  SGLang reports ``context_length`` null when ``--context-length`` was not on its command line;
  both model lists carry ``max_model_len``, kept as ``context_length``. The route that gave it is
  then the last URL of ``read_from`` (``/v1/models``), and the sweep's message names it
  (``reported by the single server's /v1/models at ...: max_model_len 65536``).

The stored record (JSON)::

    {"read_at": "2026-12-06T14:02:11Z", "topology": "pd",
     "servers": {"decode0": {"base_url": "http://127.0.0.1:30002",
                             "read_from": ["http://127.0.0.1:30002/get_server_info"],
                             "max_total_num_tokens": 5376, "context_length": 65536,
                             "max_running_requests": 32, "chunked_prefill_size": 1024,
                             "admission_reserve_tokens": 16, "error": null}, ...},
     "error": null}

A value a server did not report is null; ``error`` says what each route answered when nothing
was read from a server (per server) or from any (at the top). Reading never fails readiness:
whatever goes wrong is recorded as null with why.

:func:`reported_capacity` turns the record into what bounds one request alone (the KV cache of
the decode servers for PD, of the single server otherwise; the smallest context of any worker;
the prefill servers' ``chunked_prefill_size`` for PD), each with where it was read, for
:func:`benchmarks.sweeps.grid_context_problems`.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping
from urllib.parse import urlsplit

import httpx
from django.utils import timezone

# Each request's timeout: the servers have just passed their readiness checks and answer these
# from memory in milliseconds; a short wait keeps the agent's monitor pass moving.
LIMITS_TIMEOUT_S = 2.0
SERVER_INFO_PATHS = ("/get_server_info", "/server_info")
MODELS_PATH = "/v1/models"
#: The values kept per server (all positive ints or null): tokens, except
#: ``max_running_requests`` (sequences).
FIELDS = ("max_total_num_tokens", "context_length", "max_running_requests", "chunked_prefill_size",
          "admission_reserve_tokens")
WORKER_ROLES = ("prefill", "decode", "single")


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _reserve(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def origin(url: str) -> str:
    """``http://host:port`` of ``url`` (a health route's folder is not the server's root:
    llama.cpp's health route is ``/v1/models``)."""
    return urlsplit(url)._replace(path="", query="", fragment="").geturl()


def _get_json(url: str, timeout_s: float) -> tuple[Any, str | None, bool]:
    """``(body, error, reachable)`` of ``GET url``: the JSON body of a 200 answer, else None and
    what was answered; ``reachable`` False when the server did not answer at all."""
    path = urlsplit(url).path
    try:
        resp = httpx.get(url, timeout=timeout_s)
    except httpx.TransportError as exc:
        return None, f"{path}: {type(exc).__name__}: {exc}"[:300], False
    except httpx.HTTPError as exc:
        return None, f"{path}: {type(exc).__name__}: {exc}"[:300], True
    if resp.status_code != 200:
        return None, f"HTTP {resp.status_code} from {path}", True
    try:
        return resp.json(), None, True
    except ValueError:
        return None, f"{path}: not JSON", True


def server_limits_fetch(base_url: str, *, timeout_s: float = LIMITS_TIMEOUT_S) -> dict[str, Any]:
    """What the server at ``base_url`` reports about its capacity (one entry of the record's
    ``servers``, see the module docstring). Never raises."""
    out: dict[str, Any] = {"base_url": base_url, "read_from": [], **{f: None for f in FIELDS}, "error": None}
    errors: list[str] = []
    info: Mapping[str, Any] | None = None
    for path in SERVER_INFO_PATHS:
        url = base_url.rstrip("/") + path
        body, error, reachable = _get_json(url, timeout_s)
        if not reachable:
            out["error"] = error
            return out
        if error is None and not isinstance(body, dict):
            error = f"{path}: not a JSON object"
        if error is not None:
            errors.append(error)
            continue
        info = body
        out["read_from"].append(url)
        break
    if info is not None:
        states = info.get("internal_states")
        state = states[0] if isinstance(states, list) and states and isinstance(states[0], Mapping) else {}
        for key in ("max_total_num_tokens", "context_length", "max_running_requests", "chunked_prefill_size"):
            out[key] = _count(info.get(key)) or _count(state.get(key))
        sim = info.get("sim") if isinstance(info.get("sim"), Mapping) else {}
        profile = sim.get("profile") if isinstance(sim.get("profile"), Mapping) else {}
        decode = profile.get("decode") if isinstance(profile.get("decode"), Mapping) else {}
        out["admission_reserve_tokens"] = _reserve(decode.get("admission_reserve_tokens"))
    if out["context_length"] is None:
        url = base_url.rstrip("/") + MODELS_PATH
        body, error, _ = _get_json(url, timeout_s)
        models = body.get("data") if isinstance(body, dict) else None
        lengths = [_count(m.get("max_model_len")) for m in models or [] if isinstance(m, Mapping)]
        lengths = [n for n in lengths if n]
        if lengths:
            out["context_length"] = min(lengths)
            out["read_from"].append(url)
        elif error is not None:
            errors.append(error)
        elif info is None:
            errors.append(f"{MODELS_PATH}: no max_model_len")
    if not out["read_from"]:
        out["error"] = "; ".join(errors) or "nothing reported"
    return out


def deployment_limits_read(deployment, *, timeout_s: float = LIMITS_TIMEOUT_S) -> dict[str, Any]:
    """The record (module docstring) of what ``deployment``'s worker servers report now. Never
    raises: a failure is kept as the record's ``error``."""
    record: dict[str, Any] = {"read_at": timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ"),
                              "topology": None, "servers": {}, "error": None}
    try:
        record["topology"] = deployment.recipe.topology
        for p in deployment.processes.filter(role__in=WORKER_ROLES).order_by("role", "ordinal"):
            if not p.health_url:
                continue
            record["servers"][f"{p.role}{p.ordinal}"] = server_limits_fetch(origin(p.health_url), timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 - a reading that goes wrong must never fail readiness
        record["error"] = f"{type(exc).__name__}: {exc}"[:300]
        return record
    if not record["servers"]:
        record["error"] = "no worker server has a URL to ask"
    elif all(s["error"] and not s["read_from"] for s in record["servers"].values()):
        record["error"] = "no server reported its limits: " + "; ".join(
            f"{k}: {s['error']}" for k, s in record["servers"].items())
    return record


def _server_label(key: str, servers: Mapping[str, Any]) -> str:
    role = key.rstrip("0123456789")
    same = [k for k in servers if k.rstrip("0123456789") == role]
    return f"{role} server" if len(same) == 1 else f"{role} server {key[len(role):]}"


def _read_time(record: Mapping[str, Any]) -> str:
    try:
        at = datetime.strptime(str(record.get("read_at")), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return "an unknown time"
    return f"{at:%Y-%m-%d %H:%M:%S} UTC"


def _smallest(record: Mapping[str, Any], roles: tuple[str, ...], field: str) -> tuple[int, str] | None:
    """The smallest ``field`` the servers of ``roles`` reported, with where it was read
    (``reported by the decode server's /get_server_info at 2026-12-06 14:02:11 UTC:
    max_total_num_tokens 5376``); None when none did."""
    servers = record.get("servers") if isinstance(record.get("servers"), Mapping) else {}
    found: tuple[int, str] | None = None
    for key in sorted(servers):
        server = servers[key] if isinstance(servers[key], Mapping) else {}
        value = _count(server.get(field))
        if value is None or key.rstrip("0123456789") not in roles or (found and found[0] <= value):
            continue
        read_from = [u for u in server.get("read_from") or [] if isinstance(u, str)]
        # A context length found only in the model list was read there; everything else from the
        # first URL (the server-info route).
        url = read_from[-1] if field == "context_length" and len(read_from) > 1 else (read_from or [""])[0]
        name = "max_model_len" if urlsplit(url).path == MODELS_PATH else field
        found = (value, f"reported by the {_server_label(key, servers)}'s {urlsplit(url).path or 'server'} "
                        f"at {_read_time(record)}: {name} {value}")
    return found


def reported_capacity(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What bounds one request alone according to the servers' own reports in ``record``
    (:attr:`Deployment.engine_limits`): ``{"tokens", "where", "reserve", "context",
    "context_where", "prefill_batch", "prefill_where"}``; ``tokens`` is the smallest
    ``max_total_num_tokens`` of the decode servers (PD) or single servers, ``reserve`` the
    admission reserve reported with it (only the sim reports one), ``context`` the smallest context length
    of any worker, ``prefill_batch`` the smallest ``chunked_prefill_size`` of the prefill servers
    (PD only). Absent values are None; None when ``record`` is None or reported nothing."""
    if not isinstance(record, Mapping) or not isinstance(record.get("servers"), Mapping):
        return None
    kv_roles = ("decode",) if record.get("topology") == "pd" else ("single",)
    kv = _smallest(record, kv_roles, "max_total_num_tokens")
    ctx = _smallest(record, WORKER_ROLES, "context_length")
    prefill = _smallest(record, ("prefill",), "chunked_prefill_size") if record.get("topology") == "pd" else None
    if kv is None and ctx is None and prefill is None:
        return None
    reserve = None
    if kv is not None:
        for key, server in record["servers"].items():
            if (isinstance(server, Mapping) and key.rstrip("0123456789") in kv_roles
                    and _count(server.get("max_total_num_tokens")) == kv[0]):
                reserve = _reserve(server.get("admission_reserve_tokens"))
                break
    return {"tokens": kv[0] if kv else None, "where": kv[1] if kv else None, "reserve": reserve,
            "context": ctx[0] if ctx else None, "context_where": ctx[1] if ctx else None,
            "prefill_batch": prefill[0] if prefill else None, "prefill_where": prefill[1] if prefill else None}


def limits_view(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The record as the deployment page shows it: ``{"read_at", "error", "rows"}``, one row per
    server (``label``, each of :data:`FIELDS`, ``read_from`` joined, ``error``); None when
    nothing was read yet."""
    if not isinstance(record, Mapping):
        return None
    servers = record.get("servers") if isinstance(record.get("servers"), Mapping) else {}
    rows = []
    for key in sorted(servers):
        server = servers[key] if isinstance(servers[key], Mapping) else {}
        rows.append({"label": _server_label(key, servers), **{f: _count(server.get(f)) for f in FIELDS},
                     "admission_reserve_tokens": _reserve(server.get("admission_reserve_tokens")),
                     "read_from": ", ".join(u for u in server.get("read_from") or [] if isinstance(u, str)),
                     "error": server.get("error") or ""})
    return {"read_at": _read_time(record), "error": record.get("error") or "", "rows": rows}


def reported_batch_limits(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What bounds how many requests the deployment runs at once according to its servers' own
    reports in ``record`` (:attr:`Deployment.engine_limits`), for the notes a sweep gets when its
    load exceeds it (:func:`benchmarks.sweeps.grid_engine_queue_notes`): ``{"running",
    "running_where", "kv_tokens", "kv_where", "reserve", "servers"}``. The batch runs on the decode
    servers for PD and on the single server otherwise; each runs its own, so ``running`` (the
    smallest ``max_running_requests`` reported) and ``kv_tokens`` (the smallest
    ``max_total_num_tokens``) are per server and ``servers`` counts them. Absent values are None;
    None when ``record`` is None or reported neither."""
    if not isinstance(record, Mapping) or not isinstance(record.get("servers"), Mapping):
        return None
    roles = ("decode",) if record.get("topology") == "pd" else ("single",)
    running = _smallest(record, roles, "max_running_requests")
    capacity = reported_capacity(record) or {}
    if running is None and capacity.get("tokens") is None:
        return None
    servers = sum(1 for key in record["servers"] if key.rstrip("0123456789") in roles)
    return {"running": running[0] if running else None, "running_where": running[1] if running else None,
            "kv_tokens": capacity.get("tokens"), "kv_where": capacity.get("where"),
            "reserve": capacity.get("reserve"), "servers": max(1, servers)}
