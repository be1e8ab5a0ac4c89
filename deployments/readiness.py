"""Readiness and liveness probes of engine processes, over HTTP with short timeouts.

Readiness per role runs the ordered checks a launch plan puts on each process
(:attr:`deployments.launch.ProcessSpec.readiness`) and stops at the first that fails:

* ``process_alive``: the process (identity checked by the caller) is running;
* ``http``: e.g. ``GET /health`` answers with the expected status;
* ``router_workers``: the router's worker list (``GET /workers`` of sglang-router 0.3.2,
  ``{"workers": [{"worker_type": "prefill"|"decode", "is_healthy": bool, ...}], ...}``, found by
  running the router against ``sim`` workers) shows at least the expected healthy prefill and
  decode workers;
* ``generate``: a one-token generation succeeds and returns at least one output token. Through
  a router the request is streamed (``"stream": true``) and must yield a server-sent event
  carrying a token, which exercises the whole prefill → KV transfer → decode path.

``/v1/models`` answering is never readiness: engines serve it while the weights still load (the
simulator does so during its startup delay too). Liveness of a ready process is the
``process_alive`` and ``http`` (``/health``) checks alone, repeated periodically by the agent.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

# Health answers come from the serving loop and take milliseconds; 2 s tolerates a busy
# engine without stalling the agent's monitor loop.
HTTP_TIMEOUT_S = 2.0
# A first generation may compile kernels or warm caches; 15 s bounds it while staying well
# below any recipe's startup timeout (at least 1 s, 30 min by default).
GENERATE_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 1.0
BODY_EXCERPT = 200


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of a probe: ``ok``; ``kind`` of the check that failed (or of the last one run
    when all passed); ``detail``, one line of human text naming what was seen."""

    ok: bool
    kind: str
    detail: str


def _excerpt(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= BODY_EXCERPT else text[:BODY_EXCERPT] + "…"


def _expected_status(check: dict) -> int:
    return int((check.get("expect") or {}).get("status", 200))


def _http_check(check: dict, client: httpx.Client) -> ProbeResult:
    url = check["url"]
    try:
        response = client.request(check.get("method", "GET"), url, timeout=HTTP_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return ProbeResult(False, "http", f"{url}: {type(exc).__name__}: {_excerpt(str(exc))}")
    want = _expected_status(check)
    if response.status_code != want:
        return ProbeResult(False, "http", f"{url} answered {response.status_code}, expected {want}")
    return ProbeResult(True, "http", f"{url} answered {response.status_code}")


def _count_tokens(payload: Any) -> int:
    """Output tokens in one SGLang-native or OpenAI-style response (or stream chunk)."""
    if not isinstance(payload, dict):
        return 0
    meta = payload.get("meta_info")
    if isinstance(meta, dict) and isinstance(meta.get("completion_tokens"), int):
        return meta["completion_tokens"]
    if isinstance(payload.get("output_ids"), list) and payload["output_ids"]:
        return len(payload["output_ids"])
    usage = payload.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int) and usage["completion_tokens"]:
        return usage["completion_tokens"]
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        first = choices[0]
        text = first.get("text")
        if text is None and isinstance(first.get("delta"), dict):
            text = first["delta"].get("content")
        if text is None and isinstance(first.get("message"), dict):
            text = first["message"].get("content")
        return 1 if text else 0
    return 1 if payload.get("text") else 0


def _generate_check(check: dict, client: httpx.Client) -> ProbeResult:
    url = check["url"]
    body = dict(check.get("json") or {})
    try:
        response = client.request(check.get("method", "POST"), url, json=body, timeout=GENERATE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return ProbeResult(False, "generate", f"one-token generation at {url} failed: {type(exc).__name__}: "
                                              f"{_excerpt(str(exc))}")
    if response.status_code != _expected_status(check):
        return ProbeResult(False, "generate", f"one-token generation at {url} failed: HTTP {response.status_code}: "
                                              f"{_excerpt(response.text)}")
    try:
        payload = response.json()
    except ValueError:
        return ProbeResult(False, "generate", f"one-token generation at {url} returned no JSON: "
                                              f"{_excerpt(response.text)}")
    if _count_tokens(payload) < 1:
        return ProbeResult(False, "generate", f"one-token generation at {url} returned no token: "
                                              f"{_excerpt(response.text)}")
    return ProbeResult(True, "generate", f"one-token generation at {url} succeeded")


def _streamed_generate_check(check: dict, client: httpx.Client) -> ProbeResult:
    url = check["url"]
    body = {**(check.get("json") or {}), "stream": True}
    try:
        with client.stream(check.get("method", "POST"), url, json=body, timeout=GENERATE_TIMEOUT_S) as response:
            if response.status_code != _expected_status(check):
                response.read()
                return ProbeResult(False, "generate", f"streamed request through {url} failed: HTTP "
                                                      f"{response.status_code}: {_excerpt(response.text)}")
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    continue
                if isinstance(chunk, dict) and chunk.get("error"):
                    return ProbeResult(False, "generate", f"streamed request through {url} reported an error: "
                                                          f"{_excerpt(json.dumps(chunk['error']))}")
                if _count_tokens(chunk) >= 1:
                    return ProbeResult(True, "generate", f"streamed request through {url} yielded a token")
    except httpx.HTTPError as exc:
        return ProbeResult(False, "generate", f"streamed request through {url} failed: {type(exc).__name__}: "
                                              f"{_excerpt(str(exc))}")
    return ProbeResult(False, "generate", f"streamed request through {url} ended without an output token")


def router_worker_counts(payload: Any) -> dict[str, int]:
    """Healthy workers per type in a ``GET /workers`` answer of sglang-router:
    ``{"prefill": n, "decode": m, "regular": k}``; unhealthy workers are not counted."""
    counts = {"prefill": 0, "decode": 0, "regular": 0}
    workers = payload.get("workers") if isinstance(payload, dict) else None
    for worker in workers if isinstance(workers, list) else []:
        if not isinstance(worker, dict) or worker.get("is_healthy") is False:
            continue
        kind = str(worker.get("worker_type") or "regular")
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _router_workers_check(check: dict, client: httpx.Client) -> ProbeResult:
    url = check["url"]
    try:
        response = client.get(url, timeout=HTTP_TIMEOUT_S)
        payload = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        return ProbeResult(False, "router_workers", f"{url}: {type(exc).__name__}: {_excerpt(str(exc))}")
    if payload is None:
        return ProbeResult(False, "router_workers", f"{url} answered {response.status_code}")
    counts = router_worker_counts(payload)
    expected = {k: int(v) for k, v in (check.get("expect") or {}).items() if k != "status"}
    short = {k: (counts.get(k, 0), v) for k, v in expected.items() if counts.get(k, 0) < v}
    seen = ", ".join(f"{k} {counts.get(k, 0)}" for k in expected)
    if short:
        want = ", ".join(f"{k} {v}" for k, v in expected.items())
        return ProbeResult(False, "router_workers", f"router lists healthy workers {seen}; expected {want}")
    return ProbeResult(True, "router_workers", f"router lists healthy workers {seen}")


def readiness_check(check: dict, *, alive: bool, streamed: bool = False, client: httpx.Client) -> ProbeResult:
    """Run one readiness check (a dict from :attr:`ProcessSpec.readiness`). ``alive`` answers
    ``process_alive``; ``streamed`` makes a ``generate`` check a streamed request (used through
    routers). Never raises for network errors; they become a failed result."""
    kind = check.get("kind")
    if kind == "process_alive":
        return ProbeResult(alive, "process_alive", "process is running" if alive else "process is not running")
    if kind == "http":
        return _http_check(check, client)
    if kind == "router_workers":
        return _router_workers_check(check, client)
    if kind == "generate":
        return _streamed_generate_check(check, client) if streamed else _generate_check(check, client)
    return ProbeResult(False, str(kind), f"unknown readiness check kind {kind!r}")


def process_readiness(*, checks: list[dict], alive: bool, role: str) -> ProbeResult:
    """Run ``checks`` in order and stop at the first failure.

    ``role`` ``router`` streams its generation check. Returns the first failing result, or the
    last passing one when every check passed (a process with no checks is ready when alive).
    """
    if not checks:
        return ProbeResult(alive, "process_alive", "process is running" if alive else "process is not running")
    result = ProbeResult(True, "none", "no checks")
    with httpx.Client(timeout=httpx.Timeout(HTTP_TIMEOUT_S, connect=CONNECT_TIMEOUT_S), trust_env=False) as client:
        for check in checks:
            result = readiness_check(check, alive=alive, streamed=(role == "router"), client=client)
            if not result.ok:
                return result
    return result


def process_liveness(*, checks: list[dict], alive: bool) -> ProbeResult:
    """Liveness of a ready process: only its ``process_alive`` and ``http`` checks (no
    generation, which would add load to a serving engine every period)."""
    cheap = [c for c in checks if c.get("kind") in ("process_alive", "http")]
    return process_readiness(checks=cheap, alive=alive, role="liveness")
