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
``process_alive`` and ``http`` (``/health``) checks alone, repeated periodically by the agent. A
check that failed only because the server did not answer in time (no connection accepted within
``CONNECT_TIMEOUT_S``, no answer within ``HTTP_TIMEOUT_S``) says so in
:attr:`ProbeResult.timed_out`: the agent does not count such a timeout of a process that is
computing as a failure (:func:`deployments.agent.liveness_timeout_verdict`).

A probe never takes the port it probes. A connection to a port inside the kernel's ephemeral
range (``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default) made before the
server listens can be given that very port as its source port: TCP then connects the socket to
itself (simultaneous open, RFC 9293 section 3.5) and it holds the port, so the engine's own bind
fails with "address already in use". Every probe socket therefore narrows its own ephemeral
range to exclude the target port (``IP_LOCAL_PORT_RANGE``, Linux 6.3 and later, ``ip(7)``),
which rules the self-connection out, and each probe round first checks with a raw socket that
something listens (:func:`tcp_listening`): a self-connection seen there (on kernels without
the option) is reset at once and reported as "not listening yet", before any HTTP request.
"""
from __future__ import annotations

import functools
import json
import socket
import struct
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

# Health answers come from the serving loop and take milliseconds; 2 s tolerates a busy
# engine without stalling the agent's monitor loop.
HTTP_TIMEOUT_S = 2.0
# A first generation may compile kernels or warm caches; 15 s bounds it while staying well
# below any recipe's startup timeout (at least 1 s, 30 min by default).
GENERATE_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 1.0
BODY_EXCERPT = 200
# <linux/in.h>: IP_LOCAL_PORT_RANGE (51), the per-socket bounds of the ephemeral range, packed as
# low | high << 16; the kernel intersects them with the system range (net/ipv4/inet_connection_sock.c,
# inet_sk_get_local_port_range). Kernels before 6.3 refuse it with ENOPROTOOPT.
IP_LOCAL_PORT_RANGE = getattr(socket, "IP_LOCAL_PORT_RANGE", 51)
EPHEMERAL_RANGE_PATH = "/proc/sys/net/ipv4/ip_local_port_range"


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of a probe: ``ok``; ``kind`` of the check that failed (or of the last one run
    when all passed); ``detail``, one line of human text naming what was seen; ``timed_out``,
    True only when the failure was a timeout of the ``http`` check or of the connection before
    it (a refused connection, a wrong status or a bad body is not a timeout)."""

    ok: bool
    kind: str
    detail: str
    timed_out: bool = False


def ephemeral_port_range(path: str = EPHEMERAL_RANGE_PATH) -> tuple[int, int] | None:
    """The kernel's ephemeral (local) port range ``(low, high)``, inclusive, as
    ``net.ipv4.ip_local_port_range`` sets it for IPv4 and IPv6 alike; None when unreadable
    (not Linux) or malformed."""
    try:
        with open(path, encoding="ascii") as handle:
            low, high = (int(part) for part in handle.read().split())
    except (OSError, ValueError):
        return None
    return (low, high) if 0 < low <= high <= 65535 else None


@functools.cache
def _range_option_supported(family: int) -> bool:
    """Whether this kernel takes ``IP_LOCAL_PORT_RANGE`` on a TCP socket of ``family``
    (checked once per family on a socket that is never bound or connected)."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.IPPROTO_IP, IP_LOCAL_PORT_RANGE, 0)
    except OSError:
        return False
    return True


def source_port_options(host: str, port: int, *,
                        ephemeral: tuple[int, int] | None = None) -> list[tuple[int, int, bytes]]:
    """Socket options (``(level, name, value)``, for ``setsockopt`` or httpx's
    ``socket_options``) that keep TCP ``port`` out of the source ports the kernel may give a
    connection to ``host``: the socket's ephemeral range becomes the larger side of the
    system range (``ephemeral``, default :func:`ephemeral_port_range`) below or above ``port``.

    Empty when no option is needed (``port`` outside the range) or possible (a kernel before
    6.3, a range of that one port, or a host name whose address families the kernel does not
    all take the option for); the raw check of :func:`tcp_listening` covers those.
    """
    low_high = ephemeral if ephemeral is not None else ephemeral_port_range()
    if low_high is None:
        return []
    low, high = low_high
    if not low <= port <= high:
        return []
    families = _host_families(host)
    if not families or not all(_range_option_supported(f) for f in families):
        return []
    if port - low >= high - port:
        value = low | (port - 1) << 16
    else:
        value = (port + 1) | high << 16
    # A u32 in host byte order: the packed high port does not fit a signed C int.
    return [(socket.IPPROTO_IP, IP_LOCAL_PORT_RANGE, struct.pack("=I", value))]


def _host_families(host: str) -> set[int]:
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return set()
    return {info[0] for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)}


def _url_host_port(url: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def tcp_listening(host: str, port: int, *, timeout_s: float = CONNECT_TIMEOUT_S,
                  options: list[tuple[int, int, bytes]] | None = None) -> tuple[bool, str]:
    """Whether something accepts TCP connections on ``host``:``port``, with a raw connection
    that sends nothing and is closed at once: ``(True, "")`` or ``(False, why)``.

    The socket takes ``options`` (default :func:`source_port_options`) before connecting. A
    connection that ends up connected to itself (``getsockname() == getpeername()``: the kernel
    picked ``port`` as the source port while nothing listened) is closed with an immediate
    reset (``SO_LINGER`` 0, so no ``TIME_WAIT`` remnant either) and reported as not listening.
    A connection not accepted within ``timeout_s`` seconds (a full listen backlog) is reported
    as such. Never raises for network errors.
    """
    listening, why, _timed_out = _tcp_listening(host, port, timeout_s=timeout_s, options=options)
    return listening, why


def _tcp_listening(host: str, port: int, *, timeout_s: float = CONNECT_TIMEOUT_S,
                   options: list[tuple[int, int, bytes]] | None = None) -> tuple[bool, str, bool]:
    """:func:`tcp_listening` plus whether the last failed connection timed out."""
    if options is None:
        options = source_port_options(host, port)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return False, f"{host}:{port}: cannot resolve the host: {exc}", False
    why, timed_out = f"nothing listens on {host}:{port} yet", False
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            for level, name, value in options:
                sock.setsockopt(level, name, value)
            sock.settimeout(timeout_s)
            try:
                sock.connect(address)
            except TimeoutError:
                why, timed_out = f"{host}:{port} accepted no connection within {timeout_s:.1f} s", True
                continue
            except OSError as exc:
                why, timed_out = f"nothing listens on {host}:{port} yet ({exc.strerror or type(exc).__name__})", False
                continue
            if sock.getsockname()[:2] == sock.getpeername()[:2]:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return False, (f"nothing listens on {host}:{port} yet (the probe's connection got port {port} "
                               "as its own source port and was reset at once)"), False
            return True, "", False
        finally:
            sock.close()
    return False, why, timed_out


def _excerpt(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= BODY_EXCERPT else text[:BODY_EXCERPT] + "…"


def _expected_status(check: dict) -> int:
    return int((check.get("expect") or {}).get("status", 200))


def _http_check(check: dict, client: httpx.Client) -> ProbeResult:
    url = check["url"]
    try:
        response = client.request(check.get("method", "GET"), url, timeout=HTTP_TIMEOUT_S)
    except httpx.TimeoutException as exc:
        # The request's timeout (connect included) is HTTP_TIMEOUT_S; the exception names the phase.
        return ProbeResult(False, "http", f"{url} did not answer within {HTTP_TIMEOUT_S:.1f} s "
                                          f"({type(exc).__name__})", timed_out=True)
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


def readiness_check(check: dict, *, alive: bool, streamed: bool = False, client: httpx.Client | None) -> ProbeResult:
    """Run one readiness check (a dict from :attr:`ProcessSpec.readiness`). ``alive`` answers
    ``process_alive``; ``streamed`` makes a ``generate`` check a streamed request (used through
    routers); ``client`` (see :func:`probe_client`) is needed by the checks with a ``url``.
    Never raises for network errors; they become a failed result."""
    if client is None and check.get("url"):
        client = probe_client(*(_url_host_port(check["url"]) or ("", 0)))
        with client:
            return readiness_check(check, alive=alive, streamed=streamed, client=client)
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
    clients: dict[tuple[str, int] | None, httpx.Client] = {}
    try:
        for check in checks:
            target = _url_host_port(check["url"]) if check.get("url") else None
            if target is not None and target not in clients:
                listening, why, timed_out = _tcp_listening(*target)
                if not listening:
                    return ProbeResult(False, str(check.get("kind")), f"{check['url']}: {why}", timed_out=timed_out)
            client = None
            if target is not None:
                client = clients.get(target) or clients.setdefault(target, probe_client(*target))
            result = readiness_check(check, alive=alive, streamed=(role == "router"), client=client)
            if not result.ok:
                return result
    finally:
        for client in clients.values():
            client.close()
    return result


def probe_client(host: str = "", port: int = 0) -> httpx.Client:
    """An HTTP client for probing ``host``:``port`` whose connections never take ``port`` as
    their source port on a kernel with ``IP_LOCAL_PORT_RANGE`` (:func:`source_port_options`;
    elsewhere :func:`process_readiness`'s raw check comes first); proxies from the environment
    are ignored (probes go to the engine directly)."""
    options = source_port_options(host, port) if host else []
    transport = httpx.HTTPTransport(socket_options=options or None)
    return httpx.Client(timeout=httpx.Timeout(HTTP_TIMEOUT_S, connect=CONNECT_TIMEOUT_S), trust_env=False,
                        transport=transport)


def process_liveness(*, checks: list[dict], alive: bool) -> ProbeResult:
    """Liveness of a ready process: only its ``process_alive`` and ``http`` checks (no
    generation, which would add load to a serving engine every period). The ``http`` check
    waits at most ``HTTP_TIMEOUT_S`` (2 s), so one probe never stalls the agent's monitor loop
    for long; a timeout comes back with ``timed_out`` set, for the agent to tell a busy
    process from a hung one."""
    cheap = [c for c in checks if c.get("kind") in ("process_alive", "http")]
    return process_readiness(checks=cheap, alive=alive, role="liveness")
